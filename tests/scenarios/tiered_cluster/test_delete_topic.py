"""Deleting a tiered topic whose partitions are led by two brokers (Kafka's
``DeleteTopicTest``): two partitions, replication factor 2, one record per segment.

    p0 on [1, 2], p1 on [2, 1]; k0..k2 to each    broker 1 tiers p0, broker 2 tiers p1:
                                                  remote [0-0][1-1] each, local earliest 2
    DeleteTopics                                  each leader marks its partition (only it)
    tier --delete-partitions on broker 1          deletes p0's 2 segments, skips p1
    tier --delete-partitions on broker 2          deletes p1's 2 segments, skips p0
                                                  the store holds nothing of the topic
"""

from __future__ import annotations

from tests.scenarios.tiered_cluster.stage import ClusterTieredStage, tiered_topic_configs

TOPIC = "delete-topic"


def test_each_leader_deletes_its_partitions_remote_data(stage: ClusterTieredStage) -> None:
    topic_id = stage.create_topic(TOPIC, [[1, 2], [2, 1]], tiered_topic_configs(1))
    for partition in (0, 1):
        stage.produce(TOPIC, partition, 3)
    for broker_id, mine, theirs, other in ((1, 0, 1, 2), (2, 1, 0, 1)):
        lines = stage.tier(broker_id, TOPIC)
        assert lines[0] == (
            f"partition={TOPIC}-{theirs} action=copy status=skipped"
            f' reason="leader is broker {other}, not {broker_id}"'
        )
        assert lines[1].startswith(
            f"partition={TOPIC}-{mine} action=copy status=ok segments=2 bytes="
        )
    for partition in (0, 1):
        stage.expect(
            TOPIC,
            topic_id,
            "1: [2-2]* 2: [2-2]* remote: [0-0][1-1] | earliest=0 local=2 tiered=1 end=3",
            partition,
        )

    stage.delete_topic(TOPIC)
    for broker_id in (1, 2):
        stage.wait_gone(broker_id, TOPIC)
    deleted = {}
    for broker_id, other in ((1, 2), (2, 1)):
        lines = stage.tier(broker_id, TOPIC, "--delete-partitions")
        mine, theirs = (0, 1) if broker_id == 1 else (1, 0)
        if broker_id == 1:  # p1 is broker 2's to delete (p0 is done when broker 2 runs)
            assert (
                f"partition={TOPIC}-{theirs} action=delete-partition status=skipped"
                f' reason="marked by broker {other}, not {broker_id}"'
            ) in lines
        (done,) = [line for line in lines if line.startswith(f"partition={TOPIC}-{mine} ")]
        assert done.startswith(
            f"partition={TOPIC}-{mine} action=delete-partition status=ok topic_id={topic_id}"
            " segments=2 finished=true"
        ), done
        deleted[mine] = done
    assert sorted(deleted) == [0, 1]
    for partition in (0, 1):
        assert stage.stored_segments(topic_id, TOPIC, partition) == []
    assert not any(path.is_file() for path in stage.remote_dir.rglob("*"))
