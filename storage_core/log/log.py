"""The log of one partition: an ordered list of segments plus its offsets and epochs.

Directory ``<log dir>/<topic>-<partition>/``::

    00000000000000000000.log / .index / .timeindex     closed segments ...
    00000000000000001234.log / .index / .timeindex     the active segment (takes appends)
    00000000000000001234.snapshot                      producer state at offset 1234
    leader-epoch-checkpoint                            LeaderEpochFileCache
    partition.metadata                                 topic id

Offsets (all inclusive lower / exclusive upper bounds as in Kafka)::

    log_start_offset <= local_log_start_offset <= high_watermark <= log_end_offset

``log_start_offset`` moves forward through retention or DeleteRecords; the high watermark is set
by the replication layer; the log end offset (LEO) is the offset the next append gets.

Idempotent producers: every batch with a producer id goes through the
``ProducerStateManager`` (``producer_state.py``) under the lock before it is written. A
snapshot of that state is written when a segment rolls (at the new segment's base offset)
and on ``close`` (at the LEO); loading starts from the newest valid snapshot at or below the
LEO and replays the batches after it.

Thread safety: every mutation holds ``self._lock``. ``read`` takes it only to pick segments and
reads file bytes without it; bytes below the observed end are immutable until truncation, which
only happens on followers that are not serving reads.
"""

from __future__ import annotations

import bisect
import logging
import os
import shutil
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from storage_core.clock import SYSTEM_CLOCK, Clock
from storage_core.common import TopicPartition, Uuid
from storage_core.errors import (
    CorruptCheckpointError,
    InvalidOffsetError,
    KafkaStorageError,
    OffsetOutOfRangeError,
    UnexpectedAppendOffsetError,
)
from storage_core.log import log_file_utils as files
from storage_core.log.leader_epoch_cache import (
    LEADER_EPOCH_CHECKPOINT_FILENAME,
    LeaderEpochCheckpointFile,
    LeaderEpochFileCache,
)
from storage_core.log.log_config import LogConfig
from storage_core.log.log_loader import load_log
from storage_core.log.log_segment import (
    FetchDataInfo,
    LogOffsetMetadata,
    LogSegment,
    RollParams,
)
from storage_core.log.log_validator import LogAppendInfo, analyze_and_validate, assign_offsets
from storage_core.log.partition_metadata import PARTITION_METADATA_FILENAME, PartitionMetadataFile
from storage_core.log.producer_append_info import AppendOrigin, ProducerAppendInfo
from storage_core.log.producer_snapshot import SnapshotFile
from storage_core.log.producer_state import DEFAULT_PRODUCER_ID_EXPIRATION_MS, ProducerStateManager
from storage_core.log.producer_state_entry import (
    BatchMetadata,
    CompletedTxn,
    ProducerBatch,
    ProducerStateEntry,
)
from storage_core.log.retention import RetentionReason, SegmentSummary, plan_retention
from storage_core.log.timestamp_window import TimestampWindow
from storage_core.records import NO_PRODUCER_ID, NO_TIMESTAMP, RecordBatch, RecordBatchHeader
from storage_core.records.end_transaction_marker import end_txn_marker_of

logger = logging.getLogger(__name__)


class AppendWouldWaitError(Exception):
    """An append that may not wait for the disk (on the event loop) would have: it must roll
    a segment, fsync (``flush.messages``) or write a new leader epoch's checkpoint. Nothing
    was written: append again where waiting is allowed (an I/O thread)."""


# ListOffsets special timestamps (Kafka's ListOffsetsRequest).
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4

# A predicate that may forbid deleting a segment locally (tiered storage: "not yet copied").
SegmentDeletionGuard = Callable[[SegmentSummary], bool]


@dataclass(frozen=True, slots=True)
class TimestampAndOffset:
    """Answer of ``offset_for_timestamp``: the record's timestamp, offset and leader epoch."""

    timestamp: int
    offset: int
    leader_epoch: int | None


