"""Which partitions wait for the deletion of their remote data: those whose latest
``RemotePartitionDeleteMetadata`` event on ``__remote_log_metadata`` is
DELETE_PARTITION_MARKED or DELETE_PARTITION_STARTED, with the broker that published it."""

from __future__ import annotations

from storage_core.client.cluster import KafkaCluster
from storage_core.common import TopicIdPartition
from storage_core.tiered.metadata import serde
from storage_core.tiered.metadata.metadata import RemotePartitionDeleteMetadata
from storage_core.tiered.metadata.states import RemotePartitionDeleteState
from storage_core.tiered.topic_based_rlmm.topic_scan import scan_metadata_topic


def marked_partitions(cluster: KafkaCluster, topic: str | None) -> list[TopicIdPartition]:
    """Partitions whose latest deletion event is MARKED or STARTED, read from the start of
    every ``__remote_log_metadata`` partition up to its current end."""
    return [tip for tip, _broker_id in marked_partitions_by_broker(cluster, topic)]


def marked_partitions_by_broker(
    cluster: KafkaCluster, topic: str | None
) -> list[tuple[TopicIdPartition, int]]:
    """As ``marked_partitions``, with the broker of each one's latest deletion event: the
    partition's leader when its topic was deleted (only the leader marks it, as Kafka's
    ``StopPartition(deleteRemoteLog)``), or the broker whose deletion started."""
    latest: dict[TopicIdPartition, RemotePartitionDeleteMetadata] = {}
    for record in scan_metadata_topic(cluster):
        event = serde.deserialize(record.value)
        if isinstance(event, RemotePartitionDeleteMetadata):
            latest[event.topic_id_partition] = event
    pending = (
        RemotePartitionDeleteState.DELETE_PARTITION_MARKED,
        RemotePartitionDeleteState.DELETE_PARTITION_STARTED,
    )
    return sorted(
        (
            (tip, event.broker_id)
            for tip, event in latest.items()
            if event.state in pending and (topic is None or tip.topic_partition.topic == topic)
        ),
        key=lambda item: (
            item[0].topic_partition.topic,
            item[0].topic_partition.partition,
            item[0].topic_id,
        ),
    )
