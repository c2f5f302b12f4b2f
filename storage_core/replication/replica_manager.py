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

Where the parts live, after Kafka's files: the purgatories in ``delayed_operation``,
``delayed_produce``, ``delayed_fetch`` and ``delayed_remote_fetch``; ``readFromLog`` in
``read_from_log``, ``appendToLocalLog`` in ``append_to_local_log``, and
``becomeLeaderOrFollower`` in ``leader_and_isr``.

Thread-safety: ``_partitions`` is guarded by ``_lock``; waiters live on the loop and are woken
through ``call_soon_threadsafe``.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from storage_core.clock import SYSTEM_CLOCK, Clock
from storage_core.common import TopicPartition
from storage_core.errors import (
    InvalidRequiredAcksError,
    KafkaStorageError,
    NotLeaderOrFollowerError,
    StorageError,
    UnknownTopicOrPartitionError,
)
from storage_core.log.log_manager import LogManager
from storage_core.log.producer_append_info import AppendOrigin
from storage_core.log.verification_guard import VerificationGuard
from storage_core.metrics import BrokerTopicStats, KafkaMetricsRegistry
from storage_core.records.file_region import SENDFILE_SUPPORTED
from storage_core.replication.append_to_local_log import append_to_local_log
from storage_core.replication.delayed_fetch import (
    DelayedFetchPurgatory,
    FetchRequestPartition,
    FetchResult,
    FetchResults,
    Waiter,
    call_soon_threadsafe,
    close_regions,
    close_regions_of_read,
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
)
from storage_core.replication.fetch_isolation import FetchIsolation
from storage_core.replication.leader_and_isr import FollowerFetchers, LeaderAndIsrMixin
from storage_core.replication.partition import (
    NO_EPOCH_CHECK,
    IsrUpdateSubmitter,
    Partition,
)
from storage_core.replication.read_from_log import (
    read_from_log,
    read_log_tail,
    read_tiered_offsets,
)
from storage_core.scheduler import Scheduler
from storage_core.tiered.remote_log_manager import (
    RemoteLogManager,
)

logger = logging.getLogger(__name__)

T = TypeVar("T")

IO_THREADS = 4


