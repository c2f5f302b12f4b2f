"""Errors of the group coordinator, each mapped to the Kafka protocol error clients expect.

The coordinator returns these (it does not raise them) inside its results, one per group,
member or partition, exactly where Kafka puts an error code in the response.
"""

from __future__ import annotations

from typing import ClassVar

from storage_core.errors import CorruptRecordError, StorageError


class GroupCoordinatorError(StorageError):
    """Base class of the errors a group request can end with."""


class InvalidGroupIdError(GroupCoordinatorError):
    """The group id is empty (JoinGroup, SyncGroup, Heartbeat, LeaveGroup) or missing."""

    error_code: ClassVar[str] = "invalid_group_id"


class CoordinatorNotAvailableError(GroupCoordinatorError):
    """The coordinator is not running, or the group's ``__consumer_offsets`` partition is not
    writable; the client retries after finding the coordinator again."""

    error_code: ClassVar[str] = "coordinator_not_available"


class CoordinatorLoadInProgressError(GroupCoordinatorError):
    """The group's ``__consumer_offsets`` partition is still being replayed; retry shortly."""

    error_code: ClassVar[str] = "coordinator_load_in_progress"


class NotCoordinatorError(GroupCoordinatorError):
    """This broker no longer leads the group's ``__consumer_offsets`` partition."""

    error_code: ClassVar[str] = "not_coordinator"


class UnknownMemberIdError(GroupCoordinatorError):
    """The member id is not (or no longer) a member of the group; the client rejoins."""

    error_code: ClassVar[str] = "unknown_member_id"


class MemberIdRequiredError(GroupCoordinatorError):
    """KIP-394: the first JoinGroup (v4+) gets a member id and must be sent again with it."""

    error_code: ClassVar[str] = "member_id_required"


class IllegalGenerationError(GroupCoordinatorError):
    """The request names a generation other than the group's current one; the client rejoins."""

    error_code: ClassVar[str] = "illegal_generation"


class RebalanceInProgressError(GroupCoordinatorError):
    """The group is rebalancing; the member must send JoinGroup again."""

    error_code: ClassVar[str] = "rebalance_in_progress"


class InconsistentGroupProtocolError(GroupCoordinatorError):
    """The member's protocol type or protocols do not match those of the group."""

    error_code: ClassVar[str] = "inconsistent_group_protocol"


class InvalidSessionTimeoutError(GroupCoordinatorError):
    """The session timeout is outside [group.min.session.timeout.ms,
    group.max.session.timeout.ms]; change the client's session timeout or the broker bounds."""

    error_code: ClassVar[str] = "invalid_session_timeout"


class GroupMaxSizeReachedError(GroupCoordinatorError):
    """The group already has ``group.max.size`` members."""

    error_code: ClassVar[str] = "group_max_size_reached"


class OffsetMetadataTooLargeError(GroupCoordinatorError):
    """The committed metadata string is longer than ``offset.metadata.max.bytes``."""

    error_code: ClassVar[str] = "offset_metadata_too_large"


class InvalidCommitOffsetSizeError(GroupCoordinatorError):
    """The offset commit does not fit one batch of ``__consumer_offsets``; commit fewer."""

    error_code: ClassVar[str] = "invalid_commit_offset_size"


class CorruptCoordinatorRecordError(CorruptRecordError):
    """A ``__consumer_offsets`` record key or value does not parse (unknown version, short or
    trailing bytes). Inspect the partition with ``storage-core dump-log``."""


class IllegalGroupStateTransitionError(GroupCoordinatorError):
    """A group was asked to move between two states the state machine does not connect.

    This is a bug in the coordinator, never a client mistake; the group is left unchanged.
    """

    error_code: ClassVar[str] = "unknown_server_error"


class NonEmptyGroupError(GroupCoordinatorError):
    """The group still has members: DeleteGroups (and OffsetDelete of a group that is not a
    consumer group) needs it Empty. Stop or close its consumers first."""

    error_code: ClassVar[str] = "non_empty_group"


class GroupIdNotFoundError(GroupCoordinatorError):
    """The group does not exist (never created, or already deleted)."""

    error_code: ClassVar[str] = "group_id_not_found"


class GroupSubscribedToTopicError(GroupCoordinatorError):
    """OffsetDelete of a partition whose topic an active consumer group subscribes to: its
    members would commit it again. Unsubscribe the topic or stop the group first."""

    error_code: ClassVar[str] = "group_subscribed_to_topic"


class FencedInstanceIdError(GroupCoordinatorError):
    """KIP-345: the request names a static member's ``group.instance.id`` with a member id that
    a newer member with the same instance id has replaced. Two consumers share one
    ``group.instance.id``: give each its own."""

    error_code: ClassVar[str] = "fenced_instance_id"


class UnstableOffsetCommitError(GroupCoordinatorError):
    """OffsetFetch with ``require_stable`` (KIP-447) of a partition whose offset is being
    committed, or waits for its transaction to end: retry once the transaction is decided."""

    error_code: ClassVar[str] = "unstable_offset_commit"
