"""``RemoteLogManager``: the broker side of tiered storage (KIP-405's RLM, as a broker runs it).

Copying and expiring remote segments is the business of the operations library; the broker
keeps its local log consistent with the remote tier and serves tiered offsets:

- owns the ``RemoteStorageManager`` (``remote.log.storage.manager.class.name`` built from the
  ``rsm.config.*`` settings), the ``RemoteIndexCache`` (``remote.log.index.file.cache.
  total.size.bytes``) and the ``RemoteLogReader`` pool (``remote.log.reader.threads``); uses
  the broker's ``RemoteLogMetadataManager``;
- installs on every hosted log the **segment deletion guard**: a local segment of a
  remote-enabled log may be deleted by local retention only if a COPY_SEGMENT_FINISHED copy
  covers its last offset (highest remote offset >= segment end, inclusive) or the log start
  offset passed it. This is DESIGN's "no hole" rule (``Ry + 1 >= Lx``);
- every ``remote.log.manager.task.interval.ms``, for each remote-enabled partition it leads:
  rolls an active segment that breaches local retention (so it can be copied and then
  deleted locally; by size only at ``local.retention.bytes=0``, as Kafka), and moves the
  log start offset to ``min(Rx, Lx)``: past segments in DELETE_SEGMENT_STARTED (which
  readers stop seeing at once) with the leader-epoch cache truncated from the start, as
  ``Log.maybe_increment_log_start_offset`` does. A remote read that finds no segment runs
  the same sync for its partition at once;
- feeds the remote series of ``BrokerTopicMetrics`` (``remote_log_metrics``): the remote
  read meters on the reader threads, and per led partition, every task interval, the copy
  lag and the remote log size and metadata count;
- on the partitions 0 it leads, rewrites the topic's manifest in the bucket when the topic's
  configs, partition count or replication factor changed (``TopicManifestWriter``, set as
  ``topic_manifests`` by the broker when its store takes whole objects);
- answers ListOffsets for tiered data (``latest-tiered`` = highest remote offset, -1 if none;
  timestamps searched in remote segments first) and publishes DELETE_PARTITION_MARKED for the
  partitions of a deleted remote-enabled topic.

Remote reads count their record bytes against the broker's fetch quota (KIP-956,
``quota.remote_log_quotas``); a consumer fetch of a tiered offset over it reads nothing.

Reads of tiered offsets go through ``PendingRemoteReads`` (one read per partition, kept
while the store is slow) and are waited for ``remote.fetch.max.wait.ms`` (KIP-1018, default
500) by the fetch; a store that does not answer by then gives ``RemoteReadTimeoutError`` and
an object missing from the store ``RemoteSegmentMissingError`` (``remote_read_faults``). Both
log one WARN per partition (timeouts) or per segment (missing objects) per minute.

Offsets (DESIGN section 2): ``log start offset`` of the whole partition = ``Log.log_start_offset``,
which local retention leaves alone on a remote-enabled log; local log start offset =
``Log.local_log_start_offset``.

Thread-safety: every method may be called from any thread; ``_lock`` guards the hosted
partitions; the task runs on its own daemon thread; reads run on the reader pool.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from concurrent.futures import Future
from pathlib import Path
from typing import ClassVar, Protocol

from storage_core.clock import SYSTEM_CLOCK, Clock
from storage_core.common import TopicIdPartition, TopicPartition, Uuid
from storage_core.errors import OffsetOutOfRangeError, StorageError
from storage_core.log.log import Log, TimestampAndOffset
from storage_core.log.retention import SegmentSummary
from storage_core.metrics import BrokerTopicStats
from storage_core.records import NO_TIMESTAMP
from storage_core.tiered.chunked.chunked_storage_manager import ChunkedRemoteStorageManager
from storage_core.tiered.chunked.errors import ChunkIntegrityError
from storage_core.tiered.metadata.metadata import RemotePartitionDeleteMetadata
from storage_core.tiered.metadata.states import RemotePartitionDeleteState
from storage_core.tiered.operations.copy import is_copy_enabled
from storage_core.tiered.pending_remote_reads import PendingRead, PendingRemoteReads
from storage_core.tiered.quota.remote_log_quotas import RemoteLogQuotas
from storage_core.tiered.recovery.topic_manifest_writer import TopicManifestWriter
from storage_core.tiered.remote_index_cache import RemoteIndexCache
from storage_core.tiered.remote_log_metadata_manager import RemoteLogMetadataManager
from storage_core.tiered.remote_log_metrics import (
    NO_COPY_LAG,
    RemoteLogMetrics,
    RemoteLogSize,
    copy_lag,
    register_chunk_cache,
)
from storage_core.tiered.remote_log_reader import (
    MemoryReadMissError,
    RemoteFetchData,
    RemoteLogReader,
    RemoteReadStart,
    RemoteStorageFetchInfo,
)
from storage_core.tiered.remote_read_faults import (
    RemoteReadTimeoutError,
    RemoteSegmentMissingError,
    WarningLimiter,
)
from storage_core.tiered.remote_storage_manager import (
    RSM_CONFIG_PREFIX,
    RemoteReadNeedsStoreError,
    RemoteStorageError,
    RemoteStorageManager,
)
from storage_core.tiered.rsm_loader import load_remote_storage_manager

logger = logging.getLogger(__name__)

LATEST_TIERED_TIMESTAMP = -5
REMOTE_FETCH_MAX_WAIT_MS_DEFAULT = 500  # Kafka's remote.fetch.max.wait.ms (KIP-1018)
REMOTE_FETCH_MAX_WAIT_MS_MAX = 300_000


class HostedPartition(Protocol):
    """What the RLM reads of a ``replication.Partition``."""

    @property
    def topic_partition(self) -> TopicPartition: ...

    @property
    def topic_id(self) -> Uuid: ...

    @property
    def log(self) -> Log: ...

    @property
    def is_leader(self) -> bool: ...


class OffsetMovedToTieredStorageError(StorageError):
    """A replica fetched an offset that is only in the remote tier (KIP-405): it must build
    its leader-epoch and producer state from remote metadata, then fetch from the leader's
    local log start offset."""

    error_code: ClassVar[str] = "offset_moved_to_tiered_storage"


class NoRemoteLogMetadataManagerError(RemoteStorageError):
    """The broker has no remote log metadata manager yet (it is starting or stopping)."""


def topic_id_partition_of(partition: HostedPartition) -> TopicIdPartition:
    return TopicIdPartition(partition.topic_id, partition.topic_partition)


class RemoteLogManager:
    """One per broker; see the module docstring."""

    def __init__(
        self,
        *,
        broker_id: int,
        rsm: RemoteStorageManager,
        rlmm: RemoteLogMetadataManager | None,
        log_dir: Path,
        index_cache_max_bytes: int,
        reader_threads: int,
        task_interval_ms: int,
        remote_fetch_max_wait_ms: int = REMOTE_FETCH_MAX_WAIT_MS_DEFAULT,
        clock: Clock = SYSTEM_CLOCK,
        topic_stats: BrokerTopicStats | None = None,
        quotas: RemoteLogQuotas | None = None,
    ) -> None:
        if task_interval_ms <= 0:
            raise ValueError(
                f"remote.log.manager.task.interval.ms must be > 0, got {task_interval_ms}"
            )
        if not 0 < remote_fetch_max_wait_ms <= REMOTE_FETCH_MAX_WAIT_MS_MAX:
            raise ValueError(
                f"remote.fetch.max.wait.ms must be in [1, {REMOTE_FETCH_MAX_WAIT_MS_MAX}],"
                f" got {remote_fetch_max_wait_ms}"
            )
        self.remote_fetch_max_wait_ms = remote_fetch_max_wait_ms
        self._pending_reads: PendingRemoteReads[RemoteFetchData] = PendingRemoteReads(clock=clock)
        self._warnings = WarningLimiter(clock=clock)
        self.broker_id = broker_id
        self.rsm = rsm
        self._rlmm = rlmm
        self._clock = clock
        self.task_interval_ms = task_interval_ms
        self.index_cache = RemoteIndexCache(rsm, log_dir, max_size_bytes=index_cache_max_bytes)
        self._reader: RemoteLogReader | None = None
        self._reader_threads = reader_threads
        self._lock = threading.Lock()
        self._partitions: dict[TopicPartition, HostedPartition] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.topic_manifests: TopicManifestWriter | None = None
        self.metrics = RemoteLogMetrics(topic_stats) if topic_stats is not None else None
        # KIP-956: remote reads count against the fetch quota (quota.remote_log_quotas)
        self.quotas = quotas if quotas is not None else RemoteLogQuotas.from_config({}, clock=clock)
        if topic_stats is not None:
            self.quotas.register_metrics(topic_stats.registry)
        if topic_stats is not None and isinstance(rsm, ChunkedRemoteStorageManager):
            register_chunk_cache(topic_stats.registry, rsm.fetcher)

    @staticmethod
    def from_config(
        props: Mapping[str, str],
        *,
        broker_id: int,
        log_dir: Path,
        rlmm: RemoteLogMetadataManager | None,
        clock: Clock = SYSTEM_CLOCK,
        topic_stats: BrokerTopicStats | None = None,
    ) -> RemoteLogManager:
        """Build from broker properties (``props`` holds every ``remote.log.*`` and
        ``rsm.config.*`` key as strings; missing keys take Kafka's defaults)."""
        rsm = load_remote_storage_manager(
            props.get("remote.log.storage.manager.class.name", ""),
            {k: v for k, v in props.items() if k.startswith(RSM_CONFIG_PREFIX)},
        )
        return RemoteLogManager(
            broker_id=broker_id,
            rsm=rsm,
            rlmm=rlmm,
            log_dir=log_dir,
            index_cache_max_bytes=int(
                props.get("remote.log.index.file.cache.total.size.bytes", 1 << 30)
            ),
            reader_threads=int(props.get("remote.log.reader.threads", 10)),
            task_interval_ms=int(props.get("remote.log.manager.task.interval.ms", 30_000)),
            remote_fetch_max_wait_ms=int(
                props.get("remote.fetch.max.wait.ms", REMOTE_FETCH_MAX_WAIT_MS_DEFAULT)
            ),
            clock=clock,
            topic_stats=topic_stats,
            quotas=RemoteLogQuotas.from_config(props, clock=clock),
        )

    # ------------------------------------------------------------------ wiring
    @property
    def rlmm(self) -> RemoteLogMetadataManager:
        rlmm = self._rlmm
        if rlmm is None:
            raise NoRemoteLogMetadataManagerError(
                "no remote log metadata manager is configured on this broker; tiered data"
                " cannot be read until it is"
            )
        return rlmm

    def set_remote_log_metadata_manager(self, rlmm: RemoteLogMetadataManager | None) -> None:
        with self._lock:
            self._rlmm = rlmm
            if self._reader is not None:
                self._reader.close()
                self._reader = None
        self._pending_reads = PendingRemoteReads(clock=self._clock)

    @property
    def reader(self) -> RemoteLogReader:
        with self._lock:
            if self._reader is None:
                self._reader = RemoteLogReader(
                    rsm=self.rsm,
                    rlmm=self.rlmm,
                    index_cache=self.index_cache,
                    threads=self._reader_threads,
                )
            return self._reader

    def on_partition_hosted(self, partition: HostedPartition) -> None:
        """Track ``partition`` and install the deletion guard on its log."""
        log = partition.log
        tip = topic_id_partition_of(partition)
        log.set_segment_deletion_guard(
            lambda segment: self.may_delete_local_segment(log, tip, segment)
        )
        with self._lock:
            self._partitions[partition.topic_partition] = partition
        rlmm = self._rlmm
        if rlmm is not None and log.config.remote_storage_enable:
            # A partition hosted after the RLMM started (a new topic): track its metadata.
            leaders, followers = ({tip}, set()) if partition.is_leader else (set(), {tip})
            rlmm.on_partition_leadership_changes(leaders, followers)

    def on_partition_removed(self, tp: TopicPartition) -> None:
        with self._lock:
            self._partitions.pop(tp, None)
        self._pending_reads.forget(tp)
        if self.metrics is not None:
            self.metrics.remove_partition(tp)

    def is_remote_enabled(self, partition: HostedPartition) -> bool:
        return partition.log.config.remote_storage_enable

    # ------------------------------------------------------------------ offsets
    def highest_remote_offset(self, log: Log, tip: TopicIdPartition) -> int:
        """Kafka's ``findHighestRemoteOffset``: the highest offset (inclusive) copied for the
        log's epoch lineage, latest epoch first, bounded by each epoch's end; -1 if none."""
        rlmm = self._rlmm
        if rlmm is None:
            return -1
        entries = log.leader_epoch_cache.epoch_entries()
        for i in range(len(entries) - 1, -1, -1):
            offset = rlmm.highest_offset_for_epoch(tip, entries[i].epoch)
            if offset is not None:
                if i + 1 < len(entries):
                    offset = min(offset, entries[i + 1].start_offset - 1)
                return offset
        return -1

    def remote_log_start_offset(self, tip: TopicIdPartition) -> int | None:
        """Start offset (inclusive) of the earliest COPY_SEGMENT_FINISHED segment; None if none."""
        return self.rlmm.remote_log_segments_summary(tip).copied_start_offset

    def may_delete_local_segment(
        self, log: Log, tip: TopicIdPartition, segment: SegmentSummary
    ) -> bool:
        """The deletion guard (see the module docstring). Called under the log's lock."""
        if not log.config.remote_storage_enable:
            return True
        if segment.next_base_offset is None:
            return False  # the active segment is never copied
        if segment.next_base_offset <= log.log_start_offset:
            return True
        try:
            highest = self.highest_remote_offset(log, tip)
        except StorageError as exc:  # metadata not loaded yet: keep the segment for now
            logger.info(
                "local segment kept, remote metadata unavailable partition=%s error=%s",
                log.topic_partition,
                exc,
            )
            return False
        return segment.next_base_offset - 1 <= highest

    # ------------------------------------------------------------------ the task
    def start(self) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(
            target=self._run, name=f"remote-log-manager-{self.broker_id}", daemon=True
        )
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.task_interval_ms / 1000):
            try:
                self.run_once()
            except Exception:
                logger.exception("remote log manager task failed; it runs again next interval")

    def run_once(self) -> None:
        """One pass of the task over the remote-enabled partitions this broker leads."""
        with self._lock:
            partitions = list(self._partitions.values())
        for partition in partitions:
            if not partition.is_leader or not self.is_remote_enabled(partition):
                if self.metrics is not None:
                    self.metrics.remove_partition(partition.topic_partition)
                if self.topic_manifests is not None and partition.topic_partition.partition == 0:
                    self.topic_manifests.forget(partition.topic_id)
                continue
            try:
                self.maybe_roll_active_segment(partition.log)
                self.maybe_sync_log_start_offset(partition)
                self.maybe_update_metrics(partition)
            except StorageError as exc:
                logger.warning(
                    "remote log manager task skipped partition=%s error=%s",
                    partition.topic_partition,
                    exc,
                )
            self.maybe_write_topic_manifest(partition)

    def maybe_write_topic_manifest(self, partition: HostedPartition) -> bool:
        """The leader of partition 0 rewrites its topic's manifest when the topic's settings
        changed (``TopicManifestWriter``); a store error waits for the next pass."""
        writer = self.topic_manifests
        tp = partition.topic_partition
        if writer is None or tp.partition != 0:
            return False
        try:
            return writer.maybe_write(tp.topic)
        except (StorageError, ValueError) as exc:
            self._maybe_warn(("topic-manifest", tp.topic), "topic manifest not written", tp, exc)
            return False

    def maybe_roll_active_segment(self, log: Log) -> bool:
        """Roll the active segment when it alone breaches local retention (time or size), so
        that it can be copied and then deleted locally. Only when all of it is below the last
        stable offset (a copy never includes offsets at or above it: an undecided
        transaction or records not yet replicated)."""
        config = log.config
        active = log.active_segment
        if active.size == 0 or log.log_end_offset > log.last_stable_offset:
            return False
        retention_ms = config.effective_local_retention_ms
        retention_bytes = config.effective_local_retention_bytes
        breach_ms = (
            retention_ms >= 0
            and active.largest_timestamp >= 0
            and self._clock.milliseconds() - active.largest_timestamp > retention_ms
        )
        # Kafka's size rule (UnifiedLog.deletableSegments) walks the segments oldest first,
        # taking each one's size off (log size - retention); the active segment is reached
        # with (its size - retention) left, so it is past retention only when that covers
        # all of it: retention 0. With local.retention.bytes=1 the active segment stays.
        breach_bytes = retention_bytes >= 0 and active.size - retention_bytes >= active.size
        if not (breach_ms or breach_bytes):
            return False
        log.roll()
        logger.info(
            "rolled active segment breaching local retention partition=%s base_offset=%d"
            " by_time=%s by_size=%s",
            log.topic_partition,
            active.base_offset,
            breach_ms,
            breach_bytes,
        )
        return True

    def maybe_sync_log_start_offset(self, partition: HostedPartition) -> bool:
        """Move the log start offset to ``min(Rx, Lx)`` once anything is tiered, dropping the
        cached indexes of segments being deleted. Never moves it back or above the HW."""
        tip = topic_id_partition_of(partition)
        rlmm = self.rlmm
        if not rlmm.is_ready(tip):
            return False
        log = partition.log
        summary = rlmm.remote_log_segments_summary(tip)  # not a listing: asked every interval
        for segment_id in summary.deleting_segment_ids:
            self.index_cache.remove(segment_id.id)
        if summary.copied_start_offset is None and not summary.deleting_segment_ids:
            return False  # nothing tiered (yet): local retention keeps the log start
        local_start = log.local_log_start_offset
        target = local_start
        if summary.copied_start_offset is not None:
            target = min(summary.copied_start_offset, local_start)
        target = min(target, log.high_watermark)
        if target <= log.log_start_offset:
            return False
        return log.maybe_increment_log_start_offset(target, "remote segments deleted")

    def maybe_update_metrics(self, partition: HostedPartition) -> bool:
        """Refresh the partition's copy lag and remote log size gauges from its log and the
        RLMM listing (see ``remote_log_metrics``); not before the RLMM is ready."""
        metrics = self.metrics
        tip = topic_id_partition_of(partition)
        rlmm = self.rlmm
        if metrics is None or not rlmm.is_ready(tip):
            return False
        log = partition.log
        if is_copy_enabled(log.config):
            lag = copy_lag(
                log.segment_summaries(),
                highest_remote_offset=self.highest_remote_offset(log, tip),
                local_log_start_offset=log.local_log_start_offset,
                last_stable_offset=log.last_stable_offset,
            )
        else:
            lag = NO_COPY_LAG
        summary = rlmm.remote_log_segments_summary(tip)
        size = RemoteLogSize(
            finished_size_bytes=summary.finished_size_bytes, metadata_count=summary.metadata_count
        )
        metrics.update_partition(partition.topic_partition, lag, size)
        return True

    # ------------------------------------------------------------------ reads
    def needs_remote_read(self, partition: HostedPartition, fetch_offset: int) -> bool:
        """True for an offset in ``[log start, local log start)`` of a remote-enabled log."""
        log = partition.log
        return (
            log.config.remote_storage_enable
            and log.log_start_offset <= fetch_offset < log.local_log_start_offset
        )

    def read_async(
        self,
        partition: HostedPartition,
        fetch_offset: int,
        max_bytes: int,
        *,
        min_one_message: bool,
        include_aborted_txns: bool = False,
    ) -> PendingRead[RemoteFetchData]:
        """The partition's pending remote read of this request, else a new one submitted to
        the reader pool (Kafka's ``asyncRead``). Wait for it at most
        ``remote.fetch.max.wait.ms``; on time ``read_collected``, else ``read_timed_out``.
        ``include_aborted_txns`` for a read_committed fetch."""
        info = RemoteStorageFetchInfo(
            topic_id_partition=topic_id_partition_of(partition),
            fetch_offset=fetch_offset,
            max_bytes=max_bytes,
            min_one_message=min_one_message,
            include_aborted_txns=include_aborted_txns,
        )
        log = partition.log
        epochs = log.leader_epoch_cache
        reader = self.reader
        metrics = self.metrics
        quotas = self.quotas
        tp = partition.topic_partition
        topic = tp.topic

        def served(data: RemoteFetchData) -> RemoteFetchData:
            quotas.record_fetch(len(data.records))
            if metrics is not None:
                metrics.mark_fetch(topic, len(data.records))
            return data

        def read(start: RemoteReadStart | None = None) -> RemoteFetchData:
            try:
                data = reader.read(info, epochs, log, start=start)
            except OffsetOutOfRangeError:
                if metrics is not None:
                    metrics.mark_fetch(topic, 0)
                # The segment may have just been deleted: move the log start at once.
                self._sync_quietly(partition)
                raise
            except RemoteSegmentMissingError as exc:
                if metrics is not None:
                    metrics.mark_fetch_error(topic)
                self._maybe_warn(("missing", exc.segment_id), "remote segment lost", tp, exc)
                raise
            except ChunkIntegrityError as exc:
                if metrics is not None:
                    metrics.mark_fetch_error(topic)
                # Never served: KAFKA_STORAGE_ERROR, one WARN per damaged object, not per fetch.
                what = f"remote segment damaged fetch_offset={fetch_offset}"
                self._maybe_warn(("damaged", str(exc)), what, tp, exc)
                raise
            except RemoteStorageError:
                if metrics is not None:
                    metrics.mark_fetch_error(topic)
                self._sync_quietly(partition)  # maybe deleted while being read
                raise
            except BaseException:
                if metrics is not None:
                    metrics.mark_fetch_error(topic)
                raise
            return served(data)

        def submit() -> Future[RemoteFetchData]:
            # First from memory, here: a consumer reading on through cached chunks then needs
            # no trip to a reader thread and back (0.1-0.2 ms a fetch on two cores). A read
            # that needs the store, or fails, runs on a reader thread, which reports failures
            # (from the segment the try found, if it got that far).
            start = None
            if reader.reads_from_memory and not include_aborted_txns:
                try:
                    data = reader.read(info, epochs, log, memory_only=True)
                except MemoryReadMissError as miss:
                    start = miss.start
                except (RemoteReadNeedsStoreError, StorageError):
                    pass
                else:
                    answered: Future[RemoteFetchData] = Future()
                    answered.set_result(served(data))
                    return answered
            try:
                return reader.submit(lambda: read(start))
            except StorageError:  # the reader queue is full
                if metrics is not None:
                    metrics.mark_fetch_error(topic)
                raise

        request = (fetch_offset, max_bytes, min_one_message, include_aborted_txns)
        return self._pending_reads.read(tp, request, submit)

    def read_collected(self, tp: TopicPartition, pending: PendingRead[RemoteFetchData]) -> None:
        """The outcome of ``pending`` answered a fetch: the next fetch starts a new read."""
        self._pending_reads.forget_if(tp, pending)

    def read_timed_out(
        self, tp: TopicPartition, fetch_offset: int, pending: PendingRead[RemoteFetchData]
    ) -> RemoteReadTimeoutError:
        """The error for a fetch whose remote read is still running after
        ``remote.fetch.max.wait.ms`` (logged at WARN once a minute per partition)."""
        age_ms = pending.age_ms(self._clock.nanoseconds())
        error = RemoteReadTimeoutError(
            f"partition {tp}: the remote store {self.rsm!r} has not answered a read of offset"
            f" {fetch_offset} within remote.fetch.max.wait.ms={self.remote_fetch_max_wait_ms}"
            f" (the read has been running for {age_ms} ms and carries on; a later fetch gets"
            " its records). Check that the store is reachable and answering"
        )
        self._maybe_warn(("timeout", tp), "remote read not answered in time", tp, error)
        return error

    def _maybe_warn(self, key: object, what: str, tp: TopicPartition, error: Exception) -> None:
        log_now, suppressed = self._warnings.should_log(key)
        if log_now:
            logger.warning(
                "%s partition=%s suppressed_since_last=%d error=%s", what, tp, suppressed, error
            )

    def _sync_quietly(self, partition: HostedPartition) -> None:
        try:
            if partition.is_leader:
                self.maybe_sync_log_start_offset(partition)
        except StorageError as exc:
            logger.warning(
                "log start offset sync failed partition=%s error=%s", partition.topic_partition, exc
            )

    def fetch_offset_for_timestamp(
        self, partition: HostedPartition, timestamp: int, local: TimestampAndOffset | None
    ) -> TimestampAndOffset | None:
        """ListOffsets on a remote-enabled log, given the local answer (blocking).

        ``-5`` (latest tiered): the highest remote offset (-1 if none) and its epoch. A
        timestamp: the first match in remote segments (from the log start offset), else the
        local answer. Other special timestamps: the local answer.
        """
        log = partition.log
        tip = topic_id_partition_of(partition)
        if timestamp == LATEST_TIERED_TIMESTAMP:
            offset = self.highest_remote_offset(log, tip)
            epoch = log.leader_epoch_cache.epoch_for_offset(offset) if offset >= 0 else None
            return TimestampAndOffset(NO_TIMESTAMP, offset, epoch)
        if timestamp < 0 or log.log_start_offset >= log.local_log_start_offset:
            return local
        found = self.reader.find_offset_by_timestamp(
            tip, timestamp, log.log_start_offset, log.leader_epoch_cache
        )
        return found if found is not None else local

    # ------------------------------------------------------------------ deletion
    def on_partitions_deleted(self, partitions: list[TopicIdPartition]) -> None:
        """Publish DELETE_PARTITION_MARKED for each partition of a deleted remote-enabled
        topic; the remote deletion job takes it from there."""
        rlmm = self.rlmm
        for tip in partitions:
            rlmm.put_remote_partition_delete_metadata(
                RemotePartitionDeleteMetadata(
                    topic_id_partition=tip,
                    state=RemotePartitionDeleteState.DELETE_PARTITION_MARKED,
                    event_timestamp_ms=self._clock.milliseconds(),
                    broker_id=self.broker_id,
                )
            )
            logger.info("remote partition marked for deletion partition=%s", tip)

    # ------------------------------------------------------------------ lifecycle
    def close(self) -> None:
        self._stop.set()
        thread = self._thread
        if thread is not None:
            thread.join(timeout=30)
        with self._lock:
            reader, self._reader = self._reader, None
        if reader is not None:
            reader.close()
        self.index_cache.close()
        self.rsm.close()
