"""The two offsets ``Log`` keeps above its ``LocalLog`` (where the log starts, locally or
remotely, and how far it is replicated), and a process-wide count of their changes and of the
``LocalLog``'s recovery point.

Tasks that walk every log for these offsets on a timer (the checkpoints, a follower's next
fetch request) cost O(partitions) each time even on an idle broker of thousands of
partitions; with ``OFFSET_CHANGES`` they skip the walk while no log's offset moved since the
count they last saw. A count is read before the walk, so a change made during it is counted
after the read and seen by the next one.

Thread-safety: the offsets are changed under their log's lock; the counts under their own.
"""

from __future__ import annotations

import threading


class OffsetChanges:
    """How many times any log's high watermark, log start offset and recovery point changed
    (process-wide)."""

    __slots__ = ("_lock", "high_watermarks", "log_start_offsets", "recovery_points")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.high_watermarks = 0
        self.log_start_offsets = 0
        self.recovery_points = 0

    def high_watermark_changed(self) -> None:
        with self._lock:
            self.high_watermarks += 1

    def log_start_offset_changed(self) -> None:
        with self._lock:
            self.log_start_offsets += 1

    def recovery_point_changed(self) -> None:
        with self._lock:
            self.recovery_points += 1


OFFSET_CHANGES = OffsetChanges()


class LogOffsets:
    """A log's start offset and high watermark; each change is counted in
    ``OFFSET_CHANGES``. Mutable; changed under the log's lock."""

    __slots__ = ("_high_watermark", "_log_start_offset")

    def __init__(self, log_start_offset: int, high_watermark: int) -> None:
        self._log_start_offset = log_start_offset
        self._high_watermark = high_watermark
        OFFSET_CHANGES.high_watermark_changed()
        OFFSET_CHANGES.log_start_offset_changed()

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @log_start_offset.setter
    def log_start_offset(self, offset: int) -> None:
        if offset != self._log_start_offset:
            self._log_start_offset = offset
            OFFSET_CHANGES.log_start_offset_changed()

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @high_watermark.setter
    def high_watermark(self, offset: int) -> None:
        if offset != self._high_watermark:
            self._high_watermark = offset
            OFFSET_CHANGES.high_watermark_changed()
