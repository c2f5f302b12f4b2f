"""How ``topics describe`` and the status job write a partition's LSO and open transactions
(``storage_core.tools.open_transactions``), from values as DescribeProducers returns them."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from storage_core.client.admin_producers import PartitionProducers, ProducerState
from storage_core.common import TopicPartition
from storage_core.tools.open_transactions import (
    PartitionTransactions,
    duration_text,
    format_transactions,
    status_fields,
)

TP = TopicPartition("orders", 3)
NOW_MS = 1_764_423_605_000  # 2025-11-29T13:40:05Z


def producer(pid: int, start: int, *, last_timestamp_ms: int = NOW_MS - 125_000) -> ProducerState:
    return ProducerState(
        producer_id=pid,
        producer_epoch=2,
        last_sequence=9,
        last_timestamp_ms=last_timestamp_ms,
        coordinator_epoch=5,
        current_txn_start_offset=start,
    )


def test_a_quiet_partition_prints_nothing_more() -> None:
    quiet = PartitionTransactions(
        partition=TP, high_watermark=7, last_stable_offset=7, open_transactions=()
    )
    assert quiet.is_quiet
    assert format_transactions(quiet, NOW_MS) == []


def test_open_transactions_oldest_first_with_their_age() -> None:
    answer = PartitionProducers(
        partition=TP,
        producers=(producer(7, 40), producer(4, -1), producer(5, 12)),
    )
    assert [p.producer_id for p in answer.open_transactions] == [5, 7]
    t = PartitionTransactions(
        partition=TP,
        high_watermark=50,
        last_stable_offset=12,
        open_transactions=answer.open_transactions,
    )
    assert format_transactions(t, NOW_MS) == [
        "\t\tHighWatermark: 50\tLastStableOffset: 12\tOpenTransactions: 2",
        "\t\tOpenTransaction: ProducerId: 5\tProducerEpoch: 2\tStartOffset: 12"
        "\tLastTimestamp: 2025-11-29T13:38:00Z\tAge: 2m 5s",
        "\t\tOpenTransaction: ProducerId: 7\tProducerEpoch: 2\tStartOffset: 40"
        "\tLastTimestamp: 2025-11-29T13:38:00Z\tAge: 2m 5s",
    ]
    fields = status_fields(t, NOW_MS)
    assert fields["last_stable_offset"] == 12
    assert fields["open_transactions"] == 2
    assert fields["oldest_open_transaction_start_offset"] == 12
    assert fields["oldest_open_transaction_age_ms"] == 125_000
    assert [p["producer_id"] for p in fields["open_transaction_producers"]] == [5, 7]


def test_an_lso_below_the_hw_without_open_transactions_shows_alone() -> None:
    # the marker is written but not yet replicated: the LSO waits for the HW
    t = PartitionTransactions(
        partition=TP, high_watermark=9, last_stable_offset=8, open_transactions=()
    )
    assert format_transactions(t, NOW_MS) == [
        "\t\tHighWatermark: 9\tLastStableOffset: 8\tOpenTransactions: 0"
    ]
    assert status_fields(t, NOW_MS)["oldest_open_transaction_age_ms"] is None


def test_a_producer_without_timestamps_has_no_age_and_a_clock_ahead_no_negative_one() -> None:
    t = PartitionTransactions(
        partition=TP,
        high_watermark=3,
        last_stable_offset=1,
        open_transactions=(
            producer(1, 1, last_timestamp_ms=-1),
            producer(2, 2, last_timestamp_ms=NOW_MS + 5_000),
        ),
    )
    lines = format_transactions(t, NOW_MS)
    assert lines[1].endswith("\tLastTimestamp: unknown\tAge: unknown")
    assert lines[2].endswith("\tAge: 0s")
    assert status_fields(t, NOW_MS)["oldest_open_transaction_age_ms"] is None


@pytest.mark.parametrize(
    ("ms", "text"),
    [
        (0, "0s"),
        (59_999, "59s"),
        (60_000, "1m 0s"),
        (3_599_000, "59m 59s"),
        (3_600_000, "1h 0m"),
        (86_399_000, "23h 59m"),
        (90_000_000, "1d 1h"),
    ],
)
def test_durations(ms: int, text: str) -> None:
    assert duration_text(ms) == text


def test_an_lso_above_the_hw_is_refused() -> None:
    with pytest.raises(ValueError, match="LSO 5 above the HW 4"):
        PartitionTransactions(
            partition=TP, high_watermark=4, last_stable_offset=5, open_transactions=()
        )


def test_a_partition_error_raises_naming_the_partition() -> None:
    answer = PartitionProducers(partition=TP, error=ErrorCode.not_leader_or_follower)
    with pytest.raises(Exception, match="partition orders-3: NOT_LEADER_OR_FOLLOWER"):
        answer.raise_for_error()


def test_producers_unknown_still_show_the_lso() -> None:
    # DescribeProducers refused (no Read on the topic): the LSO from ListOffsets alone
    t = PartitionTransactions(
        partition=TP, high_watermark=9, last_stable_offset=4, open_transactions=None
    )
    assert format_transactions(t, NOW_MS) == [
        "\t\tHighWatermark: 9\tLastStableOffset: 4\tOpenTransactions: unknown"
    ]
    fields = status_fields(t, NOW_MS)
    assert (fields["last_stable_offset"], fields["open_transactions"]) == (4, None)
    assert fields["open_transaction_producers"] == []
    quiet = PartitionTransactions(
        partition=TP, high_watermark=9, last_stable_offset=9, open_transactions=None
    )
    assert format_transactions(quiet, NOW_MS) == []
