"""The local part of one partition's log (Kafka's ``LocalLog``): its segment files, the log
end offset (LEO) and the recovery point.

``LocalLog`` rolls, reads, flushes and truncates segments; it knows nothing of the high
watermark, the log start offset, leader epochs or producers, which ``Log`` (Kafka's
``UnifiedLog``) owns and keeps in step. Offsets::

    segments[0].base_offset <= recovery_point <= log_end_offset

``recovery_point`` (exclusive) is the offset below which every byte is fsynced; the LEO is the
offset the next append gets.

Thread safety: ``Log`` calls every mutation under its lock, which this object shares (an
``RLock``). ``read``, ``read_batches`` and ``flush`` take it themselves; ``read`` holds it
only to pick segments and reads file bytes without it: bytes below the observed end are
immutable until truncation, which only happens on followers that are not serving reads.
"""

from __future__ import annotations

import bisect
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from storage_core.clock import Clock
from storage_core.common import TopicPartition
from storage_core.errors import KafkaStorageError, OffsetOutOfRangeError, TooManyOpenFilesError
from storage_core.log import log_file_utils as files
from storage_core.log.leader_epoch_cache import LeaderEpochFileCache
from storage_core.log.log_config import LogConfig
from storage_core.log.log_offsets import OFFSET_CHANGES
from storage_core.log.log_segment import FetchDataInfo, LogOffsetMetadata, LogSegment, RollParams
from storage_core.log.log_segments import LogSegments
from storage_core.log.log_validator import LogAppendInfo
from storage_core.log.offset_index import OffsetPosition
from storage_core.log.retention import SegmentSummary
from storage_core.log.transaction_index import AbortedTxn
from storage_core.records import NO_TIMESTAMP, RecordBatch
from storage_core.records.open_file_cache import (
    OpenFileCache,
    is_out_of_descriptors,
    open_files_limit,
)

# ListOffsets special timestamps (Kafka's ListOffsetsRequest).
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4


@dataclass(frozen=True, slots=True)
class TimestampAndOffset:
    """Answer of ``offset_for_timestamp``: the record's timestamp, offset and leader epoch."""

    timestamp: int
    offset: int
    leader_epoch: int | None


