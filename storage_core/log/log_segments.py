"""The segments of one partition's log, ordered by base offset (Kafka's ``LogSegments``).

Two parallel lists: the segments and their base offsets (searched with ``bisect``). Once a
log is open the list is never empty, and its last segment is the active one, which takes the
appends: its files are kept open, while those of the others may be closed when idle
(``LogSegment.set_evictable``, kept in step by every change below).

Thread safety: none; the owning log reads and changes it under its lock. ``values`` and
``base_offsets`` return copies that stay valid after the lock is released.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator

from storage_core.log.log_segment import LogSegment


class LogSegments:
    """Segments by base offset, oldest first; the last one is active."""

    __slots__ = ("_base_offsets", "_segments")

    def __init__(self, segments: list[LogSegment]) -> None:
        self._segments = segments
        self._base_offsets = [s.base_offset for s in segments]
        for segment in segments[:-1]:
            segment.set_evictable(True)
        self._keep_active_open()

    def _keep_active_open(self) -> None:
        if self._segments:
            self._segments[-1].set_evictable(False)

    @classmethod
    def viewing(cls, segments: list[LogSegment]) -> LogSegments:
        """The segments, in order, without changing which of their files may be closed: for
        reading a log being loaded (its producer state replayed) before it is opened."""
        view = cls.__new__(cls)
        view._segments = list(segments)
        view._base_offsets = [s.base_offset for s in segments]
        return view

    def __len__(self) -> int:
        return len(self._segments)

    def __iter__(self) -> Iterator[LogSegment]:
        return iter(self._segments)

    def __getitem__(self, index: int) -> LogSegment:
        return self._segments[index]

    def values(self) -> list[LogSegment]:
        """A copy of the segments, oldest first."""
        return list(self._segments)

    def base_offsets(self) -> list[int]:
        """A copy of the base offsets, oldest first."""
        return list(self._base_offsets)

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    @property
    def active_base_offset(self) -> int:
        return self._base_offsets[-1]

    def next_base_offset(self, index: int) -> int | None:
        """Base offset of the segment after the ``index``-th one (the exclusive end of that
        segment's offsets), None for the active segment."""
        return self._base_offsets[index + 1] if index + 1 < len(self._segments) else None

    def count_at_or_below(self, offset: int) -> int:
        """How many segments have a base offset <= ``offset``."""
        return bisect.bisect_right(self._base_offsets, offset)

    @property
    def size_in_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    def add(self, segment: LogSegment) -> None:
        """Append ``segment`` as the new active segment."""
        if self._segments:
            self._segments[-1].set_evictable(True)
        self._segments.append(segment)
        self._base_offsets.append(segment.base_offset)
        self._keep_active_open()

    def remove_first(self, count: int) -> list[LogSegment]:
        """Remove and return the ``count`` oldest segments."""
        removed = self._segments[:count]
        del self._segments[:count]
        del self._base_offsets[:count]
        return removed

    def remove_from(self, index: int) -> list[LogSegment]:
        """Remove and return the segments from the ``index``-th one on."""
        removed = self._segments[index:]
        del self._segments[index:]
        del self._base_offsets[index:]
        self._keep_active_open()
        return removed

    def replace_all(self, segment: LogSegment) -> None:
        """Make ``segment`` the only segment."""
        self._segments = [segment]
        self._base_offsets = [segment.base_offset]
        self._keep_active_open()
