"""Remote log metadata of KIP-405 tiered storage (Kafka's RLMM building blocks).

- ``states``: ``RemoteLogSegmentState`` and ``RemotePartitionDeleteState`` state machines.
- ``metadata``: the immutable values (``RemoteLogSegmentId``, ``RemoteLogSegmentMetadata``...).
- ``serde``: ``RemoteLogMetadataSerde``, the ``__remote_log_metadata`` record values.
- ``partitioner``: ``RemoteLogMetadataTopicPartitioner`` (which metadata partition).
- ``cache``: ``RemoteLogMetadataCache``, one partition's materialised metadata.
- ``snapshot_file``: ``RemoteLogMetadataSnapshotFile``, the cache on disk.
"""

from storage_core.tiered.metadata.cache import RemoteLogLeaderEpochState, RemoteLogMetadataCache
from storage_core.tiered.metadata.errors import (
    CorruptRemoteLogMetadataError,
    CorruptRemoteLogMetadataSnapshotError,
    IllegalRemoteLogStateTransitionError,
    RemoteResourceNotFoundError,
)
from storage_core.tiered.metadata.metadata import (
    RemoteLogMetadata,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataSnapshot,
    RemoteLogSegmentMetadataUpdate,
    RemotePartitionDeleteMetadata,
)
from storage_core.tiered.metadata.partitioner import RemoteLogMetadataTopicPartitioner
from storage_core.tiered.metadata.serde import RemoteLogMetadataSerde
from storage_core.tiered.metadata.snapshot_file import RemoteLogMetadataSnapshotFile
from storage_core.tiered.metadata.states import RemoteLogSegmentState, RemotePartitionDeleteState

__all__ = [
    "CorruptRemoteLogMetadataError",
    "CorruptRemoteLogMetadataSnapshotError",
    "IllegalRemoteLogStateTransitionError",
    "RemoteLogLeaderEpochState",
    "RemoteLogMetadata",
    "RemoteLogMetadataCache",
    "RemoteLogMetadataSerde",
    "RemoteLogMetadataSnapshotFile",
    "RemoteLogMetadataTopicPartitioner",
    "RemoteLogSegmentId",
    "RemoteLogSegmentMetadata",
    "RemoteLogSegmentMetadataSnapshot",
    "RemoteLogSegmentMetadataUpdate",
    "RemoteLogSegmentState",
    "RemotePartitionDeleteMetadata",
    "RemotePartitionDeleteState",
    "RemoteResourceNotFoundError",
]
