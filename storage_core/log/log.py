"""The log of one partition (Kafka's ``UnifiedLog``): its segments plus its offsets and epochs.

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

As in Kafka, ``Log`` sits on a ``LocalLog`` (``local_log.py``: the segments, kept in
``LogSegments``, the LEO and the recovery point; rolling, reading, flushing, truncating
segments) and owns what spans it: the log start offset, the high watermark, the leader epoch
cache, the producer state, appends (``log_appender.py``, validated by ``log_validator.py``)
and the log start offset and retention (``log_retention.py``, decided by ``retention.py``).

Idempotent producers: every batch with a producer id goes through the
``ProducerStateManager`` (``producer_state.py``) under the lock before it is written
(``log_producer_state.py``). A snapshot of that state is written when a segment rolls (at the
new segment's base offset) and on ``close`` (at the LEO); loading starts from the newest valid
snapshot at or below the LEO and replays the batches after it.

Thread safety: every mutation holds ``self._lock``, which the ``LocalLog`` shares. ``read``
takes it only to pick segments and reads file bytes without it; bytes below the observed end
are immutable until truncation, which only happens on followers that are not serving reads.
"""

from __future__ import annotations

import logging
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

from storage_core.clock import SYSTEM_CLOCK, Clock
from storage_core.common import TopicPartition, Uuid
from storage_core.errors import (
    InvalidOffsetError,
    KafkaStorageError,
)
from storage_core.log.local_log import LocalLog, fsync_dir
from storage_core.log.local_log import TimestampAndOffset as TimestampAndOffset  # noqa: PLC0414 (export)
from storage_core.log.log_appender import AppendWouldWaitError as AppendWouldWaitError  # noqa: PLC0414 (export)
from storage_core.log.log_appender import LogAppender
from storage_core.log.log_config import LogConfig
from storage_core.log.log_loader import (
    create_new_log,
    load_log,
    open_leader_epoch_cache,
    rebuild_leader_epoch_cache,
)
from storage_core.log.log_offsets import LogOffsets
from storage_core.log.log_producer_state import (
    rebuild_producer_state,
)
from storage_core.log.log_retention import LogRetention
from storage_core.log.log_segment import FetchDataInfo, LogSegment
from storage_core.log.log_segments import LogSegments
from storage_core.log.log_validator import (
    LogAppendInfo,
)
from storage_core.log.partition_metadata import PARTITION_METADATA_FILENAME, PartitionMetadataFile
from storage_core.log.producer_append_info import AppendOrigin
from storage_core.log.producer_snapshot import SnapshotFile
from storage_core.log.producer_state import DEFAULT_PRODUCER_ID_EXPIRATION_MS, ProducerStateManager
from storage_core.log.producer_state_entry import ProducerStateEntry
from storage_core.log.retention import (
    SegmentDeletionGuard,
    SegmentSummary,
)
from storage_core.log.transaction_index import AbortedTxn
from storage_core.log.verification_guard import VerificationGuard
from storage_core.records import RecordBatch
from storage_core.records.open_file_cache import OpenFileCache

