"""The segments of one partition's cache kept in listing order, and what is read off them.

``RemoteLogMetadataCache`` answers ``list_all_remote_log_segments`` and the remote log manager
asks about every partition every task interval (its log start offset, its size gauges); with
10^5 segments, sorting them per call took the broker's task thread most of its time and
starved everything else of the interpreter lock. ``SegmentListing`` keeps them sorted as
events arrive instead::

    keys      (start_offset, end_offset, segment id), ascending   bisect: O(log n) to find
    segments  the metadata at the same index                      a new segment: one insert,
                                                                  an update: one slot replaced

A listing is one copy of ``segments`` (no Python work per segment), and ``summary`` is
computed once per change of the listing (``version``) and then reused.

Not thread-safe: the owning cache serialises access.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from storage_core.tiered.metadata.metadata import RemoteLogSegmentId, RemoteLogSegmentMetadata
from storage_core.tiered.metadata.states import RemoteLogSegmentState

_SortKey = tuple[int, int, RemoteLogSegmentId]


def _sort_key(metadata: RemoteLogSegmentMetadata) -> _SortKey:
    return (metadata.start_offset, metadata.end_offset, metadata.remote_log_segment_id)


@dataclass(frozen=True, slots=True, kw_only=True)
class RemoteLogSegmentsSummary:
    """What the remote log manager reads off a partition's segments (not DELETE_SEGMENT_FINISHED):

    ``copied_start_offset``: the smallest start offset (inclusive) of a COPY_SEGMENT_FINISHED
    segment, ``None`` if none; ``deleting_segment_ids``: segments in DELETE_SEGMENT_STARTED, by
    start offset; ``finished_size_bytes``: the bytes of the COPY_SEGMENT_FINISHED segments;
    ``metadata_count``: every segment listed."""

    copied_start_offset: int | None
    deleting_segment_ids: tuple[RemoteLogSegmentId, ...]
    finished_size_bytes: int
    metadata_count: int


def summarize(segments: list[RemoteLogSegmentMetadata]) -> RemoteLogSegmentsSummary:
    """The summary of ``segments`` (any order)."""
    copied_start_offset: int | None = None
    deleting: list[RemoteLogSegmentId] = []
    finished_size_bytes = 0
    for metadata in segments:
        if metadata.state is RemoteLogSegmentState.COPY_SEGMENT_FINISHED:
            finished_size_bytes += metadata.segment_size_in_bytes
            if copied_start_offset is None or metadata.start_offset < copied_start_offset:
                copied_start_offset = metadata.start_offset
        elif metadata.state is RemoteLogSegmentState.DELETE_SEGMENT_STARTED:
            deleting.append(metadata.remote_log_segment_id)
    return RemoteLogSegmentsSummary(
        copied_start_offset=copied_start_offset,
        deleting_segment_ids=tuple(deleting),
        finished_size_bytes=finished_size_bytes,
        metadata_count=len(segments),
    )


class SegmentListing:
    """Segments sorted by (start offset, end offset, id); see the module doc."""

    __slots__ = ("_keys", "_segments", "_summary", "_summary_version", "version")

    def __init__(self) -> None:
        self._keys: list[_SortKey] = []
        self._segments: list[RemoteLogSegmentMetadata] = []
        self.version = 0
        """Changes whenever the listing does."""
        self._summary: RemoteLogSegmentsSummary | None = None
        self._summary_version = -1

    @classmethod
    def of(cls, segments: list[RemoteLogSegmentMetadata]) -> SegmentListing:
        """A listing of ``segments`` (distinct ids, any order), sorted once."""
        listing = cls()
        ordered = sorted(segments, key=_sort_key)
        listing._keys = [_sort_key(m) for m in ordered]
        listing._segments = ordered
        return listing

    def __len__(self) -> int:
        return len(self._segments)

    def put(
        self, metadata: RemoteLogSegmentMetadata, previous: RemoteLogSegmentMetadata | None
    ) -> None:
        """Add ``metadata``, or replace ``previous`` (the same segment's metadata listed now)."""
        if previous is not None:
            index = self._index(previous)
            if _sort_key(metadata) == self._keys[index]:
                self._segments[index] = metadata
                self.version += 1
                return
            self.remove(previous)
        key = _sort_key(metadata)
        index = bisect.bisect_left(self._keys, key)
        self._keys.insert(index, key)
        self._segments.insert(index, metadata)
        self.version += 1

    def remove(self, metadata: RemoteLogSegmentMetadata) -> None:
        """Drop ``metadata`` (listed now)."""
        index = self._index(metadata)
        del self._keys[index]
        del self._segments[index]
        self.version += 1

    def segments(self) -> list[RemoteLogSegmentMetadata]:
        """Every segment in listing order (a new list)."""
        return list(self._segments)

    def summary(self) -> RemoteLogSegmentsSummary:
        """``summarize`` of the listing, computed once per ``version``."""
        if self._summary is None or self._summary_version != self.version:
            self._summary = summarize(self._segments)
            self._summary_version = self.version
        return self._summary

    def _index(self, metadata: RemoteLogSegmentMetadata) -> int:
        key = _sort_key(metadata)
        index = bisect.bisect_left(self._keys, key)
        if index == len(self._keys) or self._keys[index] != key:
            raise KeyError(f"segment {metadata.remote_log_segment_id} is not listed")
        return index
