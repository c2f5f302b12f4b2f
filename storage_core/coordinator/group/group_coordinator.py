"""The classic group coordinator (Kafka's ``GroupCoordinator``): rebalances and offsets.

Interface towards the broker (everything it needs, nothing more)::

    coordinator = GroupCoordinator(
        GroupCoordinatorConfig(offsets_topic_num_partitions=50, ...),
        get_offsets_log=lambda p: <the Log of __consumer_offsets-p, led by this broker>,
        replica_manager=<appends with acks=-1 (coordinator_writer.ReplicaAppender)>,
        clock=SYSTEM_CLOCK,
    )
    await coordinator.startup()     # replays every offsets partition, starts the timers
    ... join_group / sync_group / heartbeat / leave_group / commit_offsets / fetch_offsets /
        list_groups / describe_group, called by the protocol handlers ...
    await coordinator.shutdown()    # answers parked requests with NOT_COORDINATOR

Every write to ``__consumer_offsets`` (offset commits, the group record of a rebalance,
tombstones) goes through the replica manager with acks=-1; the request that caused it is
answered once every in-sync replica has it. A write that completes after the group moved on
(another rebalance, another generation) changes nothing, as in Kafka's callbacks.

Results carry errors (``StorageError`` instances whose ``error_code`` is the Kafka error) in
the places where Kafka's responses carry error codes; nothing here raises for a client error.

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
clock. ``startup`` runs a task that fires them; tests drive them with ``expire_deadlines``.

DeleteGroups and OffsetDelete live in ``group_deletion``.

Not implemented: transactional offset commits, offset expiration
(``offsets.retention.minutes``), the pending-sync timeout and the KIP-848 consumer protocol.

Thread safety: none; every method runs on the one asyncio loop that called ``startup``
(``load`` may run on a worker thread before it).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import heapq
import itertools
import logging
from collections.abc import Awaitable, Callable, Collection, Coroutine, Mapping, Sequence
from dataclasses import dataclass

from storage_core.clock import SYSTEM_CLOCK, Clock
from storage_core.common import TopicPartition
from storage_core.coordinator.group import group_deletion
from storage_core.coordinator.group.coordinator_writer import ReplicaAppender
from storage_core.coordinator.group.errors import (
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    GroupMaxSizeReachedError,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    InvalidGroupIdError,
    InvalidSessionTimeoutError,
    MemberIdRequiredError,
    NotCoordinatorError,
    OffsetMetadataTooLargeError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)
from storage_core.coordinator.group.group_metadata import (
    GroupMetadata,
    GroupOverview,
    GroupState,
    GroupSummary,
    OffsetAndMetadata,
)
from storage_core.coordinator.group.group_metadata_manager import (
    GroupMetadataManager,
    PartitionLoadState,
)
from storage_core.coordinator.group.member_metadata import (
    UNKNOWN_MEMBER_ID,
    JoinCallback,
    JoinGroupResult,
    MemberMetadata,
    SyncCallback,
    SyncGroupResult,
)
from storage_core.coordinator.group.static_membership import (
    generate_member_id,
    validate_current_member,
)
from storage_core.errors import InvalidConfigError, StorageError
from storage_core.log.log import Log

logger = logging.getLogger(__name__)

INT32_MAX = 2**31 - 1


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupCoordinatorConfig:
    """The broker configs the coordinator reads, under Kafka's names and defaults.

    offsets_topic_num_partitions        offsets.topic.num.partitions
    group_initial_rebalance_delay_ms    group.initial.rebalance.delay.ms
    group_min_session_timeout_ms        group.min.session.timeout.ms  (inclusive bound)
    group_max_session_timeout_ms        group.max.session.timeout.ms  (inclusive bound)
    group_max_size                      group.max.size
    offset_metadata_max_bytes           offset.metadata.max.bytes     (characters, as Kafka)
    offset_commit_timeout_ms            offsets.commit.timeout.ms     (a write waits this long
                                                                       for the in-sync replicas)
    new_member_join_timeout_ms          how long a new member may wait in its first join
    max_timer_wait_ms                   the timer task wakes at least this often
    """

    offsets_topic_num_partitions: int = 50
    group_initial_rebalance_delay_ms: int = 3000
    group_min_session_timeout_ms: int = 6000
    group_max_session_timeout_ms: int = 1_800_000
    group_max_size: int = INT32_MAX
    offset_metadata_max_bytes: int = 4096
    offset_commit_timeout_ms: int = 5000
    new_member_join_timeout_ms: int = 300_000
    max_timer_wait_ms: int = 1000

    def __post_init__(self) -> None:
        if self.offsets_topic_num_partitions <= 0:
            raise InvalidConfigError(
                "offsets.topic.num.partitions must be positive, got"
                f" {self.offsets_topic_num_partitions}"
            )
        if self.group_initial_rebalance_delay_ms < 0:
            raise InvalidConfigError(
                "group.initial.rebalance.delay.ms must be >= 0, got"
                f" {self.group_initial_rebalance_delay_ms}"
            )
        if not 0 <= self.group_min_session_timeout_ms <= self.group_max_session_timeout_ms:
            raise InvalidConfigError(
                f"group.min.session.timeout.ms ({self.group_min_session_timeout_ms}) must be"
                f" >= 0 and <= group.max.session.timeout.ms"
                f" ({self.group_max_session_timeout_ms})"
            )
        if self.group_max_size < 1:
            raise InvalidConfigError(f"group.max.size must be >= 1, got {self.group_max_size}")
        if self.offset_metadata_max_bytes < 0:
            raise InvalidConfigError(
                f"offset.metadata.max.bytes must be >= 0, got {self.offset_metadata_max_bytes}"
            )
        if self.offset_commit_timeout_ms <= 0:
            raise InvalidConfigError(
                f"offsets.commit.timeout.ms must be positive, got {self.offset_commit_timeout_ms}"
            )
        if self.new_member_join_timeout_ms <= 0 or self.max_timer_wait_ms <= 0:
            raise InvalidConfigError("the join timeout and timer wait must be positive")


# ====================================================================== request / result values
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


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetFetchResult:
    """A group-level error, or the committed offset (None: none) of each partition."""

    error: StorageError | None = None
    offsets: Mapping[TopicPartition, OffsetAndMetadata | None]


@dataclass(frozen=True, slots=True, kw_only=True)
class ListGroupsResult:
    error: StorageError | None = None
    groups: tuple[GroupOverview, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeGroupResult:
    """``summary`` is None when ``error`` is set; an unknown group is reported Dead."""

    error: StorageError | None = None
    summary: GroupSummary | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class _DelayedJoin:
    """A rebalance waiting for members (Kafka's ``DelayedJoin`` / ``InitialDelayedJoin``).

    ``initial``: the group was Empty; wait the whole delay and extend it while new members
    keep arriving, by at most ``remaining_ms`` more in total.
    """

    deadline_ms: int
    initial: bool
    remaining_ms: int = 0


class _TimerKind(enum.Enum):
    JOIN = "join"
    HEARTBEAT = "heartbeat"
    PENDING_MEMBER = "pending_member"


@dataclass(frozen=True, slots=True, order=True)
class _Timer:
    deadline_ms: int
    sequence: int
    kind: _TimerKind
    group_id: str
    member_id: str


# ====================================================================== coordinator
class GroupCoordinator:
    """Runs the classic rebalance protocol and stores offsets in ``__consumer_offsets``."""

    def __init__(
        self,
        config: GroupCoordinatorConfig,
        get_offsets_log: Callable[[int], Log],
        replica_manager: ReplicaAppender,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.config = config
        self._clock = clock
        self.manager = GroupMetadataManager(
            num_partitions=config.offsets_topic_num_partitions,
            get_offsets_log=get_offsets_log,
            replica_manager=replica_manager,
            offset_commit_timeout_ms=config.offset_commit_timeout_ms,
            clock=clock,
        )
        self._writes: set[asyncio.Task[None]] = set()  # group record writes under way
        self._active = False
        self._delayed_joins: dict[str, _DelayedJoin] = {}
        self._timers: list[_Timer] = []
        self._timer_sequence = itertools.count()
        self._timer_task: asyncio.Task[None] | None = None
        self._timer_wakeup: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    # ================================================================== lifecycle
    @property
    def is_active(self) -> bool:
        return self._active

    def partition_for(self, group_id: str) -> int:
        """The ``__consumer_offsets`` partition that stores ``group_id``."""
        return self.manager.partition_for(group_id)

    def load(self, leads: Callable[[int], bool] = lambda _partition: True) -> None:
        """Replay every ``__consumer_offsets`` partition this broker leads, then accept
        requests (groups of the others get NOT_COORDINATOR: clients find their leader)."""
        for partition in range(self.config.offsets_topic_num_partitions):
            if leads(partition):
                self._install(self.manager.load_partition(partition))
        self._active = True

    def _install(self, groups: list[GroupMetadata]) -> None:
        for group in groups:
            for member in group.members:
                self._complete_and_schedule_next_heartbeat_expiration(group, member)

    async def startup(self, leads: Callable[[int], bool] = lambda _partition: True) -> None:
        """Load (on a worker thread) and start firing timers on the running loop."""
        self._loop = asyncio.get_running_loop()
        await asyncio.to_thread(self.load, leads)
        self._timer_wakeup = asyncio.Event()
        self._timer_task = asyncio.create_task(self._run_timers(), name="group-coordinator")
        logger.info(
            "group coordinator started groups=%d partitions=%d",
            len(self.manager.groups),
            self.config.offsets_topic_num_partitions,
        )

    def on_leadership_changes(self, *, elected: list[int], resigned: list[int]) -> None:
        """``__consumer_offsets`` partitions this broker now leads, or no longer leads (Kafka's
        onElection / onResignation); any thread. The work happens on the coordinator's loop."""
        loop = self._loop
        if loop is None or loop.is_closed() or not (elected or resigned):
            return
        asyncio.run_coroutine_threadsafe(self._apply_leadership(elected, resigned), loop)

    async def _apply_leadership(self, elected: list[int], resigned: list[int]) -> None:
        for partition in resigned:
            self._unload_partition(partition)
        for partition in elected:
            self._install(await asyncio.to_thread(self.manager.load_partition, partition))

    @staticmethod
    def _evict(group: GroupMetadata, error: StorageError, *, now_ms: int) -> None:
        """Answer the group's parked JoinGroup/SyncGroup requests with ``error`` (clients find
        the coordinator again) and mark it Dead."""
        for member in group.members:
            group.maybe_invoke_join_callback(
                member, JoinGroupResult.failed(member.member_id, error)
            )
            group.maybe_invoke_sync_callback(member, SyncGroupResult(error=error))
        group.transition_to(GroupState.DEAD, now_ms=now_ms)

    def _unload_partition(self, partition: int) -> None:
        """Forget the partition's groups; their members find the new coordinator."""
        now = self._clock.milliseconds()
        for group in self.manager.unload_partition(partition):
            self._evict(
                group,
                NotCoordinatorError(
                    f"group {group.group_id}: __consumer_offsets-{partition} moved to another"
                    " broker"
                ),
                now_ms=now,
            )
            self._delayed_joins.pop(group.group_id, None)
        logger.info("unloaded group metadata partition=__consumer_offsets-%d", partition)

    async def shutdown(self) -> None:
        """Stop timers, let the group record writes under way finish (each is bounded by
        offsets.commit.timeout.ms); parked JoinGroup/SyncGroup requests get NOT_COORDINATOR."""
        self._active = False
        task, self._timer_task = self._timer_task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        while self._writes:
            await asyncio.gather(*self._writes, return_exceptions=True)
        now = self._clock.milliseconds()
        for group in self.manager.groups:
            self._evict(
                group,
                NotCoordinatorError(
                    f"group {group.group_id}: the coordinator is shutting down; find it again"
                ),
                now_ms=now,
            )
        self._delayed_joins.clear()
        self._timers.clear()

    def _start_write(self, write: Coroutine[object, object, None]) -> None:
        """Run a group record write and its follow-up on the loop (Kafka's append callback)."""
        task = asyncio.get_running_loop().create_task(write)
        self._writes.add(task)
        task.add_done_callback(self._write_done)

    def _write_done(self, task: asyncio.Task[None]) -> None:
        self._writes.discard(task)
        if not task.cancelled() and task.exception() is not None:
            logger.error("group metadata write failed", exc_info=task.exception())

    # ================================================================== JoinGroup
    async def join_group(
        self,
        *,
        group_id: str,
        member_id: str,
        group_instance_id: str | None = None,
        require_known_member_id: bool,
        client_id: str,
        client_host: str,
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        protocol_type: str,
        protocols: Sequence[tuple[str, bytes]],
        supports_skip_assignment: bool = False,
    ) -> JoinGroupResult:
        """Join (or rejoin) ``group_id``; returns when the rebalance completes or fails.

        ``require_known_member_id`` is True for JoinGroup v4+ (KIP-394),
        ``supports_skip_assignment`` for v9+ (a static leader rejoining a Stable group is
        told it leads but must not assign).
        """
        future: asyncio.Future[JoinGroupResult] = asyncio.get_running_loop().create_future()

        def respond(result: JoinGroupResult) -> None:
            if not future.done():
                future.set_result(result)

        self._handle_join_group(
            group_id=group_id,
            member_id=member_id,
            group_instance_id=group_instance_id,
            require_known_member_id=require_known_member_id,
            client_id=client_id,
            client_host=client_host,
            rebalance_timeout_ms=rebalance_timeout_ms,
            session_timeout_ms=session_timeout_ms,
            protocol_type=protocol_type,
            protocols=tuple(protocols),
            supports_skip_assignment=supports_skip_assignment,
            respond=respond,
        )
        return await future

    def _handle_join_group(
        self,
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
        error = self._validate_group_status(group_id, allow_empty_group_id=False)
        if error is not None:
            respond(JoinGroupResult.failed(member_id, error))
            return
        config = self.config
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
        group = self.manager.get_group(group_id)
        if group is None:
            if not is_unknown_member:
                respond(
                    JoinGroupResult.failed(
                        member_id,
                        UnknownMemberIdError(f"group {group_id} has no member {member_id}"),
                    )
                )
                return
            group = self.manager.add_group(
                GroupMetadata(group_id, now_ms=self._clock.milliseconds())
            )
        if not self._accept_joining_member(group, member_id):
            respond(
                JoinGroupResult.failed(
                    member_id,
                    GroupMaxSizeReachedError(
                        f"group {group_id} already has {group.size} members"
                        f" (group.max.size={self.config.group_max_size})"
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
            self._do_unknown_join_group(
                group, join, require_known_member_id, supports_skip_assignment, respond
            )
        else:
            self._do_current_member_join_group(group, join, respond)
        if group.is_in(GroupState.PREPARING_REBALANCE):
            self._maybe_complete_join(group)

    def _accept_joining_member(self, group: GroupMetadata, member_id: str) -> bool:
        limit = self.config.group_max_size
        state = group.state
        if state in (GroupState.EMPTY, GroupState.DEAD):
            return True
        if state is GroupState.PREPARING_REBALANCE:
            if group.has(member_id) and group.get(member_id).is_awaiting_join:
                return True
            return group.num_members_awaiting_join < limit
        return group.has(member_id) or group.size < limit

    def _do_unknown_join_group(
        self,
        group: GroupMetadata,
        join: _Join,
        require_known_member_id: bool,
        supports_skip_assignment: bool,
        respond: JoinCallback,
    ) -> None:
        if group.is_in(GroupState.DEAD):
            respond(JoinGroupResult.failed(join.member_id, self._dead_group_error(group)))
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
                self._add_member_and_rebalance(group, join.with_member_id(new_member_id), respond)
            else:
                self._update_static_member_and_rebalance(
                    group,
                    old_member_id,
                    join.with_member_id(new_member_id),
                    supports_skip_assignment,
                    respond,
                )
            return
        if require_known_member_id:
            group.add_pending_member(new_member_id)
            self._schedule(
                self._clock.milliseconds() + join.session_timeout_ms,
                _TimerKind.PENDING_MEMBER,
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
        self._add_member_and_rebalance(group, join.with_member_id(new_member_id), respond)

    def _do_current_member_join_group(
        self, group: GroupMetadata, join: _Join, respond: JoinCallback
    ) -> None:
        member_id = join.member_id
        if group.is_in(GroupState.DEAD):
            respond(JoinGroupResult.failed(member_id, self._dead_group_error(group)))
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
            self._add_member_and_rebalance(group, join, respond)
            return
        error = validate_current_member(group, member_id, join.group_instance_id, "join-group")
        if error is not None:
            respond(JoinGroupResult.failed(member_id, error))
            return
        member = group.get(member_id)
        state = group.state
        if state is GroupState.PREPARING_REBALANCE:
            self._update_member_and_rebalance(group, member, join, respond)
        elif state is GroupState.COMPLETING_REBALANCE:
            if member.matches(join.protocols):
                # The member missed the answer to its JoinGroup: send it again.
                respond(self._current_join_result(group, member_id))
            else:
                self._update_member_and_rebalance(group, member, join, respond)
        elif state is GroupState.STABLE:
            if group.is_leader(member_id) or not member.matches(join.protocols):
                # The leader rejoining means it wants a new assignment (e.g. new topics).
                self._update_member_and_rebalance(group, member, join, respond)
            else:
                respond(self._current_join_result(group, member_id))
        else:
            respond(
                JoinGroupResult.failed(
                    member_id,
                    UnknownMemberIdError(
                        f"group {group.group_id} is {state.value}; member {member_id} is unknown"
                    ),
                )
            )

    def _current_join_result(self, group: GroupMetadata, member_id: str) -> JoinGroupResult:
        return JoinGroupResult(
            member_id=member_id,
            generation_id=group.generation_id,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            leader_id=group.leader_id or "",
            members=group.current_member_metadata() if group.is_leader(member_id) else (),
        )

    def _add_member_and_rebalance(
        self, group: GroupMetadata, join: _Join, respond: JoinCallback
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
        self._complete_and_schedule_next_heartbeat_expiration(
            group, member, self.config.new_member_join_timeout_ms
        )
        group.remove_pending_member(member.member_id)
        self._maybe_prepare_rebalance(group, f"adding new member {member.member_id}")

    def _update_static_member_and_rebalance(
        self,
        group: GroupMetadata,
        old_member_id: str,
        join: _Join,
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
        self._complete_and_schedule_next_heartbeat_expiration(group, member)
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
                self._maybe_prepare_rebalance(
                    group,
                    f"static member {new_member_id} with instance id {instance_id} changes the"
                    " selected protocol",
                )
                return
            # Only the member id changed: persist it and answer with the current generation.
            self._start_write(
                self._persist_static_member(
                    group,
                    member,
                    self.manager.store_group(
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
            self._prepare_rebalance(
                group,
                f"static member {new_member_id} with instance id {instance_id} rejoined while"
                " the group completes a rebalance",
            )
        elif state is not GroupState.PREPARING_REBALANCE:
            raise StorageError(  # unreachable: a group with members is never Empty or Dead
                f"group {group.group_id} is {state.value} with static member {instance_id}"
            )

    async def _persist_static_member(
        self,
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
                self._complete_and_schedule_next_heartbeat_expiration(group, old)
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
        self, group: GroupMetadata, member: MemberMetadata, join: _Join, respond: JoinCallback
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
        self._maybe_prepare_rebalance(group, f"updating metadata of member {member.member_id}")

    # ================================================================== rebalance
    def _maybe_prepare_rebalance(self, group: GroupMetadata, reason: str) -> None:
        if group.can_rebalance():
            self._prepare_rebalance(group, reason)

    def _prepare_rebalance(self, group: GroupMetadata, reason: str) -> None:
        if group.is_in(GroupState.COMPLETING_REBALANCE):
            self._reset_and_propagate_assignment_with_error(
                group,
                RebalanceInProgressError(
                    f"group {group.group_id} is rebalancing again; join again"
                ),
            )
        now = self._clock.milliseconds()
        rebalance_timeout_ms = group.rebalance_timeout_ms()
        if group.is_in(GroupState.EMPTY):
            delay_ms = min(self.config.group_initial_rebalance_delay_ms, rebalance_timeout_ms)
            delayed = _DelayedJoin(
                deadline_ms=now + delay_ms,
                initial=True,
                remaining_ms=max(rebalance_timeout_ms - delay_ms, 0),
            )
        else:
            delayed = _DelayedJoin(deadline_ms=now + rebalance_timeout_ms, initial=False)
        group.transition_to(GroupState.PREPARING_REBALANCE, now_ms=now)
        logger.info(
            "preparing to rebalance group=%s generation=%d reason=%r",
            group.group_id,
            group.generation_id,
            reason,
        )
        self._set_delayed_join(group, delayed)
        self._maybe_complete_join(group)  # e.g. the last member left: nobody to wait for

    def _set_delayed_join(self, group: GroupMetadata, delayed: _DelayedJoin) -> None:
        self._delayed_joins[group.group_id] = delayed
        self._schedule(delayed.deadline_ms, _TimerKind.JOIN, group.group_id, "")

    def _maybe_complete_join(self, group: GroupMetadata) -> None:
        """Complete the pending rebalance of ``group`` if it is due (Kafka's ``tryComplete``
        plus ``onExpiration`` of the delayed join)."""
        delayed = self._delayed_joins.get(group.group_id)
        if delayed is None or not group.is_in(GroupState.PREPARING_REBALANCE):
            return
        now = self._clock.milliseconds()
        if delayed.initial:
            if now < delayed.deadline_ms:
                return
            if group.new_member_added and delayed.remaining_ms > 0:
                group.new_member_added = False
                delay_ms = min(self.config.group_initial_rebalance_delay_ms, delayed.remaining_ms)
                self._set_delayed_join(
                    group,
                    _DelayedJoin(
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
        self._delayed_joins.pop(group.group_id, None)
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
        now = self._clock.milliseconds()
        if group.size and not group.maybe_elect_new_joined_leader():
            # Only static members that did not rejoin are left: wait another rebalance
            # timeout (their sessions expire meanwhile unless they come back).
            logger.warning(
                "no member rejoined group=%s generation=%d static_members=%d",
                group.group_id,
                group.generation_id,
                group.static_member_count,
            )
            self._set_delayed_join(
                group,
                _DelayedJoin(deadline_ms=now + group.rebalance_timeout_ms(), initial=False),
            )
            return
        group.init_next_generation(now_ms=now)
        if group.is_in(GroupState.EMPTY):
            logger.info(
                "group is now empty group=%s generation=%d", group.group_id, group.generation_id
            )
            self._start_write(
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
                member, self._current_join_result(group, member.member_id)
            )
            self._complete_and_schedule_next_heartbeat_expiration(group, member)
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
                self._complete_and_schedule_next_heartbeat_expiration(group, member)

    # ================================================================== SyncGroup
    async def sync_group(
        self,
        *,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None = None,
        protocol_type: str | None = None,
        protocol_name: str | None = None,
        assignments: Mapping[str, bytes],
    ) -> SyncGroupResult:
        """Wait for this member's assignment; the leader brings everyone's ``assignments``."""
        future: asyncio.Future[SyncGroupResult] = asyncio.get_running_loop().create_future()

        def respond(result: SyncGroupResult) -> None:
            if not future.done():
                future.set_result(result)

        self._handle_sync_group(
            group_id=group_id,
            generation_id=generation_id,
            member_id=member_id,
            group_instance_id=group_instance_id,
            protocol_type=protocol_type,
            protocol_name=protocol_name,
            assignments=assignments,
            respond=respond,
        )
        return await future

    def _handle_sync_group(
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

        error = self._validate_group_status(group_id, allow_empty_group_id=False)
        if error is not None:
            fail(error)
            return
        group = self.manager.get_group(group_id)
        if group is None:
            fail(UnknownMemberIdError(f"group {group_id} does not exist"))
            return
        if group.is_in(GroupState.DEAD):
            fail(self._dead_group_error(group))
            return
        error = validate_current_member(group, member_id, group_instance_id, "sync-group")
        if error is not None:
            fail(error)
            return
        if generation_id != group.generation_id:
            fail(_illegal_generation(group, generation_id))
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
            self._complete_and_schedule_next_heartbeat_expiration(group, member)

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
        self._start_write(
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
            self._maybe_prepare_rebalance(group, "error when storing group assignment")
            return
        self._set_and_propagate_assignment(group, assignments)
        group.transition_to(GroupState.STABLE, now_ms=self._clock.milliseconds())

    # ================================================================== Heartbeat
    def heartbeat(
        self,
        *,
        group_id: str,
        member_id: str,
        group_instance_id: str | None = None,
        generation_id: int,
    ) -> StorageError | None:
        """None when the member is alive and nothing changes; REBALANCE_IN_PROGRESS asks it
        to rejoin."""
        error = self._validate_group_status(group_id, allow_empty_group_id=False)
        if error is not None:
            return error
        group = self.manager.get_group(group_id)
        if group is None:
            return UnknownMemberIdError(f"group {group_id} does not exist")
        if group.is_in(GroupState.DEAD):
            return self._dead_group_error(group)
        error = validate_current_member(group, member_id, group_instance_id, "heartbeat")
        if error is not None:
            return error
        if generation_id != group.generation_id:
            return _illegal_generation(group, generation_id)
        state = group.state
        if state is GroupState.EMPTY:
            return UnknownMemberIdError(f"group {group_id} is Empty")
        self._complete_and_schedule_next_heartbeat_expiration(group, group.get(member_id))
        if state is GroupState.PREPARING_REBALANCE:
            return RebalanceInProgressError(f"group {group_id} is rebalancing; join again")
        return None

    # ================================================================== LeaveGroup
    def leave_group(self, *, group_id: str, members: Sequence[MemberIdentity]) -> LeaveGroupResult:
        error = self._validate_group_status(group_id, allow_empty_group_id=False)
        if error is not None:
            return LeaveGroupResult(error=error)
        group = self.manager.get_group(group_id)
        if group is None:
            return LeaveGroupResult(
                members=tuple(
                    (m, UnknownMemberIdError(f"group {group_id} does not exist")) for m in members
                )
            )
        if group.is_in(GroupState.DEAD):
            return LeaveGroupResult(error=self._dead_group_error(group))
        results: list[tuple[MemberIdentity, StorageError | None]] = []
        for identity in members:
            results.append((identity, self._leave(group, identity)))
        return LeaveGroupResult(members=tuple(results))

    def _leave(self, group: GroupMetadata, identity: MemberIdentity) -> StorageError | None:
        member_id, instance_id = identity.member_id, identity.group_instance_id
        if member_id == UNKNOWN_MEMBER_ID:
            # KIP-345: an administrator removes a static member by its instance id alone.
            current = None if instance_id is None else group.current_static_member_id(instance_id)
            if current is None:
                return UnknownMemberIdError(
                    f"group {group.group_id} has no static member with group.instance.id"
                    f" {instance_id}"
                )
            member_id = current
        elif group.remove_pending_member(member_id):
            logger.info("pending member left group=%s member=%s", group.group_id, member_id)
            if group.is_in(GroupState.PREPARING_REBALANCE):
                self._maybe_complete_join(group)
            return None
        else:
            error = validate_current_member(group, member_id, instance_id, "leave-group")
            if error is not None:
                return error
        self._remove_member_and_update_group(
            group, group.get(member_id), f"removing member {member_id} on LeaveGroup"
        )
        return None

    def _remove_member_and_update_group(
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
            self._maybe_prepare_rebalance(group, reason)
        elif state is GroupState.PREPARING_REBALANCE:
            self._maybe_complete_join(group)

    # ================================================================== offsets
    async def commit_offsets(
        self,
        *,
        group_id: str,
        member_id: str,
        group_instance_id: str | None = None,
        generation_id: int,
        offsets: Mapping[TopicPartition, OffsetAndMetadata],
    ) -> dict[TopicPartition, StorageError | None]:
        """Commit ``offsets``; one error (None: committed) per partition, once every in-sync
        replica of the group's offsets partition has them.

        Without group management (generation < 0, empty member id) commits are accepted while
        the group has no members, as Kafka does for "simple" consumers.
        """
        error = self._validate_group_status(group_id, allow_empty_group_id=True)
        if error is not None:
            return dict.fromkeys(offsets, error)
        group = self.manager.get_group(group_id)
        if group is None:
            if generation_id >= 0:
                return dict.fromkeys(offsets, _illegal_generation(None, generation_id))
            group = self.manager.add_group(
                GroupMetadata(group_id, now_ms=self._clock.milliseconds())
            )
        error = self._validate_offset_commit(group, generation_id, member_id, group_instance_id)
        if error is not None:
            return dict.fromkeys(offsets, error)
        state = group.state
        if state is GroupState.COMPLETING_REBALANCE:
            # The member knows the new generation but has no assignment yet.
            return dict.fromkeys(
                offsets,
                RebalanceInProgressError(f"group {group_id} is completing a rebalance"),
            )
        if state in (GroupState.STABLE, GroupState.PREPARING_REBALANCE) and group.has(member_id):
            self._complete_and_schedule_next_heartbeat_expiration(group, group.get(member_id))
        return await self._store_offsets(group, offsets)

    def _validate_offset_commit(
        self,
        group: GroupMetadata,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
    ) -> StorageError | None:
        if group.is_in(GroupState.DEAD):
            return self._dead_group_error(group)
        if generation_id < 0 and group.is_in(GroupState.EMPTY):
            return None  # the admin client or a consumer without group management
        if generation_id >= 0 or member_id != UNKNOWN_MEMBER_ID or group_instance_id is not None:
            error = validate_current_member(group, member_id, group_instance_id, "offset-commit")
            if error is not None:
                return error
            if generation_id != group.generation_id:
                return _illegal_generation(group, generation_id)
            return None
        if not group.is_in(GroupState.EMPTY):
            return UnknownMemberIdError(
                f"group {group.group_id} has members: only they may commit offsets"
            )
        return None

    async def _store_offsets(
        self, group: GroupMetadata, offsets: Mapping[TopicPartition, OffsetAndMetadata]
    ) -> dict[TopicPartition, StorageError | None]:
        results: dict[TopicPartition, StorageError | None] = {}
        accepted: dict[TopicPartition, OffsetAndMetadata] = {}
        limit = self.config.offset_metadata_max_bytes
        for tp, committed in offsets.items():
            if len(committed.metadata) > limit:
                results[tp] = OffsetMetadataTooLargeError(
                    f"group {group.group_id}: metadata of {tp} is {len(committed.metadata)}"
                    f" characters, more than offset.metadata.max.bytes={limit}"
                )
            else:
                accepted[tp] = committed
        if accepted:
            error = await self.manager.store_offsets(group, accepted)
            for tp in accepted:
                results[tp] = error
        return {tp: results[tp] for tp in offsets}

    def fetch_offsets(
        self,
        *,
        group_id: str,
        partitions: Sequence[TopicPartition] | None,
        require_stable: bool = False,
    ) -> OffsetFetchResult:
        """Committed offsets of ``partitions``, or of every partition when None.

        ``require_stable`` (KIP-447) needs no waiting here: transactional commits, which
        could be pending, are not supported.
        """
        error = self._validate_group_status(group_id, allow_empty_group_id=True)
        if error is not None:
            return OffsetFetchResult(error=error, offsets={})
        group = self.manager.get_group(group_id)
        known = {} if group is None or group.is_in(GroupState.DEAD) else group.offsets
        if partitions is None:
            return OffsetFetchResult(offsets=dict(known))
        return OffsetFetchResult(offsets={tp: known.get(tp) for tp in partitions})

    # ================================================================== ListGroups, DescribeGroups
    def list_groups(self, *, states: Collection[str] = ()) -> ListGroupsResult:
        """Every group, or those in ``states`` (state names, any case)."""
        if not self._active:
            return ListGroupsResult(error=_not_available())
        wanted = {s.lower() for s in states}
        groups = tuple(
            group.overview()
            for group in self.manager.groups
            if not wanted or group.state.value.lower() in wanted
        )
        if self.manager.is_any_partition_loading:
            return ListGroupsResult(
                error=CoordinatorLoadInProgressError("group metadata is still loading"),
                groups=groups,
            )
        return ListGroupsResult(groups=groups)

    def describe_group(self, group_id: str) -> DescribeGroupResult:
        error = self._validate_group_status(group_id, allow_empty_group_id=True)
        if error is not None:
            return DescribeGroupResult(error=error)
        group = self.manager.get_group(group_id)
        if group is None:
            return DescribeGroupResult(
                summary=GroupSummary(
                    state=GroupState.DEAD, protocol_type="", protocol="", members=()
                )
            )
        return DescribeGroupResult(summary=group.summary())

    # ================================================================== DeleteGroups, OffsetDelete
    async def delete_groups(self, group_ids: Sequence[str]) -> dict[str, StorageError | None]:
        """Delete Empty groups with their offsets; one error (None: deleted) per group."""
        return await group_deletion.delete_groups(
            self.manager,
            group_ids,
            lambda group_id: self._validate_group_status(group_id, allow_empty_group_id=True),
        )

    async def delete_offsets(
        self, *, group_id: str, partitions: Sequence[TopicPartition]
    ) -> group_deletion.OffsetDeleteResult:
        """Delete committed offsets of ``partitions`` that the group does not consume."""
        return await group_deletion.delete_offsets(
            self.manager,
            group_id,
            partitions,
            lambda group_id: self._validate_group_status(group_id, allow_empty_group_id=False),
        )

    # ================================================================== validation
    def _validate_group_status(
        self, group_id: str | None, *, allow_empty_group_id: bool
    ) -> StorageError | None:
        if group_id is None or (not allow_empty_group_id and not group_id):
            return InvalidGroupIdError(f"group id {group_id!r} is not valid: use a non-empty id")
        if not self._active:
            return _not_available()
        partition = self.manager.partition_for(group_id)
        state = self.manager.partition_state(partition)
        if state is PartitionLoadState.LOADING:
            return CoordinatorLoadInProgressError(
                f"group {group_id}: __consumer_offsets-{partition} is still loading"
            )
        if state is not PartitionLoadState.LOADED:
            return NotCoordinatorError(
                f"group {group_id}: this broker does not serve __consumer_offsets-{partition}"
            )
        return None

    @staticmethod
    def _dead_group_error(group: GroupMetadata) -> StorageError:
        return CoordinatorNotAvailableError(
            f"group {group.group_id} is being removed from this coordinator; find it again"
        )

    # ================================================================== timers
    def _complete_and_schedule_next_heartbeat_expiration(
        self, group: GroupMetadata, member: MemberMetadata, timeout_ms: int | None = None
    ) -> None:
        deadline_ms = self._clock.milliseconds() + (
            member.session_timeout_ms if timeout_ms is None else timeout_ms
        )
        member.heartbeat_deadline_ms = deadline_ms
        self._schedule(deadline_ms, _TimerKind.HEARTBEAT, group.group_id, member.member_id)

    def _schedule(self, deadline_ms: int, kind: _TimerKind, group_id: str, member_id: str) -> None:
        earliest = self._timers[0].deadline_ms if self._timers else None
        heapq.heappush(
            self._timers,
            _Timer(deadline_ms, next(self._timer_sequence), kind, group_id, member_id),
        )
        if self._timer_wakeup is not None and (earliest is None or deadline_ms < earliest):
            self._timer_wakeup.set()

    @property
    def pending_timers(self) -> int:
        """Scheduled timers, stale ones included (they are dropped when they fire)."""
        return len(self._timers)

    def expire_deadlines(self) -> int:
        """Fire every timer whose deadline has passed; returns how many fired."""
        now = self._clock.milliseconds()
        fired = 0
        while self._timers and self._timers[0].deadline_ms <= now:
            timer = heapq.heappop(self._timers)
            fired += 1
            group = self.manager.get_group(timer.group_id)
            if group is None:
                continue
            if timer.kind is _TimerKind.JOIN:
                self._maybe_complete_join(group)
            elif timer.kind is _TimerKind.HEARTBEAT:
                self._on_heartbeat_deadline(group, timer)
            elif group.remove_pending_member(timer.member_id):
                logger.info(
                    "pending member expired group=%s member=%s", group.group_id, timer.member_id
                )
                if group.is_in(GroupState.PREPARING_REBALANCE):
                    self._maybe_complete_join(group)
        return fired

    def _on_heartbeat_deadline(self, group: GroupMetadata, timer: _Timer) -> None:
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
        self._remove_member_and_update_group(
            group, member, f"removing member {member.member_id} on heartbeat expiration"
        )

    async def _run_timers(self) -> None:
        wakeup = self._timer_wakeup
        if wakeup is None:
            raise RuntimeError("the timer task needs the wake-up event made by startup()")
        while True:
            try:
                self.expire_deadlines()
            except Exception:
                logger.exception("group coordinator timer failed; continuing")
            wait_ms = self.config.max_timer_wait_ms
            if self._timers:
                wait_ms = min(
                    wait_ms, max(self._timers[0].deadline_ms - self._clock.milliseconds(), 0)
                )
            wakeup.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wakeup.wait(), timeout=wait_ms / 1000)


# ====================================================================== helpers
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


def _illegal_generation(group: GroupMetadata | None, generation_id: int) -> StorageError:
    current = "none" if group is None else str(group.generation_id)
    return IllegalGenerationError(
        f"generation {generation_id} is not the group's current generation ({current});"
        " join the group again"
    )


def _not_available() -> StorageError:
    return CoordinatorNotAvailableError("the group coordinator is not running")