logger = logging.getLogger(__name__)


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
        file_cache: OpenFileCache | None = None,
        defer_metadata_flush: bool = False,
        new_log: bool = False,
    ) -> None:
        """``file_cache``: the broker's LRU of open segment files (``LogManager``'s); without
        one every segment keeps its ``.log`` open (tools, tests). ``defer_metadata_flush``:
        a new ``topic_id`` is recorded but ``partition.metadata`` is written later, by
        ``maybe_flush_metadata_file`` (Kafka schedules that write rather than fsync while it
        creates a log), or at the latest by ``flush`` or ``close``. ``new_log``: the caller
        has just created ``directory``, so there is nothing in it to load (``create_new_log`` of the
        loader)."""
        self.topic_partition = TopicPartition.parse_dir_name(directory.name)
        self._clock = clock
        self._lock = threading.RLock()
        if not new_log:
            directory.mkdir(parents=True, exist_ok=True)
        self.leader_epoch_cache, epochs_lost = open_leader_epoch_cache(
            directory, self.topic_partition, new_log=new_log
        )
        self.partition_metadata_file = PartitionMetadataFile(
            directory / PARTITION_METADATA_FILENAME
        )
        self.topic_id: Uuid | None = None
        if not new_log and self.partition_metadata_file.exists():
            self.topic_id = self.partition_metadata_file.read()
        if topic_id is not None:
            self.assign_topic_id(topic_id, flush=not defer_metadata_flush)
        if new_log:
            loaded = create_new_log(
                directory,
                config,
                partition=str(self.topic_partition),
                clock=clock,
                file_cache=file_cache,
            )
        else:
            loaded = load_log(
                directory,
                config,
                partition=str(self.topic_partition),
                log_start_offset_checkpoint=log_start_offset,
                recovery_point_checkpoint=recovery_point,
                had_clean_shutdown=had_clean_shutdown,
                leader_epoch_cache=self.leader_epoch_cache,
                clock=clock,
                file_cache=file_cache,
            )
        self._offsets = LogOffsets(loaded.log_start_offset, loaded.log_start_offset)
        self._local_log = LocalLog(
            directory,
            config,
            self.topic_partition,
            LogSegments(loaded.segments),
            recovery_point=loaded.recovery_point,
            log_end_offset=loaded.log_end_offset,
            clock=clock,
            lock=self._lock,
            log_start_offset=lambda: self._offsets.log_start_offset,
            file_cache=file_cache,
        )
        self._closed = False
        self.recovered_segments = loaded.recovered_segments
        self.truncated_bytes_on_load = loaded.truncated_bytes
        if epochs_lost:
            rebuild_leader_epoch_cache(
                self.leader_epoch_cache, self._local_log.segments, self._offsets.log_start_offset
            )
        self.producer_state_manager = ProducerStateManager(
            directory,
            str(self.topic_partition),
            producer_id_expiration_ms=producer_id_expiration_ms,
            new_log=new_log,
        )
        if not new_log:
            self.producer_state_manager.remove_stray_snapshots(
                self._local_log.segments.base_offsets()
            )
        self._retention = LogRetention(
            self._local_log,
            self._offsets,
            self.leader_epoch_cache,
            self.producer_state_manager,
            clock=clock,
            lock=self._lock,
            check_open=self._check_open,
        )
        self._appender = LogAppender(
            self._local_log,
            self.leader_epoch_cache,
            self.producer_state_manager,
            clock=clock,
            lock=self._lock,
            check_open=self._check_open,
        )
        if new_log:
            return  # the manager's "created log" line says it
        self._rebuild_producer_state(self._local_log.log_end_offset)
        logger.info(
            "loaded log partition=%s segments=%d log_start_offset=%d log_end_offset=%d"
            " recovered_segments=%d truncated_bytes=%d",
            self.topic_partition,
            len(self._local_log.segments),
            self._offsets.log_start_offset,
            self._local_log.log_end_offset,
            loaded.recovered_segments,
            loaded.truncated_bytes,
        )

    # ================================================================== identity and offsets
    @property
    def dir(self) -> Path:
        """The partition directory (renamed when the partition is deleted)."""
        return self._local_log.dir

    @property
    def config(self) -> LogConfig:
        return self._local_log.config

    @config.setter
    def config(self, config: LogConfig) -> None:
        self._local_log.config = config

    def assign_topic_id(self, topic_id: Uuid, *, flush: bool = True) -> None:
        """Record the topic id in ``partition.metadata`` (fails if a different one is there);
        written now, or with ``flush=False`` by ``maybe_flush_metadata_file``."""
        self.partition_metadata_file.record(topic_id)
        if flush:
            self.partition_metadata_file.maybe_flush()
        self.topic_id = topic_id

    def maybe_flush_metadata_file(self) -> None:
        """Write ``partition.metadata`` if its topic id is recorded and not yet on disk (Kafka's
        ``maybeFlushMetadataFile``). Nothing once the log is closed, or while its directory is
        being renamed away for deletion."""
        with self._lock:
            if self._closed or not self.dir.exists():
                return
            self.partition_metadata_file.maybe_flush()

    @property
    def log_start_offset(self) -> int:
        return self._offsets.log_start_offset

    @property
    def local_log_start_offset(self) -> int:
        """First offset held locally (inclusive); above ``log_start_offset`` once tiered."""
        with self._lock:
            return max(self._offsets.log_start_offset, self._local_log.segments[0].base_offset)

    @property
    def log_end_offset(self) -> int:
        """Offset the next append receives (exclusive end of the log)."""
        return self._local_log.log_end_offset

    @property
    def high_watermark(self) -> int:
        return self._offsets.high_watermark

    @property
    def last_stable_offset(self) -> int:
        """Kafka's LSO: the first offset of the oldest transaction not yet decided (or whose
        marker is not yet replicated), at or above the log start; the HW when there is none
        below it. read_committed consumers read below it. Read without the lock."""
        high_watermark = self._offsets.high_watermark
        first = self.producer_state_manager.first_unstable_offset
        if first is None:
            return high_watermark
        return min(max(first, self._offsets.log_start_offset), high_watermark)

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
        return self._local_log.recovery_point

    @property
    def size_in_bytes(self) -> int:
        with self._lock:
            return self._local_log.segments.size_in_bytes

    @property
    def segments(self) -> list[LogSegment]:
        """A copy of the segment list, oldest first; the last one is active."""
        with self._lock:
            return self._local_log.segments.values()

    @property
    def active_segment(self) -> LogSegment:
        return self._local_log.segments.active_segment

    @property
    def latest_epoch(self) -> int | None:
        return self.leader_epoch_cache.latest_epoch

    def update_high_watermark(self, offset: int) -> int:
        """Set the high watermark, clamped to ``[log_start_offset, log_end_offset]``."""
        with self._lock:
            self._offsets.high_watermark = min(
                max(offset, self._offsets.log_start_offset), self._local_log.log_end_offset
            )
            self.producer_state_manager.on_high_watermark_updated(self._offsets.high_watermark)
            return self._offsets.high_watermark

    def maybe_increment_high_watermark(self, offset: int) -> bool:
        with self._lock:
            if offset <= self._offsets.high_watermark:
                return False
            self.update_high_watermark(offset)
            return True

    def set_segment_deletion_guard(self, guard: SegmentDeletionGuard | None) -> None:
        """Install the rule that must allow each local deletion (used by tiered storage)."""
        with self._lock:
            self._retention.deletion_guard = guard

    # ================================================================== appends (log_appender)
    def append_as_leader(
        self,
        records: bytes | bytearray | memoryview,
        *,
        leader_epoch: int,
        disk_wait_allowed: bool = True,
        origin: AppendOrigin = AppendOrigin.CLIENT,
        verification_guard: VerificationGuard | None = None,
    ) -> LogAppendInfo:
        """Validate, assign offsets from the LEO and ``leader_epoch``, and append
        (``LogAppender.append_as_leader``: duplicates, producer errors, disk waits,
        transaction verification)."""
        return self._appender.append_as_leader(
            records,
            leader_epoch=leader_epoch,
            disk_wait_allowed=disk_wait_allowed,
            origin=origin,
            verification_guard=verification_guard,
        )

    def maybe_start_transaction_verification(
        self, producer_id: int, sequence: int, epoch: int
    ) -> VerificationGuard:
        """The guard a transactional append of the producer must carry, or the sentinel
        when its transaction is ongoing here (``LogAppender``)."""
        return self._appender.maybe_start_transaction_verification(producer_id, sequence, epoch)

    def append_as_follower(self, records: bytes | bytearray | memoryview) -> LogAppendInfo:
        """Append batches that already carry offsets and epochs; they must start at the LEO."""
        return self._appender.append_as_follower(records)

    def roll(self, expected_next_offset: int | None = None) -> LogSegment:
        """Close the active segment and start a new one at the LEO (Kafka's ``roll``)."""
        return self._appender.roll(expected_next_offset)

    @property
    def unflushed_messages(self) -> int:
        return self._local_log.unflushed_messages

    def _check_open(self) -> None:
        if self._closed:
            raise KafkaStorageError(f"partition {self.topic_partition}: the log is closed")

    # ================================================================== reads
    def recent_tail_bytes(self, offset: int) -> int | None:
        """Bytes from ``offset`` to the log end when the last appends wrote them (in the page
        cache): 0 at the log end; None for older offsets (a read may wait for the disk)."""
        return self._local_log.recent_tail_bytes(offset)

    def read(
        self,
        start_offset: int,
        max_bytes: int,
        *,
        max_offset: int | None = None,
        min_one_message: bool = True,
    ) -> FetchDataInfo:
        """Batches from the one holding ``start_offset``, below ``max_offset`` (exclusive)
        (``LocalLog.read``: HW isolation for consumers, the LEO for followers)."""
        return self._local_log.read(
            start_offset, max_bytes, max_offset=max_offset, min_one_message=min_one_message
        )

    def read_batches(
        self, start_offset: int, *, max_offset: int | None = None
    ) -> Iterator[RecordBatch]:
        """Every whole batch holding an offset in ``[start_offset, max_offset)``, in order."""
        return self._local_log.read_batches(start_offset, max_offset=max_offset)

    def fetch_upper_bound_offset(self, info: FetchDataInfo) -> int:
        """An offset above every record of ``info``, a ``read`` of this log (``LocalLog``'s)."""
        return self._local_log.fetch_upper_bound_offset(info)

    def collect_aborted_transactions(
        self, start_offset: int, upper_bound_offset: int
    ) -> list[AbortedTxn]:
        """Aborted transactions overlapping ``[start_offset, upper_bound_offset)`` (exclusive),
        oldest marker first, for a read_committed fetch (``LocalLog``'s, under the lock)."""
        with self._lock:
            return self._local_log.collect_aborted_transactions(start_offset, upper_bound_offset)

    # ================================================================== timestamps
    def offset_for_timestamp(self, timestamp: int) -> TimestampAndOffset | None:
        """ListOffsets semantics: special values -1/-2/-3/-4 or the first record at/after."""
        return self._local_log.offset_for_timestamp(timestamp, self.leader_epoch_cache)

    # ================================================================== durability
    def flush(self, up_to_offset: int | None = None) -> None:
        """fsync every segment holding offsets in ``[recovery point, up_to_offset)`` (and a
        ``partition.metadata`` not yet written)."""
        self.maybe_flush_metadata_file()
        self._local_log.flush(up_to_offset)

    def maybe_flush_by_time(self) -> bool:
        """Flush when ``flush.ms`` has passed since the last flush (background task)."""
        return self._local_log.maybe_flush_by_time()

    # ================================================================== truncation
    def truncate_to(self, target_offset: int) -> bool:
        """Remove every offset >= ``target_offset`` (follower truncation). True if anything went."""
        if target_offset < 0:
            raise InvalidOffsetError(f"cannot truncate to a negative offset {target_offset}")
        with self._lock:
            self._check_open()
            local = self._local_log
            if target_offset >= local.log_end_offset:
                # No record goes, but an epoch this broker assigned as leader at its LEO and
                # never wrote in may: kept, it would be sent as the last fetched epoch and
                # diverge from the new leader's log forever (Kafka's UnifiedLog.truncateTo).
                self.leader_epoch_cache.truncate_from_end(local.log_end_offset)
                return False
            logger.info(
                "truncating partition=%s to_offset=%d log_end_offset=%d",
                self.topic_partition,
                target_offset,
                local.log_end_offset,
            )
            if target_offset <= local.segments[0].base_offset:
                self.truncate_fully_and_start_at(target_offset)
                return True
            local.truncate_to(target_offset)
            log_end_offset = local.log_end_offset
            self.leader_epoch_cache.truncate_from_end(log_end_offset)
            self._offsets.log_start_offset = min(self._offsets.log_start_offset, log_end_offset)
            local.recovery_point = min(local.recovery_point, log_end_offset)
            self._offsets.high_watermark = min(self._offsets.high_watermark, log_end_offset)
            self._rebuild_producer_state(log_end_offset)
            return True

    def truncate_fully_and_start_at(
        self, new_offset: int, log_start_offset: int | None = None
    ) -> None:
        """Delete every segment and restart the log empty at ``new_offset``."""
        if new_offset < 0:
            raise InvalidOffsetError(f"cannot start a log at a negative offset {new_offset}")
        with self._lock:
            self._check_open()
            local = self._local_log
            local.truncate_fully_and_start_at(new_offset)
            self.leader_epoch_cache.clear_and_flush()
            self.producer_state_manager.truncate_fully_and_start_at(new_offset)
            local.log_end_offset = new_offset
            self._offsets.log_start_offset = (
                new_offset if log_start_offset is None else log_start_offset
            )
            local.recovery_point = new_offset
            self._offsets.high_watermark = new_offset
            fsync_dir(local.dir)
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
                self._local_log.log_end_offset if last_offset is None else last_offset
            )

    def _rebuild_producer_state(self, last_offset: int) -> None:
        rebuild_producer_state(
            self.producer_state_manager,
            self._local_log.segments,
            log_start_offset=self._offsets.log_start_offset,
            last_offset=last_offset,
            now_ms=self._clock.milliseconds(),
        )

    # ================================================================== log start and retention
    def maybe_increment_log_start_offset(self, new_log_start_offset: int, reason: str) -> bool:
        """Move the log start offset forward (DeleteRecords, retention); never past the HW."""
        return self._retention.maybe_increment_log_start_offset(new_log_start_offset, reason)

    def segment_summaries(self) -> list[SegmentSummary]:
        return self._local_log.segment_summaries()

    def delete_old_segments(self) -> int:
        """Apply local retention once; returns how many segments were deleted."""
        return self._retention.delete_old_segments()

    # ================================================================== lifecycle
    def close(self) -> None:
        """Close files (trimming the active segment's indexes); no flush implied.

        The producer state is snapshotted at the LEO first, so that the next load need not
        replay the log; if that write fails the state is rebuilt from the log on load.
        """
        with self._lock:
            if self._closed:
                return
            self.maybe_flush_metadata_file()
            try:
                self.producer_state_manager.take_snapshot()
            except KafkaStorageError as exc:
                logger.error(
                    "producer snapshot on close failed partition=%s error=%s",
                    self.topic_partition,
                    exc,
                )
            for segment in self._local_log.segments:
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
            self._local_log.dir = directory
            self.producer_state_manager.update_parent_dir(directory)
            for segment in self._local_log.segments:
                # Its files were under the old dir name, now gone: this only unmaps and closes.
                segment.delete_if_exists()
            self._closed = True

    def __repr__(self) -> str:
        return (
            f"Log({self.topic_partition}, start={self._offsets.log_start_offset},"
            f" end={self._local_log.log_end_offset}, segments={len(self._local_log.segments)})"
        )
