"""Remote log metadata events for tests of the topic-based RLMM."""

from __future__ import annotations

from storage_core.common import TopicIdPartition, TopicPartition, Uuid
from storage_core.tiered.metadata import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
)


def user_partition(topic: str, partition: int, topic_id: Uuid | None = None) -> TopicIdPartition:
    return TopicIdPartition(topic_id or Uuid.random(), TopicPartition(topic, partition))


def copy_started(
    tip: TopicIdPartition, start: int, end: int, epochs: dict[int, int] | None = None
) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(
        remote_log_segment_id=RemoteLogSegmentId.generate_new(tip),
        start_offset=start,
        end_offset=end,
        max_timestamp_ms=1_700_000_000_000 + end,
        broker_id=0,
        event_timestamp_ms=1_700_000_000_000,
        segment_size_in_bytes=(end - start + 1) * 100,
        segment_leader_epochs=epochs or {0: start},
    )


def state_update(
    segment: RemoteLogSegmentMetadata, state: RemoteLogSegmentState
) -> RemoteLogSegmentMetadataUpdate:
    return RemoteLogSegmentMetadataUpdate(
        remote_log_segment_id=segment.remote_log_segment_id,
        event_timestamp_ms=1_700_000_000_001,
        state=state,
        broker_id=0,
    )


def partition_delete(
    tip: TopicIdPartition, state: RemotePartitionDeleteState
) -> RemotePartitionDeleteMetadata:
    return RemotePartitionDeleteMetadata(
        topic_id_partition=tip, state=state, event_timestamp_ms=1_700_000_000_002, broker_id=0
    )
