"""``InMemoryRemoteLogMetadataManager``: the RLMM interface over in-process caches.

One ``RemoteLogMetadataCache`` per user partition, created on first use and initialized at
once (there is no topic to catch up with). Every publish is applied to the cache before the
method returns, which gives the read-your-writes contract of ``RemoteLogMetadataManager``;
an event the state machines forbid raises ``IllegalRemoteLogStateTransitionError`` and
changes nothing.

For single-process use and tests only: nothing is durable and nothing is shared between
processes. Brokers and batch jobs that must agree on metadata use the topic-based manager
(``topic_based_rlmm``), which materialises the same caches from ``__remote_log_metadata``.

Thread-safety: every method may be called from any thread (one lock guards the partition
map; each cache has its own lock).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

from storage_core.common import TopicIdPartition
from storage_core.tiered.metadata.cache import RemoteLogMetadataCache
from storage_core.tiered.metadata.metadata import (
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemotePartitionDeleteMetadata,
)
from storage_core.tiered.metadata.segment_listing import RemoteLogSegmentsSummary


class InMemoryRemoteLogMetadataManager:
    """A ``RemoteLogMetadataManager`` kept in memory (see the module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._caches: dict[TopicIdPartition, RemoteLogMetadataCache] = {}
        self._closed = False

    def _cache(self, topic_id_partition: TopicIdPartition) -> RemoteLogMetadataCache:
        with self._lock:
            if self._closed:
                raise RuntimeError("InMemoryRemoteLogMetadataManager is closed")
            cache = self._caches.get(topic_id_partition)
            if cache is None:
                cache = RemoteLogMetadataCache(topic_id_partition)
                cache.mark_initialized()
                self._caches[topic_id_partition] = cache
            return cache

    # ------------------------------------------------------------------ publishing
    def add_remote_log_segment_metadata(self, metadata: RemoteLogSegmentMetadata) -> None:
        self._cache(metadata.topic_id_partition).add_copy_in_progress_segment(metadata)

    def update_remote_log_segment_metadata(self, update: RemoteLogSegmentMetadataUpdate) -> None:
        self._cache(update.topic_id_partition).update_remote_log_segment_metadata(update)

    def put_remote_partition_delete_metadata(self, metadata: RemotePartitionDeleteMetadata) -> None:
        self._cache(metadata.topic_id_partition).put_remote_partition_delete_metadata(metadata)

    # ------------------------------------------------------------------ queries
    def remote_log_segment_metadata(
        self, topic_id_partition: TopicIdPartition, leader_epoch: int, offset: int
    ) -> RemoteLogSegmentMetadata | None:
        return self._cache(topic_id_partition).remote_log_segment_metadata(leader_epoch, offset)

    def highest_offset_for_epoch(
        self, topic_id_partition: TopicIdPartition, leader_epoch: int
    ) -> int | None:
        return self._cache(topic_id_partition).highest_offset_for_epoch(leader_epoch)

    def list_remote_log_segments(
        self, topic_id_partition: TopicIdPartition, leader_epoch: int | None = None
    ) -> Iterator[RemoteLogSegmentMetadata]:
        return iter(self._cache(topic_id_partition).list_remote_log_segments(leader_epoch))

    def remote_log_segments_summary(
        self, topic_id_partition: TopicIdPartition
    ) -> RemoteLogSegmentsSummary:
        return self._cache(topic_id_partition).remote_log_segments_summary()

    def remote_partition_delete_metadata(
        self, topic_id_partition: TopicIdPartition
    ) -> RemotePartitionDeleteMetadata | None:
        return self._cache(topic_id_partition).remote_partition_delete_metadata()

    # ------------------------------------------------------------------ lifecycle
    def on_partition_leadership_changes(
        self,
        leader_partitions: set[TopicIdPartition],
        follower_partitions: set[TopicIdPartition],
    ) -> None:
        for topic_id_partition in leader_partitions | follower_partitions:
            self._cache(topic_id_partition)

    def on_stop_partitions(self, partitions: set[TopicIdPartition]) -> None:
        """Nothing to stop: the caches are the only copy of the metadata, so they are kept."""

    def is_ready(self, topic_id_partition: TopicIdPartition) -> bool:
        return True

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._caches.clear()