class LocalLog:
    """One partition's segments on local disk, its LEO and its recovery point.

    ``log_start_offset`` reads the owning log's start offset (under the shared lock): reads
    below it are out of range.
    """

    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        topic_partition: TopicPartition,
        segments: LogSegments,
        *,
        recovery_point: int,
        log_end_offset: int,
        clock: Clock,
        lock: threading.RLock,
        log_start_offset: Callable[[], int],
        file_cache: OpenFileCache | None = None,
    ) -> None:
        self.dir = directory
        self.config = config
        self.topic_partition = topic_partition
        self.segments = segments
        self._recovery_point = recovery_point
        OFFSET_CHANGES.recovery_point_changed()
        self.log_end_offset = log_end_offset
        self.last_flush_ms = clock.milliseconds()
        self._clock = clock
        self._lock = lock
        self._log_start_offset = log_start_offset
        self.file_cache = file_cache

    @property
    def recovery_point(self) -> int:
        return self._recovery_point

    @recovery_point.setter
    def recovery_point(self, offset: int) -> None:
        if offset != self._recovery_point:
            self._recovery_point = offset
            OFFSET_CHANGES.recovery_point_changed()  # for the checkpoint (log_offsets)

    @property
    def unflushed_messages(self) -> int:
        return self.log_end_offset - self.recovery_point

    def segment_summaries(self) -> list[SegmentSummary]:
        with self._lock:
            out = []
            for i, segment in enumerate(self.segments):
                out.append(
                    SegmentSummary(
                        base_offset=segment.base_offset,
                        next_base_offset=self.segments.next_base_offset(i),
                        size_bytes=segment.size,
                        largest_timestamp_ms=segment.largest_timestamp,
                    )
                )
            return out

    # ================================================================== rolling
    def roll_params(self, messages_size: int, info: LogAppendInfo, now_ms: int) -> RollParams:
        return RollParams(
            max_segment_ms=self.config.segment_ms,
            max_segment_bytes=self.config.segment_bytes,
            max_timestamp_in_messages=info.max_timestamp,
            max_offset_in_messages=info.last_offset,
            messages_size=messages_size,
            now_ms=now_ms,
        )

    def create_segment(self, base_offset: int) -> LogSegment:
        """A new, empty segment with its files created (its indexes preallocated; no
        ``.txnindex`` until an aborted transaction ends in it)."""
        return create_segment(
            self.dir,
            base_offset,
            self.config,
            self._clock,
            file_cache=self.file_cache,
            topic_partition=self.topic_partition,
        )

    def roll(self, new_offset: int) -> LogSegment:
        """Close the active segment and start a new one at ``new_offset``, above the active
        segment's base offset; the caller makes it durable.

        The new segment's files are created first: at the open-file limit the roll is refused
        (``TooManyOpenFilesError``, retriable) and the active segment stays as it was."""
        active = self.segments.active_segment
        for stale in (
            files.log_file(self.dir, new_offset),
            files.offset_index_file(self.dir, new_offset),
            files.time_index_file(self.dir, new_offset),
            files.txn_index_file(self.dir, new_offset),
        ):
            if stale.exists():  # left by an earlier truncation; holds nothing live
                stale.unlink()
        segment = self.create_segment(new_offset)
        try:
            self.run_evicting(active.on_becoming_inactive_segment, f"the indexes of {active.path}")
        except BaseException:
            segment.delete_if_exists()  # the active segment stays active
            raise
        self.segments.add(segment)
        self.run_evicting(lambda: fsync_dir(self.dir), str(self.dir))
        return segment

    def run_evicting(self, action: Callable[[], None], what: str) -> None:
        """``action()``; out of descriptors, idle segment files are closed and it runs once
        more, then ``TooManyOpenFilesError`` (retriable) names the limit."""
        if self.file_cache is not None:
            self.file_cache.call_evicting(action, what)
            return
        try:
            action()
        except Exception as exc:
            if not is_out_of_descriptors(exc):
                raise
            raise TooManyOpenFilesError(
                f"partition {self.topic_partition}: cannot open {what}: the broker is at its"
                f" open-file limit (ulimit -n {open_files_limit()})"
            ) from exc

    # ================================================================== appends
    def append(
        self, segment: LogSegment, parts: list[bytes | bytearray | memoryview], info: LogAppendInfo
    ) -> None:
        """Write validated batches to ``segment`` (the active one) and move the LEO past them."""
        try:
            segment.append(
                largest_offset=info.last_offset,
                largest_timestamp=info.max_timestamp,
                offset_of_max_timestamp=info.offset_of_max_timestamp,
                records=parts,
            )
        except OSError as exc:
            raise KafkaStorageError(
                f"partition {self.topic_partition}: append to {segment.path} failed: {exc}"
            ) from exc
        self.log_end_offset = info.last_offset + 1

    # ================================================================== reads
    def recent_tail_bytes(self, offset: int) -> int | None:
        """Bytes from ``offset`` to the log end when the last appends wrote them (in the page
        cache): 0 at the log end; None for older offsets (a read may wait for the disk)."""
        if offset == self.log_end_offset:
            return 0
        return self.segments.active_segment.recent_tail_bytes(offset)

    def read(
        self,
        start_offset: int,
        max_bytes: int,
        *,
        max_offset: int | None = None,
        min_one_message: bool = True,
    ) -> FetchDataInfo:
        """Batches from the one holding ``start_offset``, below ``max_offset`` (exclusive).

        ``max_offset`` is the high watermark for consumers (HW isolation) and None (the LEO)
        for followers. The first batch may start before ``start_offset``, as in Kafka.
        Raises ``OffsetOutOfRangeError`` below the local log start or above the LEO.
        """
        with self._lock:
            end = self.log_end_offset
            local_start = max(self._log_start_offset(), self.segments[0].base_offset)
            if start_offset >= self.segments.active_base_offset:  # most reads: active only
                segments = [self.segments.active_segment]
                base_offsets = [self.segments.active_base_offset]
            else:
                segments = self.segments.values()
                base_offsets = self.segments.base_offsets()
        if start_offset > end or start_offset < local_start:
            raise OffsetOutOfRangeError(
                f"partition {self.topic_partition}: offset {start_offset} is out of range"
                f" [{local_start}, {end}]"
            )
        limit = end if max_offset is None else min(max_offset, end)
        if start_offset >= limit:
            active = segments[-1]
            return FetchDataInfo(
                LogOffsetMetadata(start_offset, active.base_offset, active.size), None
            )
        index = bisect.bisect_right(base_offsets, start_offset) - 1
        for i in range(max(index, 0), len(segments)):
            segment = segments[i]
            if segment.base_offset >= limit:
                break
            next_base = base_offsets[i + 1] if i + 1 < len(segments) else None
            max_position: int | None = None
            if limit < end and (next_base is None or limit < next_base):
                boundary = segment.translate_offset(limit)
                max_position = segment.size if boundary is None else boundary.position
            info = segment.read(
                start_offset, max_bytes, max_position=max_position, min_one_message=min_one_message
            )
            if info is not None:
                return info
        active = segments[-1]
        return FetchDataInfo(LogOffsetMetadata(end, active.base_offset, active.size), None)

    def read_batches(
        self, start_offset: int, *, max_offset: int | None = None
    ) -> Iterator[RecordBatch]:
        """Every whole batch holding an offset in ``[start_offset, max_offset)``, in order.

        For tools and jobs that want decoded batches rather than fetch bytes; the segment sizes
        are taken under the lock so a concurrent append is never seen half-written.
        """
        with self._lock:
            end = self.log_end_offset
            segments = self.segments.values()
            sizes = [s.size for s in segments]
            local_start = max(self._log_start_offset(), segments[0].base_offset)
        if start_offset > end or start_offset < local_start:
            raise OffsetOutOfRangeError(
                f"partition {self.topic_partition}: offset {start_offset} is out of range"
                f" [{local_start}, {end}]"
            )
        limit = end if max_offset is None else min(max_offset, end)
        first = max(bisect.bisect_right([s.base_offset for s in segments], start_offset) - 1, 0)
        for segment, size in zip(segments[first:], sizes[first:], strict=True):
            position = 0
            if segment.base_offset <= start_offset:
                position = segment.offset_index.lookup(start_offset).position
            for _position, header in segment.log.batches(position, max_position=size):
                if header.base_offset >= limit:
                    return
                if header.last_offset >= start_offset:
                    yield header.load(segment.log)

    # ================================================================== transactions
    def fetch_upper_bound_offset(self, info: FetchDataInfo) -> int:
        """An offset above every record ``info`` (a ``read`` of this log) carries, so that a
        read_committed fetch looks up only the aborted transactions of what it returns
        (Kafka's ``LocalLog.addAbortedTransactions``): the first offset-index entry at or past
        the end of the bytes read, else the next segment's base offset, else the log end
        offset. Not the smallest such offset in general (the index is sparse); the LEO when
        the segment read is gone meanwhile."""
        start = info.fetch_offset_metadata
        with self._lock:
            count = self.segments.count_at_or_below(start.segment_base_offset)
            if info.records is not None and count > 0:
                segment = self.segments[count - 1]
                if segment.base_offset == start.segment_base_offset:
                    found = segment.offset_index.fetch_upper_bound_offset(
                        OffsetPosition(start.message_offset, start.relative_position_in_segment),
                        info.records.size,
                    )
                    if found is not None:
                        return found.offset
                    next_base = self.segments.next_base_offset(count - 1)
                    if next_base is not None:
                        return next_base
            return self.log_end_offset

    def collect_aborted_transactions(
        self, start_offset: int, upper_bound_offset: int
    ) -> list[AbortedTxn]:
        """Aborted transactions overlapping ``[start_offset, upper_bound_offset)``, from the
        ``.txnindex`` of the segment holding ``start_offset`` and of the later ones, until a
        segment's search is complete (Kafka's ``LocalLog.collectAbortedTransactions``; Kafka's
        ``UnifiedLog`` variant passes the log start offset as the fetch offset, which adds
        only transactions ending before ``start_offset``). Under the lock, so no segment is
        deleted or truncated meanwhile; a segment without aborted transactions costs no I/O."""
        with self._lock:
            first = max(self.segments.count_at_or_below(start_offset) - 1, 0)
            aborted: list[AbortedTxn] = []
            for i in range(first, len(self.segments)):
                result = self.segments[i].collect_aborted_txns(start_offset, upper_bound_offset)
                aborted.extend(result.aborted_transactions)
                if result.is_complete:
                    break
            return aborted

    # ================================================================== timestamps
    def offset_for_timestamp(
        self, timestamp: int, leader_epoch_cache: LeaderEpochFileCache
    ) -> TimestampAndOffset | None:
        """ListOffsets semantics: special values -1/-2/-3/-4 or the first record at/after."""
        with self._lock:
            segments = self.segments.values()
            log_start = self._log_start_offset()
            end = self.log_end_offset
        if timestamp == EARLIEST_TIMESTAMP:
            return TimestampAndOffset(
                NO_TIMESTAMP, log_start, leader_epoch_cache.epoch_for_offset(log_start)
            )
        if timestamp == EARLIEST_LOCAL_TIMESTAMP:
            local = max(log_start, segments[0].base_offset)
            return TimestampAndOffset(
                NO_TIMESTAMP, local, leader_epoch_cache.epoch_for_offset(local)
            )
        if timestamp == LATEST_TIMESTAMP:
            return TimestampAndOffset(NO_TIMESTAMP, end, leader_epoch_cache.latest_epoch)
        if timestamp == MAX_TIMESTAMP:
            return _max_timestamp_and_offset(segments, leader_epoch_cache)
        if timestamp < 0:
            raise ValueError(f"unsupported special timestamp {timestamp}")
        for segment in segments:
            if segment.largest_timestamp < timestamp or segment.size == 0:
                continue
            found = segment.find_offset_by_timestamp(timestamp, log_start)
            if found is not None:
                ts, offset = found
                return TimestampAndOffset(ts, offset, leader_epoch_cache.epoch_for_offset(offset))
        return None

    # ================================================================== durability
    def flush(self, up_to_offset: int | None = None) -> None:
        """fsync every segment holding offsets in ``[recovery point, up_to_offset)``."""
        with self._lock:
            target = self.log_end_offset if up_to_offset is None else up_to_offset
            if target <= self.recovery_point:
                return
            for i, segment in enumerate(self.segments):
                next_base = self.segments.next_base_offset(i)
                if next_base is not None and next_base <= self.recovery_point:
                    continue
                if segment.base_offset >= target:
                    break
                segment.flush()
            self.recovery_point = min(target, self.log_end_offset)
            self.last_flush_ms = self._clock.milliseconds()

    def maybe_flush_by_time(self) -> bool:
        """Flush when ``flush.ms`` has passed since the last flush (background task)."""
        with self._lock:
            due = self._clock.milliseconds() - self.last_flush_ms >= self.config.flush_ms
            if due and self.unflushed_messages > 0:
                self.flush()
                return True
            return False

    # ================================================================== truncation
    def truncate_to(self, target_offset: int) -> None:
        """Remove every offset >= ``target_offset``, which is above the first segment's base
        offset, and set the LEO to the offset after the last batch kept."""
        keep = self.segments.count_at_or_below(target_offset)
        doomed = self.segments.remove_from(keep)
        self.delete_segment_files(doomed)
        active = self.segments.active_segment
        active.truncate_to(target_offset)
        self.log_end_offset = active.read_next_offset()

    def truncate_fully_and_start_at(self, new_offset: int) -> None:
        """Delete every segment and leave one empty segment at ``new_offset``."""
        doomed = self.segments.values()
        self.delete_segment_files(doomed)
        segment = self.create_segment(new_offset)
        self.segments.replace_all(segment)

    @staticmethod
    def delete_segment_files(segments: list[LogSegment]) -> None:
        """Rename to ``.deleted`` first so a crash mid-way leaves only stray files behind."""
        for segment in segments:
            segment.close()
            segment.change_file_suffixes("", files.DELETED_FILE_SUFFIX)
        for segment in segments:
            segment.delete_if_exists()


