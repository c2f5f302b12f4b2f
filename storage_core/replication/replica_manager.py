"""Appends and fetches over many partitions (Kafka's ``ReplicaManager``).

The network layer calls ``append_records`` and ``fetch_messages`` from the asyncio loop. What
may wait for the disk runs on a small pool of I/O threads, so that the loop never waits for an
fsync or a read: an append that rolls a segment, fsyncs (``flush.messages``) or checkpoints a
new leader epoch, or whose partition another thread holds, and reads of older records. An
append that only copies its bytes into the page cache runs on the loop, as do a follower's
fetch at the log end or a few appends behind it: a thread round trip costs more CPU than
either. Such a write can still be held by the kernel when too much of the page cache is dirty
(its writeback throttling); the loop then waits with it, where before the I/O thread did and
the loop mostly waited for that thread's GIL anyway.

A fetch that finds less than ``min_bytes`` waits, up to ``max_wait_ms``, until the high
watermark of one of its partitions advances, or for a follower's fetch its log end offset
(Kafka's ``DelayedFetch`` in the fetch purgatory); ``acks=-1`` produces wait until the high
watermark covers their last offset (``DelayedProduce``): ``append_records`` waits for it,
``append_to_leaders`` leaves that wait to its caller.

Each partition of a produce or of a fetch's answer marks ``topic_stats`` (Kafka's
``BrokerTopicStats``: requests, bytes and messages in, bytes out, failures).

Thread-safety: ``_partitions`` is guarded by ``_lock``; waiters live on the loop and are woken
through ``call_soon_threadsafe``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from storage_core.clock import SYSTEM_CLOCK, Clock
from storage_core.common import ZERO_UUID, TopicPartition, Uuid
from storage_core.errors import (
    InconsistentTopicIdError,
    InvalidRequiredAcksError,
    KafkaStorageError,
    NotLeaderOrFollowerError,
    OffsetOutOfRangeError,
    StorageError,
    UnknownTopicOrPartitionError,
)
from storage_core.log.log import AppendWouldWaitError
from storage_core.log.log_config import LogConfig
from storage_core.log.log_manager import LogManager
from storage_core.log.log_validator import (
    analyze_and_validate,
    validate_client_batches,
)
from storage_core.metrics import BrokerTopicStats, KafkaMetricsRegistry
from storage_core.records.file_region import SENDFILE_SUPPORTED, FileRegion
from storage_core.replication.delayed_fetch import (
    DelayedFetchPurgatory,
    FetchRequestPartition,
    FetchResult,
    FetchResults,
    Waiter,
    close_regions,
    close_regions_of_read,
    set_result,
    until,
)
from storage_core.replication.delayed_operation import DelayedOperationPurgatory
from storage_core.replication.delayed_produce import (
    AppendedRecords,
    DelayedProduce,
    ProduceResult,
    complete_replicated,
)
from storage_core.replication.delayed_remote_fetch import (
    complete_remote_reads,
    tiered_fetch_result,
)
from storage_core.replication.fetch_state import InitialFetchState
from storage_core.replication.partition import (
    NO_EPOCH_CHECK,
    IsrUpdateSubmitter,
    Partition,
)
from storage_core.replication.replica_fetcher_thread import initial_fetch_offset
from storage_core.scheduler import Scheduler
from storage_core.tiered.remote_log_manager import (
    RemoteLogManager,
)

logger = logging.getLogger(__name__)

T = TypeVar("T")

IO_THREADS = 4
# Zero-copy fetches copy record sets smaller than this: a sendfile round trip through an
# I/O thread costs more than copying a few KiB.
ZERO_COPY_MIN_BYTES = 64 * 1024
# A follower fetch of at most this many partitions, each at or just behind the leader's log
# end, is answered on the event loop (``_read_log_tail``); a larger one goes to an I/O thread.
LOG_END_READ_MAX_PARTITIONS = 64
# ... and at most this many bytes behind it in all (one replica.fetch.max.bytes by default):
# bytes the last appends wrote, in the page cache.
LOG_TAIL_READ_BYTES_MAX = 1024 * 1024


class PartitionState(Protocol):
    """What the controller decided for a partition (``MetadataCache``'s ``PartitionMetadata``)."""

    @property
    def replicas(self) -> tuple[int, ...]: ...
    @property
    def leader(self) -> int: ...
    @property
    def leader_epoch(self) -> int: ...
    @property
    def isr(self) -> tuple[int, ...]: ...
    @property
    def partition_epoch(self) -> int: ...
    @property
    def controller_epoch(self) -> int: ...


class FollowerFetchers(Protocol):
    """The follower side (``ReplicaFetcherManager``) as the ReplicaManager drives it."""

    def add_fetcher_for_partitions(
        self, partitions: Mapping[TopicPartition, InitialFetchState]
    ) -> None: ...
    def remove_fetcher_for_partitions(self, partitions: Iterable[TopicPartition]) -> object: ...
    def shutdown_idle_fetcher_threads(self) -> int: ...


@dataclass(slots=True)
class LeadershipChanges:
    """What ``become_leader_or_follower`` changed on this broker."""

    leaders: list[Partition] = field(default_factory=list)
    followers: list[Partition] = field(default_factory=list)
    stopped: list[TopicPartition] = field(default_factory=list)
    failed: list[TopicPartition] = field(default_factory=list)


class ReplicaManager:
    """Routes appends and fetches to ``Partition`` objects; owns the fetch purgatory."""

    def __init__(
        self,
        log_manager: LogManager,
        *,
        local_broker_id: int,
        topic_stats: BrokerTopicStats | None = None,
        clock: Clock = SYSTEM_CLOCK,
        replica_lag_time_max_ms: int = 30_000,
    ) -> None:
        self.log_manager = log_manager
        self.local_broker_id = local_broker_id
        self.clock = clock
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        # Set by the broker in a cluster: who commits ISR changes, which brokers are alive.
        self.submit_isr_update: IsrUpdateSubmitter | None = None
        self.replica_fetcher_manager: FollowerFetchers | None = None
        self.is_broker_alive: Callable[[int], bool] | None = None
        # Set once this broker asked to leave (controlled shutdown): it follows no more.
        self._follower_fetching_stopped = False
        # Parked fetches: followers' until the leader's log end offset moves (they read
        # beyond the HW), consumers' until the HW moves.
        self._delayed_fetch_purgatory = DelayedFetchPurgatory()
        self._scheduler = Scheduler("replica-manager-scheduler")
        self._lock = threading.RLock()
        self._partitions: dict[TopicPartition, Partition] = {}
        # assigned here, but the local log holds another topic id: neither led nor followed
        self._inconsistent_topic_ids: dict[TopicPartition, str] = {}
        self._io = ThreadPoolExecutor(max_workers=IO_THREADS, thread_name_prefix="io")
        self._loop: asyncio.AbstractEventLoop | None = None
        # acks=-1 produces waiting for the HW, per partition they wait on (Kafka's produce
        # purgatory); tried when its HW moves, each against the offset it requires there.
        self._produce_purgatory: DelayedOperationPurgatory[TopicPartition, DelayedProduce] = (
            DelayedOperationPurgatory("Produce")
        )
        self.topic_stats = topic_stats or BrokerTopicStats(KafkaMetricsRegistry())
        # Set by the broker when remote.log.storage.system.enable: serves tiered offsets.
        self.remote_log_manager: RemoteLogManager | None = None

    # ------------------------------------------------------------------ lifecycle
    def bind_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    def startup(self) -> None:
        """Kafka's ``isr-expiration`` task, every ``replica.lag.time.max.ms`` / 2."""
        period = max(self.replica_lag_time_max_ms // 2, 1)
        self._scheduler.schedule(
            "isr-expiration", self.maybe_shrink_isr, delay_ms=period, period_ms=period
        )
        self._scheduler.startup()

    def stop_follower_fetching(self) -> None:
        """What Kafka's controller does with StopReplica (no deletion) to a broker in
        controlled shutdown: its fetchers stop and no later role change starts them again.
        Otherwise a leader would see this broker, still fetching at the log end, as caught up
        and write it back into the ISR the controller has just taken it out of."""
        with self._lock:
            self._follower_fetching_stopped = True
            followed = [tp for tp, p in self._partitions.items() if not p.is_leader]
        fetchers = self.replica_fetcher_manager
        if fetchers is not None:
            fetchers.remove_fetcher_for_partitions(followed)
            fetchers.shutdown_idle_fetcher_threads()
        logger.info(
            "follower fetching stopped for controlled shutdown partitions=%d", len(followed)
        )

    def shutdown(self) -> None:
        self._scheduler.shutdown()
        self._io.shutdown(wait=True)

    async def run_io(self, function: Callable[[], T]) -> T:
        """Run blocking disk work on the I/O threads."""
        return await asyncio.get_running_loop().run_in_executor(self._io, function)

    # ------------------------------------------------------------------ partitions
    def add_partition(self, partition: Partition) -> None:
        with self._lock:
            self._partitions[partition.topic_partition] = partition

    def remove_partition(self, tp: TopicPartition) -> Partition | None:
        with self._lock:
            partition = self._partitions.pop(tp, None)
        self._on_leadership_lost(tp)
        return partition

    def get_partition(self, tp: TopicPartition) -> Partition:
        with self._lock:
            partition = self._partitions.get(tp)
            inconsistent = self._inconsistent_topic_ids.get(tp)
        if inconsistent is not None:  # Kafka's answer: the partition has no role here
            raise NotLeaderOrFollowerError(f"partition {tp} has no role here: {inconsistent}")
        if partition is None:
            offline = self.log_manager.offline_logs().get(tp)
            if offline is not None:  # Kafka's HostedPartition.Offline
                raise KafkaStorageError(
                    f"partition {tp} is offline: its log in {offline.dir} could not be loaded"
                    f" ({offline.reason})"
                )
            raise UnknownTopicOrPartitionError(f"This server does not host partition {tp}.")
        return partition

    def become_leader_or_follower(
        self,
        changes: Mapping[TopicPartition, PartitionState | None],
        *,
        topic_ids: Mapping[str, Uuid | None],
        log_config: Callable[[str], LogConfig],
    ) -> LeadershipChanges:
        """Apply the controller's decisions for the partitions that changed (Kafka's
        ``becomeLeaderOrFollower``, fed by ZooKeeper instead of LeaderAndIsr requests): host
        the partitions assigned here (opening or creating their logs), lead those whose leader
        is this broker at the controller's epoch (no new epoch of its own: a restarted leader
        keeps the epoch it was given), follow the others, and stop hosting partitions no longer
        assigned here (their logs stay until the topic is deleted). A partition whose log
        cannot be opened, or holds another topic id, stays offline with an error line; nothing
        is deleted."""
        result = LeadershipChanges()
        fetchers = self.replica_fetcher_manager
        if fetchers is not None:
            # A partition led here or no longer hosted stops fetching before anything else
            # (Kafka's makeLeaders): no follower append may land once it leads.
            fetchers.remove_fetcher_for_partitions(
                [
                    tp
                    for tp, state in changes.items()
                    if state is None
                    or self.local_broker_id not in state.replicas
                    or state.leader == self.local_broker_id
                ]
            )
        for tp, state in sorted(changes.items()):
            if state is None or self.local_broker_id not in state.replicas:
                with self._lock:
                    self._inconsistent_topic_ids.pop(tp, None)
                if self.remove_partition(tp) is not None:
                    result.stopped.append(tp)
                continue
            try:
                with self._lock:
                    partition = self._partitions.get(tp)
                hosted = partition is not None
                if partition is None:
                    topic_id = topic_ids.get(tp.topic)
                    log = self.log_manager.get_or_create_log(
                        tp, topic_id=topic_id, config=log_config(tp.topic)
                    )
                    partition = Partition(
                        tp,
                        topic_id or log.topic_id or ZERO_UUID,
                        log,
                        local_broker_id=self.local_broker_id,
                        on_high_watermark_advanced=self.on_high_watermark_advanced,
                        clock=self.clock,
                        replica_lag_time_max_ms=self.replica_lag_time_max_ms,
                        submit_isr_update=self.submit_isr_update,
                        is_broker_alive=self.is_broker_alive,
                    )
                if state.leader == self.local_broker_id:
                    if partition.make_leader(
                        leader_epoch=state.leader_epoch,
                        replicas=state.replicas,
                        isr=state.isr,
                        partition_epoch=state.partition_epoch,
                        controller_epoch=state.controller_epoch,
                    ):
                        result.leaders.append(partition)
                else:
                    was_leader = partition.is_leader
                    changed = partition.make_follower(
                        leader_id=state.leader,
                        leader_epoch=state.leader_epoch,
                        replicas=state.replicas,
                        isr=state.isr,
                        partition_epoch=state.partition_epoch,
                        controller_epoch=state.controller_epoch,
                    )
                    if changed or not hosted:
                        result.followers.append(partition)
                    if was_leader:  # parked fetches and acks=all produces answer at once
                        self._on_leadership_lost(tp)
                self.add_partition(partition)
                with self._lock:
                    self._inconsistent_topic_ids.pop(tp, None)
            except InconsistentTopicIdError:
                self._refuse_inconsistent_topic_id(tp, topic_ids.get(tp.topic))
                result.failed.append(tp)
            except StorageError as error:
                logger.error(
                    "cannot host partition=%s leader=%s leader_epoch=%s: it stays offline (%s)",
                    tp,
                    state.leader,
                    state.leader_epoch,
                    error,
                )
                result.failed.append(tp)
        if fetchers is not None:
            if result.followers:
                self._restart_fetchers(fetchers, result.followers)
            fetchers.shutdown_idle_fetcher_threads()
        return result

    def _restart_fetchers(self, fetchers: FollowerFetchers, followers: list[Partition]) -> None:
        """Kafka's makeFollowers: the fetchers of partitions whose leader or epoch changed
        start again from ``initial_fetch_offset``; a partition without a leader waits for
        one."""
        fetchers.remove_fetcher_for_partitions([p.topic_partition for p in followers])
        with self._lock:
            if self._follower_fetching_stopped:
                return
        starts = {
            partition.topic_partition: InitialFetchState(
                topic_id=partition.topic_id,
                leader_id=partition.leader_id,
                current_leader_epoch=partition.leader_epoch,
                init_offset=initial_fetch_offset(partition.log),
            )
            for partition in followers
            if partition.leader_id >= 0 and not partition.is_leader
        }
        if starts:
            fetchers.add_fetcher_for_partitions(starts)

    def _refuse_inconsistent_topic_id(self, tp: TopicPartition, topic_id: Uuid | None) -> None:
        """Kafka's INCONSISTENT_TOPIC_ID in ``becomeLeaderOrFollower``: the partition gets no
        role and its log (of another cluster, or of an earlier incarnation of the topic) is
        left as it is for an operator to inspect."""
        log = self.log_manager.get_log(tp)
        log_dir = log.dir if log is not None else None
        log_topic_id = log.topic_id if log is not None else None
        reason = (
            f"its log dir {log_dir} holds topic id {log_topic_id}, the cluster's topic"
            f" {tp.topic} has id {topic_id}"
        )
        with self._lock:
            self._inconsistent_topic_ids[tp] = reason
        logger.error(
            "inconsistent topic id: partition neither led nor followed, its files left"
            " untouched partition=%s dir=%s topic_id=%s log_topic_id=%s",
            tp,
            log_dir,
            topic_id,
            log_topic_id,
        )

    def partitions(self) -> dict[TopicPartition, Partition]:
        with self._lock:
            return dict(self._partitions)

    def on_high_watermark_advanced(self, tp: TopicPartition) -> None:
        """Called by a Partition (any thread) when its HW moved: wake the consumer fetches and
        acks=all produces waiting on it. Parked follower fetches stay parked: as Kafka's
        ``DelayedFetch`` of a follower, they wait for bytes past their fetch offset (the log
        end), not for the HW, and carry the new HW with their next answer. Waking them here
        cost every acks=all round a re-read of each follower's empty fetch.

        On the loop (a follower's fetch answered there moved the HW) the waiters are woken
        at once, without a round through the loop's self-pipe."""
        self._on_loop(self._wake_high_watermark_waiters, tp)

    def _on_loop(self, wake: Callable[[TopicPartition], None], tp: TopicPartition) -> None:
        """Run ``wake(tp)`` on the event loop, which owns the waiters' futures and timers:
        now when called there, else through ``call_soon_threadsafe``."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        if _running_loop() is loop:
            wake(tp)
        else:
            _call_soon_threadsafe(loop, wake, tp)

    def _wake_high_watermark_waiters(self, tp: TopicPartition) -> None:
        """Wake the fetches waiting on ``tp``'s HW, and answer the acks=-1 produces it has
        reached (the others stay: several wait at once on a connection whose produces are
        pipelined)."""
        delayed = self._produce_purgatory.watched(tp)
        if delayed:
            high_watermark = self._high_watermark(tp)
            for produce in [p for p in delayed if p.required.get(tp, 0) <= high_watermark]:
                produce.try_complete()
        self._delayed_fetch_purgatory.wake_high_watermark_waiters(tp)

    def _on_leadership_lost(self, tp: TopicPartition) -> None:
        """This broker stopped leading ``tp``, or no longer hosts it (any thread): every
        parked fetch and acks=all produce answers now (NOT_LEADER_OR_FOLLOWER), follower
        fetches included."""
        self._on_loop(self._wake, tp)

    def _wake(self, tp: TopicPartition) -> None:
        self._produce_purgatory.check_and_complete(tp)
        self._delayed_fetch_purgatory.wake(tp)

    def on_log_start_offset_incremented(self, tp: TopicPartition) -> None:
        """DeleteRecords moved a led partition's log start offset (loop thread): answer the
        waiting replica fetches now, so that followers learn it without a fetch wait."""
        self._delayed_fetch_purgatory.wake_replica_fetches(tp)

    # ------------------------------------------------------------------ ISR
    def maybe_shrink_isr(self) -> int:
        """Kafka's ``isr-expiration`` task (every ``replica.lag.time.max.ms`` / 2): each led
        partition drops the followers that stopped keeping up. Returns the proposals made."""
        proposed = 0
        for partition in self.partitions().values():
            if partition.is_leader:
                try:
                    proposed += partition.maybe_shrink_isr()
                except StorageError:
                    logger.exception("ISR check failed partition=%s", partition.topic_partition)
        return proposed

    def under_replicated_count(self) -> int:
        return sum(p.is_under_replicated for p in self.partitions().values())

    def under_min_isr_count(self) -> int:
        return sum(p.is_under_min_isr for p in self.partitions().values())

    def at_min_isr_count(self) -> int:
        return sum(p.is_at_min_isr for p in self.partitions().values())

    def leader_count(self) -> int:
        return sum(p.is_leader for p in self.partitions().values())

    def partition_count(self) -> int:
        return len(self.partitions())

    # ------------------------------------------------------------------ produce
    async def append_records(
        self,
        entries: Mapping[TopicPartition, bytes],
        *,
        required_acks: int,
        timeout_ms: int,
    ) -> dict[TopicPartition, ProduceResult]:
        """Append, then for acks=-1 wait until the ISR has the records (or ``timeout_ms``)."""
        appended = await self.append_to_leaders(
            entries, required_acks=required_acks, timeout_ms=timeout_ms
        )
        return await appended.replicated()

    async def append_to_leaders(
        self,
        entries: Mapping[TopicPartition, bytes],
        *,
        required_acks: int,
        timeout_ms: int,
    ) -> AppendedRecords:
        """Append to each partition's leader log; the wait for replication (acks=-1) is left
        to the caller, which may do other work meanwhile (``AppendedRecords.replicated``)."""
        if required_acks not in (0, 1, -1):
            error = InvalidRequiredAcksError(f"acks must be 0, 1 or -1, got {required_acks}")
            return AppendedRecords({tp: ProduceResult(error=error) for tp in entries})

        # On the loop where the append only copies bytes into the page cache; the others
        # (a roll, an fsync, an epoch checkpoint, a partition held by another thread) on an
        # I/O thread. A thread round trip costs more CPU than such an append.
        results: dict[TopicPartition, ProduceResult] = {}
        waiting: dict[TopicPartition, bytes] = {}
        for tp, records in entries.items():
            result = self._append_one(tp, records, required_acks, on_loop=True)
            if result is None:
                waiting[tp] = records
            else:
                results[tp] = result

        def append_all() -> dict[TopicPartition, ProduceResult]:
            appended = {}
            for tp, records in waiting.items():
                result = self._append_one(tp, records, required_acks)
                assert result is not None  # off the loop an append waits, it never gives up
                appended[tp] = result
            return appended

        if waiting:
            claimed = self._delayed_fetch_purgatory.claim_follower_reads(waiting.keys())
            if claimed:
                results.update(await self._append_then_read(append_all, claimed))
            else:
                results.update(await self.run_io(append_all))
        for tp, result in results.items():
            self.topic_stats.mark_produce(tp.topic, result.info, result.error)
            if result.info is not None:
                self._delayed_fetch_purgatory.wake_replica_fetches(tp)
        if required_acks != -1:
            return AppendedRecords(results)
        # Kafka's DelayedProduce tries to complete before it waits (``tryCompleteElseWatch``):
        # with the leader alone in the ISR, the append is the whole answer.
        required = {
            tp: result.info.last_offset + 1
            for tp, result in results.items()
            if result.info is not None
        }
        complete_replicated(self.get_partition, results, required)
        if not required:
            return AppendedRecords(results)
        delayed = DelayedProduce(self.get_partition, results, required, timeout_ms)
        self._produce_purgatory.watch(delayed, required)
        return AppendedRecords(results, delayed.future)

    async def _append_then_read(
        self,
        append_all: Callable[[], dict[TopicPartition, ProduceResult]],
        claimed: dict[Waiter, Callable[[], FetchResults]],
    ) -> dict[TopicPartition, ProduceResult]:
        """Append on an I/O thread, answer the produce, then on the same thread read for the
        follower fetches parked on these partitions and hand the reads over: the followers
        get the new batches without another round trip to an I/O thread."""
        loop = asyncio.get_running_loop()
        appended: asyncio.Future[dict[TopicPartition, ProduceResult]] = loop.create_future()

        def append_then_read() -> None:
            try:
                results = append_all()
            except BaseException as error:
                _call_soon_threadsafe(loop, self._append_failed, appended, error, claimed)
                return
            reads = (
                self._delayed_fetch_purgatory.read_for_followers(claimed)
                if any(r.info is not None for r in results.values())
                else None
            )
            _call_soon_threadsafe(loop, self._appended, appended, results, claimed, reads)

        self._io.submit(append_then_read)
        return await appended

    def _appended(
        self,
        appended: asyncio.Future[dict[TopicPartition, ProduceResult]],
        results: dict[TopicPartition, ProduceResult],
        claimed: Iterable[Waiter],
        reads: Mapping[Waiter, FetchResults | None] | None,
    ) -> None:
        """The append and the reads made for the followers arrive together (loop thread):
        one wake-up of the loop per append. The followers' fetches are answered first: the
        acks=all produce waits for their next fetches anyway."""
        if reads is None:  # nothing was appended
            self._delayed_fetch_purgatory.release_claims(claimed)
        else:
            self._delayed_fetch_purgatory.hand_over_reads(reads)
        set_result(appended, results)

    def _append_failed(
        self,
        appended: asyncio.Future[dict[TopicPartition, ProduceResult]],
        error: BaseException,
        claimed: Iterable[Waiter],
    ) -> None:
        self._delayed_fetch_purgatory.release_claims(claimed)
        _set_exception(appended, error)

    def _append_one(
        self, tp: TopicPartition, records: bytes, required_acks: int, *, on_loop: bool = False
    ) -> ProduceResult | None:
        """One partition's append. ``on_loop``: on the event loop, which it must not stall;
        None, with nothing written, when another thread holds the partition or its log, or
        when the append would roll, fsync or checkpoint an epoch (``AppendWouldWaitError``).
        Off the loop it always answers."""
        try:
            partition = self.get_partition(tp)
            if partition.is_leader:  # else the append answers NOT_LEADER_OR_FOLLOWER first
                _validate_client_append(partition, records)
            # Off the loop the append takes the locks itself, waiting for them.
            if on_loop and not partition.try_hold():
                return None
            try:
                info = partition.append_records_to_leader(
                    records, required_acks=required_acks, disk_wait_allowed=not on_loop
                )
            finally:
                if on_loop:
                    partition.release_hold()
            return ProduceResult(info=info, log_start_offset=partition.log.log_start_offset)
        except AppendWouldWaitError:
            return None
        except StorageError as error:
            logger.info("produce failed partition=%s error=%s", tp, error)
            return ProduceResult(error=error)

    def _high_watermark(self, tp: TopicPartition) -> int:
        try:
            return self.get_partition(tp).log.high_watermark
        except StorageError:
            return -1

    # ------------------------------------------------------------------ fetch
    async def fetch_messages(
        self,
        requests: Mapping[TopicPartition, FetchRequestPartition],
        *,
        max_wait_ms: int,
        min_bytes: int,
        max_bytes: int,
        isolation_high_watermark: bool = True,
        zero_copy: bool = False,
        replica_id: int = -1,
    ) -> dict[TopicPartition, FetchResult]:
        """Read now; below ``min_bytes`` and without errors, wait up to ``max_wait_ms`` for data.

        With ``zero_copy``, record sets of ``ZERO_COPY_MIN_BYTES`` or more come back as
        ``FileRegion``s (to be sent with sendfile); the caller owns and must close them.

        Tiered offsets (below the local log start of a remote-enabled log): a consumer's are
        read by the remote log reader (one partition per request, as Kafka) and the answer
        goes out when that read completes or ``remote.fetch.max.wait.ms`` runs out (then
        with KAFKA_STORAGE_ERROR for it; the read carries on for the next fetch); a
        replica's (``replica_id >= 0``) get OFFSET_MOVED_TO_TIERED_STORAGE.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(max_wait_ms, 0) / 1000
        zero_copy = zero_copy and SENDFILE_SUPPORTED
        replica = replica_id >= 0
        purgatory = self._delayed_fetch_purgatory

        def read_all() -> FetchResults:
            return self._read_all(
                requests, max_bytes, isolation_high_watermark, zero_copy, replica_id
            )

        handed: FetchResults | None = None  # read by an append for this parked fetch
        while True:
            waiter: Waiter | None = None
            try:
                if handed is not None:
                    # The records an append read for this fetch are its answer: no parking.
                    results, handed = handed, None
                    may_park = False
                elif (
                    tail := self._read_log_tail(requests, max_bytes, zero_copy, replica_id)
                ) is not None:
                    # Read on the loop: a wake-up also runs on the loop, so none can come
                    # between this read and the parking below, which only a fetch that
                    # must wait pays for.
                    results = tail
                    may_park = True
                else:
                    # Parked before reading: an append that lands while the read runs on
                    # an I/O thread wakes this waiter, instead of being missed until
                    # max_wait_ms.
                    waiter = purgatory.park(requests.keys(), replica=replica)
                    may_park = False
                    reading = asyncio.ensure_future(self.run_io(read_all))
                    try:
                        results = await asyncio.shield(reading)
                    except asyncio.CancelledError:
                        reading.add_done_callback(close_regions_of_read)
                        raise
                if any(r.remote_read is not None for r in results.values()):
                    await complete_remote_reads(
                        self.remote_log_manager, self.get_partition, results
                    )
                    for tp, result in results.items():
                        self.topic_stats.mark_fetch(
                            tp.topic, len(result.records), result.error, follower=replica
                        )
                    return results
                remaining = deadline - loop.time()
                must_wait = (
                    remaining > 0
                    and bool(requests)
                    and sum(len(r.records) for r in results.values()) < min_bytes
                    and not any(r.error is not None for r in results.values())
                )
                if must_wait and may_park:
                    waiter = purgatory.park(requests.keys(), replica=replica)
                # No waiter: handed an append's read, or the purgatory is full.
                if not must_wait or waiter is None:
                    for tp, result in results.items():
                        self.topic_stats.mark_fetch(
                            tp.topic, len(result.records), result.error, follower=replica
                        )
                    return results
                close_regions(results.values())
                if replica:
                    purgatory.read_for(waiter, read_all)
                await until(waiter, remaining)
                if waiter.done():
                    handed = waiter.result()
            finally:
                if waiter is not None:
                    purgatory.forget_read(waiter)
                    purgatory.unpark(waiter, requests.keys(), replica=replica)

    def _read_log_tail(
        self,
        requests: Mapping[TopicPartition, FetchRequestPartition],
        max_bytes: int,
        zero_copy: bool,
        replica_id: int,
    ) -> dict[TopicPartition, FetchResult] | None:
        """A follower's fetch at or just behind the leader's log end, answered on the event
        loop (None: read on an I/O thread). It waits for no disk: at the log end it reads
        nothing (the follower's fetch state is recorded, which may move the HW and complete
        acks=all produces, and the answer holds the offsets only); just behind, it takes
        what the last appends wrote, from the page cache: with ``zero_copy``, as ``resident``
        file regions that are sent from the loop too. These are the fetches of followers in
        sync, so an acks=all round never waits for an I/O thread there.

        The same ``_read_all`` runs, with every partition's lock and log lock taken without
        waiting: the loop never waits for an append, a roll or an fsync. A follower fetch
        (``replica_id >= 0``) of up to ``LOG_END_READ_MAX_PARTITIONS`` partitions qualifies
        when each partition is hosted here, both its locks are free, and its fetch offset is
        its log end offset or starts one of its last appends (``Log.recent_tail_bytes``), at
        most ``LOG_TAIL_READ_BYTES_MAX`` bytes behind in all."""
        if replica_id < 0 or not requests or len(requests) > LOG_END_READ_MAX_PARTITIONS:
            return None
        behind_bytes = 0
        held: list[Partition] = []
        try:
            for tp, request in requests.items():
                with self._lock:
                    partition = self._partitions.get(tp)
                if partition is None or not partition.try_hold():
                    return None
                held.append(partition)
                tail_bytes = partition.log.recent_tail_bytes(request.fetch_offset)
                if tail_bytes is None:
                    return None
                behind_bytes += tail_bytes
                if behind_bytes > LOG_TAIL_READ_BYTES_MAX:
                    return None
            results = self._read_all(
                requests, max_bytes, False, zero_copy=zero_copy, replica_id=replica_id
            )
        finally:
            for partition in held:
                partition.release_hold()
        for result in results.values():
            if isinstance(result.records, FileRegion):
                result.records.resident = True
        return results

    def _read_all(
        self,
        requests: Mapping[TopicPartition, FetchRequestPartition],
        max_bytes: int,
        isolation_high_watermark: bool,
        zero_copy: bool = False,
        replica_id: int = -1,
    ) -> dict[TopicPartition, FetchResult]:
        """Kafka's ``readFromLog``: the response budget shrinks as partitions are read; the
        first non-empty partition may exceed it by one batch (``min_one_message``)."""
        results: dict[TopicPartition, FetchResult] = {}
        try:
            self._read_each(
                requests,
                max_bytes,
                isolation_high_watermark,
                zero_copy,
                results,
                replica_id=replica_id,
            )
        except BaseException:
            close_regions(results.values())
            raise
        return results

    def _read_each(
        self,
        requests: Mapping[TopicPartition, FetchRequestPartition],
        max_bytes: int,
        isolation_high_watermark: bool,
        zero_copy: bool,
        results: dict[TopicPartition, FetchResult],
        *,
        replica_id: int = -1,
    ) -> None:
        budget = max_bytes
        for tp, request in requests.items():
            try:
                _check_topic_id(self.log_manager, tp, request.topic_id)
                partition = self.get_partition(tp)
                diverging = self._diverging_epoch(partition, request)
                if diverging is not None:
                    results[tp] = FetchResult(
                        read=partition.read_records(
                            # No data is read: a diverged follower may be past this LEO,
                            # which is not OFFSET_OUT_OF_RANGE here (Kafka's readRecords).
                            min(request.fetch_offset, partition.log.log_end_offset),
                            0,
                            current_leader_epoch=request.current_leader_epoch,
                            min_one_message=False,
                        ),
                        diverging_epoch=diverging,
                    )
                    continue
                limit = max(min(request.max_bytes, budget), 0)
                try:
                    read = partition.read_records(
                        request.fetch_offset,
                        limit,
                        current_leader_epoch=request.current_leader_epoch,
                        # followers read up to the LEO: the HW moves once they have it
                        isolation_high_watermark=isolation_high_watermark and replica_id < 0,
                        min_one_message=budget == max_bytes,
                    )
                    if replica_id >= 0:
                        partition.update_follower_fetch_state(
                            replica_id,
                            fetch_offset=request.fetch_offset,
                            follower_log_start_offset=request.log_start_offset,
                            leader_end_offset=read.log_end_offset,
                            fetch_time_ms=self.clock.milliseconds(),
                        )
                except OffsetOutOfRangeError:
                    # Raised after the leadership checks: maybe a tiered offset.
                    rlm = self.remote_log_manager
                    if rlm is None or not rlm.needs_remote_read(partition, request.fetch_offset):
                        raise
                    results[tp] = tiered_fetch_result(
                        partition,
                        request.fetch_offset,
                        replica_id,
                        remote_read=None
                        if any(r.remote_read is not None for r in results.values())
                        else (request.fetch_offset, limit, budget == max_bytes),
                    )
                    continue
                records: bytes | FileRegion
                data = read.info.records
                if zero_copy and data is not None and data.size >= ZERO_COPY_MIN_BYTES:
                    records = FileRegion.of(data.file_records, data.position, data.size)
                else:
                    records = read.info.read_bytes()
                budget -= len(records)
                results[tp] = FetchResult(read=read, records=records)
            except StorageError as error:
                results[tp] = FetchResult(error=error)

    @staticmethod
    def _diverging_epoch(
        partition: Partition, request: FetchRequestPartition
    ) -> tuple[int, int] | None:
        if request.last_fetched_epoch < 0:
            return None
        epoch, end_offset = partition.last_offset_for_leader_epoch(
            request.last_fetched_epoch, current_leader_epoch=request.current_leader_epoch
        )
        if epoch < request.last_fetched_epoch or end_offset < request.fetch_offset:
            return epoch, end_offset
        return None

    def leader_partition(
        self, tp: TopicPartition, current_leader_epoch: int = NO_EPOCH_CHECK
    ) -> Partition:
        partition = self.get_partition(tp)
        if not partition.is_leader:
            raise NotLeaderOrFollowerError(
                f"broker {self.local_broker_id} is not the leader of {tp}"
            )
        return partition


def _validate_client_append(partition: Partition, records: bytes) -> None:
    """Batches from a client (Kafka's ``AppendOrigin.CLIENT``): the client-only rules first,
    but a framing, size or CRC error of the same bytes is reported before them, as Kafka
    checks those first (``analyze_and_validate`` runs again in the append, at no cost on this
    failure path only)."""
    try:
        validate_client_batches(records)
    except StorageError:
        config = partition.log.config
        analyze_and_validate(
            records, max_message_bytes=config.max_message_bytes, segment_bytes=config.segment_bytes
        )
        raise


def _check_topic_id(log_manager: LogManager, tp: TopicPartition, topic_id: Uuid | None) -> None:
    """Kafka's ``hasConsistentTopicId`` for a fetch that named the topic by id."""
    log = log_manager.get_log(tp) if topic_id is not None else None
    if log is not None and log.topic_id is not None and log.topic_id != topic_id:
        raise InconsistentTopicIdError(
            "Topic ID in the fetch session did not match the topic ID in the log."
        )


def _running_loop() -> asyncio.AbstractEventLoop | None:
    """The event loop running on this thread, or None (an I/O or scheduler thread)."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _call_soon_threadsafe(
    loop: asyncio.AbstractEventLoop, callback: Callable[..., object], *args: object
) -> None:
    """Schedule ``callback`` on ``loop`` from an I/O thread; dropped once the loop is closed
    (the broker is stopping)."""
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(callback, *args)


def _set_exception(future: asyncio.Future[T], error: BaseException) -> None:
    if not future.done():
        future.set_exception(error)
