"""Classic consumer groups (Kafka's ``GroupCoordinator``) with offsets in ``__consumer_offsets``.

``group_metadata`` holds one group's state machine and members, ``offsets_records`` the record
formats of ``__consumer_offsets``, ``coordinator_writer`` how writes go through the broker's
replica manager, ``group_metadata_manager`` the group cache and its persistence,
``group_coordinator`` the JoinGroup/SyncGroup/Heartbeat/LeaveGroup/OffsetCommit/OffsetFetch/
ListGroups/DescribeGroups logic.
"""

from storage_core.coordinator.group.group_coordinator import (
    GroupCoordinator,
    GroupCoordinatorConfig,
    MemberIdentity,
)
from storage_core.coordinator.group.group_metadata import GroupState, OffsetAndMetadata
from storage_core.coordinator.group.offsets_records import OFFSETS_TOPIC_NAME, partition_for

__all__ = [
    "OFFSETS_TOPIC_NAME",
    "GroupCoordinator",
    "GroupCoordinatorConfig",
    "GroupState",
    "MemberIdentity",
    "OffsetAndMetadata",
    "partition_for",
]
