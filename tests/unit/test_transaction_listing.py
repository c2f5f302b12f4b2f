"""What DescribeTransactions and ListTransactions show (Kafka's listTransactionStates and
handleDescribeTransactions rules), over plain metadata."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from storage_core.common import TopicPartition
from storage_core.coordinator.transaction.transaction_listing import describe, list_transactions
from storage_core.coordinator.transaction.transaction_metadata import TransactionMetadata
from storage_core.coordinator.transaction.transaction_state import TransactionState

S = TransactionState
NOW = 1_000_000


def txn(
    txn_id: str, producer_id: int, state: TransactionState, started: int = -1
) -> TransactionMetadata:
    return TransactionMetadata(
        transactional_id=txn_id,
        producer_id=producer_id,
        producer_epoch=3,
        txn_timeout_ms=60_000,
        state=state,
        topic_partitions=[TopicPartition("b", 1), TopicPartition("a", 2), TopicPartition("a", 0)]
        if state is S.ONGOING
        else [],
        txn_start_timestamp_ms=started,
        txn_last_update_timestamp_ms=started,
    )


CACHE = [
    txn("old", 1, S.ONGOING, started=NOW - 50_000),
    txn("young", 2, S.ONGOING, started=NOW - 1_000),
    txn("idle", 3, S.EMPTY),
    txn("done", 4, S.COMPLETE_COMMIT, started=NOW - 90_000),
    txn("expiring", 5, S.DEAD),
]


def listed(**filters: object) -> list[str]:
    args = {"state_filters": (), "producer_id_filters": (), "duration_filter_ms": -1, **filters}
    result = list_transactions(CACHE, now_ms=NOW, **args)  # type: ignore[arg-type]
    return [t.transactional_id for t in result.transactions]


def test_every_id_but_the_dead_is_listed_without_filters() -> None:
    assert listed() == ["done", "idle", "old", "young"]


def test_filters_combine_and_unknown_states_are_returned() -> None:
    assert listed(state_filters=("Ongoing",)) == ["old", "young"]
    assert listed(state_filters=("Ongoing",), producer_id_filters=(2, 3)) == ["young"]
    result = list_transactions(
        CACHE,
        state_filters=("Sleeping",),
        producer_id_filters=(),
        duration_filter_ms=-1,
        now_ms=NOW,
    )
    assert (result.unknown_state_filters, result.transactions) == (("Sleeping",), ())


def test_the_duration_filter_keeps_transactions_running_longer_than_it() -> None:
    # Kafka compares now - txnStartTimestamp whatever the state (an Empty id's start is -1)
    assert listed(duration_filter_ms=10_000) == ["done", "idle", "old"]
    assert listed(duration_filter_ms=10_000, state_filters=("Ongoing",)) == ["old"]
    assert listed(duration_filter_ms=50_000, state_filters=("Ongoing",)) == []


def test_a_description_groups_partitions_by_topic_and_hides_the_dead() -> None:
    described = describe("old", CACHE[0])
    assert (described.state, described.producer_id, described.producer_epoch) == ("Ongoing", 1, 3)
    assert described.topics == (("a", (0, 2)), ("b", (1,)))
    assert described.start_time_ms == NOW - 50_000
    assert describe("expiring", CACHE[4]).error == ErrorCode.transactional_id_not_found
    assert describe("never", None).error == ErrorCode.transactional_id_not_found
    assert describe("idle", CACHE[2]).start_time_ms == -1
