"""Writing a transaction's COMMIT / ABORT marker on partitions this broker leads: what a
WriteTxnMarkers request asks of its leader (Kafka's ``handleWriteTxnMarkersRequest``), shared
by the handler and by this broker's own transaction coordinator.

One control batch (``build_end_txn_marker_batch``) is appended to every partition with acks=-1
and origin COORDINATOR (the producer and coordinator epochs are checked against the partition's
producer state), then the group coordinator decides the transactional offsets of the
``__consumer_offsets`` partitions that got it.

Kafka's coordinator sends its markers over the network even to its own broker. Here the
markers for partitions this broker leads are appended in place (``LocalTxnMarkerWriter``):
the same append, without a request to itself, so that the transaction's end is not delayed
by a round trip through its own socket server (a client's next AddPartitionsToTxn waits for
it, answered CONCURRENT_TRANSACTIONS meanwhile).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections.abc import Callable, Collection

from kio.schema.errors import ErrorCode

from storage_core.common import TopicPartition
from storage_core.coordinator.group.offsets_records import OFFSETS_TOPIC_NAME
from storage_core.coordinator.transaction.transaction_marker_entries import TxnMarkerEntry
from storage_core.coordinator.transaction.transaction_results import TransactionResult
from storage_core.log.producer_append_info import AppendOrigin
from storage_core.records.end_transaction_marker import (
    ControlRecordType,
    build_end_txn_marker_batch,
)
from storage_core.server.broker_services import BrokerServices
from storage_core.server.handlers.common import error_code_of

logger = logging.getLogger(__name__)

MarkerDone = Callable[[dict[TopicPartition, ErrorCode] | None, str | None], None]


async def write_txn_marker(
    services: BrokerServices,
    *,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    commit: bool,
    partitions: Collection[TopicPartition],
    requested_by: str,
) -> dict[TopicPartition, ErrorCode]:
    """Each partition's error for the marker (NONE once every in-sync replica has it)."""
    try:
        batch = build_end_txn_marker_batch(
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            coordinator_epoch=coordinator_epoch,
            control_type=ControlRecordType.COMMIT if commit else ControlRecordType.ABORT,
            timestamp=services.clock.milliseconds(),
        )
    except ValueError as exc:  # no producer id or epoch: Kafka's builder refuses it too
        logger.warning("WriteTxnMarkers refused client=%s error=%s", requested_by, exc)
        return dict.fromkeys(partitions, ErrorCode.unknown_server_error)
    results = await services.replica_manager.append_records(
        dict.fromkeys(partitions, batch),
        required_acks=-1,
        timeout_ms=services.config.get_int("request.timeout.ms"),
        origin=AppendOrigin.COORDINATOR,
    )
    errors = {tp: error_code_of(result.error) for tp, result in results.items()}
    _maybe_complete_offsets(services, producer_id, commit, errors)
    return errors


def _maybe_complete_offsets(
    services: BrokerServices,
    producer_id: int,
    commit: bool,
    errors: dict[TopicPartition, ErrorCode],
) -> None:
    """Tell the group coordinator which ``__consumer_offsets`` partitions got the marker;
    should that fail, those partitions answer UNKNOWN_SERVER_ERROR and the transaction
    coordinator retries them (Kafka's handler does the same)."""
    written = [
        tp
        for tp, error in errors.items()
        if tp.topic == OFFSETS_TOPIC_NAME and error == ErrorCode.none
    ]
    coordinator = services.group_coordinator
    if not written or coordinator is None:
        return
    try:
        coordinator.on_transaction_completed(producer_id, written, is_commit=commit)
    except Exception:
        logger.exception(
            "transactional offsets not decided producer_id=%d partitions=%s",
            producer_id,
            written,
        )
        errors.update(dict.fromkeys(written, ErrorCode.unknown_server_error))


class LocalTxnMarkerWriter:
    """Markers for partitions this broker leads, appended on its event loop (any thread may
    submit); ``on_done(errors, None)`` or ``on_done(None, reason)`` runs on the loop."""

    def __init__(self, services: BrokerServices, loop: asyncio.AbstractEventLoop) -> None:
        self._services = services
        self._loop = loop

    def submit(self, entry: TxnMarkerEntry, on_done: MarkerDone) -> None:
        future = asyncio.run_coroutine_threadsafe(
            write_txn_marker(
                self._services,
                producer_id=entry.producer_id,
                producer_epoch=entry.producer_epoch,
                coordinator_epoch=entry.coordinator_epoch,
                commit=entry.result is TransactionResult.COMMIT,
                partitions=sorted(entry.topic_partitions),
                requested_by=f"broker-{self._services.broker_id}-txn-coordinator",
            ),
            self._loop,
        )

        def done(finished: concurrent.futures.Future[dict[TopicPartition, ErrorCode]]) -> None:
            if finished.cancelled():
                on_done(None, "cancelled: the broker is stopping")
            elif (error := finished.exception()) is not None:
                on_done(None, repr(error))
            else:
                on_done(finished.result(), None)

        future.add_done_callback(done)
