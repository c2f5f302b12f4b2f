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

Where each part lives, in Kafka's terms:

* ``group_coordinator_config``: ``GroupCoordinatorConfig``, the broker configs read here;
* ``group_status``: ``validateGroupStatus``, the check every request passes first (here);
* ``join_group``: JoinGroup, static members included; ``group_rebalancer``: the rebalance
  (``prepareRebalance``, ``onCompleteJoin``, the leader's SyncGroup); ``heartbeat``:
  Heartbeat, LeaveGroup and session expiry;
* ``group_timers``: ``DelayedJoin`` / ``DelayedHeartbeat`` deadlines on the injected clock;
  ``startup`` runs a task that fires them; tests drive them with ``expire_deadlines``;
* ``offset_manager``: OffsetCommit / OffsetFetch; ``group_deletion``: DeleteGroups and
  OffsetDelete;
* ``group_metadata_manager``: the group cache and its partitions of ``__consumer_offsets``
  (loaded and unloaded here as leadership moves).

Deleted topics: the broker tells ``on_partitions_deleted`` the partitions of each topic being
deleted (Kafka's ``onPartitionsDeleted``, on every broker); the groups here drop their offsets
of them with tombstones (``GroupMetadataManager.remove_deleted_partitions``).

Transactional offset commits (TxnOffsetCommit) are pending until the transaction's marker is
written on the group's partition: WriteTxnMarkers calls ``on_transaction_completed``
(``txn_offsets``).

Not implemented: offset expiration (``offsets.retention.minutes``), the pending-sync timeout,
the KIP-848 consumer protocol, and KIP-890's verification of a TxnOffsetCommit with the
transaction coordinator (a late commit of a fenced producer is refused by its epoch only).

Thread safety: none; every method runs on the one asyncio loop that called ``startup``
(``load`` may run on a worker thread before it).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass

from storage_core.clock import SYSTEM_CLOCK, Clock
from storage_core.common import TopicPartition
from storage_core.coordinator.group import group_deletion
from storage_core.coordinator.group.coordinator_writer import ReplicaAppender
from storage_core.coordinator.group.errors import (
    CoordinatorLoadInProgressError,
    NotCoordinatorError,
)
from storage_core.coordinator.group.group_coordinator_config import GroupCoordinatorConfig
from storage_core.coordinator.group.group_metadata import (
    GroupMetadata,
    GroupOverview,
    GroupState,
    GroupSummary,
)
from storage_core.coordinator.group.group_metadata_manager import GroupMetadataManager
from storage_core.coordinator.group.group_rebalancer import GroupRebalancer
from storage_core.coordinator.group.group_status import not_available, validate_group_status
from storage_core.coordinator.group.group_timers import GroupTimers, TimerKind
from storage_core.coordinator.group.heartbeat import (
    LeaveGroupResult,
    MemberIdentity,
    expire_pending_member,
    on_heartbeat_deadline,
)
from storage_core.coordinator.group.heartbeat import heartbeat as member_heartbeat
from storage_core.coordinator.group.heartbeat import leave_group as members_leave_group
from storage_core.coordinator.group.join_group import handle_join_group
from storage_core.coordinator.group.member_metadata import JoinGroupResult, SyncGroupResult
from storage_core.coordinator.group.offset_and_metadata import (
    OffsetAndMetadata,
)
from storage_core.coordinator.group.offset_manager import OffsetFetchResult, OffsetManager
from storage_core.coordinator.group.offsets_records import OFFSETS_TOPIC_NAME
from storage_core.errors import StorageError
from storage_core.log.log import Log

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class ListGroupsResult:
    error: StorageError | None = None
    groups: tuple[GroupOverview, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeGroupResult:
    """``summary`` is None when ``error`` is set; an unknown group is reported Dead."""

    error: StorageError | None = None
    summary: GroupSummary | None = None


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
        self._timers = GroupTimers(clock, config.max_timer_wait_ms)
        self._rebalancer = GroupRebalancer(config, clock, self.manager, self._timers)
        self._offsets = OffsetManager(config, clock, self.manager, self._timers)
        self._active = False
        self._loop: asyncio.AbstractEventLoop | None = None
        # Deleted partitions told before ``startup`` finished loading: applied once it has.
        # None once started. Guarded by ``_deleted_lock`` (told on the metadata thread).
        self._deleted_before_start: set[TopicPartition] | None = set()
        self._deleted_lock = threading.Lock()

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
                self._timers.complete_and_schedule_next_heartbeat_expiration(group, member)

    async def startup(self, leads: Callable[[int], bool] = lambda _partition: True) -> None:
        """Load (on a worker thread) and start firing timers on the running loop."""
        self._loop = asyncio.get_running_loop()
        await asyncio.to_thread(self.load, leads)
        for partition in range(self.config.offsets_topic_num_partitions):
            self.manager.complete_deferred(partition)
        with self._deleted_lock:
            deleted, self._deleted_before_start = self._deleted_before_start, None
        if deleted:
            self.manager.remove_deleted_partitions(deleted)
        self._timers.start(self.expire_deadlines)
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
            self.manager.begin_loading(partition)
        for partition in elected:
            self._install(await asyncio.to_thread(self.manager.load_partition, partition))
            self.manager.complete_deferred(partition)

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
            self._timers.remove_delayed_join(group.group_id)
        logger.info("unloaded group metadata partition=__consumer_offsets-%d", partition)

    async def shutdown(self) -> None:
        """Stop timers, let the group record writes under way finish (each is bounded by
        offsets.commit.timeout.ms); parked JoinGroup/SyncGroup requests get NOT_COORDINATOR."""
        self._active = False
        await self._timers.stop()
        await self._rebalancer.drain_writes()
        now = self._clock.milliseconds()
        for group in self.manager.groups:
            self._evict(
                group,
                NotCoordinatorError(
                    f"group {group.group_id}: the coordinator is shutting down; find it again"
                ),
                now_ms=now,
            )
        self._timers.clear()

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

        error = self._validate_group_status(group_id, allow_empty_group_id=False)
        if error is not None:
            respond(JoinGroupResult.failed(member_id, error))
            return await future
        handle_join_group(
            self._rebalancer,
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

        error = self._validate_group_status(group_id, allow_empty_group_id=False)
        if error is not None:
            respond(SyncGroupResult(error=error))
            return await future
        self._rebalancer.handle_sync_group(
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
        return member_heartbeat(
            self._rebalancer,
            group_id=group_id,
            member_id=member_id,
            group_instance_id=group_instance_id,
            generation_id=generation_id,
        )

    # ================================================================== LeaveGroup
    def leave_group(self, *, group_id: str, members: Sequence[MemberIdentity]) -> LeaveGroupResult:
        error = self._validate_group_status(group_id, allow_empty_group_id=False)
        if error is not None:
            return LeaveGroupResult(error=error)
        return members_leave_group(self._rebalancer, group_id=group_id, members=members)

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
        return await self._offsets.commit_offsets(
            group_id=group_id,
            member_id=member_id,
            group_instance_id=group_instance_id,
            generation_id=generation_id,
            offsets=offsets,
        )

    async def commit_transactional_offsets(
        self,
        *,
        group_id: str,
        producer_id: int,
        producer_epoch: int,
        member_id: str = "",
        group_instance_id: str | None = None,
        generation_id: int = -1,
        offsets: Mapping[TopicPartition, OffsetAndMetadata],
    ) -> dict[TopicPartition, StorageError | None]:
        """TxnOffsetCommit: write ``offsets`` in the producer's transaction; one error (None:
        written, pending until the transaction ends) per partition. The member and
        generation (KIP-447) are checked when given; an unknown group is created then."""
        error = self._validate_group_status(group_id, allow_empty_group_id=False)
        if error is not None:
            return dict.fromkeys(offsets, error)
        return await self._offsets.commit_transactional_offsets(
            group_id=group_id,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            member_id=member_id,
            group_instance_id=group_instance_id,
            generation_id=generation_id,
            offsets=offsets,
        )

    def on_transaction_completed(
        self, producer_id: int, partitions: Collection[TopicPartition], *, is_commit: bool
    ) -> None:
        """The producer's marker is written on these ``__consumer_offsets`` partitions
        (Kafka's ``onTransactionCompleted``): its pending offsets there become committed
        (commit) or are dropped (abort)."""
        indexes = {tp.partition for tp in partitions if tp.topic == OFFSETS_TOPIC_NAME}
        if indexes:
            self.manager.handle_txn_completion(producer_id, indexes, is_commit=is_commit)

    def fetch_offsets(
        self,
        *,
        group_id: str,
        partitions: Sequence[TopicPartition] | None,
        require_stable: bool = False,
    ) -> OffsetFetchResult:
        """Committed offsets of ``partitions``, or of every partition when None; with
        ``require_stable`` (KIP-447) partitions whose commit is under way or pending in a
        transaction answer UNSTABLE_OFFSET_COMMIT."""
        error = self._validate_group_status(group_id, allow_empty_group_id=True)
        if error is not None:
            return OffsetFetchResult(error=error, offsets={})
        return self._offsets.fetch_offsets(
            group_id=group_id, partitions=partitions, require_stable=require_stable
        )

    # ================================================================== deleted topics
    def on_partitions_deleted(self, partitions: Collection[TopicPartition]) -> None:
        """These partitions belong to topics being deleted (Kafka's ``onPartitionsDeleted``);
        any thread. Their offsets are removed from every group here, on the coordinator's
        loop; told before ``startup`` has loaded, they are removed once it has."""
        deleted = set(partitions)
        if not deleted:
            return
        with self._deleted_lock:
            if self._deleted_before_start is not None:
                self._deleted_before_start.update(deleted)
                return
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        asyncio.run_coroutine_threadsafe(self.handle_deleted_partitions(deleted), loop)

    async def handle_deleted_partitions(self, partitions: Collection[TopicPartition]) -> int:
        """Remove the offsets of ``partitions`` (of deleted topics) from every group here
        with tombstones (Kafka's ``handleDeletedPartitions``); returns how many were removed
        once written. A write that fails (this broker lost the partition's leadership, say)
        is logged: the group's new coordinator was told the deletion too."""
        tasks = self.manager.remove_deleted_partitions(partitions)
        removed = 0
        for outcome in await asyncio.gather(*tasks, return_exceptions=True):
            if isinstance(outcome, BaseException):
                logger.error("cannot remove the offsets of deleted partitions: %r", outcome)
                continue
            count, error = outcome
            removed += count
            if error is not None:
                logger.warning("offsets of deleted partitions not all removed error=%s", error)
        logger.info(
            "removed offsets of deleted partitions offsets=%d groups=%d partitions=%s",
            removed,
            len(tasks),
            ",".join(str(tp) for tp in sorted(partitions)),
        )
        return removed

    # ================================================================== ListGroups, DescribeGroups
    def list_groups(self, *, states: Collection[str] = ()) -> ListGroupsResult:
        """Every group, or those in ``states`` (state names, any case)."""
        if not self._active:
            return ListGroupsResult(error=not_available())
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
        return validate_group_status(
            self.manager,
            group_id,
            active=self._active,
            allow_empty_group_id=allow_empty_group_id,
        )

    # ================================================================== timers
    @property
    def pending_timers(self) -> int:
        """Scheduled timers, stale ones included (they are dropped when they fire)."""
        return self._timers.pending_timers

    def expire_deadlines(self) -> int:
        """Fire every timer whose deadline has passed; returns how many fired."""
        now = self._clock.milliseconds()
        fired = 0
        while (timer := self._timers.pop_due(now)) is not None:
            fired += 1
            group = self.manager.get_group(timer.group_id)
            if group is None:
                continue
            if timer.kind is TimerKind.JOIN:
                self._rebalancer.maybe_complete_join(group)
            elif timer.kind is TimerKind.HEARTBEAT:
                on_heartbeat_deadline(self._rebalancer, group, timer)
            else:
                expire_pending_member(self._rebalancer, group, timer.member_id)
        return fired
