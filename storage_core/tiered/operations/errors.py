"""Named errors of the tiering operations (copy, expiry, partition deletion).

Each says what was wrong and what to do about it. They reach the batch jobs and the
``storage-core tier`` command, never a Kafka client, so ``error_code`` only follows the
convention of ``storage_core.errors``.
"""

from __future__ import annotations

from typing import ClassVar

from storage_core.errors import FencedLeaderEpochError, KafkaStorageError, StorageError
from storage_core.tiered.remote_storage_manager import RemoteStorageError


class StaleLeaderEpochError(FencedLeaderEpochError):
    """The partition's leader epoch moved past the epoch the operation was planned at.

    A job planned at leader epoch ``E`` publishes nothing for a partition whose current
    leader epoch is greater than ``E``: a new leader owns the partition's remote tier now.
    Whatever the operation already uploaded under its own segment id was rolled back (or is
    left for the reconcile job, as the message says). Re-plan from a fresh view of the
    leader's log dir.
    """

    error_code: ClassVar[str] = "fenced_leader_epoch"


class PartitionDirChangedError(KafkaStorageError):
    """The partition directory kept changing while it was read (segments deleted or rolled
    between listing and reading). Read it again later; the broker is probably running
    retention on it right now."""


class SegmentNotEligibleError(StorageError):
    """A segment handed to ``copy_segment`` may not be copied (the active segment, one not in
    the view, or one without leader-epoch entries). Plan with ``candidate_segments``."""

    error_code: ClassVar[str] = "invalid_request"


class PartitionDeletedError(StorageError):
    """The partition's remote data is marked for deletion; nothing more may be copied to it.
    Run the partition deletion steps instead."""

    error_code: ClassVar[str] = "unknown_topic_or_partition"


class PartitionNotMarkedForDeletionError(StorageError):
    """Partition deletion was asked for a partition that has no DELETE_PARTITION_MARKED event.
    The controller marks a partition when its topic is deleted; do not delete without it."""

    error_code: ClassVar[str] = "invalid_request"


class RemoteCopyVerificationError(RemoteStorageError):
    """An uploaded object does not match the local file it was copied from (size or bytes).
    The copy was rolled back; retry it, and check the remote store if it happens again."""


class CustomMetadataSizeLimitExceededError(RemoteStorageError):
    """The remote storage manager returned custom metadata larger than
    ``remote.log.metadata.custom.metadata.max.bytes`` (Kafka's
    ``CustomMetadataSizeLimitExceededException``). The copy was rolled back; raise the limit
    or fix the remote storage manager."""
