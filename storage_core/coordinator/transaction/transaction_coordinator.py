"""The transaction coordinator (Kafka's ``TransactionCoordinator``): InitProducerId with a
transactional id, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, DescribeTransactions and
ListTransactions, for the transactional ids of the ``__transaction_state`` partitions this
broker leads.

Interface towards the broker::

    coordinator = TransactionCoordinator(
        config=TransactionConfig(...),
        state_manager=TransactionStateManager(...),   # the cache and __transaction_state
        producer_ids=<ProducerIdManager>,
        marker_channel=lambda on_complete, on_failed: TransactionMarkerChannelManager(...),
        offsets_topic_num_partitions=lambda: 50,
        run_io=replica_manager.run_io,
        clock=SYSTEM_CLOCK,
    )
    await coordinator.startup({partition: leader_epoch, ...})   # the partitions it leads
    coordinator.on_leadership_changes(elected={p: epoch}, resigned=[p])   # any thread
    ... handle_* called by the protocol handlers ...
    await coordinator.shutdown()

Each request looks its id up, decides with the pure functions of
``transaction_coordinator_logic`` (on the loop: no other request runs in between), writes
the transition with acks=all and completes it. A transition in flight leaves the id's
``pending_state`` set, so a concurrent request for the same id answers
CONCURRENT_TRANSACTIONS, as in Kafka. Once a PrepareCommit / PrepareAbort is written, EndTxn
is answered and the marker channel writes the markers on the partitions' leaders; when all
are written the CompleteCommit / CompleteAbort is appended (retried while
``__transaction_state`` is not available).

Timers: every ``abort_timed_out_transactions_interval_ms`` the Ongoing transactions older
than their timeout are fenced (epoch + 1) and aborted; every
``remove_expired_transactional_ids_interval_ms`` ids idle longer than
``transactional.id.expiration.ms`` get tombstones.

Thread safety: every method but ``on_leadership_changes`` and the marker callbacks runs on
the asyncio loop that called ``startup``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping
from typing import Protocol

from kio.schema.errors import ErrorCode

from storage_core.clock import SYSTEM_CLOCK, Clock
from storage_core.common import TopicPartition
from storage_core.coordinator.transaction import transaction_coordinator_logic as logic
from storage_core.coordinator.transaction.transaction_completion import (
    MarkerChannelFactory,
    TransactionCompletion,
)
from storage_core.coordinator.transaction.transaction_listing import (
    ListTransactionsResult,
    TransactionDescription,
    describe,
    list_transactions,
)
from storage_core.coordinator.transaction.transaction_log import TRANSACTION_STATE_TOPIC_NAME
from storage_core.coordinator.transaction.transaction_metadata import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    TransactionMetadata,
    TxnTransitMetadata,
)
from storage_core.coordinator.transaction.transaction_results import (
    EndTxnCompletion,
    EndTxnResult,
    ProducerIdAndEpoch,
    TransactionResult,
)
from storage_core.coordinator.transaction.transaction_state_manager import (
    CoordinatorEpochAndTxnMetadata,
    TransactionStateManager,
)
from storage_core.coordinator.transaction.transaction_state_manager_logic import (
    TransactionConfig,
    complete_append,
    complete_expiration,
    expired_transactional_ids,
    timed_out_transactions,
    transactions_pending_completion,
)
from storage_core.errors import StorageError

logger = logging.getLogger(__name__)

E = ErrorCode

TOMBSTONES_TIMEOUT_MS = 30_000
ENDED_WAIT_S = 0.1


class ProducerIdSource(Protocol):
    """``ProducerIdManager``: ids from blocks taken in ZooKeeper."""

    def generate_producer_id(self) -> int: ...

    def ensure_block_available(self) -> None:
        """Take a new block now if the current one is used up (blocking)."""


class TransactionCoordinator:
    def __init__(
        self,
        *,
        config: TransactionConfig,
        state_manager: TransactionStateManager,
        producer_ids: ProducerIdSource,
        marker_channel: MarkerChannelFactory,
        offsets_topic_num_partitions: Callable[[], int],
        run_io: Callable[[Callable[[], None]], Awaitable[None]],
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.config = config
        self.state_manager = state_manager
        self._producer_ids = producer_ids
        self.completion = TransactionCompletion(state_manager, marker_channel, self._spawn)
        self._offsets_topic_num_partitions = offsets_topic_num_partitions
        self._run_io = run_io
        self._clock = clock
        self._loop: asyncio.AbstractEventLoop | None = None
        self._active = False
        self._tasks: set[asyncio.Task[None]] = set()

    # ================================================================== lifecycle
    @property
    def is_active(self) -> bool:
        return self._active

    def partition_for(self, transactional_id: str) -> int:
        return self.state_manager.partition_for(transactional_id)

    async def startup(self, led: Mapping[int, int]) -> None:
        """Load the ``__transaction_state`` partitions this broker leads (partition ->
        leader epoch), start the marker channel and the timers."""
        self._loop = asyncio.get_running_loop()
        self.completion.start(self._loop)
        self._active = True
        await asyncio.gather(*(self._load(p, epoch) for p, epoch in led.items()))
        self._spawn(
            self._every(
                self.config.abort_timed_out_transactions_interval_ms,
                self.abort_timed_out_transactions,
            )
        )
        self._spawn(
            self._every(
                self.config.remove_expired_transactional_ids_interval_ms,
                self.remove_expired_transactional_ids,
            )
        )
        logger.info(
            "transaction coordinator started partitions=%d led=%d",
            self.state_manager.num_partitions,
            len(led),
        )

    async def shutdown(self) -> None:
        self._active = False
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await asyncio.to_thread(self.completion.shutdown)
        logger.info("transaction coordinator shut down")

    def on_leadership_changes(self, *, elected: Mapping[int, int], resigned: Iterable[int]) -> None:
        """``__transaction_state`` partitions this broker now leads (partition -> leader
        epoch, Kafka's onElection) or no longer leads (onResignation); any thread."""
        loop = self._loop
        resigned = list(resigned)
        if loop is None or loop.is_closed() or not (elected or resigned):
            return
        loop.call_soon_threadsafe(self._apply_leadership, dict(elected), resigned)

    def _apply_leadership(self, elected: dict[int, int], resigned: list[int]) -> None:
        for partition in resigned:
            self._unload(partition)
        for partition, epoch in elected.items():
            self._spawn(self._load(partition, epoch))

    async def _load(self, partition: int, coordinator_epoch: int) -> None:
        manager = self.state_manager
        manager.begin_loading(partition, coordinator_epoch)
        started = self._clock.milliseconds()
        try:
            loaded = await asyncio.to_thread(manager.replay, partition)
        except StorageError as exc:
            manager.fail_loading(partition, coordinator_epoch)
            logger.error(
                "cannot load transaction metadata partition=%s-%d error=%s: its transactional"
                " ids are not served",
                TRANSACTION_STATE_TOPIC_NAME,
                partition,
                exc,
            )
            return
        if not manager.finish_loading(partition, coordinator_epoch, loaded):
            return  # unloaded or reloaded meanwhile
        pending = transactions_pending_completion(loaded.values(), self._clock.milliseconds())
        logger.log(
            logging.INFO if loaded else logging.DEBUG,  # 50 empty partitions say nothing
            "loaded transaction metadata partition=%s-%d epoch=%d transactional_ids=%d"
            " to_complete=%d in_ms=%d",
            TRANSACTION_STATE_TOPIC_NAME,
            partition,
            coordinator_epoch,
            len(loaded),
            len(pending),
            self._clock.milliseconds() - started,
        )
        for markers in pending:  # a failed coordinator's PrepareCommit / PrepareAbort
            self.completion.send(coordinator_epoch, markers)

    def _unload(self, partition: int) -> None:
        removed = self.state_manager.remove_partition(partition)
        self.completion.forget_partition(partition)
        logger.info(
            "unloaded transaction metadata partition=%s-%d transactional_ids=%d",
            TRANSACTION_STATE_TOPIC_NAME,
            partition,
            removed,
        )

    # ================================================================== requests
    def _state(self, transactional_id: str) -> ErrorCode | CoordinatorEpochAndTxnMetadata | None:
        if not self._active:
            return E.coordinator_not_available
        return self.state_manager.get_transaction_state(transactional_id)

    async def _state_once_ended(
        self, transactional_id: str
    ) -> ErrorCode | CoordinatorEpochAndTxnMetadata | None:
        """The id's state, after its previous transaction's end is written if that takes
        at most ``ENDED_WAIT_S`` (else CONCURRENT_TRANSACTIONS follows, as in Kafka)."""
        await self.completion.wait_ended(transactional_id, ENDED_WAIT_S)
        return self._state(transactional_id)

    async def handle_init_producer_id(
        self, transactional_id: str, txn_timeout_ms: int, expected: ProducerIdAndEpoch | None
    ) -> tuple[ErrorCode, int, int]:
        """InitProducerId with a transactional id: (error, producer id, producer epoch)."""
        if transactional_id:
            # a new producer id may be needed: a block from ZooKeeper is taken off the loop
            await self._run_io(self._producer_ids.ensure_block_available)
        state = await self._state_once_ended(transactional_id) if transactional_id else None
        if isinstance(state, ErrorCode) and self.config.validate_transaction_timeout_ms(
            txn_timeout_ms
        ):
            return state, NO_PRODUCER_ID, NO_PRODUCER_EPOCH
        if isinstance(state, ErrorCode):
            state = None  # the request's own error comes first
        now = self._clock.milliseconds()
        result = logic.handle_init_producer_id(
            transactional_id,
            txn_timeout_ms,
            expected,
            None if state is None else state.metadata,
            config=self.config,
            generate_producer_id=self._producer_ids.generate_producer_id,
            now_ms=now,
        )
        if result.created is not None:
            put = self.state_manager.put_transaction_state_if_not_exists(result.created)
            if isinstance(put, ErrorCode):
                return put, NO_PRODUCER_ID, NO_PRODUCER_EPOCH
            state = put
        transit = result.append or (result.end_txn.append if result.end_txn else None)
        if transit is None or state is None:
            return result.error, result.producer_id, result.producer_epoch
        error = await self.state_manager.append_transit(
            transactional_id, state.coordinator_epoch, transit
        )
        if not self.state_manager.is_current(transactional_id, state.coordinator_epoch):
            return E.not_coordinator, NO_PRODUCER_ID, NO_PRODUCER_EPOCH
        completion = logic.after_init_producer_id_append(
            result, state.metadata, error, self._clock.milliseconds()
        )
        self._after_completion(state.coordinator_epoch, completion)
        if completion.error is E.none:
            logger.info(
                "initialized transactional producer transactional_id=%s producer_id=%d epoch=%d",
                transactional_id,
                completion.producer_id,
                completion.producer_epoch,
            )
        return completion.error, completion.producer_id, completion.producer_epoch

    async def handle_add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Collection[TopicPartition],
    ) -> ErrorCode:
        """AddPartitionsToTxn v0-3: one error for every partition of the request."""
        state = await self._state_once_ended(transactional_id)
        if isinstance(state, ErrorCode):
            return state
        metadata = None if state is None else state.metadata
        result = logic.handle_add_partitions_to_transaction(
            transactional_id,
            producer_id,
            producer_epoch,
            partitions,
            metadata,
            now_ms=self._clock.milliseconds(),
        )
        return await self._write_added(transactional_id, state, result.error, result.append)

    async def handle_add_offsets(
        self, transactional_id: str, producer_id: int, producer_epoch: int, group_id: str
    ) -> ErrorCode:
        """AddOffsetsToTxn: the group's ``__consumer_offsets`` partition joins the transaction."""
        state = await self._state_once_ended(transactional_id)
        if isinstance(state, ErrorCode):
            return state
        result = logic.handle_add_offsets_to_transaction(
            transactional_id,
            producer_id,
            producer_epoch,
            group_id,
            None if state is None else state.metadata,
            offsets_topic_num_partitions=self._offsets_topic_num_partitions(),
            now_ms=self._clock.milliseconds(),
        )
        return await self._write_added(transactional_id, state, result.error, result.append)

    async def _write_added(
        self,
        transactional_id: str,
        state: CoordinatorEpochAndTxnMetadata | None,
        error: ErrorCode,
        transit: TxnTransitMetadata | None,
    ) -> ErrorCode:
        if transit is None or state is None:
            return error
        append_error = await self.state_manager.append_transit(
            transactional_id, state.coordinator_epoch, transit
        )
        if not self.state_manager.is_current(transactional_id, state.coordinator_epoch):
            return E.not_coordinator
        return complete_append(state.metadata, transit, append_error)

    def verify_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Collection[TopicPartition],
    ) -> dict[TopicPartition, ErrorCode]:
        """AddPartitionsToTxn v4 verify-only (KIP-890 part 1): per partition."""
        state = self._state(transactional_id)
        if isinstance(state, ErrorCode):
            return dict.fromkeys(partitions, state)
        return logic.handle_verify_partitions_in_transaction(
            transactional_id,
            producer_id,
            producer_epoch,
            partitions,
            None if state is None else state.metadata,
        )

    async def handle_end_transaction(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        result: TransactionResult,
    ) -> ErrorCode:
        """EndTxn: answered once the PrepareCommit / PrepareAbort is written."""
        state = await self._state_once_ended(transactional_id)
        if isinstance(state, ErrorCode):
            return state
        end = logic.handle_end_transaction(
            transactional_id,
            producer_id,
            producer_epoch,
            result,
            None if state is None else state.metadata,
            now_ms=self._clock.milliseconds(),
        )
        completion = await self._write_end(transactional_id, state, end)
        return completion.error

    async def _write_end(
        self,
        transactional_id: str,
        state: CoordinatorEpochAndTxnMetadata | None,
        end: EndTxnResult,
    ) -> EndTxnCompletion:
        if end.append is None or state is None:
            return EndTxnCompletion(error=end.error)
        error = await self.state_manager.append_transit(
            transactional_id, state.coordinator_epoch, end.append
        )
        if not self.state_manager.is_current(transactional_id, state.coordinator_epoch):
            return EndTxnCompletion(error=E.not_coordinator)
        completion = logic.after_end_txn_append(
            end, state.metadata, error, self._clock.milliseconds()
        )
        self._after_completion(state.coordinator_epoch, completion)
        return completion

    def describe_transactions(
        self, transactional_ids: Iterable[str]
    ) -> list[TransactionDescription]:
        described = []
        for txn_id in transactional_ids:
            if not txn_id:
                described.append(
                    TransactionDescription(transactional_id=txn_id, error=E.invalid_request)
                )
                continue
            state = self._state(txn_id)
            if isinstance(state, ErrorCode):
                described.append(TransactionDescription(transactional_id=txn_id, error=state))
            else:
                described.append(describe(txn_id, None if state is None else state.metadata))
        return described

    def list_transactions(
        self,
        *,
        state_filters: Collection[str],
        producer_id_filters: Collection[int],
        duration_filter_ms: int,
    ) -> ListTransactionsResult:
        if not self._active:
            return ListTransactionsResult(error=E.coordinator_not_available)
        if self.state_manager.is_loading:
            return ListTransactionsResult(error=E.coordinator_load_in_progress)
        return list_transactions(
            (metadata for _, metadata in self.state_manager.all_metadata()),
            state_filters=state_filters,
            producer_id_filters=producer_id_filters,
            duration_filter_ms=duration_filter_ms,
            now_ms=self._clock.milliseconds(),
        )

    # ================================================================== markers
    def _after_completion(self, coordinator_epoch: int, completion: EndTxnCompletion) -> None:
        if completion.markers is not None:
            self.completion.send(coordinator_epoch, completion.markers)

    # ================================================================== timers
    async def abort_timed_out_transactions(self) -> None:
        """Fence and abort every Ongoing transaction past its timeout."""
        now = self._clock.milliseconds()
        timed_out = timed_out_transactions(
            (metadata for _, metadata in self.state_manager.all_metadata()), now
        )
        writes = []
        for found in timed_out:
            state = self.state_manager.get_transaction_state(found.transactional_id)
            if not isinstance(state, CoordinatorEpochAndTxnMetadata):
                continue
            end = logic.abort_timed_out_transaction(state.metadata, found, now)
            if end is None:
                continue
            logger.info(
                "aborting timed-out transaction transactional_id=%s producer_id=%d epoch=%d"
                " timeout_ms=%d",
                found.transactional_id,
                found.producer_id,
                found.producer_epoch,
                state.metadata.txn_timeout_ms,
            )
            writes.append(self._write_end(found.transactional_id, state, end))
        for completion in await asyncio.gather(*writes):
            if completion.error is not E.none:
                logger.warning("timed-out transaction not aborted error=%s", completion.error.name)

    async def remove_expired_transactional_ids(self) -> None:
        """Write tombstones for the ids idle longer than ``transactional.id.expiration.ms``."""
        now = self._clock.milliseconds()
        by_partition: dict[int, list[tuple[int, TransactionMetadata, TxnTransitMetadata]]] = {}
        for epoch, metadata in self.state_manager.all_metadata():
            for expired, transit in expired_transactional_ids([metadata], now, self.config):
                by_partition.setdefault(self.partition_for(expired.transactional_id), []).append(
                    (epoch, expired, transit)
                )
        for partition, entries in by_partition.items():
            error = await self.state_manager.append_tombstones(
                partition, [m.transactional_id for _, m, _ in entries], TOMBSTONES_TIMEOUT_MS
            )
            for epoch, metadata, transit in entries:
                if not self.state_manager.is_current(metadata.transactional_id, epoch):
                    continue
                if complete_expiration(metadata, transit, error):
                    self.state_manager.remove_if_dead(metadata.transactional_id, epoch)
            logger.info(
                "expired transactional ids partition=%s-%d count=%d error=%s",
                TRANSACTION_STATE_TOPIC_NAME,
                partition,
                len(entries),
                error.name,
            )

    async def _every(self, interval_ms: int, job: Callable[[], Awaitable[None]]) -> None:
        while True:
            await asyncio.sleep(interval_ms / 1000)
            try:
                await job()
            except Exception:
                logger.exception("transaction coordinator timer failed: it runs again")

    def _spawn(self, coroutine: Awaitable[None]) -> None:
        task = asyncio.ensure_future(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
