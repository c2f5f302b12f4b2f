"""Remote storage turned on for a replicated topic created without it (Kafka's
``EnableRemoteLogOnTopicTest``): two partitions, replication factor 2, one record per segment.

    p0 on [1, 2], p1 on [2, 1], remote.storage.enable=false; k0..k2 to each
    remote.storage.enable=true; k3, k4 to each
    each leader's job tiers its partition      remote [0-0]..[3-3], local earliest 4
    consumers from 0 read 5 records of each partition, 4 of them from the remote tier
"""

from __future__ import annotations

from tests.scenarios.tiered_cluster.stage import ClusterTieredStage, tiered_topic_configs

TOPIC = "enable-remote-log"


def test_remote_storage_enabled_on_a_replicated_topic(stage: ClusterTieredStage) -> None:
    configs = tiered_topic_configs(1, remote_storage_enable="false")
    topic_id = stage.create_topic(TOPIC, [[1, 2], [2, 1]], configs)
    for partition in (0, 1):
        stage.produce(TOPIC, partition, 3)
        stage.expect(
            TOPIC,
            topic_id,
            "1: [0-0][1-1][2-2]* 2: [0-0][1-1][2-2]* remote: -"
            " | earliest=0 local=0 tiered=-1 end=3",
            partition,
        )
    # nothing to tier yet: the tier command leaves topics without remote storage alone
    assert stage.tier(1, TOPIC)[0].startswith("summary action=copy partitions=0")

    stage.alter_topic(TOPIC, remote_storage_enable="true")
    for partition in (0, 1):
        stage.produce(TOPIC, partition, 2)
    for broker_id, partition in ((1, 0), (2, 1)):
        copied = [line for line in stage.tier(broker_id, TOPIC) if "status=ok" in line]
        assert copied[0].startswith(
            f"partition={TOPIC}-{partition} action=copy status=ok segments=4"
        ), copied
        assert "offsets=0..3" in copied[0]
    for broker_id, partition in ((1, 0), (2, 1)):
        stage.expect(
            TOPIC,
            topic_id,
            "1: [4-4]* 2: [4-4]* remote: [0-0][1-1][2-2][3-3] | earliest=0 local=4 tiered=3 end=5",
            partition,
        )
        fetches = stage.remote_fetches(broker_id)
        assert stage.consume(TOPIC, partition, 0) == [0, 1, 2, 3, 4]
        assert stage.remote_fetches(broker_id) - fetches == 4