class ReplicaManager(LeaderAndIsrMixin):
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
        # Whether the cluster's metadata has the partition (this broker may not host it).
        self.metadata_contains: Callable[[TopicPartition], bool] | None = None
        # Set once this broker asked to leave (controlled shutdown): it follows no more.
        self._follower_fetching_stopped = False
        # Parked fetches: followers' until the leader's log end offset moves (they read
        # beyond the HW), consumers' until the HW moves.
        self._delayed_fetch_purgatory = DelayedFetchPurgatory()
        self._scheduler = Scheduler("replica-manager-scheduler")
        self._lock = threading.RLock()
        self._partitions: dict[TopicPartition, Partition] = {}
        # Moves on at every change of ``_partitions``: a reference to a Partition taken at
        # the same generation is still the hosted one (incremental fetch sessions).
        self.partitions_generation = 0
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
            self.partitions_generation += 1

    def remove_partition(self, tp: TopicPartition) -> Partition | None:
        with self._lock:
            partition = self._partitions.pop(tp, None)
            self.partitions_generation += 1
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
            contains = self.metadata_contains
            if contains is not None and contains(tp):
                # Kafka's getPartitionOrError: the partition exists but this broker is no
                # replica of it (e.g. moved away): the client refreshes metadata and retries.
                raise NotLeaderOrFollowerError(
                    f"This server is not a replica of partition {tp}; it is hosted elsewhere."
                )
            raise UnknownTopicOrPartitionError(f"This server does not host partition {tp}.")
        return partition

    def _hosted_partition(self, tp: TopicPartition) -> Partition | None:
        with self._lock:
            return self._partitions.get(tp)

    def hosted_partition(self, tp: TopicPartition) -> Partition | None:
        """The partition if hosted here, else None (no error raised: the cheap look-up of an
        incremental fetch session's idle partitions)."""
        return self._partitions.get(tp)  # one dict read: atomic, no lock needed

    @property
    def delayed_fetch_purgatory(self) -> DelayedFetchPurgatory:
        return self._delayed_fetch_purgatory

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
            call_soon_threadsafe(loop, wake, tp)

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

    # ------------------------------------------------------------------ produce
    async def append_records(
        self,
        entries: Mapping[TopicPartition, bytes],
        *,
        required_acks: int,
        timeout_ms: int,
        expected_log_end_offsets: Mapping[TopicPartition, int] | None = None,
        origin: AppendOrigin = AppendOrigin.CLIENT,
    ) -> dict[TopicPartition, ProduceResult]:
        """Append, then for acks=-1 wait until the ISR has the records (or ``timeout_ms``).
        ``expected_log_end_offsets``: partitions appended to only if their log ends there
        (else ``LogEndOffsetMovedError`` for them, nothing written)."""
        appended = await self.append_to_leaders(
            entries,
            required_acks=required_acks,
            timeout_ms=timeout_ms,
            expected_log_end_offsets=expected_log_end_offsets,
            origin=origin,
        )
        return await appended.replicated()

    async def append_to_leaders(
        self,
        entries: Mapping[TopicPartition, bytes],
        *,
        required_acks: int,
        timeout_ms: int,
        expected_log_end_offsets: Mapping[TopicPartition, int] | None = None,
        origin: AppendOrigin = AppendOrigin.CLIENT,
        verification_guards: Mapping[TopicPartition, VerificationGuard] | None = None,
    ) -> AppendedRecords:
        """Append to each partition's leader log; the wait for replication (acks=-1) is left
        to the caller, which may do other work meanwhile (``AppendedRecords.replicated``).
        ``verification_guards``: a produce that verifies transactions (KIP-890) gives the
        guards it obtained (``transaction_verification``); a partition without one appends
        with the sentinel, which no transaction that needed verification passes. None: not
        verified (``transaction.partition.verification.enable=false``, other callers)."""
        if required_acks not in (0, 1, -1):
            error = InvalidRequiredAcksError(f"acks must be 0, 1 or -1, got {required_acks}")
            return AppendedRecords({tp: ProduceResult(error=error) for tp in entries})

        # On the loop where the append only copies bytes into the page cache; the others
        # (a roll, an fsync, an epoch checkpoint, a partition held by another thread) on an
        # I/O thread. A thread round trip costs more CPU than such an append.
        results: dict[TopicPartition, ProduceResult] = {}
        waiting: dict[TopicPartition, bytes] = {}
        expected = expected_log_end_offsets or {}
        guards = verification_guards

        def guard(tp: TopicPartition) -> VerificationGuard | None:
            return None if guards is None else guards.get(tp, VerificationGuard.SENTINEL)

        for tp, records in entries.items():
            result = append_to_local_log(
                self.get_partition,
                tp,
                records,
                required_acks,
                on_loop=True,
                expected_log_end_offset=expected.get(tp),
                origin=origin,
                verification_guard=guard(tp),
            )
            if result is None:
                waiting[tp] = records
            else:
                results[tp] = result

        def append_all() -> dict[TopicPartition, ProduceResult]:
            appended = {}
            for tp, records in waiting.items():
                result = append_to_local_log(
                    self.get_partition,
                    tp,
                    records,
                    required_acks,
                    expected_log_end_offset=expected.get(tp),
                    origin=origin,
                    verification_guard=guard(tp),
                )
                assert result is not None  # off the loop an append waits, it never gives up
                appended[tp] = result
            return appended

        if waiting:
            claimed = self._delayed_fetch_purgatory.claim_follower_reads(waiting.keys())
            if claimed:
                results.update(
                    await self._delayed_fetch_purgatory.append_then_read(
                        self._io, append_all, claimed
                    )
                )
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
        isolation: FetchIsolation = FetchIsolation.HIGH_WATERMARK,
        zero_copy: bool = False,
        replica_id: int = -1,
    ) -> dict[TopicPartition, FetchResult]:
        """Read now; below ``min_bytes`` and without errors, wait up to ``max_wait_ms`` for data.
        ``isolation``: a consumer's bound (HW or LSO); replicas always read to the log end.

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
            return self._read_all(requests, max_bytes, isolation, zero_copy, replica_id)

        handed: FetchResults | None = None  # read by an append for this parked fetch
        while True:
            waiter: Waiter | None = None
            try:
                if handed is not None:
                    # The records an append read for this fetch are its answer: no parking.
                    results, handed = handed, None
                    may_park = False
                elif (
                    tail := read_log_tail(
                        self._hosted_partition,
                        self._read_all,
                        requests,
                        max_bytes=max_bytes,
                        zero_copy=zero_copy,
                        replica_id=replica_id,
                    )
                ) is not None:
                    # Read on the loop: a wake-up also runs on the loop, so none can come
                    # between this read and the parking below, which only a fetch that
                    # must wait pays for.
                    results = tail
                    may_park = True
                elif (
                    tiered := read_tiered_offsets(
                        self._hosted_partition,
                        self._read_all,
                        requests,
                        remote_log_manager=self.remote_log_manager,
                        max_bytes=max_bytes,
                        isolation=isolation,
                        replica_id=replica_id,
                    )
                ) is not None:
                    # Read on the loop too: the records come from the remote log reader.
                    results = tiered
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

    def _read_all(
        self,
        requests: Mapping[TopicPartition, FetchRequestPartition],
        max_bytes: int,
        isolation: FetchIsolation,
        zero_copy: bool = False,
        replica_id: int = -1,
    ) -> dict[TopicPartition, FetchResult]:
        """Kafka's ``readFromLog`` (``read_from_log``)."""
        return read_from_log(
            self,
            requests,
            max_bytes,
            isolation,
            zero_copy=zero_copy,
            replica_id=replica_id,
        )

    def leader_partition(
        self, tp: TopicPartition, current_leader_epoch: int = NO_EPOCH_CHECK
    ) -> Partition:
        partition = self.get_partition(tp)
        if not partition.is_leader:
            raise NotLeaderOrFollowerError(
                f"broker {self.local_broker_id} is not the leader of {tp}"
            )
        return partition


def _running_loop() -> asyncio.AbstractEventLoop | None:
    """The event loop running on this thread, or None (an I/O or scheduler thread)."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
