"""Which remote segment follows another, in the lineage a partition's reads last used: what
the chunk prefetch needs to read past the end of a segment into the next one.

The lineage is the partition's leader-epoch cache: offset ``end + 1`` of a segment belongs to
the epoch the cache gives it, and the RLMM names the COPY_SEGMENT_FINISHED segment holding
that offset in that epoch, as a remote read does (``RemoteLogReader.read``)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, Protocol

from storage_core.common import TopicIdPartition
from storage_core.tiered.metadata.metadata import RemoteLogSegmentMetadata
from storage_core.tiered.remote_log_metadata_manager import RemoteLogMetadataManager

MAX_PARTITIONS = 10_000


class LeaderEpochLookup(Protocol):
    def epoch_for_offset(self, offset: int) -> int | None: ...


class NextRemoteSegment:
    """Callable: the segment after ``metadata``, or ``None``. Thread safe."""

    def __init__(self, rlmm: RemoteLogMetadataManager) -> None:
        self._rlmm = rlmm
        self._lock = threading.Lock()
        self._epochs: OrderedDict[TopicIdPartition, LeaderEpochLookup] = OrderedDict()

    def remember(self, partition: TopicIdPartition, epochs: LeaderEpochLookup) -> None:
        """The leader-epoch cache a read of ``partition`` used (the newest one wins). Every
        remote read says so: when it is the one already known, nothing is written (the
        order of eviction is then the order partitions were first seen, or changed)."""
        if self._epochs.get(partition) is epochs:
            return
        with self._lock:
            self._epochs[partition] = epochs
            self._epochs.move_to_end(partition)
            while len(self._epochs) > MAX_PARTITIONS:
                self._epochs.popitem(last=False)

    def __call__(self, metadata: Any) -> RemoteLogSegmentMetadata | None:
        if not isinstance(metadata, RemoteLogSegmentMetadata):
            return None
        partition = metadata.remote_log_segment_id.topic_id_partition
        with self._lock:
            epochs = self._epochs.get(partition)
        if epochs is None:
            return None
        next_offset = metadata.end_offset + 1
        epoch = epochs.epoch_for_offset(next_offset)
        if epoch is None:
            return None
        return self._rlmm.remote_log_segment_metadata(partition, epoch, next_offset)