def _max_timestamp_and_offset(
    segments: list[LogSegment], leader_epoch_cache: LeaderEpochFileCache
) -> TimestampAndOffset | None:
    best: LogSegment | None = None
    for segment in segments:
        if segment.size and (
            best is None or segment.max_timestamp_so_far > best.max_timestamp_so_far
        ):
            best = segment
    if best is None or best.max_timestamp_so_far < 0:
        return None
    target = best.max_timestamp_so_far
    for _position, header in best.log.batches(0):
        if header.max_timestamp == target:
            batch = header.load(best.log)
            for record in batch.records():
                if record.timestamp == target:
                    epoch = leader_epoch_cache.epoch_for_offset(record.offset)
                    return TimestampAndOffset(target, record.offset, epoch)
            epoch = leader_epoch_cache.epoch_for_offset(batch.last_offset)
            return TimestampAndOffset(target, batch.last_offset, epoch)
    return None


def create_segment(
    directory: Path,
    base_offset: int,
    config: LogConfig,
    clock: Clock,
    *,
    file_cache: OpenFileCache | None,
    topic_partition: TopicPartition | str,
    create_index_files: bool = True,
) -> LogSegment:
    """A new, empty segment at ``base_offset`` with its three files created (without
    ``create_index_files``, a new log's first segment: only its ``.log``, the indexes at its
    first append); nothing is left behind when that fails. Out of descriptors,
    ``TooManyOpenFilesError`` names the limit."""
    segment = LogSegment.open(
        directory,
        base_offset,
        index_interval_bytes=config.index_interval_bytes,
        max_index_size=config.segment_index_bytes,
        roll_jitter_ms=config.segment_jitter_ms,
        clock=clock,
        file_cache=file_cache,
        indexes_absent=not create_index_files,
    )
    try:
        segment.set_evictable(False)  # it is about to take appends
        segment.resize_indexes(config.segment_index_bytes)  # creates the index files if wanted
    except BaseException as exc:
        segment.delete_if_exists()
        if isinstance(exc, OSError) and is_out_of_descriptors(exc):
            raise TooManyOpenFilesError(
                f"partition {topic_partition}: cannot create segment {base_offset}:"
                f" {exc.strerror}; the broker is at its open-file limit (ulimit -n"
                f" {open_files_limit()}): raise it, lower log.segment.open.files.max, or let"
                " tiering and retention delete local segments"
            ) from exc
        raise
    return segment


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
