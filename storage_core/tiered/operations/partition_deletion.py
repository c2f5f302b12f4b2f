"""Deleting all remote data of a deleted partition (KIP-405's remote partition remover).

Steps, each one an event or an idempotent deletion, so the whole is resumable after a
crash at any point (``next_partition_deletion_step`` reads where it stands)::

    DELETE_PARTITION_MARKED   (published by the controller when the topic is deleted)
      -> publish DELETE_PARTITION_STARTED
      -> every remaining segment through delete_segment
         (DELETE_SEGMENT_STARTED, objects deleted, DELETE_SEGMENT_FINISHED)
      -> publish DELETE_PARTITION_FINISHED once no segment is left

A partition never marked is refused (``PartitionNotMarkedForDeletionError``). A segment
whose objects can not be deleted stays DELETE_SEGMENT_STARTED, the partition stays
DELETE_PARTITION_STARTED, and the error propagates: run the steps again later. Not fenced by
a leader epoch: a deleted topic has no leader.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from storage_core.clock import SYSTEM_CLOCK, Clock
from storage_core.common import TopicIdPartition
from storage_core.tiered.metadata.metadata import (
    RemoteLogSegmentMetadata,
    RemotePartitionDeleteMetadata,
)
from storage_core.tiered.metadata.states import RemotePartitionDeleteState
from storage_core.tiered.operations.errors import PartitionNotMarkedForDeletionError
from storage_core.tiered.operations.segment_deletion import delete_segment
from storage_core.tiered.remote_log_metadata_manager import RemoteLogMetadataManager
from storage_core.tiered.remote_storage_manager import RemoteStorageManager

logger = logging.getLogger(__name__)


class PartitionDeletionStep(enum.Enum):
    NOT_MARKED = "not marked for deletion"
    PUBLISH_STARTED = "publish DELETE_PARTITION_STARTED"
    DELETE_SEGMENTS = "delete the remaining segments"
    PUBLISH_FINISHED = "publish DELETE_PARTITION_FINISHED"
    DONE = "deletion finished"


def next_partition_deletion_step(
    delete_metadata: RemotePartitionDeleteMetadata | None,
    remaining_segments: Sequence[RemoteLogSegmentMetadata],
) -> PartitionDeletionStep:
    """Where a partition's deletion stands, from its latest deletion event and the segments
    its metadata still lists. Pure."""
    if delete_metadata is None:
        return PartitionDeletionStep.NOT_MARKED
    state = delete_metadata.state
    if state is RemotePartitionDeleteState.DELETE_PARTITION_FINISHED:
        return PartitionDeletionStep.DONE
    if state is RemotePartitionDeleteState.DELETE_PARTITION_MARKED:
        return PartitionDeletionStep.PUBLISH_STARTED
    if remaining_segments:
        return PartitionDeletionStep.DELETE_SEGMENTS
    return PartitionDeletionStep.PUBLISH_FINISHED


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionDeletionResult:
    topic_id_partition: TopicIdPartition
    deleted_segments: int
    finished: bool


def delete_partition(
    topic_id_partition: TopicIdPartition,
    *,
    rsm: RemoteStorageManager,
    rlmm: RemoteLogMetadataManager,
    broker_id: int,
    clock: Clock = SYSTEM_CLOCK,
    max_steps: int = 16,
) -> PartitionDeletionResult:
    """Run the steps of the module docstring from wherever the partition stands.

    ``max_steps`` bounds the loop (a step publishes one event or deletes the segments listed
    at its start); the result says whether DELETE_PARTITION_FINISHED was reached.
    """
    deleted = 0
    for _ in range(max_steps):
        remaining = list(rlmm.list_remote_log_segments(topic_id_partition))
        step = next_partition_deletion_step(
            rlmm.remote_partition_delete_metadata(topic_id_partition), remaining
        )
        if step is PartitionDeletionStep.NOT_MARKED:
            raise PartitionNotMarkedForDeletionError(
                f"partition {topic_id_partition} is not marked for deletion"
                " (no DELETE_PARTITION_MARKED event); its remote data is kept"
            )
        if step is PartitionDeletionStep.DONE:
            return PartitionDeletionResult(
                topic_id_partition=topic_id_partition, deleted_segments=deleted, finished=True
            )
        if step is PartitionDeletionStep.PUBLISH_STARTED:
            _publish(
                rlmm,
                topic_id_partition,
                RemotePartitionDeleteState.DELETE_PARTITION_STARTED,
                broker_id,
                clock,
            )
        elif step is PartitionDeletionStep.DELETE_SEGMENTS:
            for metadata in remaining:
                delete_segment(
                    metadata,
                    rsm=rsm,
                    rlmm=rlmm,
                    broker_id=broker_id,
                    clock=clock,
                    reason="partition deleted",
                )
                deleted += 1
        else:
            _publish(
                rlmm,
                topic_id_partition,
                RemotePartitionDeleteState.DELETE_PARTITION_FINISHED,
                broker_id,
                clock,
            )
            logger.info(
                "remote partition deleted partition=%s topic_id=%s segments=%d",
                topic_id_partition.topic_partition,
                topic_id_partition.topic_id,
                deleted,
            )
    return PartitionDeletionResult(
        topic_id_partition=topic_id_partition, deleted_segments=deleted, finished=False
    )


def _publish(
    rlmm: RemoteLogMetadataManager,
    topic_id_partition: TopicIdPartition,
    state: RemotePartitionDeleteState,
    broker_id: int,
    clock: Clock,
) -> None:
    rlmm.put_remote_partition_delete_metadata(
        RemotePartitionDeleteMetadata(
            topic_id_partition=topic_id_partition,
            state=state,
            event_timestamp_ms=clock.milliseconds(),
            broker_id=broker_id,
        )
    )
