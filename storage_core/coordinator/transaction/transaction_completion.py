"""The end of a decided transaction: its markers written on the partitions' leaders, then its
CompleteCommit / CompleteAbort in ``__transaction_state`` (Kafka's
``TransactionMarkerChannelManager.addTxnMarkersToSend`` and ``tryAppendToLog``).

``send`` hands the markers to the marker channel. When the channel reports every partition
written, the CompleteCommit / CompleteAbort is appended on the coordinator's loop, retried
while ``__transaction_state`` answers COORDINATOR_NOT_AVAILABLE; if the transactional id's
partition moved meanwhile (another coordinator epoch), nothing is appended: the new
coordinator sends the markers again when it loads the partition. A marker fenced or refused
for good leaves the transaction in PrepareCommit / PrepareAbort, as in Kafka.

Thread safety: the channel's callbacks come from its threads and are moved onto the loop;
everything else runs on the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

from kio.schema.errors import ErrorCode

from storage_core.coordinator.transaction.transaction_results import TxnMarkers
from storage_core.coordinator.transaction.transaction_state_manager import (
    CoordinatorEpochAndTxnMetadata,
    TransactionStateManager,
)
from storage_core.coordinator.transaction.transaction_state_manager_logic import complete_append

logger = logging.getLogger(__name__)

E = ErrorCode

COMPLETE_APPEND_RETRY_BACKOFF_S = 0.1


class MarkerChannel(Protocol):
    """What the coordinator needs of ``TransactionMarkerChannelManager``."""

    def start(self) -> None: ...

    def add_txn_markers_to_send(
        self, coordinator_epoch: int, markers: TxnMarkers, *, txn_topic_partition: int
    ) -> None: ...

    def remove_markers_for_txn_topic_partition(self, txn_topic_partition: int) -> None: ...

    def shutdown(self) -> None: ...


# (on_complete(transactional_id), on_failed(transactional_id, error)) -> the channel
MarkerChannelFactory = Callable[
    [Callable[[str], None], Callable[[str, ErrorCode], None]], MarkerChannel
]


class TransactionCompletion:
    def __init__(
        self,
        state_manager: TransactionStateManager,
        marker_channel: MarkerChannelFactory,
        spawn: Callable[[Awaitable[None]], None],
    ) -> None:
        self._state_manager = state_manager
        self._channel = marker_channel(self._on_markers_written, self._on_markers_failed)
        self._spawn = spawn
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping = False
        # transactional id -> (coordinator epoch, markers being written)
        self._completing: dict[str, tuple[int, TxnMarkers]] = {}
        # transactional id -> set once its transaction's end is written (or abandoned here)
        self._ended: dict[str, asyncio.Event] = {}

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._channel.start()

    def shutdown(self) -> None:
        """Stop the channel (blocking: call off the loop); markers not written are sent again
        by the next coordinator of their partition."""
        self._stopping = True
        self._channel.shutdown()

    def send(self, coordinator_epoch: int, markers: TxnMarkers) -> None:
        """Write ``markers``, then the transaction's CompleteCommit / CompleteAbort."""
        self._completing[markers.transactional_id] = (coordinator_epoch, markers)
        self._ended.setdefault(markers.transactional_id, asyncio.Event())
        self._channel.add_txn_markers_to_send(
            coordinator_epoch,
            markers,
            txn_topic_partition=self._state_manager.partition_for(markers.transactional_id),
        )

    def forget_partition(self, partition: int) -> None:
        """The ``__transaction_state`` partition moved: drop its transactions' markers."""
        self._channel.remove_markers_for_txn_topic_partition(partition)
        for txn_id in [
            t for t in self._completing if self._state_manager.partition_for(t) == partition
        ]:
            del self._completing[txn_id]
            self._set_ended(txn_id)

    def pending(self) -> int:
        """Transactions whose markers or completion are not written yet."""
        return len(self._completing)

    async def wait_ended(self, transactional_id: str, timeout_s: float) -> None:
        """Wait (at most ``timeout_s``) until the transaction being ended, if any, is: a
        client's next request after EndTxn then finds it ended instead of bouncing with
        CONCURRENT_TRANSACTIONS and a backoff."""
        event = self._ended.get(transactional_id)
        if event is None:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(event.wait(), timeout_s)

    def _set_ended(self, transactional_id: str) -> None:
        event = self._ended.pop(transactional_id, None)
        if event is not None:
            event.set()

    # ------------------------------------------------------------------ channel callbacks
    def _on_markers_written(self, transactional_id: str) -> None:
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._spawn, self._complete(transactional_id))

    def _on_markers_failed(self, transactional_id: str, error: ErrorCode) -> None:
        logger.error(
            "transaction markers not written transactional_id=%s error=%s: the transaction"
            " stays prepared until its partition's next coordinator completes it",
            transactional_id,
            error.name,
        )
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._abandon, transactional_id)

    def _abandon(self, transactional_id: str) -> None:
        self._completing.pop(transactional_id, None)
        self._set_ended(transactional_id)

    async def _complete(self, transactional_id: str) -> None:
        completing = self._completing.pop(transactional_id, None)
        if completing is None:
            return
        try:
            await self._append_end(transactional_id, *completing)
        finally:
            if transactional_id not in self._completing:  # not ended again meanwhile
                self._set_ended(transactional_id)

    async def _append_end(
        self, transactional_id: str, coordinator_epoch: int, markers: TxnMarkers
    ) -> None:
        manager = self._state_manager
        while True:
            state = manager.get_transaction_state(transactional_id)
            if (
                not isinstance(state, CoordinatorEpochAndTxnMetadata)
                or state.coordinator_epoch != coordinator_epoch
            ):
                logger.info(
                    "transaction not completed here: its coordinator moved transactional_id=%s",
                    transactional_id,
                )
                return
            error = await manager.append_transit(
                transactional_id, coordinator_epoch, markers.complete
            )
            if not manager.is_current(transactional_id, coordinator_epoch):
                return
            if error is E.coordinator_not_available and not self._stopping:
                await asyncio.sleep(COMPLETE_APPEND_RETRY_BACKOFF_S)
                continue
            error = complete_append(state.metadata, markers.complete, error)
            if error is E.none:
                logger.debug(
                    "transaction completed transactional_id=%s producer_id=%d epoch=%d result=%s"
                    " partitions=%d",
                    transactional_id,
                    markers.producer_id,
                    markers.producer_epoch,
                    markers.result.name,
                    len(markers.topic_partitions),
                )
            else:
                logger.error(
                    "transaction end not written transactional_id=%s error=%s",
                    transactional_id,
                    error.name,
                )
            return
