"""What DescribeTransactions and ListTransactions answer about the transactional ids this
broker coordinates (Kafka's ``TransactionStateManager.listTransactionStates`` and
``TransactionCoordinator.handleDescribeTransactions``). Pure functions over the cached
metadata, time passed in.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from storage_core.coordinator.transaction.transaction_metadata import TransactionMetadata
from storage_core.coordinator.transaction.transaction_state import TransactionState

E = ErrorCode


@dataclass(frozen=True, slots=True, kw_only=True)
class TransactionDescription:
    """One id as DescribeTransactions v0 shows it; topics map to sorted partitions."""

    transactional_id: str
    error: ErrorCode = E.none
    state: str = ""
    timeout_ms: int = 0
    start_time_ms: int = -1
    producer_id: int = -1
    producer_epoch: int = -1
    topics: tuple[tuple[str, tuple[int, ...]], ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class TransactionListing:
    transactional_id: str
    producer_id: int
    state: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ListTransactionsResult:
    error: ErrorCode = E.none
    unknown_state_filters: tuple[str, ...] = ()
    transactions: tuple[TransactionListing, ...] = ()


def describe(transactional_id: str, metadata: TransactionMetadata | None) -> TransactionDescription:
    """An id's description; TRANSACTIONAL_ID_NOT_FOUND if unknown or expired."""
    if metadata is None or metadata.state is TransactionState.DEAD:
        return TransactionDescription(
            transactional_id=transactional_id, error=E.transactional_id_not_found
        )
    topics: dict[str, list[int]] = {}
    for tp in sorted(metadata.topic_partitions):
        topics.setdefault(tp.topic, []).append(tp.partition)
    return TransactionDescription(
        transactional_id=transactional_id,
        state=metadata.state.state_name,
        timeout_ms=metadata.txn_timeout_ms,
        start_time_ms=metadata.txn_start_timestamp_ms,
        producer_id=metadata.producer_id,
        producer_epoch=metadata.producer_epoch,
        topics=tuple((topic, tuple(partitions)) for topic, partitions in topics.items()),
    )


def list_transactions(
    metadatas: Iterable[TransactionMetadata],
    *,
    state_filters: Collection[str],
    producer_id_filters: Collection[int],
    duration_filter_ms: int,
    now_ms: int,
) -> ListTransactionsResult:
    """The ids matching every filter given, as Kafka's ``listTransactionStates``: an empty
    filter matches all; a duration of 0 or more keeps the ids whose transaction started
    more than that long ago. Unknown state names are returned and match nothing."""
    states = set()
    unknown = []
    for name in state_filters:
        state = TransactionState.from_name(name)
        if state is None:
            unknown.append(name)
        else:
            states.add(state)
    wanted_ids = set(producer_id_filters)
    listed = []
    for metadata in metadatas:
        if metadata.state is TransactionState.DEAD:
            continue  # being expired
        if wanted_ids and metadata.producer_id not in wanted_ids:
            continue
        if state_filters and metadata.state not in states:
            continue
        if (
            duration_filter_ms >= 0
            and now_ms - metadata.txn_start_timestamp_ms <= duration_filter_ms
        ):
            continue
        listed.append(
            TransactionListing(
                transactional_id=metadata.transactional_id,
                producer_id=metadata.producer_id,
                state=metadata.state.state_name,
            )
        )
    listed.sort(key=lambda listing: listing.transactional_id)
    return ListTransactionsResult(unknown_state_filters=tuple(unknown), transactions=tuple(listed))
