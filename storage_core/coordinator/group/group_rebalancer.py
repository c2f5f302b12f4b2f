"""The rebalance of a classic group: its join phase (Kafka's ``prepareRebalance`` and the
``DelayedJoin``'s ``tryCompleteJoin`` / ``onCompleteJoin``), its sync phase (the leader's
assignment written to ``__consumer_offsets``, then handed to every member) and members
leaving it (``removeMemberAndUpdateGroup``).

Rebalance protocol (the classic one, KIP-394 included):

1. JoinGroup with an empty member id: v4+ clients get MEMBER_ID_REQUIRED and a member id
   ``<client id>-<uuid>`` (kept as a *pending* member for one session timeout); older ones
   are added right away.
2. A join that changes the group moves it to PreparingRebalance. The join completes when
   every known member has sent JoinGroup again, or when the rebalance timeout (the largest of
   the members') passes; members that did not rejoin are removed. An Empty group instead
   waits ``group.initial.rebalance.delay.ms``, and again each time a new member arrives, up
   to the rebalance timeout, so that a group starting up rebalances once.
3. The new generation is CompletingRebalance; the leader's JoinGroup answer lists every
   member's metadata. The leader's SyncGroup brings the assignments, which are written to
   ``__consumer_offsets`` before every waiting SyncGroup is answered; the group is Stable.
4. Members heartbeat within their session timeout or are removed (which rebalances). While
   a member waits in JoinGroup (if it joined before) or SyncGroup its session does not run.
5. Static members (KIP-345, ``group.instance.id``; see ``static_membership``) get a member id
   on their first JoinGroup without MEMBER_ID_REQUIRED, survive rebalances they miss, and on
   a restart take their old place (and assignment) under a new member id without a
   rebalance while the group is Stable; stale member ids are fenced (FENCED_INSTANCE_ID).

Timers (rebalance deadlines, session expiry, pending members) are deadlines on the injected
clock (``group_timers``). The coordinator's ``startup`` runs a task that fires them; tests
drive them with ``expire_deadlines``.

How a JoinGroup enters the rebalance is in ``join_group``; Heartbeat, LeaveGroup and session
expiry in ``heartbeat``. The coordinator checks the group's status
(``group_status.validate_group_status``) before calling in here.

Every write of the group record goes through the ``GroupMetadataManager``; a write that
completes after the group moved on (another rebalance, another generation) changes nothing,
as in Kafka's callbacks. ``start_write`` runs the write and its follow-up as a task;
``drain_writes`` waits for those under way.

Thread safety: none; used on the coordinator's asyncio loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Coroutine, Mapping

from storage_core.clock import Clock
from storage_core.coordinator.group.errors import (
    InconsistentGroupProtocolError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)
from storage_core.coordinator.group.group_coordinator_config import GroupCoordinatorConfig
from storage_core.coordinator.group.group_metadata import GroupMetadata, GroupState
from storage_core.coordinator.group.group_metadata_manager import GroupMetadataManager
from storage_core.coordinator.group.group_status import dead_group_error, illegal_generation
from storage_core.coordinator.group.group_timers import DelayedJoin, GroupTimers
from storage_core.coordinator.group.member_metadata import (
    JoinGroupResult,
    MemberMetadata,
    SyncCallback,
    SyncGroupResult,
)
from storage_core.coordinator.group.static_membership import validate_current_member
from storage_core.errors import StorageError

# The lines logged here keep the name they had when the coordinator held this code.
logger = logging.getLogger("storage_core.coordinator.group.group_coordinator")


class GroupRebalancer:
    """Moves groups through PreparingRebalance and CompletingRebalance to Stable."""

    def __init__(
        self,
        config: GroupCoordinatorConfig,
        clock: Clock,
        manager: GroupMetadataManager,
        timers: GroupTimers,
    ) -> None:
        self.config = config
        self.clock = clock
        self.manager = manager
        self.timers = timers
        self._writes: set[asyncio.Task[None]] = set()  # group record writes under way

    # ================================================================== group record writes
    def start_write(self, write: Coroutine[object, object, None]) -> None:
        """Run a group record write and its follow-up on the loop (Kafka's append callback)."""
        task = asyncio.get_running_loop().create_task(write)
        self._writes.add(task)
        task.add_done_callback(self._write_done)

    def _write_done(self, task: asyncio.Task[None]) -> None:
        self._writes.discard(task)
        if not task.cancelled() and task.exception() is not None:
            logger.error("group metadata write failed", exc_info=task.exception())

    async def drain_writes(self) -> None:
        """Wait for the writes under way (each is bounded by offsets.commit.timeout.ms)."""
        while self._writes:
            await asyncio.gather(*self._writes, return_exceptions=True)

    # ================================================================== JoinGroup phase
    def maybe_prepare_rebalance(self, group: GroupMetadata, reason: str) -> None:
        if group.can_rebalance():
            self.prepare_rebalance(group, reason)

    def prepare_rebalance(self, group: GroupMetadata, reason: str) -> None:
        if group.is_in(GroupState.COMPLETING_REBALANCE):
            self._reset_and_propagate_assignment_with_error(
                group,
                RebalanceInProgressError(
                    f"group {group.group_id} is rebalancing again; join again"
                ),
            )
        now = self.clock.milliseconds()
        rebalance_timeout_ms = group.rebalance_timeout_ms()
        if group.is_in(GroupState.EMPTY):
            delay_ms = min(self.config.group_initial_rebalance_delay_ms, rebalance_timeout_ms)
            delayed = DelayedJoin(
                deadline_ms=now + delay_ms,
                initial=True,
                remaining_ms=max(rebalance_timeout_ms - delay_ms, 0),
            )
        else:
            delayed = DelayedJoin(deadline_ms=now + rebalance_timeout_ms, initial=False)
        group.transition_to(GroupState.PREPARING_REBALANCE, now_ms=now)
        logger.info(
            "preparing to rebalance group=%s generation=%d reason=%r",
            group.group_id,
            group.generation_id,
            reason,
        )
        self.timers.set_delayed_join(group, delayed)
        self.maybe_complete_join(group)  # e.g. the last member left: nobody to wait for

    def maybe_complete_join(self, group: GroupMetadata) -> None:
        """Complete the pending rebalance of ``group`` if it is due (Kafka's ``tryComplete``
        plus ``onExpiration`` of the delayed join)."""
        delayed = self.timers.delayed_join(group.group_id)
        if delayed is None or not group.is_in(GroupState.PREPARING_REBALANCE):
            return
        now = self.clock.milliseconds()
        if delayed.initial:
            if now < delayed.deadline_ms:
                return
            if group.new_member_added and delayed.remaining_ms > 0:
                group.new_member_added = False
                delay_ms = min(self.config.group_initial_rebalance_delay_ms, delayed.remaining_ms)
                self.timers.set_delayed_join(
                    group,
                    DelayedJoin(
                        deadline_ms=now + delay_ms,
                        initial=True,
                        remaining_ms=max(delayed.remaining_ms - delay_ms, 0),
                    ),
                )
                if delay_ms > 0:
                    return
            self._complete_join(group)
        elif group.has_all_members_joined() or now >= delayed.deadline_ms:
            self._complete_join(group)

    def _complete_join(self, group: GroupMetadata) -> None:
        """Kafka's ``onCompleteJoin``: drop who did not rejoin, start the next generation."""
        self.timers.remove_delayed_join(group.group_id)
        for member in group.not_yet_rejoined_members():
            if member.group_instance_id is not None:
                continue  # static members stay until their session expires
            logger.info(
                "removing member that did not rejoin group=%s member=%s generation=%d",
                group.group_id,
                member.member_id,
                group.generation_id,
            )
            group.maybe_invoke_sync_callback(
                member,
                SyncGroupResult(
                    error=UnknownMemberIdError(
                        f"member {member.member_id} did not rejoin group {group.group_id}"
                    )
                ),
            )
            group.remove(member.member_id)
        if group.is_in(GroupState.DEAD):
            return
        now = self.clock.milliseconds()
        if group.size and not group.maybe_elect_new_joined_leader():
            # Only static members that did not rejoin are left: wait another rebalance
            # timeout (their sessions expire meanwhile unless they come back).
            logger.warning(
                "no member rejoined group=%s generation=%d static_members=%d",
                group.group_id,
                group.generation_id,
                group.static_member_count,
            )
            self.timers.set_delayed_join(
                group,
                DelayedJoin(deadline_ms=now + group.rebalance_timeout_ms(), initial=False),
            )
            return
        group.init_next_generation(now_ms=now)
        if group.is_in(GroupState.EMPTY):
            logger.info(
                "group is now empty group=%s generation=%d", group.group_id, group.generation_id
            )
            self.start_write(
                self._store_empty_group(
                    group.group_id, group.generation_id, self.manager.store_group(group, {})
                )
            )
            return
        logger.info(
            "stabilized group group=%s generation=%d protocol=%s members=%d leader=%s",
            group.group_id,
            group.generation_id,
            group.protocol_name,
            group.size,
            group.leader_id,
        )
        for member in group.members:
            group.maybe_invoke_join_callback(
                member, self.current_join_result(group, member.member_id)
            )
            self.timers.complete_and_schedule_next_heartbeat_expiration(group, member)
            member.is_new = False

    @staticmethod
    async def _store_empty_group(
        group_id: str, generation_id: int, written: Awaitable[StorageError | None]
    ) -> None:
        error = await written
        if error is not None:
            logger.warning(
                "could not write the empty group group=%s generation=%d error=%s",
                group_id,
                generation_id,
                error,
            )

    def _reset_and_propagate_assignment_with_error(
        self, group: GroupMetadata, error: StorageError
    ) -> None:
        for member in group.members:
            member.assignment = b""
        self._propagate_assignment(group, error)

    def _set_and_propagate_assignment(
        self, group: GroupMetadata, assignments: Mapping[str, bytes]
    ) -> None:
        for member in group.members:
            member.assignment = assignments.get(member.member_id, b"")
        self._propagate_assignment(group, None)

    def _propagate_assignment(self, group: GroupMetadata, error: StorageError | None) -> None:
        for member in group.members:
            result = SyncGroupResult(
                assignment=member.assignment,
                protocol_type=group.protocol_type,
                protocol_name=group.protocol_name,
                error=error,
            )
            if group.maybe_invoke_sync_callback(member, result):
                # Its session did not run while it waited: start it again now.
                self.timers.complete_and_schedule_next_heartbeat_expiration(group, member)

    def current_join_result(self, group: GroupMetadata, member_id: str) -> JoinGroupResult:
        return JoinGroupResult(
            member_id=member_id,
            generation_id=group.generation_id,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            leader_id=group.leader_id or "",
            members=group.current_member_metadata() if group.is_leader(member_id) else (),
        )

    # ================================================================== SyncGroup phase
    def handle_sync_group(
        self,
        *,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: Mapping[str, bytes],
        respond: SyncCallback,
    ) -> None:
        def fail(error: StorageError) -> None:
            respond(SyncGroupResult(error=error))

        group = self.manager.get_group(group_id)
        if group is None:
            fail(UnknownMemberIdError(f"group {group_id} does not exist"))
            return
        if group.is_in(GroupState.DEAD):
            fail(dead_group_error(group))
            return
        error = validate_current_member(group, member_id, group_instance_id, "sync-group")
        if error is not None:
            fail(error)
            return
        if generation_id != group.generation_id:
            fail(illegal_generation(group, generation_id))
            return
        if (protocol_type is not None and protocol_type != group.protocol_type) or (
            protocol_name is not None and protocol_name != group.protocol_name
        ):
            fail(
                InconsistentGroupProtocolError(
                    f"group {group_id} uses protocol type {group.protocol_type!r} and protocol"
                    f" {group.protocol_name!r}, not {protocol_type!r} and {protocol_name!r}"
                )
            )
            return
        state = group.state
        member = group.get(member_id)
        if state is GroupState.EMPTY:
            fail(UnknownMemberIdError(f"group {group_id} is Empty"))
        elif state is GroupState.PREPARING_REBALANCE:
            fail(RebalanceInProgressError(f"group {group_id} is rebalancing; join again"))
        elif state is GroupState.COMPLETING_REBALANCE:
            previous = member.awaiting_sync_callback
            member.awaiting_sync_callback = respond
            if previous is not None:
                previous(
                    SyncGroupResult(
                        error=RebalanceInProgressError(
                            f"group {group_id}: superseded by a newer SyncGroup"
                        )
                    )
                )
            if group.is_leader(member_id):
                self._complete_sync_from_leader(group, assignments)
        elif state is GroupState.STABLE:
            respond(
                SyncGroupResult(
                    assignment=member.assignment,
                    protocol_type=group.protocol_type,
                    protocol_name=group.protocol_name,
                )
            )
            self.timers.complete_and_schedule_next_heartbeat_expiration(group, member)

    def _complete_sync_from_leader(
        self, group: GroupMetadata, assignments: Mapping[str, bytes]
    ) -> None:
        complete = {m.member_id: assignments.get(m.member_id, b"") for m in group.members}
        missing = [m for m in complete if m not in assignments]
        logger.info(
            "assignment received from leader group=%s generation=%d members=%d missing=%d",
            group.group_id,
            group.generation_id,
            len(complete),
            len(missing),
        )
        self.start_write(
            self._store_assignment(
                group, group.generation_id, complete, self.manager.store_group(group, complete)
            )
        )

    async def _store_assignment(
        self,
        group: GroupMetadata,
        generation_id: int,
        assignments: Mapping[str, bytes],
        written: Awaitable[StorageError | None],
    ) -> None:
        """Once the leader's assignment is ``written``, answer every waiting SyncGroup; if the
        group moved on meanwhile (a member joined or left), the outcome changes nothing."""
        error = await written
        if not (
            group.is_in(GroupState.COMPLETING_REBALANCE) and group.generation_id == generation_id
        ):
            return
        if error is not None:
            self._reset_and_propagate_assignment_with_error(group, error)
            self.maybe_prepare_rebalance(group, "error when storing group assignment")
            return
        self._set_and_propagate_assignment(group, assignments)
        group.transition_to(GroupState.STABLE, now_ms=self.clock.milliseconds())

    # ================================================================== members leaving
    def remove_member_and_update_group(
        self, group: GroupMetadata, member: MemberMetadata, reason: str
    ) -> None:
        gone = UnknownMemberIdError(f"member {member.member_id} left group {group.group_id}")
        group.maybe_invoke_join_callback(member, JoinGroupResult.failed(member.member_id, gone))
        group.maybe_invoke_sync_callback(member, SyncGroupResult(error=gone))
        group.remove(member.member_id)
        logger.info(
            "member removed group=%s member=%s reason=%r", group.group_id, member.member_id, reason
        )
        state = group.state
        if state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self.maybe_prepare_rebalance(group, reason)
        elif state is GroupState.PREPARING_REBALANCE:
            self.maybe_complete_join(group)
