"""The results the transaction coordinator's decisions return, and the checks of a request
that come before them (Kafka's ``InitProducerIdResult``, ``TxnMarkerEntry``, KafkaApis'
version rules). Immutable values: safe from any thread.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from storage_core.common import TopicPartition
from storage_core.coordinator.transaction.transaction_metadata import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    TransactionMetadata,
    TxnTransitMetadata,
)

E = ErrorCode

# Request versions from which the client understands PRODUCER_FENCED; older ones get
# INVALID_PRODUCER_EPOCH instead (KafkaApis). Keyed by API key.
INIT_PRODUCER_ID_KEY = 22
ADD_PARTITIONS_TO_TXN_KEY = 24
ADD_OFFSETS_TO_TXN_KEY = 25
END_TXN_KEY = 26
_FIRST_VERSION_WITH_PRODUCER_FENCED = {
    INIT_PRODUCER_ID_KEY: 4,
    ADD_PARTITIONS_TO_TXN_KEY: 2,
    ADD_OFFSETS_TO_TXN_KEY: 2,
    END_TXN_KEY: 2,
}


class TransactionResult(enum.IntEnum):
    """How a transaction ends (Kafka's ``TransactionResult``; the values are those of the
    marker's ``ControlRecordType``)."""

    ABORT = 0
    COMMIT = 1


@dataclass(frozen=True, slots=True)
class ProducerIdAndEpoch:
    producer_id: int
    epoch: int


@dataclass(frozen=True, slots=True, kw_only=True)
class TxnMarkers:
    """Markers to write after a PrepareCommit / PrepareAbort (one WriteTxnMarkers entry per
    leader), and the transit to append once all are written (its pending state is set)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    result: TransactionResult
    topic_partitions: frozenset[TopicPartition]
    complete: TxnTransitMetadata


@dataclass(frozen=True, slots=True, kw_only=True)
class EndTxnResult:
    """EndTxn's decision. ``append`` is the PrepareCommit / PrepareAbort to write; without it,
    ``error`` (with ``producer_id`` / ``producer_epoch``) is the answer. ``is_epoch_fence``:
    the abort fences a producer (InitProducerId or a timeout), not a client's EndTxn."""

    error: ErrorCode
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    result: TransactionResult
    append: TxnTransitMetadata | None = None
    is_epoch_fence: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class EndTxnCompletion:
    """What to answer after the PrepareX append, and the markers to send (if any)."""

    error: ErrorCode
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    markers: TxnMarkers | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class InitProducerIdResult:
    """InitProducerId's decision. ``created``: a new transactional id's metadata to put in the
    cache before the append (if another request put one first, decide again with that one:
    this one's transition is already prepared). ``append``: the Empty
    transit to write (answer ``producer_id`` / ``producer_epoch`` once written); or
    ``end_txn``: the abort of the Ongoing transaction to write first (answered
    CONCURRENT_TRANSACTIONS: the client retries and gets the next epoch). With neither,
    answer ``error`` (with ``producer_id`` / ``producer_epoch``) at once."""

    error: ErrorCode
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    created: TransactionMetadata | None = None
    append: TxnTransitMetadata | None = None
    end_txn: EndTxnResult | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class AddPartitionsResult:
    """AddPartitionsToTxn / AddOffsetsToTxn: ``append`` the Ongoing transit, or answer ``error``."""

    error: ErrorCode
    append: TxnTransitMetadata | None = None


# ====================================================================== request checks
def producer_fenced_for_version(api_key: int, version: int, error: ErrorCode) -> ErrorCode:
    """PRODUCER_FENCED as the request's version understands it (KafkaApis)."""
    first = _FIRST_VERSION_WITH_PRODUCER_FENCED.get(api_key)
    if error is E.producer_fenced and first is not None and version < first:
        return E.invalid_producer_epoch
    return error


def expected_producer_id_and_epoch(
    producer_id: int, producer_epoch: int
) -> ProducerIdAndEpoch | ErrorCode | None:
    """InitProducerId v3+'s producer id and epoch: both -1 (none), both set, or INVALID_REQUEST."""
    if producer_id == NO_PRODUCER_ID and producer_epoch == NO_PRODUCER_EPOCH:
        return None
    if producer_id == NO_PRODUCER_ID or producer_epoch == NO_PRODUCER_EPOCH:
        return E.invalid_request
    return ProducerIdAndEpoch(producer_id, producer_epoch)


def markers_for(
    metadata: TransactionMetadata, result: TransactionResult, now_ms: int
) -> TxnMarkers:
    """The markers of the PrepareCommit / PrepareAbort ``metadata`` is in, with the
    CompleteCommit / CompleteAbort to append after them (its pending state is set)."""
    partitions = frozenset(metadata.topic_partitions)
    return TxnMarkers(
        transactional_id=metadata.transactional_id,
        producer_id=metadata.producer_id,
        producer_epoch=metadata.producer_epoch,
        result=result,
        topic_partitions=partitions,
        complete=metadata.prepare_complete(now_ms),
    )
