"""One follower fetcher thread: replicates the partitions this broker follows from one leader
broker (Kafka's ``ReplicaFetcherThread``; the thread's lifecycle, partition states, back-off
and failed partitions are ``AbstractFetcherThread``'s, in ``abstract_fetcher_thread``).

Each round (``do_work``):

0. build the remote log auxiliary state of the partitions in ``BuildingRemoteLogAuxState``
   (``TierStateMachine``, KIP-405), which then fetch from the leader's local log start
   offset; one that cannot be built yet backs off and stays in that state;
1. truncate the partitions in ``Truncating``: those whose log has a leader epoch ask the
   leader where that epoch ends (OffsetForLeaderEpoch) and truncate as
   ``offset_truncation`` plans; those without one truncate to their high watermark;
2. send one Fetch for the partitions in ``Fetching`` (not backing off), in the fetch session
   with the leader (KIP-227: only the partitions whose fetch changed are named, and only those
   with something new are answered), and apply each partition's answer: append the leader's
   batches as they are (offsets and epochs from the leader), follower HW = min(leader HW,
   own LEO), the leader's log start offset; a DivergingEpoch truncates (KIP-320);
   OFFSET_OUT_OF_RANGE asks the leader for its end and start offsets
   (``fetch_offset_and_truncate``); OFFSET_MOVED_TO_TIERED_STORAGE moves the partition to
   ``BuildingRemoteLogAuxState`` and builds it at once; leadership errors back off until the
   metadata moves the partition; a failed request backs off every partition and reconnects.

Locking (Kafka's ``partitionMapLock``): ``_lock`` guards the fetch states; every change to a
log (append, truncation) happens while holding it, and a response is applied only if the
partition's state still has the fetch offset and leader epoch the request was built with.
``remove_partitions`` takes the same lock, so once it returns no append can happen for the
removed partitions. Requests are sent without the lock (except the ListOffsets of an
out-of-range partition and the requests and remote reads of the ``TierStateMachine``, as in
Kafka).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping

from kio.schema.errors import ErrorCode

from storage_core.client.errors import BrokerResponseError, ClientError
from storage_core.clock import SYSTEM_CLOCK, Clock
from storage_core.common import TopicPartition
from storage_core.errors import (
    CorruptRecordError,
    InvalidRecordError,
    KafkaStorageError,
    StorageError,
    TooManyOpenFilesError,
)
from storage_core.log.log import Log
from storage_core.replication.abstract_fetcher_thread import (
    AbstractFetcherThread,
    FailedPartitions,
)
from storage_core.replication.fetch_requests import FetchRequestBuilder
from storage_core.replication.fetch_state import (
    InitialFetchState,
    PartitionFetchState,
    ReplicaState,
)
from storage_core.replication.follower_log import (
    plan_truncation,
    process_partition_data,
    truncate,
)
from storage_core.replication.leader_end_point import (
    FetchPartitionData,
    FetchPartitionRequest,
    RemoteLeaderEndPoint,
)
from storage_core.replication.offset_truncation import (
    EpochEndOffset,
    OffsetTruncationState,
)
from storage_core.replication.partition import Partition
from storage_core.replication.replica_fetcher_config import ReplicaFetcherConfig
from storage_core.replication.tier_state_machine import (
    RemoteLogAuxStateNotReadyError,
    TierStateMachine,
)
from storage_core.tiered.remote_log_manager import RemoteLogManager

logger = logging.getLogger(__name__)

# Errors after which the metadata is expected to move the partition: retry after a back-off.
_LEADERSHIP_ERRORS = frozenset(
    {
        ErrorCode.not_leader_or_follower,
        ErrorCode.fenced_leader_epoch,
        ErrorCode.unknown_leader_epoch,
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.unknown_topic_id,
        ErrorCode.inconsistent_topic_id,
    }
)

GetPartition = Callable[[TopicPartition], Partition]
GetRemoteLogManager = Callable[[], RemoteLogManager | None]


def _no_remote_log_manager() -> RemoteLogManager | None:
    return None


def initial_fetch_offset(log: Log) -> int:
    """Where a new follower starts (Kafka's ``initialFetchOffset``): its log end offset when
    the log has a leader epoch (truncation happens on fetch), else its high watermark."""
    return log.log_end_offset if log.latest_epoch is not None else log.high_watermark


class ReplicaFetcherThread(AbstractFetcherThread):
    """Fetches the partitions this broker follows from one source broker."""

    def __init__(
        self,
        *,
        name: str,
        leader: RemoteLeaderEndPoint,
        config: ReplicaFetcherConfig,
        get_partition: GetPartition,
        failed_partitions: FailedPartitions,
        truncation_on_fetch: bool = True,
        remote_log_manager: GetRemoteLogManager | None = None,
        clock: Clock = SYSTEM_CLOCK,
        on_bytes_appended: Callable[[int], None] = lambda size_bytes: None,
    ) -> None:
        """``on_bytes_appended`` learns the bytes of each append (ReplicationBytesInPerSec)."""
        super().__init__(
            name=name,
            leader=leader,
            config=config,
            failed_partitions=failed_partitions,
            clock=clock,
        )
        self._get_partition = get_partition
        # Fetch v12+ (KIP-320): divergence comes back in Fetch responses. Without it every
        # new follower truncates first through OffsetForLeaderEpoch (Kafka's older IBPs).
        self._truncation_on_fetch = truncation_on_fetch
        self._tier_state_machine = TierStateMachine(
            leader=leader,
            get_partition=get_partition,
            remote_log_manager=remote_log_manager or _no_remote_log_manager,
        )
        self._on_bytes_appended = on_bytes_appended
        self._request_builder = FetchRequestBuilder(truncation_on_fetch=truncation_on_fetch)
        # whether a state other than fetching is held, as of that version of the states
        self._others = False
        self._others_looked_at = -1

    # ================================================================== partitions
    def add_partitions(self, initial_states: Mapping[TopicPartition, InitialFetchState]) -> None:
        """Start (or keep) fetching: a partition already here at the same leader epoch keeps
        its state; otherwise it starts over from ``init_offset``."""
        with self._lock:
            self._failed.remove_all(initial_states)
            for tp, initial in initial_states.items():
                current = self._states.get(tp)
                if (
                    current is not None
                    and current.current_leader_epoch == initial.current_leader_epoch
                ):
                    continue
                try:
                    log = self._get_partition(tp).log
                except StorageError as error:
                    logger.error("cannot follow partition=%s error=%s", tp, error)
                    self._failed.add(tp)
                    continue
                self._states.pop(tp, None)  # re-inserted last: round-robin order, as Kafka
                self._states[tp] = self._initial_state(log, initial)
                logger.info(
                    "following partition=%s leader=%d leader_epoch=%d %s",
                    tp,
                    initial.leader_id,
                    initial.current_leader_epoch,
                    self._states[tp],
                )
            self._lock.notify_all()

    def _initial_state(self, log: Log, initial: InitialFetchState) -> PartitionFetchState:
        offset = initial.init_offset if initial.init_offset >= 0 else initial_fetch_offset(log)
        latest_epoch = log.latest_epoch
        if self._truncation_on_fetch and latest_epoch is not None:
            state, last_fetched = ReplicaState.FETCHING, latest_epoch
        else:
            state, last_fetched = ReplicaState.TRUNCATING, None
        return PartitionFetchState(
            topic_id=initial.topic_id,
            fetch_offset=offset,
            lag=None,
            current_leader_epoch=initial.current_leader_epoch,
            state=state,
            last_fetched_epoch=last_fetched,
        )

    # ================================================================== the loop
    def do_work(self) -> None:
        with self._lock:
            # Truncation and the remote log auxiliary state are rare: one look for them,
            # again only once the states changed.
            states = self._states
            if self._others_looked_at != states.version:
                self._others = any(s.state is not ReplicaState.FETCHING for s in states.values())
                self._others_looked_at = states.version
            others = self._others
        if others:
            self._maybe_build_remote_log_aux_state()
            self._maybe_truncate()
        self._maybe_fetch()

    # ------------------------------------------------------------------ truncation
    def _maybe_truncate(self) -> None:
        with_epochs: dict[TopicPartition, tuple[int, int]] = {}
        without_epochs: list[TopicPartition] = []
        with self._lock:
            now_ms = self._now_ms()
            for tp, state in list(self._states.items()):
                if not state.is_truncating(now_ms):
                    continue
                log = self._log_or_mark_failed(tp)
                if log is None:
                    continue
                latest = log.latest_epoch
                if latest is None:
                    without_epochs.append(tp)
                else:
                    with_epochs[tp] = (state.current_leader_epoch, latest)
        if with_epochs:
            self._truncate_to_epoch_end_offsets(with_epochs)
        if without_epochs:
            self._truncate_to_high_watermark(without_epochs)

    def _truncate_to_epoch_end_offsets(
        self, requested: Mapping[TopicPartition, tuple[int, int]]
    ) -> None:
        try:
            answers = self.leader.fetch_epoch_end_offsets(requested)
        except ClientError as error:
            self._on_request_failure("OffsetForLeaderEpoch", error, requested)
            return
        with self._lock:
            planned: dict[TopicPartition, OffsetTruncationState] = {}
            retry: set[TopicPartition] = set()
            for tp, (request_epoch, _epoch) in requested.items():
                state = self._states.get(tp)
                if state is None or state.current_leader_epoch != request_epoch:
                    continue  # removed, or a new leader epoch since: the answer is stale
                answer = answers.get(tp)
                if answer is None or answer.error != ErrorCode.none:
                    logger.info(
                        "retrying OffsetForLeaderEpoch partition=%s error=%s",
                        tp,
                        "missing" if answer is None else answer.error.name,
                    )
                    retry.add(tp)
                    continue
                plan = self._plan_truncation(tp, answer.epoch_end_offset)
                if plan is not None:
                    planned[tp] = plan
            self._delay_partitions(retry, self._config.fetch_backoff_ms)
            self._mark_truncated(planned)

    def _truncate_to_high_watermark(self, tps: Iterable[TopicPartition]) -> None:
        """A log without leader epochs truncates to its initial fetch offset, the HW."""
        with self._lock:
            planned: dict[TopicPartition, OffsetTruncationState] = {}
            for tp in tps:
                state = self._states.get(tp)
                if state is None:
                    continue
                plan = OffsetTruncationState(offset=state.fetch_offset, truncation_completed=True)
                logger.info(
                    "truncating to the high watermark partition=%s offset=%d", tp, plan.offset
                )
                if self._do_truncate(tp, plan):
                    planned[tp] = plan
            self._mark_truncated(planned)

    def _plan_truncation(
        self, tp: TopicPartition, leader: EpochEndOffset
    ) -> OffsetTruncationState | None:
        """Plan and apply a truncation (lock held); None if the partition failed."""
        log = self._log_or_mark_failed(tp)
        if log is None:
            return None
        plan = plan_truncation(log, leader)
        logger.info(
            "truncating partition=%s leader_epoch=%d leader_end_offset=%d to_offset=%d"
            " completed=%s",
            tp,
            leader.epoch,
            leader.end_offset,
            plan.offset,
            plan.truncation_completed,
        )
        return plan if self._do_truncate(tp, plan) else None

    def _do_truncate(self, tp: TopicPartition, plan: OffsetTruncationState) -> bool:
        try:
            truncate(self._get_partition(tp).log, plan)
            return True
        except Exception:
            logger.exception("truncation failed partition=%s offset=%d", tp, plan.offset)
            self._mark_partition_failed(tp)
            return False

    def _mark_truncated(self, planned: Mapping[TopicPartition, OffsetTruncationState]) -> None:
        """Fetch from where each log now ends (lock held); with truncation on fetch the next
        Fetch carries on an incomplete truncation (its DivergingEpoch), as Kafka."""
        for tp, plan in planned.items():
            state = self._states.get(tp)
            log = self._log_or_mark_failed(tp)
            if state is None or log is None:
                continue
            self._states[tp] = state.truncated(
                offset=min(plan.offset, log.log_end_offset),
                last_fetched_epoch=log.latest_epoch,
                completed=plan.truncation_completed or self._truncation_on_fetch,
            )

    # ------------------------------------------------------------------ fetch
    def _maybe_fetch(self) -> None:
        with self._lock:
            now_ms = self._now_ms()
            requests = self._request_builder.build(self._states, now_ms, self._log_or_mark_failed)
            if not requests:
                self._lock.wait(self._idle_wait_ms(now_ms) / 1000)
                return
        try:
            responses = self.leader.fetch(requests)
        except ClientError as error:
            self._on_request_failure("Fetch", error, requests)
            return
        finally:
            self.fetch_requests += 1
        self._process_fetch_response(requests, responses)

    def _process_fetch_response(
        self,
        requests: Mapping[TopicPartition, FetchPartitionRequest],
        responses: Mapping[TopicPartition, FetchPartitionData],
    ) -> None:
        with self._lock:
            now_ms = self._now_ms()
            retry: set[TopicPartition] = set()
            diverging: dict[TopicPartition, EpochEndOffset] = {}
            for tp, data in responses.items():
                state = self._states.get(tp)
                sent = requests[tp]
                if (
                    state is None
                    or state.fetch_offset != sent.fetch_offset
                    or state.current_leader_epoch != sent.current_leader_epoch
                    or not state.is_ready_for_fetch(now_ms)
                ):
                    continue  # removed, re-added or truncated while the request was out
                if data.error == ErrorCode.none:
                    if data.diverging_epoch is None:
                        if not self._apply_partition_data(tp, state, data):
                            retry.add(tp)
                    elif data.diverging_epoch.is_undefined:
                        # The leader knows no epoch to compare with: Kafka's leader answers
                        # OFFSET_OUT_OF_RANGE here, and so is it handled.
                        if not self._handle_out_of_range(tp, state):
                            retry.add(tp)
                    else:
                        diverging[tp] = data.diverging_epoch
                elif data.error == ErrorCode.offset_out_of_range:
                    if not self._handle_out_of_range(tp, state):
                        retry.add(tp)
                elif data.error == ErrorCode.offset_moved_to_tiered_storage:
                    building = state.building_remote_log_aux_state(
                        leader_log_start_offset=data.log_start_offset
                    )
                    self._states[tp] = building
                    logger.info(
                        "fetch offset moved to tiered storage, building the remote log"
                        " auxiliary state partition=%s %s",
                        tp,
                        building,
                    )
                    if not self._build_remote_log_aux_state(tp, building):
                        retry.add(tp)
                elif data.error in _LEADERSHIP_ERRORS:
                    logger.info(
                        "leader refused the fetch, waiting for new metadata partition=%s"
                        " leader=%d leader_epoch=%d error=%s",
                        tp,
                        self.leader.source_broker_id,
                        state.current_leader_epoch,
                        data.error.name,
                    )
                    retry.add(tp)
                else:
                    logger.error(
                        "fetch failed partition=%s fetch_offset=%d error=%s",
                        tp,
                        state.fetch_offset,
                        data.error.name,
                    )
                    retry.add(tp)
            if diverging:
                planned = {}
                for tp, epoch_end_offset in diverging.items():
                    plan = self._plan_truncation(tp, epoch_end_offset)
                    if plan is not None:
                        planned[tp] = plan
                self._mark_truncated(planned)
            self._delay_partitions(retry, self._config.fetch_backoff_ms)

    def _apply_partition_data(
        self, tp: TopicPartition, state: PartitionFetchState, data: FetchPartitionData
    ) -> bool:
        """Append, then move HW, log start, offsets and lag (lock held). False: back off."""
        try:
            log = self._get_partition(tp).log
            # A log start offset moved by the leader's DeleteRecords goes out in the next
            # request (see fetch_requests): the leader waits for it.
            appended = process_partition_data(log, state.fetch_offset, data)
        except (CorruptRecordError, InvalidRecordError) as error:
            # Maybe a transient state of the leader's log: retried after the back-off.
            logger.error(
                "invalid batches in fetch response partition=%s fetch_offset=%d error=%s",
                tp,
                state.fetch_offset,
                error,
            )
            return False
        except TooManyOpenFilesError as error:
            # Nothing was appended and the log is whole: a follower, like a producer, retries
            # once descriptors are free (the partition is not failed for it).
            logger.warning(
                "append deferred at the open-file limit partition=%s fetch_offset=%d error=%s",
                tp,
                state.fetch_offset,
                error,
            )
            return False
        except KafkaStorageError as error:
            logger.error(
                "storage error partition=%s fetch_offset=%d error=%s", tp, state.fetch_offset, error
            )
            self._mark_partition_failed(tp)
            return True
        except Exception:
            logger.exception(
                "unexpected error partition=%s fetch_offset=%d", tp, state.fetch_offset
            )
            self._mark_partition_failed(tp)
            return True
        next_offset = appended.last_offset + 1 if appended.valid_bytes > 0 else state.fetch_offset
        lag = max(0, data.high_watermark - next_offset)
        self._lags[tp] = lag
        if (appended.valid_bytes > 0 or state.lag is None) and tp in self._states:
            last_epoch = (
                appended.last_epoch if appended.valid_bytes > 0 else state.last_fetched_epoch
            )
            self._states[tp] = state.fetched(
                next_offset=next_offset, lag=lag, last_fetched_epoch=last_epoch
            )
            self.bytes_fetched += appended.valid_bytes
            self._on_bytes_appended(appended.valid_bytes)
        return True

    # ------------------------------------------------------------------ tiered storage
    def _maybe_build_remote_log_aux_state(self) -> None:
        with self._lock:
            now_ms = self._now_ms()
            retry = [
                tp
                for tp, state in list(self._states.items())
                if state.is_building_remote_log_aux_state(now_ms)
                and not self._build_remote_log_aux_state(tp, state)
            ]
            self._delay_partitions(retry, self._config.fetch_backoff_ms)

    def _build_remote_log_aux_state(self, tp: TopicPartition, state: PartitionFetchState) -> bool:
        """Kafka's ``handleOffsetsMovedToTieredStorage`` (lock held). False: back off, stay
        in ``BuildingRemoteLogAuxState`` and try again."""
        try:
            fetching = self._tier_state_machine.start(tp, state)
        except RemoteLogAuxStateNotReadyError as error:
            logger.info(
                "remote log auxiliary state not ready, retrying partition=%s error=%s", tp, error
            )
            return False
        except BrokerResponseError as error:
            logger.info(
                "cannot build the remote log auxiliary state partition=%s error=%s",
                tp,
                error.error.name,
            )
            return False
        except ClientError as error:
            logger.warning(
                "cannot build the remote log auxiliary state partition=%s error=%s", tp, error
            )
            self.leader.disconnect()
            return False
        except StorageError as error:  # e.g. a corrupt remote object: the log is untouched
            logger.error(
                "cannot build the remote log auxiliary state, retrying partition=%s error=%s",
                tp,
                error,
            )
            return False
        except Exception:
            logger.exception("error building the remote log auxiliary state partition=%s", tp)
            return False
        if tp in self._states:
            self._states[tp] = fetching
            self._lags[tp] = fetching.lag or 0
        logger.info("remote log auxiliary state built, fetching partition=%s %s", tp, fetching)
        return True

    # ------------------------------------------------------------------ out of range
    def _handle_out_of_range(self, tp: TopicPartition, state: PartitionFetchState) -> bool:
        """Kafka's ``handleOutOfRangeError`` (lock held). False: back off and retry."""
        try:
            self._states[tp] = self._fetch_offset_and_truncate(tp, state)
            logger.info(
                "fetch offset out of range, reset partition=%s from=%d to=%d",
                tp,
                state.fetch_offset,
                self._states[tp].fetch_offset,
            )
            return True
        except BrokerResponseError as error:
            logger.info(
                "cannot get the leader's offsets partition=%s error=%s", tp, error.error.name
            )
            return False
        except ClientError as error:
            logger.warning("cannot get the leader's offsets partition=%s error=%s", tp, error)
            self.leader.disconnect()
            return False
        except Exception:
            logger.exception("error resetting the fetch offset partition=%s", tp)
            return False

    def _fetch_offset_and_truncate(
        self, tp: TopicPartition, state: PartitionFetchState
    ) -> PartitionFetchState:
        """Kafka's ``fetchOffsetAndTruncate``: where to fetch from after OFFSET_OUT_OF_RANGE.

        Leader's end below this log's end (an unclean election made a replica with less data
        leader): truncate to the leader's end; the logs may still differ below it. Otherwise
        fetch from max(leader's start, own end); a log that ends before the leader's start is
        stale and restarts empty at the leader's start.
        """
        log = self._get_partition(tp).log
        replica_end = log.log_end_offset
        epoch = state.current_leader_epoch
        leader_end = self.leader.fetch_latest_offset(tp, epoch)
        if leader_end < replica_end:
            logger.warning(
                "leader's log ends before this replica's (unclean leader election), truncating"
                " partition=%s leader_end_offset=%d log_end_offset=%d",
                tp,
                leader_end,
                replica_end,
            )
            log.truncate_to(leader_end)
            self._lags[tp] = 0
            return PartitionFetchState(
                topic_id=state.topic_id,
                fetch_offset=log.log_end_offset,
                lag=0,
                current_leader_epoch=epoch,
                state=ReplicaState.FETCHING,
                last_fetched_epoch=log.latest_epoch,
            )
        leader_start = self.leader.fetch_earliest_offset(tp, epoch)
        offset_to_fetch = max(leader_start, replica_end)
        if leader_start > replica_end:
            logger.warning(
                "this replica's log ends before the leader's log start, restarting it empty"
                " partition=%s log_end_offset=%d leader_log_start_offset=%d",
                tp,
                replica_end,
                leader_start,
            )
            log.truncate_fully_and_start_at(leader_start)
        lag = max(0, leader_end - offset_to_fetch)
        self._lags[tp] = lag
        return PartitionFetchState(
            topic_id=state.topic_id,
            fetch_offset=offset_to_fetch,
            lag=lag,
            current_leader_epoch=epoch,
            state=ReplicaState.FETCHING,
            last_fetched_epoch=log.latest_epoch,
        )

    def _log_or_mark_failed(self, tp: TopicPartition) -> Log | None:
        try:
            return self._get_partition(tp).log
        except StorageError as error:
            logger.error("partition is gone from this broker partition=%s error=%s", tp, error)
            self._mark_partition_failed(tp)
            return None
