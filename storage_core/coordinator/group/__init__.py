"""Classic consumer groups (Kafka's ``GroupCoordinator``) with offsets in ``__consumer_offsets``.

What lives where, in Kafka's terms:

* ``group_coordinator``: ``GroupCoordinator``, what the protocol handlers call (JoinGroup,
  SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch, ListGroups, DescribeGroups,
  DeleteGroups, OffsetDelete), its lifecycle and the partitions it loads and unloads as
  leadership of ``__consumer_offsets`` moves; ``group_coordinator_config`` its configs
  (``GroupCoordinatorConfig``); ``group_status`` the check every request passes first
  (``validateGroupStatus``);
* ``join_group`` (JoinGroup, static members included), ``group_rebalancer`` (the rebalance:
  ``prepareRebalance``, ``onCompleteJoin``, the leader's SyncGroup), ``heartbeat``
  (Heartbeat, LeaveGroup, session expiry), ``group_timers`` (``DelayedJoin`` /
  ``DelayedHeartbeat`` deadlines), ``static_membership`` (KIP-345 checks);
* ``offset_manager`` (OffsetCommit, TxnOffsetCommit, OffsetFetch), ``txn_offsets``
  (transactional offsets pending until their marker), ``group_deletion`` (DeleteGroups,
  OffsetDelete);
* ``group_metadata`` one group's state machine (``GroupMetadata``), ``member_metadata`` its
  members (``MemberMetadata``), ``group_metadata_manager`` the group cache and its
  persistence (``GroupMetadataManager``), ``offsets_replay`` the load of a partition,
  ``offsets_records`` the record formats of ``__consumer_offsets`` and ``group_records`` a
  group's records, ``coordinator_writer`` how writes go through the broker's replica
  manager, ``consumer_protocol`` the consumer's subscription format.
"""

from storage_core.coordinator.group.group_coordinator import GroupCoordinator
from storage_core.coordinator.group.group_coordinator_config import GroupCoordinatorConfig
from storage_core.coordinator.group.group_metadata import (
    GroupState,
)
from storage_core.coordinator.group.heartbeat import MemberIdentity
from storage_core.coordinator.group.offset_and_metadata import (
    OffsetAndMetadata,
)
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