class Log:
    """One partition's log (Kafka's ``UnifiedLog`` over ``LocalLog``)."""

    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        *,
        log_start_offset: int = 0,
        recovery_point: int = 0,
        had_clean_shutdown: bool = True,
        topic_id: Uuid | None = None,
        clock: Clock = SYSTEM_CLOCK,
        producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    ) -> None:
        self.dir = directory
        self.topic_partition = TopicPartition.parse_dir_name(directory.name)
        self.config = config
        self._clock = clock
        self._lock = threading.RLock()
        directory.mkdir(parents=True, exist_ok=True)
        self.leader_epoch_cache, epochs_lost = self._open_leader_epoch_cache(directory)
        self.partition_metadata_file = PartitionMetadataFile(
            directory / PARTITION_METADATA_FILENAME
        )
        self.topic_id: Uuid | None = None
        if self.partition_metadata_file.exists():
            self.topic_id = self.partition_metadata_file.read()
        if topic_id is not None:
            self.assign_topic_id(topic_id)
        loaded = load_log(
            directory,
            config,
            partition=str(self.topic_partition),
            log_start_offset_checkpoint=log_start_offset,
            recovery_point_checkpoint=recovery_point,
            had_clean_shutdown=had_clean_shutdown,
            leader_epoch_cache=self.leader_epoch_cache,
            clock=clock,
        )
        self._segments: list[LogSegment] = loaded.segments
        self._base_offsets: list[int] = [s.base_offset for s in self._segments]
        self._log_start_offset = loaded.log_start_offset
        self._recovery_point = loaded.recovery_point
        self._log_end_offset = loaded.log_end_offset
        self._high_watermark = self._log_start_offset
        self._last_flush_ms = clock.milliseconds()
        self._deletion_guard: SegmentDeletionGuard | None = None
        self._closed = False
        self.recovered_segments = loaded.recovered_segments
        self.truncated_bytes_on_load = loaded.truncated_bytes
        if epochs_lost:
            self._rebuild_leader_epoch_cache()
        self.producer_state_manager = ProducerStateManager(
            directory,
            str(self.topic_partition),
            producer_id_expiration_ms=producer_id_expiration_ms,
        )
        self.producer_state_manager.remove_stray_snapshots(self._base_offsets)
        self._rebuild_producer_state(self._log_end_offset)
        logger.info(
            "loaded log partition=%s segments=%d log_start_offset=%d log_end_offset=%d"
            " recovered_segments=%d truncated_bytes=%d",
            self.topic_partition,
            len(self._segments),
            self._log_start_offset,
            self._log_end_offset,
            loaded.recovered_segments,
            loaded.truncated_bytes,
        )

    def _open_leader_epoch_cache(self, directory: Path) -> tuple[LeaderEpochFileCache, bool]:
        """The epoch cache; a corrupt checkpoint is set aside and rebuilt from the batches.

        Every batch header carries its partition leader epoch, so the cache can always be
        recomputed; refusing to open the partition would be worse than rebuilding it.
        """
        path = directory / LEADER_EPOCH_CHECKPOINT_FILENAME
        try:
            return LeaderEpochFileCache(
                self.topic_partition, LeaderEpochCheckpointFile(path)
            ), False
        except CorruptCheckpointError as exc:
            kept = path.with_name(path.name + files.QUARANTINED_FILE_SUFFIX)
            os.replace(path, kept)
            logger.error(
                "corrupt leader-epoch-checkpoint set aside, rebuilding from batches"
                " partition=%s kept_as=%s error=%s",
                self.topic_partition,
                kept.name,
                exc,
            )
            return (
                LeaderEpochFileCache(self.topic_partition, LeaderEpochCheckpointFile(path)),
                True,
            )

    def _rebuild_leader_epoch_cache(self) -> None:
        cache = self.leader_epoch_cache
        cache.clear_and_flush()
        for segment in self._segments:
            for _position, header in segment.log.batches(0):
                epoch = header.partition_leader_epoch
                latest = cache.latest_epoch
                if epoch >= 0 and (latest is None or epoch > latest):
                    cache.assign(epoch, header.base_offset)
        cache.truncate_from_start(self._log_start_offset)

    # ================================================================== identity and offsets
    def assign_topic_id(self, topic_id: Uuid) -> None:
        """Record the topic id in ``partition.metadata`` (fails if a different one is there)."""
        self.partition_metadata_file.record(topic_id)
        self.partition_metadata_file.maybe_flush()
        self.topic_id = topic_id

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def local_log_start_offset(self) -> int:
        """First offset held locally (inclusive); above ``log_start_offset`` once tiered."""
        with self._lock:
            return max(self._log_start_offset, self._segments[0].base_offset)

    @property
    def log_end_offset(self) -> int:
        """Offset the next append receives (exclusive end of the log)."""
        return self._log_end_offset

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    def try_hold(self) -> bool:
        """Take this log's lock if no other thread holds it (never waits): True if it is now
        held, until ``release_hold``. While it is, nothing appends to, truncates, rolls or
        flushes this log."""
        return self._lock.acquire(blocking=False)

    def release_hold(self) -> None:
        """Release what a successful ``try_hold`` took."""
        self._lock.release()

    @property
    def recovery_point(self) -> int:
        """Offsets below this are known to be fsynced (exclusive bound)."""
        return self._recovery_point

    @property
    def size_in_bytes(self) -> int:
        with self._lock:
            return sum(s.size for s in self._segments)

    @property
    def segments(self) -> list[LogSegment]:
        """A copy of the segment list, oldest first; the last one is active."""
        with self._lock:
            return list(self._segments)

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    @property
    def latest_epoch(self) -> int | None:
        return self.leader_epoch_cache.latest_epoch

    def update_high_watermark(self, offset: int) -> int:
        """Set the high watermark, clamped to ``[log_start_offset, log_end_offset]``."""
        with self._lock:
            self._high_watermark = min(max(offset, self._log_start_offset), self._log_end_offset)
            return self._high_watermark

    def maybe_increment_high_watermark(self, offset: int) -> bool:
        with self._lock:
            if offset <= self._high_watermark:
                return False
            self.update_high_watermark(offset)
            return True

    def set_segment_deletion_guard(self, guard: SegmentDeletionGuard | None) -> None:
        """Install the rule that must allow each local deletion (used by tiered storage)."""
        with self._lock:
            self._deletion_guard = guard

    # ================================================================== appends
    def append_as_leader(
        self,
        records: bytes | bytearray | memoryview,
        *,
        leader_epoch: int,
        disk_wait_allowed: bool = True,
    ) -> LogAppendInfo:
        """Validate, assign offsets from the LEO and the leader epoch, and append.

        Batches with a producer id are checked against the producer state first: a retry of
        one of the producer's last five batches writes nothing and returns an info with
        ``is_duplicate`` set and the original batch's offsets (Kafka's duplicate handling);
        a stale epoch raises ``InvalidProducerEpochError`` and a sequence gap
        ``OutOfOrderSequenceError``, with nothing written. Without ``disk_wait_allowed``, an
        append that would roll, fsync or checkpoint a new epoch raises
        ``AppendWouldWaitError`` instead, with nothing written: the others only copy bytes
        into the page cache.
        """
        info = analyze_and_validate(
            records,
            max_message_bytes=self.config.max_message_bytes,
            segment_bytes=self.config.segment_bytes,
            timestamp_window=TimestampWindow.maybe_of(self.config, self._clock.milliseconds()),
        )
        with self._lock:
            self._check_open()
            append_time = self._clock.milliseconds() if self.config.uses_log_append_time else None
            assigned, parts = assign_offsets(
                records,
                info,
                next_offset=self._log_end_offset,
                leader_epoch=leader_epoch,
                log_append_time_ms=append_time,
            )
            updates, completed, duplicate = self._analyze_and_validate_producer_state(
                records, assigned, AppendOrigin.CLIENT
            )
            if duplicate is not None:
                return self._duplicate_append_info(assigned, duplicate)
            now_ms = self._clock.milliseconds()
            if not disk_wait_allowed and self._append_waits_for_disk(assigned, now_ms):
                raise AppendWouldWaitError(
                    f"partition {self.topic_partition}: the append at offset"
                    f" {self._log_end_offset} must roll, fsync or checkpoint an epoch"
                )
            self._append(parts, assigned, updates, completed, now_ms=now_ms)
            return assigned

    def _append_waits_for_disk(self, info: LogAppendInfo, now_ms: int) -> bool:
        """Whether appending ``info`` would do more than write to the page cache: write a new
        leader epoch's checkpoint, roll the active segment, or fsync (``flush.messages``)."""
        if any(self._is_new_epoch(b.partition_leader_epoch) for b in info.batches):
            return True
        appended_messages = info.last_offset + 1 - self._log_end_offset
        if self.unflushed_messages + appended_messages >= self.config.flush_messages:
            return True
        return self._segments[-1].should_roll(self._roll_params(info.valid_bytes, info, now_ms))

    def _is_new_epoch(self, epoch: int) -> bool:
        """Whether a batch of leader epoch ``epoch`` starts an epoch the cache does not have."""
        latest = self.leader_epoch_cache.latest_epoch
        return epoch >= 0 and (latest is None or epoch > latest)

    def _duplicate_append_info(
        self, info: LogAppendInfo, duplicate: BatchMetadata
    ) -> LogAppendInfo:
        logger.debug(
            "duplicate produce partition=%s first_offset=%d last_offset=%d",
            self.topic_partition,
            duplicate.first_offset,
            duplicate.last_offset,
        )
        return replace(
            info,
            first_offset=duplicate.first_offset,
            last_offset=duplicate.last_offset,
            max_timestamp=duplicate.timestamp,
            offset_of_max_timestamp=duplicate.last_offset,
            batches=(),
            # Kafka answers with the original batch's timestamp as its log append time.
            log_append_time_ms=duplicate.timestamp
            if self.config.uses_log_append_time
            else NO_TIMESTAMP,
            is_duplicate=True,
        )

    def append_as_follower(self, records: bytes | bytearray | memoryview) -> LogAppendInfo:
        """Append batches that already carry offsets and epochs; they must start at the LEO.

        Producer state is updated from the batches without refusing any (the leader did).
        """
        info = analyze_and_validate(
            records,
            max_message_bytes=max(self.config.max_message_bytes, self.config.segment_bytes),
            segment_bytes=self.config.segment_bytes,
        )
        with self._lock:
            self._check_open()
            if info.first_offset != self._log_end_offset:
                raise UnexpectedAppendOffsetError(
                    f"partition {self.topic_partition}: follower append starts at offset"
                    f" {info.first_offset} but the log end offset is {self._log_end_offset}"
                )
            expected = info.first_offset
            for batch in info.batches:
                if batch.base_offset != expected:
                    raise UnexpectedAppendOffsetError(
                        f"partition {self.topic_partition}: batch at offset {batch.base_offset}"
                        f" does not follow offset {expected - 1} (offsets must be contiguous)"
                    )
                expected = batch.last_offset + 1
            updates, completed, _ = self._analyze_and_validate_producer_state(
                records, info, AppendOrigin.REPLICATION
            )
            self._append([records], info, updates, completed)
            return info

    def _analyze_and_validate_producer_state(
        self,
        records: bytes | bytearray | memoryview,
        info: LogAppendInfo,
        origin: AppendOrigin,
    ) -> tuple[list[ProducerAppendInfo], list[CompletedTxn], BatchMetadata | None]:
        """Kafka's ``analyzeAndValidateProducerState`` over batches with their final offsets.

        Returns the updates to apply once written, the transactions the batches end, and,
        for a client append that repeats a batch already in the log, that batch.
        """
        manager = self.producer_state_manager
        updates: dict[int, ProducerAppendInfo] = {}
        completed: list[CompletedTxn] = []
        for batch in info.batches:
            if batch.producer_id <= NO_PRODUCER_ID:
                continue
            marker = None
            if batch.is_control:
                marker = end_txn_marker_of(RecordBatch.from_buffer(records, batch.position))
            producer_batch = ProducerBatch(
                producer_id=batch.producer_id,
                producer_epoch=batch.producer_epoch,
                base_sequence=batch.base_sequence,
                base_offset=batch.base_offset,
                last_offset_delta=batch.last_offset_delta,
                max_timestamp=batch.max_timestamp,
                is_transactional=batch.is_transactional,
                is_control=batch.is_control,
                end_txn_marker=marker,
            )
            if origin is AppendOrigin.CLIENT:
                last = manager.last_entry(batch.producer_id)
                duplicate = None if last is None else last.find_duplicate_batch(producer_batch)
                if duplicate is not None:
                    return list(updates.values()), completed, duplicate
            update = updates.get(batch.producer_id)
            if update is None:
                update = manager.prepare_update(batch.producer_id, origin)
                updates[batch.producer_id] = update
            done = update.append(producer_batch)
            if done is not None:
                completed.append(done)
        return list(updates.values()), completed, None

    def _append(
        self,
        parts: list[bytes | bytearray | memoryview],
        info: LogAppendInfo,
        producer_updates: list[ProducerAppendInfo],
        completed_txns: list[CompletedTxn],
        *,
        now_ms: int | None = None,
    ) -> None:
        for batch in info.batches:
            if self._is_new_epoch(batch.partition_leader_epoch):
                self.leader_epoch_cache.assign(batch.partition_leader_epoch, batch.base_offset)
        now = self._clock.milliseconds() if now_ms is None else now_ms
        segment = self._maybe_roll(info.valid_bytes, info, now)
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
        self._log_end_offset = info.last_offset + 1
        manager = self.producer_state_manager
        for update in producer_updates:
            manager.update(update)
        for completed in completed_txns:
            manager.complete_txn(completed)
        manager.update_map_end_offset(self._log_end_offset)
        if self.unflushed_messages >= self.config.flush_messages:
            self.flush()

    @property
    def unflushed_messages(self) -> int:
        return self._log_end_offset - self._recovery_point

    def _check_open(self) -> None:
        if self._closed:
            raise KafkaStorageError(f"partition {self.topic_partition}: the log is closed")

    # ================================================================== rolling
    def _roll_params(self, messages_size: int, info: LogAppendInfo, now_ms: int) -> RollParams:
        return RollParams(
            max_segment_ms=self.config.segment_ms,
            max_segment_bytes=self.config.segment_bytes,
            max_timestamp_in_messages=info.max_timestamp,
            max_offset_in_messages=info.last_offset,
            messages_size=messages_size,
            now_ms=now_ms,
        )

    def _maybe_roll(self, messages_size: int, info: LogAppendInfo, now_ms: int) -> LogSegment:
        segment = self._segments[-1]
        if segment.should_roll(self._roll_params(messages_size, info, now_ms)):
            logger.debug(
                "rolling partition=%s segment=%d size=%d",
                self.topic_partition,
                segment.base_offset,
                segment.size,
            )
            return self.roll(info.first_offset)
        return segment

    def roll(self, expected_next_offset: int | None = None) -> LogSegment:
        """Close the active segment and start a new one at the LEO (Kafka's ``roll``)."""
        with self._lock:
            self._check_open()
            new_offset = max(expected_next_offset or 0, self._log_end_offset)
            active = self._segments[-1]
            if active.base_offset == new_offset:
                if active.size == 0:
                    return active  # nothing to roll away from
                raise InvalidOffsetError(
                    f"partition {self.topic_partition}: cannot roll to offset {new_offset},"
                    " the active segment already starts there"
                )
            for stale in (
                files.log_file(self.dir, new_offset),
                files.offset_index_file(self.dir, new_offset),
                files.time_index_file(self.dir, new_offset),
            ):
                if stale.exists():  # left by an earlier truncation; holds nothing live
                    stale.unlink()
            active.on_becoming_inactive_segment()
            segment = LogSegment.open(
                self.dir,
                new_offset,
                index_interval_bytes=self.config.index_interval_bytes,
                max_index_size=self.config.segment_index_bytes,
                roll_jitter_ms=self.config.segment_jitter_ms,
                clock=self._clock,
            )
            self._segments.append(segment)
            self._base_offsets.append(new_offset)
            _fsync_dir(self.dir)
            # The rolled segment will not change again: make it durable now.
            self.flush(new_offset)
            # A snapshot at the new segment's base offset lets recovery start there, and is
            # the one tiered storage uploads with the rolled segment. The LEO may be below
            # the new base offset, so the state's end offset is moved there first (as Kafka).
            self.producer_state_manager.update_map_end_offset(new_offset)
            self.producer_state_manager.take_snapshot()
            return segment

    # ================================================================== reads
    def recent_tail_bytes(self, offset: int) -> int | None:
        """Bytes from ``offset`` to the log end when the last appends wrote them (in the page
        cache): 0 at the log end; None for older offsets (a read may wait for the disk)."""
        if offset == self._log_end_offset:
            return 0
        return self.active_segment.recent_tail_bytes(offset)

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
            end = self._log_end_offset
            local_start = max(self._log_start_offset, self._segments[0].base_offset)
            if start_offset >= self._base_offsets[-1]:  # most reads: the active segment only
                segments = self._segments[-1:]
                base_offsets = self._base_offsets[-1:]
            else:
                segments = list(self._segments)
                base_offsets = list(self._base_offsets)
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
            end = self._log_end_offset
            segments = list(self._segments)
            sizes = [s.size for s in segments]
            local_start = max(self._log_start_offset, segments[0].base_offset)
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

    # ================================================================== timestamps
    def offset_for_timestamp(self, timestamp: int) -> TimestampAndOffset | None:
        """ListOffsets semantics: special values -1/-2/-3/-4 or the first record at/after."""
        with self._lock:
            segments = list(self._segments)
            log_start = self._log_start_offset
            end = self._log_end_offset
        if timestamp == EARLIEST_TIMESTAMP:
            return TimestampAndOffset(
                NO_TIMESTAMP, log_start, self.leader_epoch_cache.epoch_for_offset(log_start)
            )
        if timestamp == EARLIEST_LOCAL_TIMESTAMP:
            local = max(log_start, segments[0].base_offset)
            return TimestampAndOffset(
                NO_TIMESTAMP, local, self.leader_epoch_cache.epoch_for_offset(local)
            )
        if timestamp == LATEST_TIMESTAMP:
            return TimestampAndOffset(NO_TIMESTAMP, end, self.leader_epoch_cache.latest_epoch)
        if timestamp == MAX_TIMESTAMP:
            return self._max_timestamp_and_offset(segments)
        if timestamp < 0:
            raise ValueError(f"unsupported special timestamp {timestamp}")
        for segment in segments:
            if segment.largest_timestamp < timestamp or segment.size == 0:
                continue
            found = segment.find_offset_by_timestamp(timestamp, log_start)
            if found is not None:
                ts, offset = found
                return TimestampAndOffset(
                    ts, offset, self.leader_epoch_cache.epoch_for_offset(offset)
                )
        return None

    def _max_timestamp_and_offset(self, segments: list[LogSegment]) -> TimestampAndOffset | None:
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
                        epoch = self.leader_epoch_cache.epoch_for_offset(record.offset)
                        return TimestampAndOffset(target, record.offset, epoch)
                epoch = self.leader_epoch_cache.epoch_for_offset(batch.last_offset)
                return TimestampAndOffset(target, batch.last_offset, epoch)
        return None

    # ================================================================== durability
    def flush(self, up_to_offset: int | None = None) -> None:
        """fsync every segment holding offsets in ``[recovery point, up_to_offset)``."""
        with self._lock:
            target = self._log_end_offset if up_to_offset is None else up_to_offset
            if target <= self._recovery_point:
                return
            for i, segment in enumerate(self._segments):
                next_base = self._base_offsets[i + 1] if i + 1 < len(self._segments) else None
                if next_base is not None and next_base <= self._recovery_point:
                    continue
                if segment.base_offset >= target:
                    break
                segment.flush()
            self._recovery_point = min(target, self._log_end_offset)
            self._last_flush_ms = self._clock.milliseconds()

    def maybe_flush_by_time(self) -> bool:
        """Flush when ``flush.ms`` has passed since the last flush (background task)."""
        with self._lock:
            due = self._clock.milliseconds() - self._last_flush_ms >= self.config.flush_ms
            if due and self.unflushed_messages > 0:
                self.flush()
                return True
            return False

    # ================================================================== truncation
    def truncate_to(self, target_offset: int) -> bool:
        """Remove every offset >= ``target_offset`` (follower truncation). True if anything went."""
        if target_offset < 0:
            raise InvalidOffsetError(f"cannot truncate to a negative offset {target_offset}")
        with self._lock:
            self._check_open()
            if target_offset >= self._log_end_offset:
                # No record goes, but an epoch this broker assigned as leader at its LEO and
                # never wrote in may: kept, it would be sent as the last fetched epoch and
                # diverge from the new leader's log forever (Kafka's UnifiedLog.truncateTo).
                self.leader_epoch_cache.truncate_from_end(self._log_end_offset)
                return False
            logger.info(
                "truncating partition=%s to_offset=%d log_end_offset=%d",
                self.topic_partition,
                target_offset,
                self._log_end_offset,
            )
            if target_offset <= self._segments[0].base_offset:
                self.truncate_fully_and_start_at(target_offset)
                return True
            keep = bisect.bisect_right(self._base_offsets, target_offset)
            doomed = self._segments[keep:]
            del self._segments[keep:]
            del self._base_offsets[keep:]
            self._delete_segment_files(doomed)
            active = self._segments[-1]
            active.truncate_to(target_offset)
            self._log_end_offset = active.read_next_offset()
            self.leader_epoch_cache.truncate_from_end(self._log_end_offset)
            self._log_start_offset = min(self._log_start_offset, self._log_end_offset)
            self._recovery_point = min(self._recovery_point, self._log_end_offset)
            self._high_watermark = min(self._high_watermark, self._log_end_offset)
            self._rebuild_producer_state(self._log_end_offset)
            return True

    def truncate_fully_and_start_at(
        self, new_offset: int, log_start_offset: int | None = None
    ) -> None:
        """Delete every segment and restart the log empty at ``new_offset``."""
        if new_offset < 0:
            raise InvalidOffsetError(f"cannot start a log at a negative offset {new_offset}")
        with self._lock:
            self._check_open()
            doomed = list(self._segments)
            self._delete_segment_files(doomed)
            segment = LogSegment.open(
                self.dir,
                new_offset,
                index_interval_bytes=self.config.index_interval_bytes,
                max_index_size=self.config.segment_index_bytes,
                roll_jitter_ms=self.config.segment_jitter_ms,
                clock=self._clock,
            )
            self._segments = [segment]
            self._base_offsets = [new_offset]
            self.leader_epoch_cache.clear_and_flush()
            self.producer_state_manager.truncate_fully_and_start_at(new_offset)
            self._log_end_offset = new_offset
            self._log_start_offset = new_offset if log_start_offset is None else log_start_offset
            self._recovery_point = new_offset
            self._high_watermark = new_offset
            _fsync_dir(self.dir)
            self._rebuild_producer_state(new_offset)

    # ================================================================== producer state
    @property
    def active_producers(self) -> dict[int, ProducerStateEntry]:
        """Producer id -> state, a copy taken under the lock."""
        with self._lock:
            return dict(self.producer_state_manager.active_producers)

    def producer_snapshot_files(self) -> list[SnapshotFile]:
        """The producer ``.snapshot`` files, oldest first. Tiered storage uploads with each
        segment the snapshot whose offset is the next segment's base offset."""
        with self._lock:
            return self.producer_state_manager.snapshot_files()

    def fetch_producer_snapshot(self, offset: int) -> Path | None:
        """The snapshot file at exactly ``offset``, or None."""
        with self._lock:
            return self.producer_state_manager.fetch_snapshot(offset)

    def take_producer_snapshot(self) -> Path | None:
        """Snapshot the producer state at the LEO unless already done; returns the file."""
        with self._lock:
            self._check_open()
            return self.producer_state_manager.take_snapshot()

    def remove_expired_producers(self) -> int:
        """Drop producers idle for ``producer.id.expiration.ms`` (run every
        ``producer.id.expiration.check.interval.ms``, 10 minutes in Kafka)."""
        with self._lock:
            return self.producer_state_manager.remove_expired_producers(self._clock.milliseconds())

    def load_producer_state(self, last_offset: int | None = None) -> None:
        """Reload the producer state from the snapshot files on disk and replay the log up to
        ``last_offset`` (the LEO by default); e.g. after a snapshot was restored from remote
        storage into the partition directory."""
        with self._lock:
            self._check_open()
            manager = self.producer_state_manager
            manager.reload_snapshots()
            self._rebuild_producer_state(
                self._log_end_offset if last_offset is None else last_offset
            )

    def _on_log_start_offset_incremented(self) -> None:
        manager = self.producer_state_manager
        manager.delete_snapshots_before(self._log_start_offset, keep_newest_at_or_below=True)
        manager.on_log_start_offset_incremented(self._log_start_offset)

    def _rebuild_producer_state(self, last_offset: int) -> None:
        """Kafka's ``rebuildProducerState``: reload the newest snapshot at or below
        ``last_offset`` and replay the batches from there to ``last_offset`` (exclusive).

        Without any snapshot the whole local log is replayed, even after a clean shutdown
        (Kafka then skips the scan, assuming a log from before idempotence; here a log from
        before snapshots existed would lose its producers that way). Snapshots are written on
        the way at the base offsets of the last two segments and at ``last_offset``.
        """
        manager = self.producer_state_manager
        segments = self._segments
        offsets_to_snapshot = {segments[-1].base_offset, last_offset}
        if len(segments) > 1:
            offsets_to_snapshot.add(segments[-2].base_offset)
        was_empty = manager.is_empty and manager.map_end_offset >= last_offset
        manager.truncate_and_reload(self._log_start_offset, last_offset, self._clock.milliseconds())
        replay_from = manager.map_end_offset
        if last_offset > replay_from and not was_empty:
            for i, segment in enumerate(segments):
                next_base = self._base_offsets[i + 1] if i + 1 < len(segments) else None
                if next_base is not None and next_base <= replay_from:
                    continue
                if segment.base_offset >= last_offset:
                    break
                start = max(segment.base_offset, manager.map_end_offset, self._log_start_offset)
                manager.update_map_end_offset(start)
                if segment.base_offset in offsets_to_snapshot:
                    manager.take_snapshot()
                manager.load_producers_from_batches(
                    self._producer_batches(segment, start, last_offset)
                )
        manager.update_map_end_offset(last_offset)
        manager.take_snapshot()

    def _producer_batches(
        self, segment: LogSegment, start_offset: int, end_offset: int
    ) -> Iterator[ProducerBatch]:
        """Batches of ``segment`` with a producer id, from the one holding ``start_offset``
        to the last one ending below ``end_offset`` (exclusive)."""
        position = 0
        if segment.base_offset < start_offset:
            position = segment.offset_index.lookup(start_offset).position
        for _position, header in segment.log.batches(position):
            if header.last_offset >= end_offset:
                return
            if header.last_offset < start_offset or header.producer_id <= NO_PRODUCER_ID:
                continue
            yield _producer_batch(header, segment)

    # ================================================================== log start and retention
    def maybe_increment_log_start_offset(self, new_log_start_offset: int, reason: str) -> bool:
        """Move the log start offset forward (DeleteRecords, retention); never past the HW."""
        with self._lock:
            if new_log_start_offset > self._high_watermark:
                raise OffsetOutOfRangeError(
                    f"partition {self.topic_partition}: cannot move the log start offset to"
                    f" {new_log_start_offset}, above the high watermark {self._high_watermark}"
                )
            if new_log_start_offset <= self._log_start_offset:
                return False
            logger.info(
                "log start offset moved partition=%s from=%d to=%d reason=%r",
                self.topic_partition,
                self._log_start_offset,
                new_log_start_offset,
                reason,
            )
            self._log_start_offset = new_log_start_offset
            self.leader_epoch_cache.truncate_from_start(new_log_start_offset)
            self._recovery_point = max(self._recovery_point, new_log_start_offset)
            self._on_log_start_offset_incremented()
            return True

    def segment_summaries(self) -> list[SegmentSummary]:
        with self._lock:
            out = []
            for i, segment in enumerate(self._segments):
                next_base = self._base_offsets[i + 1] if i + 1 < len(self._segments) else None
                out.append(
                    SegmentSummary(
                        base_offset=segment.base_offset,
                        next_base_offset=next_base,
                        size_bytes=segment.size,
                        largest_timestamp_ms=segment.largest_timestamp,
                    )
                )
            return out

    def delete_old_segments(self) -> int:
        """Apply local retention once; returns how many segments were deleted."""
        with self._lock:
            self._check_open()
            config = self.config
            decision = plan_retention(
                self.segment_summaries(),
                now_ms=self._clock.milliseconds(),
                retention_ms=config.effective_local_retention_ms
                if config.remote_storage_enable
                else config.retention_ms,
                retention_bytes=config.effective_local_retention_bytes
                if config.remote_storage_enable
                else config.retention_bytes,
                log_start_offset=self._log_start_offset,
                high_watermark=self._high_watermark,
                delete_by_time_and_size=config.is_delete,
                may_delete=self._deletion_guard_for(config),
            )
            if decision.segment_count == 0:
                return 0
            doomed = self._segments[: decision.segment_count]
            del self._segments[: decision.segment_count]
            del self._base_offsets[: decision.segment_count]
            new_local_start = self._segments[0].base_offset
            logger.info(
                "deleting segments partition=%s count=%d up_to_offset=%d reason=%r",
                self.topic_partition,
                len(doomed),
                new_local_start,
                decision.reason.value if decision.reason else None,
            )
            self._delete_segment_files(doomed)
            if (
                not config.remote_storage_enable
                or decision.reason is RetentionReason.LOG_START_OFFSET
            ):
                # With tiered storage, the remote copy still serves these offsets.
                self._log_start_offset = max(self._log_start_offset, new_local_start)
                self.leader_epoch_cache.truncate_from_start(self._log_start_offset)
            self._recovery_point = max(self._recovery_point, new_local_start)
            # The snapshots of the deleted segments go; the one at the new first segment's
            # base offset (or the newest below it) stays.
            self.producer_state_manager.delete_snapshots_before(
                new_local_start, keep_newest_at_or_below=True
            )
            self._on_log_start_offset_incremented()
            return len(doomed)

    def _deletion_guard_for(self, config: LogConfig) -> SegmentDeletionGuard | None:
        """The installed guard; on a remote-enabled log without one (tiered storage not
        running yet), only segments below the log start offset may go: deleting any other
        one locally could lose data that was never copied."""
        if self._deletion_guard is not None or not config.remote_storage_enable:
            return self._deletion_guard
        log_start_offset = self._log_start_offset
        return lambda segment: (
            segment.next_base_offset is not None and segment.next_base_offset <= log_start_offset
        )

    def _delete_segment_files(self, segments: list[LogSegment]) -> None:
        """Rename to ``.deleted`` first so a crash mid-way leaves only stray files behind."""
        for segment in segments:
            segment.close()
            segment.change_file_suffixes("", files.DELETED_FILE_SUFFIX)
        for segment in segments:
            segment.delete_if_exists()

    # ================================================================== lifecycle
    def close(self) -> None:
        """Close files (trimming the active segment's indexes); no flush implied.

        The producer state is snapshotted at the LEO first, so that the next load need not
        replay the log; if that write fails the state is rebuilt from the log on load.
        """
        with self._lock:
            if self._closed:
                return
            try:
                self.producer_state_manager.take_snapshot()
            except KafkaStorageError as exc:
                logger.error(
                    "producer snapshot on close failed partition=%s error=%s",
                    self.topic_partition,
                    exc,
                )
            for segment in self._segments:
                segment.close()
            self._closed = True

    def delete(self) -> None:
        """Close the log and remove its directory."""
        with self._lock:
            self.close()
            shutil.rmtree(self.dir, ignore_errors=False)

    def release_deleted_files(self, directory: Path) -> None:
        """The partition dir was renamed to ``directory`` for deletion: drop every open handle
        without writing anything (no snapshot, no index trim), and stay closed."""
        with self._lock:
            self.dir = directory
            self.producer_state_manager.update_parent_dir(directory)
            for segment in self._segments:
                # Its files were under the old dir name, now gone: this only unmaps and closes.
                segment.delete_if_exists()
            self._closed = True

    def __repr__(self) -> str:
        return (
            f"Log({self.topic_partition}, start={self._log_start_offset},"
            f" end={self._log_end_offset}, segments={len(self._segments)})"
        )


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _producer_batch(header: RecordBatchHeader, segment: LogSegment) -> ProducerBatch:
    marker = end_txn_marker_of(header.load(segment.log)) if header.is_control else None
    return ProducerBatch(
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        base_offset=header.base_offset,
        last_offset_delta=header.last_offset_delta,
        max_timestamp=header.max_timestamp,
        is_transactional=header.is_transactional,
        is_control=header.is_control,
        end_txn_marker=marker,
    )
