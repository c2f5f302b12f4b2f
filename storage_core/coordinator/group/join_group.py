"""JoinGroup (Kafka's ``handleJoinGroup``): a new member, a known member rejoining, and a
static member (KIP-345) taking its old place under a new member id.

A JoinGroup with an empty member id gets MEMBER_ID_REQUIRED and a pending member id (v4+,
KIP-394), or is added at once (older clients, static members); a known member's JoinGroup
answers at once or enters the rebalance, depending on the group's state and whether its
protocols changed. A static member rejoining a Stable group keeps the generation: only its new
member id is written, and its JoinGroup answered once the write is done. The rebalance the
join starts or completes is ``group_rebalancer``'s.

The coordinator checks the group's status (``group_status.validate_group_status``) before
calling ``handle_join_group``.

Thread safety: none; used on the coordinator's asyncio loop.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable
from dataclasses import dataclass

from storage_core.coordinator.group.errors import (
    GroupMaxSizeReachedError,
    InconsistentGroupProtocolError,
    InvalidSessionTimeoutError,
    MemberIdRequiredError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)
from storage_core.coordinator.group.group_metadata import GroupMetadata, GroupState
from storage_core.coordinator.group.group_rebalancer import GroupRebalancer
from storage_core.coordinator.group.group_status import dead_group_error
from storage_core.coordinator.group.group_timers import TimerKind
from storage_core.coordinator.group.member_metadata import (
    UNKNOWN_MEMBER_ID,
    JoinCallback,
    JoinGroupResult,
    MemberMetadata,
)
from storage_core.coordinator.group.static_membership import (
    generate_member_id,
    validate_current_member,
)
from storage_core.errors import StorageError

# The lines logged here keep the name they had when the coordinator held this code.
logger = logging.getLogger("storage_core.coordinator.group.group_coordinator")


def handle_join_group(
    rebalancer: GroupRebalancer,
    *,
    group_id: str,
    member_id: str,
    group_instance_id: str | None,
    require_known_member_id: bool,
    client_id: str,
    client_host: str,
    rebalance_timeout_ms: int,
    session_timeout_ms: int,
    protocol_type: str,
    protocols: tuple[tuple[str, bytes], ...],
    supports_skip_assignment: bool,
    respond: JoinCallback,
) -> None:
    config = rebalancer.config
    if not (
        config.group_min_session_timeout_ms
        <= session_timeout_ms
        <= config.group_max_session_timeout_ms
    ):
        respond(
            JoinGroupResult.failed(
                member_id,
                InvalidSessionTimeoutError(
                    f"session timeout {session_timeout_ms} ms is outside"
                    f" [{config.group_min_session_timeout_ms},"
                    f" {config.group_max_session_timeout_ms}] ms (group.min/max.session"
                    ".timeout.ms); change the client's session.timeout.ms"
                ),
            )
        )
        return
    is_unknown_member = member_id == UNKNOWN_MEMBER_ID
    group = rebalancer.manager.get_group(group_id)
    if group is None:
        if not is_unknown_member:
            respond(
                JoinGroupResult.failed(
                    member_id,
                    UnknownMemberIdError(f"group {group_id} has no member {member_id}"),
                )
            )
            return
        group = rebalancer.manager.add_group(
            GroupMetadata(group_id, now_ms=rebalancer.clock.milliseconds())
        )
    if not _accept_joining_member(rebalancer, group, member_id):
        respond(
            JoinGroupResult.failed(
                member_id,
                GroupMaxSizeReachedError(
                    f"group {group_id} already has {group.size} members"
                    f" (group.max.size={rebalancer.config.group_max_size})"
                ),
            )
        )
        return
    join = _Join(
        member_id=member_id,
        group_instance_id=group_instance_id,
        client_id=client_id,
        client_host=client_host,
        rebalance_timeout_ms=rebalance_timeout_ms,
        session_timeout_ms=session_timeout_ms,
        protocol_type=protocol_type,
        protocols=protocols,
    )
    if is_unknown_member:
        _do_unknown_join_group(
            rebalancer,
            group,
            join,
            require_known_member_id=require_known_member_id,
            supports_skip_assignment=supports_skip_assignment,
            respond=respond,
        )
    else:
        _do_current_member_join_group(rebalancer, group, join, respond)
    if group.is_in(GroupState.PREPARING_REBALANCE):
        rebalancer.maybe_complete_join(group)


def _accept_joining_member(
    rebalancer: GroupRebalancer, group: GroupMetadata, member_id: str
) -> bool:
    limit = rebalancer.config.group_max_size
    state = group.state
    if state in (GroupState.EMPTY, GroupState.DEAD):
        return True
    if state is GroupState.PREPARING_REBALANCE:
        if group.has(member_id) and group.get(member_id).is_awaiting_join:
            return True
        return group.num_members_awaiting_join < limit
    return group.has(member_id) or group.size < limit


def _do_unknown_join_group(
    rebalancer: GroupRebalancer,
    group: GroupMetadata,
    join: _Join,
    *,
    require_known_member_id: bool,
    supports_skip_assignment: bool,
    respond: JoinCallback,
) -> None:
    if group.is_in(GroupState.DEAD):
        respond(JoinGroupResult.failed(join.member_id, dead_group_error(group)))
        return
    if not group.supports_protocols(join.protocol_type, join.protocol_names):
        respond(JoinGroupResult.failed(join.member_id, _inconsistent_protocol(group, join)))
        return
    new_member_id = generate_member_id(join.client_id, join.group_instance_id)
    instance_id = join.group_instance_id
    if instance_id is not None:
        old_member_id = group.current_static_member_id(instance_id)
        if old_member_id is None:
            logger.info(
                "new static member group=%s instance=%s member=%s state=%s",
                group.group_id,
                instance_id,
                new_member_id,
                group.state.value,
            )
            _add_member_and_rebalance(
                rebalancer, group, join.with_member_id(new_member_id), respond
            )
        else:
            _update_static_member_and_rebalance(
                rebalancer,
                group,
                old_member_id,
                join.with_member_id(new_member_id),
                supports_skip_assignment=supports_skip_assignment,
                respond=respond,
            )
        return
    if require_known_member_id:
        group.add_pending_member(new_member_id)
        rebalancer.timers.schedule(
            rebalancer.clock.milliseconds() + join.session_timeout_ms,
            TimerKind.PENDING_MEMBER,
            group.group_id,
            new_member_id,
        )
        logger.debug("member id required group=%s member=%s", group.group_id, new_member_id)
        respond(
            JoinGroupResult.failed(
                new_member_id,
                MemberIdRequiredError(
                    f"group {group.group_id}: join again with member id {new_member_id}"
                ),
            )
        )
        return
    _add_member_and_rebalance(rebalancer, group, join.with_member_id(new_member_id), respond)


def _do_current_member_join_group(
    rebalancer: GroupRebalancer, group: GroupMetadata, join: _Join, respond: JoinCallback
) -> None:
    member_id = join.member_id
    if group.is_in(GroupState.DEAD):
        respond(JoinGroupResult.failed(member_id, dead_group_error(group)))
        return
    if not group.supports_protocols(join.protocol_type, join.protocol_names):
        respond(JoinGroupResult.failed(member_id, _inconsistent_protocol(group, join)))
        return
    if group.has_pending_member(member_id):
        if join.group_instance_id is not None:
            # Member ids are handed out pending only to dynamic members (KIP-394).
            respond(
                JoinGroupResult.failed(
                    member_id,
                    UnknownMemberIdError(
                        f"group {group.group_id}: pending member {member_id} cannot join"
                        f" with group.instance.id {join.group_instance_id}; join again"
                        " with an empty member id"
                    ),
                )
            )
            return
        _add_member_and_rebalance(rebalancer, group, join, respond)
        return
    error = validate_current_member(group, member_id, join.group_instance_id, "join-group")
    if error is not None:
        respond(JoinGroupResult.failed(member_id, error))
        return
    member = group.get(member_id)
    state = group.state
    if state is GroupState.PREPARING_REBALANCE:
        _update_member_and_rebalance(rebalancer, group, member, join, respond)
    elif state is GroupState.COMPLETING_REBALANCE:
        if member.matches(join.protocols):
            # The member missed the answer to its JoinGroup: send it again.
            respond(rebalancer.current_join_result(group, member_id))
        else:
            _update_member_and_rebalance(rebalancer, group, member, join, respond)
    elif state is GroupState.STABLE:
        if group.is_leader(member_id) or not member.matches(join.protocols):
            # The leader rejoining means it wants a new assignment (e.g. new topics).
            _update_member_and_rebalance(rebalancer, group, member, join, respond)
        else:
            respond(rebalancer.current_join_result(group, member_id))
    else:
        respond(
            JoinGroupResult.failed(
                member_id,
                UnknownMemberIdError(
                    f"group {group.group_id} is {state.value}; member {member_id} is unknown"
                ),
            )
        )


def _add_member_and_rebalance(
    rebalancer: GroupRebalancer, group: GroupMetadata, join: _Join, respond: JoinCallback
) -> None:
    member = MemberMetadata(
        member_id=join.member_id,
        group_instance_id=join.group_instance_id,
        client_id=join.client_id,
        client_host=join.client_host,
        rebalance_timeout_ms=join.rebalance_timeout_ms,
        session_timeout_ms=join.session_timeout_ms,
        protocol_type=join.protocol_type,
        supported_protocols=join.protocols,
    )
    member.is_new = True
    if group.is_in(GroupState.PREPARING_REBALANCE) and group.generation_id == 0:
        group.new_member_added = True
    group.add(member, respond)
    rebalancer.timers.complete_and_schedule_next_heartbeat_expiration(
        group, member, rebalancer.config.new_member_join_timeout_ms
    )
    group.remove_pending_member(member.member_id)
    rebalancer.maybe_prepare_rebalance(group, f"adding new member {member.member_id}")


def _update_static_member_and_rebalance(
    rebalancer: GroupRebalancer,
    group: GroupMetadata,
    old_member_id: str,
    join: _Join,
    *,
    supports_skip_assignment: bool,
    respond: JoinCallback,
) -> None:
    """A known static member joins with an unknown member id (Kafka's
    ``updateStaticMemberAndRebalance``): it takes its old place under ``join.member_id``."""
    instance_id = join.group_instance_id
    if instance_id is None:
        raise ValueError("only a static member can be replaced")
    new_member_id = join.member_id
    current_leader = group.leader_id
    member = group.replace_static_member(instance_id, old_member_id, new_member_id)
    # The old member id's heartbeat deadline now finds no member and does nothing.
    rebalancer.timers.complete_and_schedule_next_heartbeat_expiration(group, member)
    old_protocols = member.supported_protocols
    old_rebalance_timeout_ms = member.rebalance_timeout_ms
    old_session_timeout_ms = member.session_timeout_ms
    group.update_member(
        member,
        join.protocols,
        rebalance_timeout_ms=join.rebalance_timeout_ms,
        session_timeout_ms=join.session_timeout_ms,
        callback=respond,
    )
    logger.info(
        "static member rejoined group=%s instance=%s old_member=%s member=%s state=%s",
        group.group_id,
        instance_id,
        old_member_id,
        new_member_id,
        group.state.value,
    )
    state = group.state
    if state is GroupState.STABLE:
        if group.select_protocol() != group.protocol_name:
            rebalancer.maybe_prepare_rebalance(
                group,
                f"static member {new_member_id} with instance id {instance_id} changes the"
                " selected protocol",
            )
            return
        # Only the member id changed: persist it and answer with the current generation.
        rebalancer.start_write(
            _persist_static_member(
                rebalancer,
                group,
                member,
                rebalancer.manager.store_group(
                    group, {m.member_id: m.assignment for m in group.members}
                ),
                old_member_id=old_member_id,
                current_leader=current_leader,
                old_protocols=old_protocols,
                old_rebalance_timeout_ms=old_rebalance_timeout_ms,
                old_session_timeout_ms=old_session_timeout_ms,
                supports_skip_assignment=supports_skip_assignment,
                respond=respond,
            )
        )
    elif state is GroupState.COMPLETING_REBALANCE:
        # The leader may be assigning to the old member id: rebalance again.
        rebalancer.prepare_rebalance(
            group,
            f"static member {new_member_id} with instance id {instance_id} rejoined while"
            " the group completes a rebalance",
        )
    elif state is not GroupState.PREPARING_REBALANCE:
        raise StorageError(  # unreachable: a group with members is never Empty or Dead
            f"group {group.group_id} is {state.value} with static member {instance_id}"
        )


async def _persist_static_member(
    rebalancer: GroupRebalancer,
    group: GroupMetadata,
    member: MemberMetadata,
    written: Awaitable[StorageError | None],
    *,
    old_member_id: str,
    current_leader: str | None,
    old_protocols: tuple[tuple[str, bytes], ...],
    old_rebalance_timeout_ms: int,
    old_session_timeout_ms: int,
    supports_skip_assignment: bool,
    respond: JoinCallback,
) -> None:
    """Once the group with the static member's new member id is ``written``, answer its
    JoinGroup; if the write failed, the member goes back to its old member id (Kafka's
    callback in ``updateStaticMemberAndRebalance``)."""
    instance_id = member.group_instance_id
    new_member_id = member.member_id
    error = await written
    if error is not None:
        if instance_id is not None and group.has(new_member_id):
            group.update_member(
                member,
                old_protocols,
                rebalance_timeout_ms=old_rebalance_timeout_ms,
                session_timeout_ms=old_session_timeout_ms,
                callback=None,
            )
            old = group.replace_static_member(instance_id, new_member_id, old_member_id)
            rebalancer.timers.complete_and_schedule_next_heartbeat_expiration(group, old)
        respond(
            JoinGroupResult(
                member_id=UNKNOWN_MEMBER_ID,
                generation_id=group.generation_id,
                protocol_type=group.protocol_type,
                protocol_name=group.protocol_name,
                leader_id=current_leader or "",
                error=error,
            )
        )
        return
    is_leader = group.is_leader(new_member_id)
    if supports_skip_assignment:
        # v9+: the leader learns it leads (to watch metadata) but skips assigning.
        result = JoinGroupResult(
            member_id=new_member_id,
            generation_id=group.generation_id,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            leader_id=group.leader_id or "",
            members=group.current_member_metadata() if is_leader else (),
            skip_assignment=is_leader,
        )
    else:
        # Before v9 the old leader id is returned, so that a rejoining leader does not
        # compute an assignment that a Stable group would ignore.
        result = JoinGroupResult(
            member_id=new_member_id,
            generation_id=group.generation_id,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            leader_id=current_leader or "",
        )
    group.maybe_invoke_join_callback(member, result)


def _update_member_and_rebalance(
    rebalancer: GroupRebalancer,
    group: GroupMetadata,
    member: MemberMetadata,
    join: _Join,
    respond: JoinCallback,
) -> None:
    previous = member.awaiting_join_callback
    group.update_member(
        member,
        join.protocols,
        rebalance_timeout_ms=join.rebalance_timeout_ms,
        session_timeout_ms=join.session_timeout_ms,
        callback=respond,
    )
    if previous is not None and previous is not respond:
        # A second JoinGroup replaces the first: answer the first so that it is not left
        # hanging (the client has given up on it).
        previous(
            JoinGroupResult.failed(
                member.member_id,
                RebalanceInProgressError(
                    f"group {group.group_id}: superseded by a newer JoinGroup"
                ),
            )
        )
    rebalancer.maybe_prepare_rebalance(group, f"updating metadata of member {member.member_id}")


@dataclass(frozen=True, slots=True, kw_only=True)
class _Join:
    """The fields of one JoinGroup request that describe the member."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]

    @property
    def protocol_names(self) -> list[str]:
        return [name for name, _metadata in self.protocols]

    def with_member_id(self, member_id: str) -> _Join:
        return _Join(
            member_id=member_id,
            group_instance_id=self.group_instance_id,
            client_id=self.client_id,
            client_host=self.client_host,
            rebalance_timeout_ms=self.rebalance_timeout_ms,
            session_timeout_ms=self.session_timeout_ms,
            protocol_type=self.protocol_type,
            protocols=self.protocols,
        )


def _inconsistent_protocol(group: GroupMetadata, join: _Join) -> StorageError:
    return InconsistentGroupProtocolError(
        f"group {group.group_id} (protocol type {group.protocol_type!r}) cannot take a member"
        f" with protocol type {join.protocol_type!r} and protocols {join.protocol_names}:"
        " the type must match and one protocol must be supported by every member"
    )
