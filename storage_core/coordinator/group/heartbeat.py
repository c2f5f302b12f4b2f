"""Heartbeat and LeaveGroup, and a member's session running out (Kafka's ``handleHeartbeat``,
``handleLeaveGroup`` and ``DelayedHeartbeat``'s ``onExpireHeartbeat``): how a member stays in
its group and how it goes.

A heartbeat from the current generation moves the member's session deadline
(``group_timers``); during a rebalance it is answered REBALANCE_IN_PROGRESS. A member that
leaves, or whose session expires while it does not wait inside a rebalance, is removed and
the group rebalances (``GroupRebalancer.remove_member_and_update_group``). An administrator
removes a static member by its ``group.instance.id`` alone (KIP-345).

The coordinator checks the group's status (``group_status.validate_group_status``) before
calling in here.

Thread safety: none; used on the coordinator's asyncio loop.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from storage_core.coordinator.group.errors import (
    RebalanceInProgressError,
    UnknownMemberIdError,
)
from storage_core.coordinator.group.group_metadata import GroupMetadata, GroupState
from storage_core.coordinator.group.group_rebalancer import GroupRebalancer
from storage_core.coordinator.group.group_status import dead_group_error, illegal_generation
from storage_core.coordinator.group.group_timers import Timer
from storage_core.coordinator.group.member_metadata import UNKNOWN_MEMBER_ID
from storage_core.coordinator.group.static_membership import validate_current_member
from storage_core.errors import StorageError

# The lines logged here keep the name they had when the coordinator held this code.
logger = logging.getLogger("storage_core.coordinator.group.group_coordinator")


@dataclass(frozen=True, slots=True, kw_only=True)
class MemberIdentity:
    """A member named by LeaveGroup."""

    member_id: str
    group_instance_id: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaveGroupResult:
    """A top-level error, or one error (None: left) per member in request order."""

    error: StorageError | None = None
    members: tuple[tuple[MemberIdentity, StorageError | None], ...] = ()


def heartbeat(
    rebalancer: GroupRebalancer,
    *,
    group_id: str,
    member_id: str,
    group_instance_id: str | None = None,
    generation_id: int,
) -> StorageError | None:
    """None when the member is alive and nothing changes; REBALANCE_IN_PROGRESS asks it
    to rejoin."""
    group = rebalancer.manager.get_group(group_id)
    if group is None:
        return UnknownMemberIdError(f"group {group_id} does not exist")
    if group.is_in(GroupState.DEAD):
        return dead_group_error(group)
    error = validate_current_member(group, member_id, group_instance_id, "heartbeat")
    if error is not None:
        return error
    if generation_id != group.generation_id:
        return illegal_generation(group, generation_id)
    state = group.state
    if state is GroupState.EMPTY:
        return UnknownMemberIdError(f"group {group_id} is Empty")
    rebalancer.timers.complete_and_schedule_next_heartbeat_expiration(group, group.get(member_id))
    if state is GroupState.PREPARING_REBALANCE:
        return RebalanceInProgressError(f"group {group_id} is rebalancing; join again")
    return None


def leave_group(
    rebalancer: GroupRebalancer, *, group_id: str, members: Sequence[MemberIdentity]
) -> LeaveGroupResult:
    group = rebalancer.manager.get_group(group_id)
    if group is None:
        return LeaveGroupResult(
            members=tuple(
                (m, UnknownMemberIdError(f"group {group_id} does not exist")) for m in members
            )
        )
    if group.is_in(GroupState.DEAD):
        return LeaveGroupResult(error=dead_group_error(group))
    results: list[tuple[MemberIdentity, StorageError | None]] = []
    for identity in members:
        results.append((identity, _leave(rebalancer, group, identity)))
    return LeaveGroupResult(members=tuple(results))


def _leave(
    rebalancer: GroupRebalancer, group: GroupMetadata, identity: MemberIdentity
) -> StorageError | None:
    member_id, instance_id = identity.member_id, identity.group_instance_id
    if member_id == UNKNOWN_MEMBER_ID:
        # KIP-345: an administrator removes a static member by its instance id alone.
        current = None if instance_id is None else group.current_static_member_id(instance_id)
        if current is None:
            return UnknownMemberIdError(
                f"group {group.group_id} has no static member with group.instance.id {instance_id}"
            )
        member_id = current
    elif group.remove_pending_member(member_id):
        logger.info("pending member left group=%s member=%s", group.group_id, member_id)
        if group.is_in(GroupState.PREPARING_REBALANCE):
            rebalancer.maybe_complete_join(group)
        return None
    else:
        error = validate_current_member(group, member_id, instance_id, "leave-group")
        if error is not None:
            return error
    rebalancer.remove_member_and_update_group(
        group, group.get(member_id), f"removing member {member_id} on LeaveGroup"
    )
    return None


def on_heartbeat_deadline(rebalancer: GroupRebalancer, group: GroupMetadata, timer: Timer) -> None:
    if not group.has(timer.member_id):
        return
    member = group.get(timer.member_id)
    if member.heartbeat_deadline_ms != timer.deadline_ms or member.should_keep_alive():
        return  # a later heartbeat moved the deadline, or it waits inside a rebalance
    logger.info(
        "member session expired group=%s member=%s session_timeout_ms=%d",
        group.group_id,
        member.member_id,
        member.session_timeout_ms,
    )
    rebalancer.remove_member_and_update_group(
        group, member, f"removing member {member.member_id} on heartbeat expiration"
    )


def expire_pending_member(
    rebalancer: GroupRebalancer, group: GroupMetadata, member_id: str
) -> None:
    if group.remove_pending_member(member_id):
        logger.info("pending member expired group=%s member=%s", group.group_id, member_id)
        if group.is_in(GroupState.PREPARING_REBALANCE):
            rebalancer.maybe_complete_join(group)
