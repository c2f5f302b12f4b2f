"""The ``RemoteLogMetadataManager`` interface (KIP-405), as Kafka declares it.

Every change to remote segment metadata is an event on ``__remote_log_metadata``; an RLMM
publishes events and materialises them into one ``RemoteLogMetadataCache`` per user partition.
Publishing returns once the event is durable on the topic **and** applied to this manager's
own cache (read-your-writes), so a caller may act on what it just wrote.

Implementations: the topic-based manager (``topic_based_rlmm``), used alike by brokers (which
tail their local replicas of the metadata partitions) and by batch jobs in other processes
(which produce and consume through the Kafka protocol).

Thread-safety: every method may be called from any thread.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

from storage_core.common import TopicIdPartition
from storage_core.tiered.metadata.metadata import (
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemotePartitionDeleteMetadata,
)
from storage_core.tiered.metadata.segment_listing import RemoteLogSegmentsSummary


class RemoteLogMetadataManager(Protocol):
    # ------------------------------------------------------------------ publishing
    def add_remote_log_segment_metadata(self, metadata: RemoteLogSegmentMetadata) -> None:
        """Publish a new segment; its state must be COPY_SEGMENT_STARTED."""

    def update_remote_log_segment_metadata(self, update: RemoteLogSegmentMetadataUpdate) -> None:
        """Publish a state change (COPY_SEGMENT_FINISHED, DELETE_SEGMENT_STARTED/FINISHED)."""

    def put_remote_partition_delete_metadata(self, metadata: RemotePartitionDeleteMetadata) -> None:
        """Publish a partition deletion state (MARKED, STARTED, FINISHED)."""

    # ------------------------------------------------------------------ queries
    def remote_log_segment_metadata(
        self, topic_id_partition: TopicIdPartition, leader_epoch: int, offset: int
    ) -> RemoteLogSegmentMetadata | None:
        """The COPY_SEGMENT_FINISHED segment holding ``offset`` in ``leader_epoch``'s lineage."""

    def highest_offset_for_epoch(
        self, topic_id_partition: TopicIdPartition, leader_epoch: int
    ) -> int | None:
        """Highest offset (inclusive) copied for ``leader_epoch``; None if nothing was."""

    def list_remote_log_segments(
        self, topic_id_partition: TopicIdPartition, leader_epoch: int | None = None
    ) -> Iterator[RemoteLogSegmentMetadata]:
        """Segments of the partition (or of one epoch), ordered by start offset."""

    def remote_log_segments_summary(
        self, topic_id_partition: TopicIdPartition
    ) -> RemoteLogSegmentsSummary:
        """``list_remote_log_segments`` of the partition summed up (earliest copied start
        offset, segments being deleted, bytes copied, count), without listing them: the
        remote log manager asks for it every task interval."""

    def remote_partition_delete_metadata(
        self, topic_id_partition: TopicIdPartition
    ) -> RemotePartitionDeleteMetadata | None:
        """The latest partition deletion event of the partition, if any."""

    # ------------------------------------------------------------------ lifecycle
    def on_partition_leadership_changes(
        self,
        leader_partitions: set[TopicIdPartition],
        follower_partitions: set[TopicIdPartition],
    ) -> None:
        """Start materialising the metadata partitions that hold these user partitions."""

    def on_stop_partitions(self, partitions: set[TopicIdPartition]) -> None:
        """Stop tracking these partitions (e.g. after deletion)."""

    def is_ready(self, topic_id_partition: TopicIdPartition) -> bool:
        """True once the partition's cache has caught up with its metadata partition."""

    def close(self) -> None: ...
