"""The quality suites on pandas: green on a healthy tier, and for every expectation a
negative case that injects its defect into otherwise good tables and sees the suite fail
with a reason naming the expectation and the offending rows. One GE context per module."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from expectations import (
    DESCRIPTIONS,
    PARTITION_OFFSETS_SUITE,
    QUALITY_EXPECTATIONS,
    REMOTE_SEGMENTS_SUITE,
)
from expectations.definitions import STARTED_STATE_MAX_MS_DEFAULT
from expectations.runner import QualityContext, SuiteOutcome, pandas_frame
from jobs.tables.inputs import CopyOffsets
from jobs.tables.partition_offsets import derive_partition_checks, partition_base_rows
from jobs.tables.remote_segments import derive_segment_checks, with_copy_offsets
from jobs.tables.schemas import Row
from storage_core.tiered.metadata.states import RemoteLogSegmentState as S
from storage_core.tiered.metadata.states import RemotePartitionDeleteState as D
from tests.unit.expectations.world import (
    DAY_MS,
    GONE,
    NOW_MS,
    ORDERS,
    World,
    healthy_world,
    row_of,
    segment_id,
)


@pytest.fixture(scope="module")
def quality(tmp_path_factory: pytest.TempPathFactory) -> Iterator[QualityContext]:
    # Data Docs are rebuilt from every stored result on each run: built once, by its own test
    yield QualityContext(tmp_path_factory.mktemp("quality"), engine="pandas", data_docs=False)


def validate(quality: QualityContext, world: World) -> dict[str, SuiteOutcome]:
    segments, partitions = world.tables()
    return validate_rows(quality, segments, partitions)


def validate_rows(
    quality: QualityContext, segments: list[Row], partitions: list[Row]
) -> dict[str, SuiteOutcome]:
    return {
        REMOTE_SEGMENTS_SUITE: quality.validate(
            REMOTE_SEGMENTS_SUITE, pandas_frame(REMOTE_SEGMENTS_SUITE, segments)
        ),
        PARTITION_OFFSETS_SUITE: quality.validate(
            PARTITION_OFFSETS_SUITE, pandas_frame(PARTITION_OFFSETS_SUITE, partitions)
        ),
    }


def assert_only_failure(
    outcomes: dict[str, SuiteOutcome], suite: str, expectation: str, *needles: str
) -> str:
    """``expectation`` is the one failure of ``suite`` (the other suite passes); its reason
    names it, its rule and every needle (the offending rows)."""
    for name, outcome in outcomes.items():
        if name != suite:
            assert outcome.success, [f.reason for f in outcome.failed]
    outcome = outcomes[suite]
    assert not outcome.success
    assert outcome.failed_expectations() == [expectation], [f.reason for f in outcome.failed]
    reason = outcome.failed[0].reason
    assert reason.startswith(f"{expectation}: {DESCRIPTIONS[expectation]}")
    for needle in needles:
        assert needle in reason, reason
    return reason


def test_the_healthy_tier_passes_both_suites(quality: QualityContext) -> None:
    outcomes = validate(quality, healthy_world())
    for outcome in outcomes.values():
        assert outcome.success, [f.reason for f in outcome.failed]
        assert outcome.evaluated >= 9


def test_a_context_with_data_docs_writes_them(tmp_path: Path) -> None:
    with_docs = QualityContext(tmp_path, engine="pandas")
    outcomes = validate(with_docs, healthy_world())
    assert all(o.success for o in outcomes.values())
    index = with_docs.data_docs_index
    assert index == tmp_path / "gx/uncommitted/data_docs/local_site/index.html"
    assert index.is_file()
    assert "remote_segments" in index.read_text()


def test_a_run_stores_one_result_per_suite_listing_rows_only_where_it_failed(
    tmp_path: Path,
) -> None:
    """A suite's first pass counts unexpected rows; only a failure runs the detailed pass,
    whose result (the rows' ids listed) replaces the first under the same run id."""
    quality = QualityContext(tmp_path, engine="pandas", data_docs=False)
    world = healthy_world()
    world.drop_segment(2)  # remote_segments fails, partition_offsets passes
    segments, partitions = world.tables()
    for suite, rows in ((REMOTE_SEGMENTS_SUITE, segments), (PARTITION_OFFSETS_SUITE, partitions)):
        quality.validate(suite, pandas_frame(suite, rows), run_name="run-1")
    store = quality.context.validation_results_store
    keys = store.list_keys()
    by_suite = {key.expectation_suite_identifier.name: key for key in keys}
    assert len(keys) == 2 and set(by_suite) == {REMOTE_SEGMENTS_SUITE, PARTITION_OFFSETS_SUITE}
    failed = store.get(by_suite[REMOTE_SEGMENTS_SUITE])
    assert not failed.success
    gap = next(r for r in failed.results if not r.success)
    assert gap.result["unexpected_index_list"], gap.result
    passed = store.get(by_suite[PARTITION_OFFSETS_SUITE])
    assert passed.success
    assert not any("unexpected_index_list" in r.result for r in passed.results)


def test_every_expectation_has_a_rule() -> None:
    assert len(QUALITY_EXPECTATIONS) == 25
    assert all(DESCRIPTIONS[name] for name in QUALITY_EXPECTATIONS)


# ---------------------------------------------------------------------------- remote_segments
def _rederived(world: World, change: Callable[[list[Row]], None]) -> tuple[list[Row], list[Row]]:
    """Tables whose segment facts were changed by ``change``, check columns derived again."""
    segments, _ = world.tables()
    change(segments)
    by_key = {p.key: p for p in world.partitions}
    segments = derive_segment_checks(segments, by_key, now_ms=NOW_MS)
    partitions = derive_partition_checks(
        partition_base_rows(world.partitions, world.records()), segments, now_ms=NOW_MS
    )
    return segments, partitions


def test_start_offset_above_end_offset_fails(quality: QualityContext) -> None:
    def change(rows: list[Row]) -> None:
        row = row_of(rows, 5)  # the STARTED one: no contiguity or offsets effect
        row["start_offset"], row["end_offset"] = 44, 40
        row["segment_leader_epochs"] = [{"epoch": 1, "start_offset": 44}]

    outcomes = validate_rows(quality, *_rederived(healthy_world(), change))
    # the epochs are now outside [start, end] too, so that rule fails as well
    failed = outcomes[REMOTE_SEGMENTS_SUITE].failed_expectations()
    assert failed[0] == "expect_segment_start_offset_at_most_end_offset"
    reason = outcomes[REMOTE_SEGMENTS_SUITE].failed[0].reason
    assert (
        str(segment_id(5)) in reason and "start_offset=44" in reason and "end_offset=40" in reason
    )


def test_a_gap_in_the_lineage_fails(quality: QualityContext) -> None:
    world = healthy_world()
    world.drop_segment(2)  # 10..19 never copied
    assert_only_failure(
        validate(quality, world),
        REMOTE_SEGMENTS_SUITE,
        "expect_no_gap_before_finished_segment",
        str(segment_id(3)),
        "start_offset=20",
        "previous_end_offset=9",
    )


def test_an_overlap_in_the_lineage_fails(quality: QualityContext) -> None:
    world = healthy_world()
    world.segment(8, 15, 24)
    assert_only_failure(
        validate(quality, world),
        REMOTE_SEGMENTS_SUITE,
        "expect_no_overlap_with_previous_finished_segment",
        str(segment_id(8)),
        "previous_end_offset=19",
    )


def test_segment_epochs_not_increasing_fail(quality: QualityContext) -> None:
    def change(rows: list[Row]) -> None:
        row_of(rows, 5)["segment_leader_epochs"] = [
            {"epoch": 1, "start_offset": 40},
            {"epoch": 1, "start_offset": 42},
        ]

    assert_only_failure(
        validate_rows(quality, *_rederived(healthy_world(), change)),
        REMOTE_SEGMENTS_SUITE,
        "expect_segment_epochs_strictly_increasing",
        str(segment_id(5)),
    )


def test_segment_epochs_against_the_chain_fail(quality: QualityContext) -> None:
    world = healthy_world()
    world.drop_segment(4)
    world.segment(4, 30, 39, epochs={0: 30})  # the chain says epoch 1 starts at 30
    assert_only_failure(
        validate(quality, world),
        REMOTE_SEGMENTS_SUITE,
        "expect_segment_epochs_agree_with_leader_epoch_chain",
        str(segment_id(4)),
        "start_offset=30",
    )


def test_a_transition_outside_the_state_machine_fails(quality: QualityContext) -> None:
    world = healthy_world()
    world.update(3, S.COPY_SEGMENT_STARTED, at_ms=NOW_MS - 10)
    reason = assert_only_failure(
        validate(quality, world),
        REMOTE_SEGMENTS_SUITE,
        "expect_only_valid_segment_state_transitions",
        str(segment_id(3)),
    )
    assert "COPY_SEGMENT_FINISHED -> COPY_SEGMENT_STARTED" in reason


def test_an_update_of_an_unknown_segment_fails(quality: QualityContext) -> None:
    world = healthy_world()
    world.update(9, S.DELETE_SEGMENT_FINISHED, at_ms=NOW_MS - 10)
    assert_only_failure(
        validate(quality, world),
        REMOTE_SEGMENTS_SUITE,
        "expect_only_valid_segment_state_transitions",
        "(none) -> DELETE_SEGMENT_FINISHED",
    )


def test_a_copy_stuck_in_started_fails(quality: QualityContext) -> None:
    world = healthy_world()
    world.drop_segment(5)
    stale = NOW_MS - STARTED_STATE_MAX_MS_DEFAULT - 1
    world.segment(5, 40, 44, epochs={1: 40}, states=(S.COPY_SEGMENT_STARTED,), at_ms=stale)
    assert_only_failure(
        validate(quality, world),
        REMOTE_SEGMENTS_SUITE,
        "expect_no_segment_stuck_in_started_state",
        str(segment_id(5)),
        f"started_age_ms={STARTED_STATE_MAX_MS_DEFAULT + 1}",
    )


def test_a_delete_stuck_in_started_fails(quality: QualityContext) -> None:
    world = healthy_world()
    world.update(5, S.DELETE_SEGMENT_STARTED, at_ms=NOW_MS - 2 * STARTED_STATE_MAX_MS_DEFAULT)
    assert_only_failure(
        validate(quality, world),
        REMOTE_SEGMENTS_SUITE,
        "expect_no_segment_stuck_in_started_state",
        "current_state=DELETE_SEGMENT_STARTED",
    )


def test_a_missing_object_fails(quality: QualityContext) -> None:
    world = healthy_world()
    world.objects = [o for o in world.objects if not o.key.endswith(f"{segment_id(2)}.index")]
    assert_only_failure(
        validate(quality, world),
        REMOTE_SEGMENTS_SUITE,
        "expect_finished_segment_objects_complete",
        str(segment_id(2)),
        "missing .index",
    )


def test_a_log_object_of_the_wrong_size_fails(quality: QualityContext) -> None:
    world = healthy_world()
    world.objects = [o for o in world.objects if str(segment_id(3)) not in o.key]
    world.add_objects(3, 20, log_size=999)
    assert_only_failure(
        validate(quality, world),
        REMOTE_SEGMENTS_SUITE,
        "expect_finished_segment_objects_complete",
        ".log is 999 bytes, metadata says 1000",
    )


def test_objects_without_metadata_fail(quality: QualityContext) -> None:
    world = healthy_world()
    world.add_objects(42, 100)  # no event ever named segment 42
    world.add_objects(6, 0)  # segment 6 is DELETE_SEGMENT_FINISHED
    reason = assert_only_failure(
        validate(quality, world),
        REMOTE_SEGMENTS_SUITE,
        "expect_no_objects_without_live_metadata",
        str(segment_id(42)),
        str(segment_id(6)),
    )
    assert "2 of 8 rows unexpected" in reason


def test_a_segment_older_than_twice_retention_fails(quality: QualityContext) -> None:
    world = healthy_world()
    world.drop_segment(1)
    world.segment(1, 0, 9, max_timestamp_ms=NOW_MS - 15 * DAY_MS)
    assert_only_failure(
        validate(quality, world),
        REMOTE_SEGMENTS_SUITE,
        "expect_no_segment_older_than_twice_retention_ms",
        str(segment_id(1)),
    )


COPY_LSO_EXPECTATION = "expect_copied_segment_end_below_last_stable_offset"


def test_a_copy_that_ended_at_the_lso_of_its_time_fails(quality: QualityContext) -> None:
    """Segments 3 (20..29) and 4 (30..39) copied by one run: planned with an LSO of 40 both
    end below it; with an LSO of 39 (an open transaction at 39) segment 4 ends at it."""
    segments, partitions = healthy_world().tables()

    def copied(lso: int) -> dict[str, CopyOffsets]:
        offsets = CopyOffsets(high_watermark_at_copy=45, last_stable_offset_at_copy=lso)
        return {str(segment_id(3)): offsets, str(segment_id(4)): offsets}

    below = validate_rows(quality, with_copy_offsets(segments, copied(40)), partitions)
    assert all(o.success for o in below.values()), [f.reason for f in below.values()]

    at_lso = validate_rows(quality, with_copy_offsets(segments, copied(39)), partitions)
    reason = assert_only_failure(
        at_lso,
        REMOTE_SEGMENTS_SUITE,
        COPY_LSO_EXPECTATION,
        str(segment_id(4)),
        "end_offset=39",
        "last_stable_offset_at_copy=39",
    )
    assert "1 of 7 rows unexpected" in reason, reason
    assert str(segment_id(3)) not in reason


# ---------------------------------------------------------------------------- partition_offsets
def test_log_end_offset_below_lso_fails(quality: QualityContext) -> None:
    world = healthy_world()
    world.set_partition(log_end_offset=45)
    assert_only_failure(
        validate(quality, world),
        PARTITION_OFFSETS_SUITE,
        "expect_log_end_offset_at_least_last_stable_offset",
        "topic=orders",
        "log_end_offset=45",
    )


def test_lso_below_local_log_start_fails(quality: QualityContext) -> None:
    world = healthy_world()
    world.set_partition(high_watermark=39, last_stable_offset=39, local_log_start_offset=40)
    assert_only_failure(
        validate(quality, world),
        PARTITION_OFFSETS_SUITE,
        "expect_last_stable_offset_at_least_local_log_start",
        "last_stable_offset=39",
        "local_log_start_offset=40",
    )


def test_lso_below_remote_log_end_fails(quality: QualityContext) -> None:
    world = healthy_world()
    world.set_partition(high_watermark=35, last_stable_offset=35)
    assert_only_failure(
        validate(quality, world),
        PARTITION_OFFSETS_SUITE,
        "expect_last_stable_offset_at_least_remote_log_end",
        "remote_log_end_offset=39",
    )


def test_remote_log_end_below_remote_log_start_fails(quality: QualityContext) -> None:
    segments, partitions = healthy_world().tables()
    orders = next(p for p in partitions if p["topic"] == "orders")
    orders["remote_log_start_offset"] = 40  # table-level injection: Rx above Ry = 39
    assert_only_failure(
        validate_rows(quality, segments, partitions),
        PARTITION_OFFSETS_SUITE,
        "expect_remote_log_end_at_least_remote_log_start",
        "remote_log_start_offset=40",
    )


def test_a_hole_before_the_local_log_fails(quality: QualityContext) -> None:
    world = healthy_world()
    world.set_partition(local_log_start_offset=45)  # 40..44 neither remote nor local
    assert_only_failure(
        validate(quality, world),
        PARTITION_OFFSETS_SUITE,
        "expect_no_hole_between_remote_and_local_log",
        "local_log_start_offset=45",
        "remote_log_end_offset=39",
    )


def test_no_hole_when_the_log_start_moved_past_the_remote_end() -> None:
    world = healthy_world()
    world.set_partition(log_start_offset=45, local_log_start_offset=45)
    _, partitions = world.tables()
    assert not next(p for p in partitions if p["topic"] == "orders")["hole_before_local_log"]


def test_a_chain_not_increasing_fails(quality: QualityContext) -> None:
    segments, partitions = healthy_world().tables()
    orders = next(p for p in partitions if p["topic"] == "orders")
    orders["leader_epoch_chain"] = [
        {"epoch": 0, "start_offset": 0},
        {"epoch": 1, "start_offset": 30},
        {"epoch": 1, "start_offset": 35},
    ]
    partitions = derive_partition_checks(partitions, segments, now_ms=NOW_MS)
    assert_only_failure(
        validate_rows(quality, segments, partitions),
        PARTITION_OFFSETS_SUITE,
        "expect_leader_epoch_chain_strictly_increasing",
        "topic=orders",
    )


def test_remote_bytes_over_retention_fail(quality: QualityContext) -> None:
    world = healthy_world()
    world.set_partition(retention_bytes=2000)  # 4000 remote > 2000 + one segment
    assert_only_failure(
        validate(quality, world),
        PARTITION_OFFSETS_SUITE,
        "expect_remote_bytes_within_retention_bytes",
        "topic=orders",
    )


def test_a_partition_deletion_outside_its_state_machine_fails(quality: QualityContext) -> None:
    world = healthy_world()
    world.delete_event(D.DELETE_PARTITION_MARKED, at_ms=NOW_MS - 1)  # after FINISHED
    reason = assert_only_failure(
        validate(quality, world),
        PARTITION_OFFSETS_SUITE,
        "expect_only_valid_partition_delete_transitions",
        "topic=gone",
    )
    assert "DELETE_PARTITION_FINISHED -> DELETE_PARTITION_MARKED" in reason


def test_a_partition_deletion_stuck_fails(quality: QualityContext) -> None:
    world = healthy_world()
    other = type(GONE)(ORDERS.topic_id, type(ORDERS.topic_partition)("orders", 1))
    world.delete_event(D.DELETE_PARTITION_MARKED, at_ms=NOW_MS - 2 * DAY_MS, tip=other)
    assert_only_failure(
        validate(quality, world),
        PARTITION_OFFSETS_SUITE,
        "expect_no_partition_deletion_stuck",
        "partition=1",
    )
