"""``jobs.delete_partitions``' pure parts (each partition's step and segments) and the shared
deletion executor's (the task count, the items)."""

from __future__ import annotations

import pytest

from jobs.common.remote_deletion import TASKS_MAX, DeletionItem, task_count
from jobs.delete_partitions import plan_partition_deletions
from storage_core.common import TopicIdPartition, TopicPartition, Uuid
from storage_core.tiered.metadata import serde
from storage_core.tiered.metadata.metadata import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemotePartitionDeleteMetadata,
)
from storage_core.tiered.metadata.states import RemoteLogSegmentState, RemotePartitionDeleteState
from storage_core.tiered.operations import PartitionDeletionStep

A = TopicIdPartition(Uuid(1, 1), TopicPartition("a", 0))
B = TopicIdPartition(Uuid(2, 2), TopicPartition("b", 3))
C = TopicIdPartition(Uuid(3, 3), TopicPartition("a", 1))


def segment(tip: TopicIdPartition, start: int) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(
        remote_log_segment_id=RemoteLogSegmentId(topic_id_partition=tip, id=Uuid.random()),
        start_offset=start,
        end_offset=start + 9,
        max_timestamp_ms=1,
        broker_id=0,
        event_timestamp_ms=1,
        segment_size_in_bytes=100,
        segment_leader_epochs={0: start},
        state=RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
    )


def marked(
    tip: TopicIdPartition, state: RemotePartitionDeleteState
) -> RemotePartitionDeleteMetadata:
    return RemotePartitionDeleteMetadata(
        topic_id_partition=tip, state=state, event_timestamp_ms=1, broker_id=0
    )


def test_each_partition_gets_its_step_and_its_segments_oldest_first() -> None:
    a_segments = [segment(A, 20), segment(A, 0), segment(A, 10)]
    plans = plan_partition_deletions(
        {
            B: (marked(B, RemotePartitionDeleteState.DELETE_PARTITION_STARTED), []),
            A: (marked(A, RemotePartitionDeleteState.DELETE_PARTITION_MARKED), a_segments),
            C: (marked(C, RemotePartitionDeleteState.DELETE_PARTITION_STARTED), [segment(C, 5)]),
        }
    )
    assert [(p.topic_id_partition, p.step) for p in plans] == [
        (A, PartitionDeletionStep.PUBLISH_STARTED),
        (C, PartitionDeletionStep.DELETE_SEGMENTS),
        (B, PartitionDeletionStep.PUBLISH_FINISHED),
    ]
    assert [m.start_offset for m in plans[0].segments] == [0, 10, 20]
    assert plans[0].size_bytes == 300
    assert plans[2].segments == ()


def test_finished_and_unmarked_partitions_delete_nothing() -> None:
    plans = plan_partition_deletions(
        {
            A: (marked(A, RemotePartitionDeleteState.DELETE_PARTITION_FINISHED), []),
            B: (None, [segment(B, 0)]),
        }
    )
    assert [(p.step, p.segments) for p in plans] == [
        (PartitionDeletionStep.DONE, ()),
        (PartitionDeletionStep.NOT_MARKED, ()),
    ]


@pytest.mark.parametrize(
    ("items", "cores", "expected"),
    [(1, 8, 1), (5, 2, 4), (3, 2, 3), (10_000, 1_000, TASKS_MAX), (0, 2, 1), (7, 0, 2)],
)
def test_task_count(items: int, cores: int, expected: int) -> None:
    assert task_count(items, cores) == expected


def test_a_segment_item_carries_its_metadata_as_serde_bytes() -> None:
    metadata = segment(A, 0)
    item = DeletionItem.for_segment(
        metadata, reason="r", allowed_states=[RemoteLogSegmentState.COPY_SEGMENT_STARTED]
    )
    assert item.metadata_bytes is not None
    assert serde.deserialize(item.metadata_bytes) == metadata
    assert item.allowed_states == (0,)
