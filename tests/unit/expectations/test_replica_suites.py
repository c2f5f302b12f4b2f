"""The replica suites on pandas, and the leader-lineage rule of ``remote_segments``: green on
a healthy partition of three replicas; for every rule a table that breaks only it, and the
suite failing by that rule's name with the offending rows. ``replica_warnings`` fails
without failing the run."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import pytest

from expectations import (
    DESCRIPTIONS,
    PARTITION_OFFSETS_SUITE,
    REMOTE_SEGMENTS_SUITE,
    REPLICA_WARNINGS_SUITE,
    REPLICAS_SUITE,
)
from expectations.runner import QualityContext, SuiteOutcome, pandas_frame
from jobs.tables import ReplicaState, build_replicas, leader_replicas
from jobs.tables.inputs import NO_LEADER
from jobs.tables.schemas import Row
from storage_core.tiered.metadata.states import RemoteLogSegmentState as S
from tests.unit.expectations.world import (
    DAY_MS,
    NOW_MS,
    ORDERS,
    World,
    healthy_world,
    row_of,
    segment_id,
)


@pytest.fixture(scope="module")
def quality(tmp_path_factory: pytest.TempPathFactory) -> Iterator[QualityContext]:
    yield QualityContext(tmp_path_factory.mktemp("replicas"), engine="pandas", data_docs=False)


def replica(broker_id: int, **changes: object) -> ReplicaState:
    """``orders-0`` (the world's partition) led by broker 1 at epoch 1, all three in sync,
    with the world's lineage ``0@0 1@30``, local log start 30, HW 50, LEO 55."""
    base = ReplicaState(
        topic=ORDERS.topic_partition.topic,
        partition=ORDERS.topic_partition.partition,
        topic_id=ORDERS.topic_id,
        broker_id=broker_id,
        leader_id=1,
        leader_epoch=1,
        replicas=(1, 2, 3),
        isr=(1, 2, 3),
        log_dir=f"/broker-{broker_id}/orders-0",
        log_start_offset=0,
        local_log_start_offset=30,
        high_watermark=50,
        high_watermark_source="LIST_OFFSETS" if broker_id == 1 else "CHECKPOINT",
        log_end_offset=55,
        leader_epoch_entries=((0, 0), (1, 30)),
    )
    return replace(base, **changes)  # type: ignore[arg-type]


def healthy_replicas() -> list[ReplicaState]:
    return [replica(1), replica(2), replica(3)]


def validate_replicas(quality: QualityContext, rows: list[Row]) -> dict[str, SuiteOutcome]:
    frame = pandas_frame("replicas", rows)
    return {
        REPLICAS_SUITE: quality.validate(REPLICAS_SUITE, frame),
        REPLICA_WARNINGS_SUITE: quality.validate(REPLICA_WARNINGS_SUITE, frame),
    }


def validate_world(
    quality: QualityContext, world: World, replicas: list[ReplicaState]
) -> dict[str, SuiteOutcome]:
    segments, partitions = world.tables(leaders=leader_replicas(replicas))
    return {
        REMOTE_SEGMENTS_SUITE: quality.validate(
            REMOTE_SEGMENTS_SUITE, pandas_frame(REMOTE_SEGMENTS_SUITE, segments)
        ),
        PARTITION_OFFSETS_SUITE: quality.validate(
            PARTITION_OFFSETS_SUITE, pandas_frame(PARTITION_OFFSETS_SUITE, partitions)
        ),
        **validate_replicas(quality, build_replicas(replicas)),
    }


def assert_only_failure(
    outcomes: dict[str, SuiteOutcome], suite: str, expectation: str, *needles: str
) -> str:
    for name, outcome in outcomes.items():
        if name != suite:
            assert outcome.success, (name, [f.reason for f in outcome.failed])
    outcome = outcomes[suite]
    assert not outcome.success
    assert outcome.failed_expectations() == [expectation], [f.reason for f in outcome.failed]
    reason = outcome.failed[0].reason
    assert reason.startswith(f"{expectation}: {DESCRIPTIONS[expectation]}")
    for needle in needles:
        assert needle in reason, reason
    return reason


def test_a_healthy_partition_and_its_replicas_pass_every_suite(quality: QualityContext) -> None:
    outcomes = validate_world(quality, healthy_world(), healthy_replicas())
    for name, outcome in outcomes.items():
        assert outcome.success, (name, [f.reason for f in outcome.failed])
        assert not outcome.fails_run
    assert outcomes[REPLICAS_SUITE].evaluated == 3
    assert outcomes[REPLICA_WARNINGS_SUITE].evaluated == 1
    assert outcomes[REPLICA_WARNINGS_SUITE].warning
    assert not outcomes[REPLICAS_SUITE].warning


def test_a_follower_whose_epochs_differ_from_the_leaders_fails(quality: QualityContext) -> None:
    replicas = healthy_replicas()
    replicas[1] = replica(2, leader_epoch_entries=((0, 0), (1, 30), (3, 52)))
    assert_only_failure(
        validate_replicas(quality, build_replicas(replicas)),
        REPLICAS_SUITE,
        "expect_follower_epochs_agree_with_leader",
        "broker_id=2",
        "offsets 30..54: broker 2 has [1@30 3@52], leader 1 has [1@30]",
    )


def test_an_isr_member_below_the_high_watermark_fails(quality: QualityContext) -> None:
    replicas = healthy_replicas()
    replicas[2] = replica(3, log_end_offset=48)
    assert_only_failure(
        validate_replicas(quality, build_replicas(replicas)),
        REPLICAS_SUITE,
        "expect_isr_log_end_at_least_high_watermark",
        "broker_id=3",
        "log_end_offset=48",
        "partition_high_watermark=50",
    )


def test_a_partition_without_a_leader_fails(quality: QualityContext) -> None:
    replicas = [replica(b, leader_id=NO_LEADER, isr=(1,)) for b in (1, 2, 3)]
    reason = assert_only_failure(
        validate_replicas(quality, build_replicas(replicas)),
        REPLICAS_SUITE,
        "expect_no_partition_offline",
        "topic=orders",
        "leader_id=-1",
    )
    assert "3 of 3 rows unexpected" in reason


def test_an_under_replicated_partition_is_a_warning_that_does_not_fail_the_run(
    quality: QualityContext,
) -> None:
    replicas = [replica(b, isr=(1, 2)) for b in (1, 2, 3)]
    replicas[2] = replace(replicas[2], log_end_offset=40, high_watermark=40)
    outcomes = validate_replicas(quality, build_replicas(replicas))
    assert_only_failure(
        outcomes,
        REPLICA_WARNINGS_SUITE,
        "expect_no_under_replicated_partition",
        "broker_id=3",
    )
    warning = outcomes[REPLICA_WARNINGS_SUITE]
    assert warning.warning and not warning.fails_run
    assert warning.to_dict()["severity"] == "warning"
    assert outcomes[REPLICAS_SUITE].to_dict()["severity"] == "critical"


def test_a_remote_segment_off_the_current_leaders_lineage_fails(quality: QualityContext) -> None:
    # the leader's lineage skips epoch 1 (an unclean election made epoch 2 start at 30): the
    # segments written in epoch 1 (30..39 FINISHED, 40..44 STARTED) are off it, while the
    # partition_offsets chain (read from another replica) still has them on it
    replicas = [
        replica(b, leader_epoch=2, leader_epoch_entries=((0, 0), (2, 30))) for b in (1, 2, 3)
    ]
    reason = assert_only_failure(
        validate_world(quality, healthy_world(), replicas),
        REMOTE_SEGMENTS_SUITE,
        "expect_remote_segment_epochs_on_leader_lineage",
        str(segment_id(4)),
        str(segment_id(5)),
        "epochs [1@30] are off the lineage of leader 1 (epoch 2): [0@0 2@30] up to 55",
    )
    assert str(segment_id(1)) not in reason


def test_an_off_lineage_segment_is_reported_until_its_deletion_finishes() -> None:
    replicas = [replica(1, leader_epoch=2, leader_epoch_entries=((0, 0), (2, 30)))]
    world = healthy_world()
    world.update(4, S.DELETE_SEGMENT_STARTED, at_ms=NOW_MS - DAY_MS // 2)
    segments, _ = world.tables(leaders=leader_replicas(replicas))
    assert row_of(segments, 4)["off_leader_lineage"] is not None
    world.update(4, S.DELETE_SEGMENT_FINISHED, at_ms=NOW_MS - DAY_MS // 2 + 1)
    segments, _ = world.tables(leaders=leader_replicas(replicas))
    assert row_of(segments, 4)["off_leader_lineage"] is None
    # without the leader's log dir nothing is compared
    segments, _ = healthy_world().tables()
    assert all(row["off_leader_lineage"] is None for row in segments)
