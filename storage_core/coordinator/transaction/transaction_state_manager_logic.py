"""The pure decisions of Kafka's ``TransactionStateManager``: its settings, what an append
to ``__transaction_state`` answers, which transactions time out, which transactional ids
expire, and what a partition's load leaves to complete. Functions over the caller's
``TransactionMetadata``, under the caller's locks; time comes in as ``now_ms``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from storage_core.coordinator.transaction.transaction_metadata import (
    TransactionMetadata,
    TxnTransitMetadata,
)
from storage_core.coordinator.transaction.transaction_results import (
    TransactionResult,
    TxnMarkers,
    markers_for,
)
from storage_core.coordinator.transaction.transaction_state import TransactionState

_S = TransactionState
E = ErrorCode


@dataclass(frozen=True, slots=True, kw_only=True)
class TransactionConfig:
    """The coordinator's settings (Kafka's ``TransactionConfig``, Kafka's defaults)."""

    transactional_id_expiration_ms: int = 604_800_000  # transactional.id.expiration.ms
    transaction_max_timeout_ms: int = 900_000  # transaction.max.timeout.ms
    abort_timed_out_transactions_interval_ms: int = 10_000
    remove_expired_transactional_ids_interval_ms: int = 3_600_000

    def __post_init__(self) -> None:
        for name in ("transactional_id_expiration_ms", "transaction_max_timeout_ms"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")

    def validate_transaction_timeout_ms(self, txn_timeout_ms: int) -> bool:
        """A client's transaction timeout must be in (0, transaction.max.timeout.ms]."""
        return 0 < txn_timeout_ms <= self.transaction_max_timeout_ms


@dataclass(frozen=True, slots=True, kw_only=True)
class TransactionalIdAndProducerIdEpoch:
    transactional_id: str
    producer_id: int
    producer_epoch: int


# ====================================================================== appends
def coordinator_error_for_append(error: ErrorCode) -> ErrorCode:
    """The error a client gets when the append to ``__transaction_state`` failed with ``error``
    (TransactionStateManager.appendTransactionToLog)."""
    if error in (
        E.unknown_topic_or_partition,
        E.not_enough_replicas,
        E.not_enough_replicas_after_append,
        E.request_timed_out,
    ):
        return E.coordinator_not_available
    if error in (E.not_leader_or_follower, E.kafka_storage_error):
        return E.not_coordinator
    if error in (E.message_too_large, E.record_list_too_large):
        return E.unknown_server_error
    return error


def complete_append(
    metadata: TransactionMetadata,
    transit: TxnTransitMetadata,
    append_error: ErrorCode,
    *,
    retry_on_error: bool = False,
) -> ErrorCode:
    """After the append of ``transit``: complete the transition, or (unless the caller will
    retry the same append) clear the pending state. Returns the error to answer."""
    error = coordinator_error_for_append(append_error)
    if error is E.none:
        metadata.complete_transition_to(transit)
    elif not retry_on_error:
        metadata.pending_state = None
    return error


def timed_out_transactions(
    metadatas: Iterable[TransactionMetadata], now_ms: int
) -> list[TransactionalIdAndProducerIdEpoch]:
    """Ongoing transactions open longer than their timeout at ``now_ms`` (exclusive), with
    no transition pending (``timedOutTransactions``)."""
    return [
        TransactionalIdAndProducerIdEpoch(
            transactional_id=m.transactional_id,
            producer_id=m.producer_id,
            producer_epoch=m.producer_epoch,
        )
        for m in metadatas
        if not m.pending_transition_in_progress
        and m.state is _S.ONGOING
        and m.txn_start_timestamp_ms + m.txn_timeout_ms < now_ms
    ]


def expired_transactional_ids(
    metadatas: Iterable[TransactionMetadata], now_ms: int, config: TransactionConfig
) -> list[tuple[TransactionMetadata, TxnTransitMetadata]]:
    """Ids idle in Empty, CompleteCommit or CompleteAbort for ``transactional.id.expiration.ms``
    (last update at or before ``now_ms - expiration``), each moved to a pending Dead: the
    caller writes their tombstones (``key_to_bytes`` with a null value)."""
    expired = []
    for metadata in metadatas:
        if (
            metadata.pending_state is None
            and metadata.state.is_expiration_allowed
            and metadata.txn_last_update_timestamp_ms
            <= now_ms - config.transactional_id_expiration_ms
        ):
            expired.append((metadata, metadata.prepare_dead()))
    return expired


def complete_expiration(
    metadata: TransactionMetadata, transit: TxnTransitMetadata, append_error: ErrorCode
) -> bool:
    """After a tombstone's append: True if the id is to be removed from the cache; else its
    pending Dead is cleared and it stays (Kafka's ``removeFromCacheCallback``)."""
    if (
        append_error is E.none
        and metadata.pending_state is _S.DEAD
        and metadata.producer_epoch == transit.producer_epoch
    ):
        return True
    metadata.pending_state = None
    return False


def transactions_pending_completion(
    metadatas: Iterable[TransactionMetadata], now_ms: int
) -> list[TxnMarkers]:
    """After loading a partition: the markers of every PrepareCommit / PrepareAbort, whose
    coordinator failed before writing them all (``loadTransactionsForTxnTopicPartition``)."""
    pending = []
    for metadata in metadatas:
        if metadata.state is _S.PREPARE_COMMIT:
            pending.append(markers_for(metadata, TransactionResult.COMMIT, now_ms))
        elif metadata.state is _S.PREPARE_ABORT:
            pending.append(markers_for(metadata, TransactionResult.ABORT, now_ms))
    return pending
