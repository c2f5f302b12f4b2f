"""The leader of a tiered partition restarts without its checkpoints (Kafka's
``FetchFromLeaderWithCorruptedCheckpointTest``): replication factor 2, one record per segment.

    [1, 2]; k0..k2, broker 1 tiers            remote [0-0][1-1], local earliest 2;
                                              from 0: 3 records, 2 from the remote tier
    broker 2 stops, broker 1 stops; broker 1's replication-offset-checkpoint,
    recovery-point-offset-checkpoint and .kafka_cleanshutdown removed; both start again
    k3, k4, broker 1 tiers                    remote [0-0]..[3-3], local earliest 4;
                                              from 0: 5 records, 4 from the remote tier
"""

from __future__ import annotations

from storage_core.log.checkpoints import REPLICATION_OFFSET_CHECKPOINT
from storage_core.log.log_file_utils import CLEAN_SHUTDOWN_FILE
from tests.scenarios.tiered_cluster.stage import ClusterTieredStage, tiered_topic_configs

TOPIC = "corrupted-checkpoint"
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"


def test_leader_restarted_without_its_checkpoints_loses_nothing(
    stage: ClusterTieredStage,
) -> None:
    topic_id = stage.create_topic(TOPIC, [[1, 2]], tiered_topic_configs(1))
    stage.produce(TOPIC, 0, 3)
    assert "offsets=0..1" in stage.tier(1, TOPIC)[0]
    stage.expect(
        TOPIC,
        topic_id,
        "1: [2-2]* 2: [2-2]* remote: [0-0][1-1] | earliest=0 local=2 tiered=1 end=3",
    )
    fetches = stage.remote_fetches(1)
    assert stage.consume(TOPIC, 0, 0) == [0, 1, 2]
    assert stage.remote_fetches(1) - fetches == 2

    leader, follower = stage.brokers[1], stage.brokers[2]
    follower.stop()
    leader.stop()
    for name in (REPLICATION_OFFSET_CHECKPOINT, RECOVERY_POINT_CHECKPOINT, CLEAN_SHUTDOWN_FILE):
        (leader.log_dir / name).unlink()
    leader.start()
    follower.start()
    stage.wait_leader(TOPIC, 0, 1)

    stage.produce(TOPIC, 0, 2)
    assert "offsets=2..3" in stage.tier(1, TOPIC)[0]
    stage.expect(
        TOPIC,
        topic_id,
        "1: [4-4]* 2: [4-4]* remote: [0-0][1-1][2-2][3-3] | earliest=0 local=4 tiered=3 end=5",
    )
    fetches = stage.remote_fetches(1)
    assert stage.consume(TOPIC, 0, 0) == [0, 1, 2, 3, 4]
    assert stage.remote_fetches(1) - fetches == 4
