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
- ``fencing``: ``LeaderEpochFence``; ``errors``: the named errors.
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
from storage_core.tiered.operations.fencing import LeaderEpochFence
from storage_core.tiered.operations.lineage import LineageCheck, OffsetAndEpoch
from storage_core.tiered.operations.log_view import LogView, SegmentView
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
    "RemoteCopyVerificationError",
    "SegmentNotEligibleError",
    "SegmentView",
    "StaleLeaderEpochError",
    "build_log_segment_data",
    "candidate_segments",
    "copy_segment",
    "delete_expired_segments",
    "delete_partition",
    "delete_segment",
    "expired_segments",
    "highest_remote_offset",
    "is_eligible_for_upload",
    "next_partition_deletion_step",
    "plan_expiry",
    "plan_upload",
    "segment_leader_epochs",
]
