"""A tiered topic grows from one partition to three, led by both brokers (Kafka's
``PartitionsExpandTest``): replication factor 2, one record per segment.

    p0 on [1, 2]; k0..k2, broker 1 tiers        remote [0-0][1-1]
    CreatePartitions 3: p1 on [1, 2], p2 on [2, 1]
    from 0 of p0: 3 records, 2 remote
    k0..k2 to p1 (broker 1 tiers), to p2 (broker 2 tiers)
    k3..k5 to p0, broker 1 tiers                 remote [0-0]..[4-4], local earliest 5
    from 0 of p0: 6 records, 5 remote; of p1: 3, 2 remote; from 1 of p2: 2, 1 remote
"""

from __future__ import annotations

from tests.scenarios.tiered_cluster.stage import ClusterTieredStage, tiered_topic_configs

TOPIC = "partitions-expand"
THREE_TIERED = "1: [2-2]* 2: [2-2]* remote: [0-0][1-1] | earliest=0 local=2 tiered=1 end=3"


def copied_offsets(lines: list[str], partition: int) -> str:
    (line,) = [x for x in lines if x.startswith(f"partition={TOPIC}-{partition} action=copy")]
    return line.split("offsets=")[1].split()[0] if "offsets=" in line else line


def test_new_partitions_led_by_both_brokers_are_tiered_by_their_leaders(
    stage: ClusterTieredStage,
) -> None:
    topic_id = stage.create_topic(TOPIC, [[1, 2]], tiered_topic_configs(1))
    stage.produce(TOPIC, 0, 3)
    assert copied_offsets(stage.tier(1, TOPIC), 0) == "0..1"
    stage.expect(TOPIC, topic_id, THREE_TIERED, 0)

    stage.create_partitions(TOPIC, [[1, 2], [2, 1]])
    assert stage.leaders_of(TOPIC) == {0: (1, 0), 1: (1, 0), 2: (2, 0)}
    fetches = stage.remote_fetches(1)
    assert stage.consume(TOPIC, 0, 0) == [0, 1, 2]
    assert stage.remote_fetches(1) - fetches == 2

    stage.produce(TOPIC, 1, 3)
    stage.produce(TOPIC, 2, 3)
    lines = stage.tier(1, TOPIC)
    assert copied_offsets(lines, 1) == "0..1"
    assert copied_offsets(lines, 2).endswith('reason="leader is broker 2, not 1"')
    assert copied_offsets(stage.tier(2, TOPIC), 2) == "0..1"
    for partition in (1, 2):
        stage.expect(TOPIC, topic_id, THREE_TIERED, partition)

    stage.produce(TOPIC, 0, 3)
    assert copied_offsets(stage.tier(1, TOPIC), 0) == "2..4"
    stage.expect(
        TOPIC,
        topic_id,
        "1: [5-5]* 2: [5-5]* remote: [0-0][1-1][2-2][3-3][4-4] | earliest=0 local=5 tiered=4 end=6",
        0,
    )
    for broker_id, partition, start, expected, remote in (
        (1, 0, 0, [0, 1, 2, 3, 4, 5], 5),
        (1, 1, 0, [0, 1, 2], 2),
        (2, 2, 1, [1, 2], 1),
    ):
        fetches = stage.remote_fetches(broker_id)
        assert stage.consume(TOPIC, partition, start) == expected
        assert stage.remote_fetches(broker_id) - fetches == remote, partition
