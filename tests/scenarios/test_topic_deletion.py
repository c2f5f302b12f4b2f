"""Deleting a remote-enabled topic marks its partitions; ``tier --delete-partitions``
removes every remote object (Kafka's ``DeleteTopicTest``).

    produce 0..24, tier      local: [10-19][20-24]*   remote: [0-9][10-19]
    delete the topic         the partition directory goes; DELETE_PARTITION_MARKED;
                             remote objects stay (remote: [0-9][10-19])
    tier --delete-partitions --dry-run   plans the partition, deletes nothing
    tier --delete-partitions             remote: - (no object, no listed segment);
                                         DELETE_PARTITION_FINISHED
    tier --delete-partitions             nothing left to do
"""

from __future__ import annotations

from storage_core.common import TopicIdPartition, TopicPartition
from storage_core.tiered.metadata.states import RemotePartitionDeleteState
from storage_core.tiered.topic_based_rlmm import (
    ConsumerTaskConfig,
    TopicBasedRemoteLogMetadataManager,
)
from tests.scenarios.harness.waiting import wait_until
from tests.scenarios.tiered import TieredStage, topic_configs

TOPIC = "deleted-topic"


def test_deleting_a_topic_then_its_remote_partitions(stage: TieredStage) -> None:
    topic_id = stage.create_topic(
        TOPIC, topic_configs(remote_storage_enable="true", local_retention_bytes="1000")
    )
    stage.produce(TOPIC, 25)
    stage.tier(TOPIC)
    stage.expect(
        TOPIC,
        topic_id,
        "local: [10-19][20-24]* remote: [0-9][10-19] | earliest=0 local=10 tiered=19 end=25",
    )

    stage.delete_topic(TOPIC)
    wait_until(lambda: stage.local_segments(TOPIC) == [], "the partition directory to go")
    assert stage.remote_segments(topic_id, TOPIC) == [(0, 9), (10, 19)]
    tip = TopicIdPartition(topic_id, TopicPartition(TOPIC, 0))
    assert delete_state(stage, tip) is RemotePartitionDeleteState.DELETE_PARTITION_MARKED

    plan = stage.tier(TOPIC, "--delete-partitions", "--dry-run")
    assert plan[0] == (
        f"partition={TOPIC}-0 action=delete-partition status=planned topic_id={topic_id} segments=2"
    )
    assert len(stage.stored_segments(topic_id, TOPIC)) == 2

    deleted = stage.tier(TOPIC, "--delete-partitions")
    assert deleted[0].startswith(
        f"partition={TOPIC}-0 action=delete-partition status=ok topic_id={topic_id}"
        " segments=2 finished=true"
    )
    assert stage.stored_segments(topic_id, TOPIC) == []
    assert stage.remote_segments(topic_id, TOPIC) == []
    assert delete_state(stage, tip) is RemotePartitionDeleteState.DELETE_PARTITION_FINISHED
    print(f"{TOPIC}: local: - remote: - (DELETE_PARTITION_FINISHED)")

    again = stage.tier(TOPIC, "--delete-partitions")
    assert again == [
        f"summary action=delete-partition partitions=0 segments=0 bytes=0 errors=0"
        f" seconds={again[0].rsplit('=', 1)[-1]}"
    ]


def delete_state(stage: TieredStage, tip: TopicIdPartition) -> RemotePartitionDeleteState | None:
    with TopicBasedRemoteLogMetadataManager.for_client(
        stage.bootstrap, consumer_config=ConsumerTaskConfig(idle_poll_ms=10)
    ) as rlmm:
        metadata = rlmm.remote_partition_delete_metadata(tip)
    return None if metadata is None else metadata.state
