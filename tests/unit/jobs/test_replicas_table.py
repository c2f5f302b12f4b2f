"""The ``replicas`` table's pure builder: one row per replica with the partition's leadership,
the replica's offsets and leader-epoch entries, and the checks against the leader replica."""

from __future__ import annotations

from dataclasses import replace

from jobs.tables import ReplicaState, build_replicas, leader_replicas, row_tuples
from jobs.tables.inputs import NO_LEADER
from jobs.tables.replicas import epochs_divergence
from jobs.tables.schemas import column_names
from storage_core.common import Uuid

TOPIC_ID = Uuid(7, 7)


def replica(broker_id: int, **changes: object) -> ReplicaState:
    """Partition ``t-0`` led by broker 1 at epoch 2, replicas 1-3 all in sync, lineage
    ``0@0 2@40``, HW 50, LEO 50, local log start 20."""
    base = ReplicaState(
        topic="t",
        partition=0,
        topic_id=TOPIC_ID,
        broker_id=broker_id,
        leader_id=1,
        leader_epoch=2,
        replicas=(1, 2, 3),
        isr=(1, 2, 3),
        log_dir=f"/b{broker_id}/t-0",
        log_start_offset=0,
        local_log_start_offset=20,
        high_watermark=50,
        high_watermark_source="LIST_OFFSETS" if broker_id == 1 else "CHECKPOINT",
        log_end_offset=50,
        leader_epoch_entries=((0, 20), (2, 40)),
    )
    return replace(base, **changes)  # type: ignore[arg-type]


def rows_by_broker(*replicas: ReplicaState) -> dict[int, dict[str, object]]:
    return {row["broker_id"]: row for row in build_replicas(replicas)}


def test_a_healthy_partition_has_one_row_per_replica_and_no_problem() -> None:
    rows = build_replicas([replica(3), replica(1), replica(2)])
    assert [r["broker_id"] for r in rows] == [1, 2, 3]
    assert [r["role"] for r in rows] == ["leader", "follower", "follower"]
    assert row_tuples("replicas", rows)  # exactly the schema's columns
    assert set(rows[0]) == set(column_names("replicas"))
    for row in rows:
        assert row["topic_id"] == str(TOPIC_ID)
        assert row["in_isr"] is True
        assert row["partition_high_watermark"] == 50
        assert row["leader_epoch_entries"] == [
            {"epoch": 0, "start_offset": 20},
            {"epoch": 2, "start_offset": 40},
        ]
        assert row["epochs_diverge_from_leader"] is None
        assert row["isr_log_end_below_high_watermark"] is False
        assert row["partition_offline"] is False
        assert row["under_replicated"] is False


def test_a_follower_entry_the_leader_does_not_have_below_its_leo_is_a_divergence() -> None:
    rows = rows_by_broker(
        replica(1), replica(2, leader_epoch_entries=((0, 20), (1, 30), (2, 40))), replica(3)
    )
    assert rows[2]["epochs_diverge_from_leader"] == (
        "offsets 20..49: broker 2 has [0@20 1@30 2@40], leader 1 has [0@20 2@40]"
    )
    assert rows[1]["epochs_diverge_from_leader"] is None
    assert rows[3]["epochs_diverge_from_leader"] is None


def test_entries_are_compared_only_up_to_the_follower_leo_and_above_both_local_starts() -> None:
    leader = replica(1, log_end_offset=60, leader_epoch_entries=((0, 20), (2, 40), (3, 55)))
    behind = replica(2, log_end_offset=45, isr=(1,), leader_epoch_entries=((0, 20), (2, 40)))
    assert epochs_divergence(behind, leader) is None  # epoch 3 starts past its LEO
    # a follower whose local log starts later (its epoch 0 entry truncated from the start)
    later = replica(2, local_log_start_offset=42, leader_epoch_entries=((2, 42),))
    assert epochs_divergence(later, leader) is None
    # but an epoch past the leader's end is a divergence (an uncut divergent tail)
    ahead = replica(2, log_end_offset=70, leader_epoch_entries=((0, 20), (2, 40), (4, 65)))
    assert epochs_divergence(ahead, leader) == (
        "offsets 20..69: broker 2 has [0@20 2@40 4@65], leader 1 has [0@20 2@40 3@55]"
    )
    assert epochs_divergence(replace(ahead, log_end_offset=None), leader) is None


def test_an_isr_member_below_the_high_watermark_is_flagged_an_out_of_sync_one_is_not() -> None:
    rows = rows_by_broker(
        replica(1, high_watermark=50),
        replica(2, log_end_offset=48),
        replica(3, log_end_offset=30, isr=(1, 2), high_watermark=30),
    )
    assert rows[2]["isr_log_end_below_high_watermark"] is True
    assert rows[3]["isr_log_end_below_high_watermark"] is False
    assert rows[3]["under_replicated"] is True
    assert rows[1]["under_replicated"] is False and rows[2]["under_replicated"] is False


def test_a_partition_without_a_leader_is_offline_on_every_row_and_not_under_replicated() -> None:
    rows = build_replicas(
        replica(b, leader_id=NO_LEADER, isr=(3,), high_watermark_source="CHECKPOINT")
        for b in (1, 2, 3)
    )
    assert [r["partition_offline"] for r in rows] == [True, True, True]
    assert [r["role"] for r in rows] == ["follower"] * 3
    assert all(r["under_replicated"] is False for r in rows)
    assert all(r["partition_high_watermark"] is None for r in rows)
    assert all(r["epochs_diverge_from_leader"] is None for r in rows)


def test_a_replica_without_a_directory_has_a_row_without_offsets() -> None:
    bare = ReplicaState(
        topic="t",
        partition=0,
        topic_id=None,
        broker_id=3,
        leader_id=1,
        leader_epoch=2,
        replicas=(1, 2, 3),
        isr=(1, 2, 3),
        log_dir=None,
    )
    rows = rows_by_broker(replica(1), bare)
    assert rows[3]["log_dir"] is None and rows[3]["log_end_offset"] is None
    assert rows[3]["topic_id"] is None and rows[3]["leader_epoch_entries"] == []
    assert rows[3]["epochs_diverge_from_leader"] is None
    assert rows[3]["isr_log_end_below_high_watermark"] is False


def test_leader_replicas_are_the_read_leaders_by_topic_id_and_partition() -> None:
    leaders = leader_replicas(
        [replica(1), replica(2), replica(1, partition=1, log_end_offset=None, log_dir=None)]
    )
    assert list(leaders) == [(str(TOPIC_ID), 0)]
    assert leaders[(str(TOPIC_ID), 0)].broker_id == 1
