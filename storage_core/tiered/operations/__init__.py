"""Tiering operations for batch jobs and the ``storage-core tier`` command.

Each runs in a process that only reads a broker's log dir (through ``LogView``) and talks
to a ``RemoteStorageManager`` and a ``RemoteLogMetadataManager``. Planning is pure; the
functions that publish events follow the order of DESIGN section 4 and roll back what they
started.

- ``log_view``: ``LogView.read(partition_dir)``, a read-only snapshot of a partition.
- ``lineage``: leader-epoch lineage rules (Kafka's ``findHighestRemoteOffset``,
  ``isRemoteSegmentWithinLeaderEpochs``, ``epochEntriesInRange``).
- ``copy``: ``candidate_segments`` and ``copy_segment``.
- ``expiry``: ``expired_segments`` (pure), ``plan_expiry``, ``delete_expired_segments``.
- ``segment_deletion``: ``delete_segment``.
- ``partition_deletion``: ``delete_partition`` (resumable).
- ``discovery``: ``discover_targets`` (the partitions to work on, read from their leaders'
  log dirs, and those left out with why), ``read_view``, ``metadata_client``.
- ``marked_partitions``: partitions whose remote data waits for deletion.
- ``fencing``: ``LeaderEpochFence``, ``fence_for``; ``errors``: the named errors.
"""

from storage_core.tiered.operations.copy import (
    CopyResult,
    build_log_segment_data,
    candidate_segments,
    copy_segment,
    highest_remote_offset,
    is_eligible_for_upload,
    plan_upload,
    segment_leader_epochs,
)
from storage_core.tiered.operations.discovery import (
    PartitionTarget,
    SkippedPartition,
    SkipReason,
    TargetDiscovery,
    check_log_dir_owners,
    discover_targets,
    is_leader_unreachable,
    leader_unavailable,
    metadata_client,
    partition_dirs,
    plan_targets,
    read_log_dir_owners,
    read_view,
    resolve_broker_id,
    topic_log_config,
)
from storage_core.tiered.operations.errors import (
    CustomMetadataSizeLimitExceededError,
    PartitionDeletedError,
    PartitionDirChangedError,
    PartitionNotMarkedForDeletionError,
    RemoteCopyVerificationError,
    SegmentNotEligibleError,
    StaleLeaderEpochError,
)
from storage_core.tiered.operations.expiry import (
    ExpiredSegment,
    ExpiryOutcome,
    ExpiryPlan,
    ExpiryReason,
    delete_expired_segments,
    expired_segments,
    plan_expiry,
)
from storage_core.tiered.operations.fencing import (
    LeaderEpochFence,
    current_leader_epoch,
    fence_for,
)
from storage_core.tiered.operations.lineage import LineageCheck, OffsetAndEpoch
from storage_core.tiered.operations.log_view import LogView, SegmentView
from storage_core.tiered.operations.marked_partitions import (
    marked_partitions,
    marked_partitions_by_broker,
)
from storage_core.tiered.operations.partition_deletion import (
    PartitionDeletionResult,
    PartitionDeletionStep,
    delete_partition,
    next_partition_deletion_step,
)
from storage_core.tiered.operations.segment_deletion import delete_segment

__all__ = [
    "CopyResult",
    "CustomMetadataSizeLimitExceededError",
    "ExpiredSegment",
    "ExpiryOutcome",
    "ExpiryPlan",
    "ExpiryReason",
    "LeaderEpochFence",
    "LineageCheck",
    "LogView",
    "OffsetAndEpoch",
    "PartitionDeletedError",
    "PartitionDeletionResult",
    "PartitionDeletionStep",
    "PartitionDirChangedError",
    "PartitionNotMarkedForDeletionError",
    "PartitionTarget",
    "RemoteCopyVerificationError",
    "SegmentNotEligibleError",
    "SegmentView",
    "SkipReason",
    "SkippedPartition",
    "StaleLeaderEpochError",
    "TargetDiscovery",
    "build_log_segment_data",
    "candidate_segments",
    "check_log_dir_owners",
    "copy_segment",
    "current_leader_epoch",
    "delete_expired_segments",
    "delete_partition",
    "delete_segment",
    "discover_targets",
    "expired_segments",
    "fence_for",
    "highest_remote_offset",
    "is_eligible_for_upload",
    "is_leader_unreachable",
    "leader_unavailable",
    "marked_partitions",
    "marked_partitions_by_broker",
    "metadata_client",
    "next_partition_deletion_step",
    "partition_dirs",
    "plan_expiry",
    "plan_targets",
    "plan_upload",
    "read_log_dir_owners",
    "read_view",
    "resolve_broker_id",
    "segment_leader_epochs",
    "topic_log_config",
]
