"""The restore drill's pure parts: the nightly sample, the scratch topics' names and the
guard on what it deletes, and the batch comparison table its suites check."""

from __future__ import annotations

import datetime

import pytest

from jobs.planning.restore_drill import (
    BatchHeader,
    DrillScratchTopicError,
    batch_rows,
    ensure_scratch_target,
    group_offset_rows,
    is_scratch_topic,
    nights_to_cover,
    range_problem,
    sample_partitions,
    scratch_topic_name,
    tail_gap_row,
)

NIGHT = datetime.date(2026, 11, 30)
PARTITIONS = [("orders", p) for p in range(5)] + [("payments", p) for p in range(2)]


def night(i: int) -> datetime.date:
    return NIGHT + datetime.timedelta(days=i)


def test_the_sample_is_the_same_for_a_night_and_rotates_over_every_partition() -> None:
    assert sample_partitions(PARTITIONS, 3, NIGHT) == sample_partitions(
        list(reversed(PARTITIONS)), 3, NIGHT
    )
    assert len(sample_partitions(PARTITIONS, 3, NIGHT)) == 3
    assert sample_partitions(PARTITIONS, 3, night(1)) != sample_partitions(PARTITIONS, 3, NIGHT)
    covered = set()
    for i in range(nights_to_cover(len(PARTITIONS), 3)):  # 3 nights for 7 partitions
        covered |= set(sample_partitions(PARTITIONS, 3, night(i)))
    assert covered == set(PARTITIONS)
    assert sample_partitions(PARTITIONS[:2], 3, NIGHT) == PARTITIONS[:2]
    with pytest.raises(ValueError, match="at least one partition"):
        sample_partitions(PARTITIONS, 0, NIGHT)


def test_scratch_names_are_marked_legal_and_recognised() -> None:
    assert scratch_topic_name("orders", NIGHT) == "restore-drill-20261130-orders"
    assert is_scratch_topic("restore-drill-20261130-orders")
    for other in ("orders", "__consumer_offsets", "restore-drill-orders", "restore-drill-2026-x"):
        assert not is_scratch_topic(other)
    long = scratch_topic_name("t" * 249, NIGHT)
    assert len(long) == 249 and is_scratch_topic(long)
    assert long != scratch_topic_name("t" * 248 + "u", NIGHT)


def test_deletion_is_refused_for_anything_but_the_drills_own_scratch_topic_id() -> None:
    ids = {"restore-drill-20261130-orders": "id-1"}
    ensure_scratch_target("restore-drill-20261130-orders", "id-1", scratch_ids=ids)
    with pytest.raises(DrillScratchTopicError, match="not a restore drill's scratch topic"):
        ensure_scratch_target("orders", "id-1", scratch_ids={"orders": "id-1"})
    with pytest.raises(DrillScratchTopicError, match="another incarnation"):
        ensure_scratch_target("restore-drill-20261130-orders", "id-2", scratch_ids=ids)
    with pytest.raises(DrillScratchTopicError, match="created it as None"):
        ensure_scratch_target("restore-drill-20261130-other", "id-3", scratch_ids=ids)


def batch(
    base: int, last: int, *, epoch: int = 0, crc: int | None = None, ok: bool = True
) -> BatchHeader:
    return BatchHeader(
        base_offset=base, last_offset=last, leader_epoch=epoch, crc=crc or base + 1000, crc_valid=ok
    )


SOURCE = [batch(0, 9), batch(10, 19, epoch=1), batch(20, 29, epoch=1)]


def rows(restored: list[BatchHeader], **kwargs: int) -> list[dict[str, object]]:
    options = {
        "restored_log_start_offset": 0,
        "restored_next_offset": 30,
        "source_log_start_offset": 0,
        **kwargs,
    }
    return batch_rows("orders", 0, source=SOURCE, restored=restored, **options)


def flags(table: list[dict[str, object]], column: str) -> list[object]:
    return [row[column] for row in table]


def test_identical_batches_compare_equal_and_contiguous() -> None:
    table = rows(list(SOURCE))
    assert flags(table, "base_offset") == [0, 10, 20]
    assert flags(table, "missing_in_restored") == [False] * 3
    assert flags(table, "missing_in_source") == [False] * 3
    assert flags(table, "gap_before") == [False] * 3
    assert flags(table, "restored_crc_invalid") == [False] * 3
    assert all(r["source_crc"] == r["restored_crc"] for r in table)
    assert all(r["source_leader_epoch"] == r["restored_leader_epoch"] for r in table)
    assert tail_gap_row("orders", 0, table, 30) is None


def test_each_difference_lands_in_its_own_column() -> None:
    table = rows([batch(0, 9), batch(10, 19, epoch=2, crc=7, ok=False), batch(25, 29, epoch=1)])
    middle = table[1]
    assert (middle["source_leader_epoch"], middle["restored_leader_epoch"]) == (1, 2)
    assert (middle["source_crc"], middle["restored_crc"]) == (1010, 7)
    assert middle["restored_crc_invalid"] is True
    assert flags(table, "base_offset") == [0, 10, 20, 25]
    assert flags(table, "missing_in_restored") == [False, False, True, False]
    assert flags(table, "missing_in_source") == [False, False, False, True]
    assert flags(table, "gap_before") == [False, False, None, True]


def test_source_batches_up_to_its_tiered_end_must_be_restored() -> None:
    table = rows(
        [batch(0, 9), batch(10, 19, epoch=1)], restored_next_offset=20, source_tiered_next_offset=30
    )
    assert flags(table, "missing_in_restored") == [False, False, True]
    assert (
        range_problem(
            source_log_start_offset=0,
            source_highest_tiered_offset=29,
            restored_log_start_offset=0,
            restored_next_offset=20,
        )
        == "restored next offset 20 <= source highest tiered offset 29"
    )


def test_batches_below_the_sources_log_start_are_not_compared_with_it() -> None:
    table = rows(list(SOURCE[1:]), restored_log_start_offset=10, source_log_start_offset=20)
    assert flags(table, "missing_in_source") == [None, False]


def test_a_restored_partition_ending_early_leaves_a_gap_at_its_next_offset() -> None:
    table = rows([batch(0, 9)], restored_next_offset=30)
    gap = tail_gap_row("orders", 0, table, 30)
    assert gap is not None and (gap["base_offset"], gap["gap_before"]) == (
        30,
        True,
    )  # at the next offset


def test_range_problem_and_group_offsets() -> None:
    covered = {
        "source_log_start_offset": 5,
        "source_highest_tiered_offset": 29,
        "restored_log_start_offset": 0,
        "restored_next_offset": 40,
    }
    assert range_problem(**covered) is None
    assert "restored log start 6 > source log start 5" in str(
        range_problem(**{**covered, "restored_log_start_offset": 6})
    )
    assert range_problem(**{**covered, "source_highest_tiered_offset": -1}) is None
    table = group_offset_rows(
        {"a": {("s", 0): 0, ("s", 1): 3}, "b": {("s", 0): 41}}, {("s", 0): (0, 40)}
    )
    assert [(r["group_id"], r["partition"], r["out_of_range"]) for r in table] == [
        ("a", 0, False),
        ("a", 1, True),
        ("b", 0, True),
    ]
