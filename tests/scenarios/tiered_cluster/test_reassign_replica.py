"""Replicas of tiered partitions reassigned (Kafka's ``ReassignReplicaExpandTest``,
``ReassignReplicaMoveTest`` and ``ReassignReplicaShrinkTest``): one record per segment; a new
replica builds its state from the remote tier, the new leader's job tiers on, consumers read
from offset 0 on the new leader.

    expand: [1] -> [1, 2], broker 2 elected;  move: [1] -> [2]
        k0..k2, broker 1 tiers [0-0][1-1]; reassign; k3; broker 2 tiers [2-2]:
        local earliest 3; from 0: 4 records, 3 from the remote tier (broker 2's)
    shrink: p0 [1, 2] -> [2], p1 [2, 1] -> [1]
        k0..k2 to each, each leader tiers [0-0][1-1]; shrink; k3 to each; the new leaders
        tier [2-2]: local earliest 3; from 0: 4 records, 3 from the remote tier
"""

from __future__ import annotations

import pytest

from tests.scenarios.tiered_cluster.stage import ClusterTieredStage, tiered_topic_configs

TOPIC = "reassign-replica"


def copied(lines: list[str], partition: int) -> str:
    (line,) = [x for x in lines if x.startswith(f"partition={TOPIC}-{partition} action=copy")]
    return line


@pytest.mark.parametrize("replicas", [[2, 1], [2]], ids=["expand", "move"])
def test_new_replica_builds_from_the_remote_tier_and_leads(
    stage: ClusterTieredStage, replicas: list[int]
) -> None:
    topic_id = stage.create_topic(TOPIC, [[1]], tiered_topic_configs(1))
    stage.produce(TOPIC, 0, 3)
    assert "offsets=0..1" in copied(stage.tier(1, TOPIC), 0)
    stage.expect(
        TOPIC, topic_id, "1: [2-2]* remote: [0-0][1-1] | earliest=0 local=2 tiered=1 end=3"
    )

    stage.move_leader(TOPIC, 0, replicas)
    output = stage.brokers[2].output_path.read_text(errors="replace")
    assert f"built the remote log auxiliary state partition={TOPIC}-0 remote_segment=" in output
    assert "leader_local_log_start_offset=2 next_offset=2 log_start_offset=0" in output
    stage.produce(TOPIC, 0, 1)
    assert "offsets=2..2" in copied(stage.tier(2, TOPIC), 0)
    local = "1: [3-3]* 2: [3-3]*" if len(replicas) == 2 else "2: [3-3]*"
    stage.expect(
        TOPIC,
        topic_id,
        f"{local} remote: [0-0][1-1][2-2] | earliest=0 local=3 tiered=2 end=4",
    )
    fetches = stage.remote_fetches(2)
    assert stage.consume(TOPIC, 0, 0) == [0, 1, 2, 3]
    assert stage.remote_fetches(2) - fetches == 3


def test_shrunk_partitions_are_led_and_tiered_by_the_remaining_replica(
    stage: ClusterTieredStage,
) -> None:
    topic_id = stage.create_topic(TOPIC, [[1, 2], [2, 1]], tiered_topic_configs(1))
    for partition, leader in ((0, 1), (1, 2)):
        stage.produce(TOPIC, partition, 3)
        assert "offsets=0..1" in copied(stage.tier(leader, TOPIC), partition)
        stage.expect(
            TOPIC,
            topic_id,
            "1: [2-2]* 2: [2-2]* remote: [0-0][1-1] | earliest=0 local=2 tiered=1 end=3",
            partition,
        )

    stage.reassign(TOPIC, 0, [2])
    stage.reassign(TOPIC, 1, [1])
    assert stage.wait_leader(TOPIC, 0, 2) > 0
    assert stage.wait_leader(TOPIC, 1, 1) > 0
    for partition, leader in ((0, 2), (1, 1)):
        stage.produce(TOPIC, partition, 1)
        assert "offsets=2..2" in copied(stage.tier(leader, TOPIC), partition)
        stage.expect(
            TOPIC,
            topic_id,
            f"{leader}: [3-3]* remote: [0-0][1-1][2-2] | earliest=0 local=3 tiered=2 end=4",
            partition,
        )
        fetches = stage.remote_fetches(leader)
        assert stage.consume(TOPIC, partition, 0) == [0, 1, 2, 3]
        assert stage.remote_fetches(leader) - fetches == 3
