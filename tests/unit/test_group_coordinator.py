"""GroupCoordinator over real ``__consumer_offsets`` logs in a temp dir, with a manual clock.

Timers fire only when a test calls ``expire_deadlines`` after moving the clock.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from storage_core.clock import SYSTEM_CLOCK, ManualClock
from storage_core.common import TopicPartition, Uuid
from storage_core.coordinator.group import (
    GroupCoordinator,
    GroupCoordinatorConfig,
    GroupState,
    MemberIdentity,
    OffsetAndMetadata,
)
from storage_core.coordinator.group.member_metadata import JoinGroupResult, SyncGroupResult
from storage_core.coordinator.group.offsets_records import OFFSETS_TOPIC_NAME, partition_for
from storage_core.errors import StorageError
from storage_core.log.log import Log
from storage_core.log.log_config import LogConfig
from storage_core.log.log_manager import LogManager
from storage_core.replication.partition import Partition
from storage_core.replication.replica_manager import ReplicaManager

NUM_PARTITIONS = 3
SESSION_MS = 10_000
REBALANCE_MS = 30_000
GROUP = "group"
OFFSETS_TOPIC_ID = Uuid.random()
T = TypeVar("T")


def code(error: StorageError | None) -> str:
    return "none" if error is None else error.error_code


class OffsetsLogs:
    """The ``__consumer_offsets-<p>`` partitions in one directory, led by broker 0 through a
    real ``ReplicaManager`` (one replica); can be closed and reopened."""

    def __init__(self, directory: Path, clock: ManualClock) -> None:
        self.directory = directory
        self.clock = clock
        self.open()

    def open(self) -> None:
        config = LogConfig(cleanup_policy="compact", segment_bytes=104857600)
        self.log_manager = LogManager([self.directory], config, clock=self.clock)
        self.log_manager.startup(background_tasks=False)
        self.replica_manager = ReplicaManager(self.log_manager, local_broker_id=0)
        for p in range(NUM_PARTITIONS):
            tp = TopicPartition(OFFSETS_TOPIC_NAME, p)
            log = self.log_manager.get_or_create_log(tp, topic_id=OFFSETS_TOPIC_ID)
            partition = Partition(
                tp,
                OFFSETS_TOPIC_ID,
                log,
                local_broker_id=0,
                on_high_watermark_advanced=self.replica_manager.on_high_watermark_advanced,
            )
            partition.make_leader(leader_epoch=0, replicas=(0,), isr=(0,))
            self.replica_manager.add_partition(partition)

    def close(self) -> None:
        self.replica_manager.shutdown()
        self.log_manager.shutdown()

    def get(self, partition: int) -> Log:
        return self.replica_manager.get_partition(TopicPartition(OFFSETS_TOPIC_NAME, partition)).log


@pytest.fixture
def logs(tmp_path: Path, clock: ManualClock) -> Iterator[OffsetsLogs]:
    opened = OffsetsLogs(tmp_path, clock)
    yield opened
    opened.close()


def make_coordinator(
    logs: OffsetsLogs, clock: ManualClock, *, initial_delay_ms: int = 0, load: bool = True
) -> GroupCoordinator:
    coordinator = GroupCoordinator(
        GroupCoordinatorConfig(
            offsets_topic_num_partitions=NUM_PARTITIONS,
            group_initial_rebalance_delay_ms=initial_delay_ms,
        ),
        logs.get,
        logs.replica_manager,
        clock,
    )
    if load:
        coordinator.load()
    return coordinator


def run(test: Callable[[], Awaitable[T]]) -> T:
    return asyncio.run(asyncio.wait_for(test(), timeout=10))


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


class Member:
    """A client of the coordinator speaking JoinGroup v4+ (KIP-394)."""

    def __init__(
        self,
        coordinator: GroupCoordinator,
        client_id: str,
        *,
        protocols: tuple[tuple[str, bytes], ...] | None = None,
        session_timeout_ms: int = SESSION_MS,
        protocol_type: str = "consumer",
        group_id: str = GROUP,
    ) -> None:
        self.coordinator = coordinator
        self.client_id = client_id
        self.member_id = ""
        self.generation = -1
        self.protocols = protocols or (("range", f"sub-{client_id}".encode()),)
        self.session_timeout_ms = session_timeout_ms
        self.protocol_type = protocol_type
        self.group_id = group_id

    async def join(self) -> JoinGroupResult:
        result = await self.coordinator.join_group(
            group_id=self.group_id,
            member_id=self.member_id,
            require_known_member_id=True,
            client_id=self.client_id,
            client_host="/127.0.0.1",
            rebalance_timeout_ms=REBALANCE_MS,
            session_timeout_ms=self.session_timeout_ms,
            protocol_type=self.protocol_type,
            protocols=self.protocols,
        )
        if code(result.error) == "member_id_required":
            self.member_id = result.member_id
            return await self.join()
        if result.error is None:
            self.member_id = result.member_id
            self.generation = result.generation_id
        return result

    def join_in_background(self) -> asyncio.Task[JoinGroupResult]:
        return asyncio.ensure_future(self.join())

    async def sync(self, assignments: dict[str, bytes] | None = None) -> SyncGroupResult:
        return await self.coordinator.sync_group(
            group_id=self.group_id,
            generation_id=self.generation,
            member_id=self.member_id,
            assignments=assignments or {},
        )

    def heartbeat(self) -> str:
        return code(
            self.coordinator.heartbeat(
                group_id=self.group_id, member_id=self.member_id, generation_id=self.generation
            )
        )

    async def commit(self, offsets: dict[TopicPartition, int]) -> dict[TopicPartition, str]:
        now = 1_700_000_000_000
        result = await self.coordinator.commit_offsets(
            group_id=self.group_id,
            member_id=self.member_id,
            generation_id=self.generation,
            offsets={
                tp: OffsetAndMetadata(offset=o, metadata=f"m{o}", commit_timestamp_ms=now)
                for tp, o in offsets.items()
            },
        )
        return {tp: code(e) for tp, e in result.items()}

    def leave(self) -> str:
        result = self.coordinator.leave_group(
            group_id=self.group_id, members=[MemberIdentity(member_id=self.member_id)]
        )
        assert result.error is None
        return code(result.members[0][1])


async def stable_pair(coordinator: GroupCoordinator) -> tuple[Member, Member]:
    """Two members in a Stable group, generation 2, ``a`` leading."""
    a, b = Member(coordinator, "a"), Member(coordinator, "b")
    first = await a.join()
    assert (first.generation_id, first.leader_id) == (1, a.member_id)
    assert (await a.sync({a.member_id: b"all"})).assignment == b"all"
    b_join = b.join_in_background()
    await settle()
    assert a.heartbeat() == "rebalance_in_progress"
    a_join = await a.join()
    b_result = await b_join
    assert a_join.generation_id == b_result.generation_id == 2
    assert [m.member_id for m in a_join.members] == [a.member_id, b.member_id]
    assert b_result.members == ()
    b_sync = asyncio.ensure_future(b.sync())
    await settle()
    assert not b_sync.done()  # waits for the leader
    a_sync = await a.sync({a.member_id: b"p0,p1", b.member_id: b"p2,p3"})
    assert (a_sync.assignment, (await b_sync).assignment) == (b"p0,p1", b"p2,p3")
    assert coordinator.manager.get_group(GROUP).state is GroupState.STABLE  # type: ignore[union-attr]
    return a, b


def group_state(coordinator: GroupCoordinator, group_id: str = GROUP) -> GroupState:
    group = coordinator.manager.get_group(group_id)
    assert group is not None
    return group.state


# ====================================================================== join / sync
def test_first_join_v4_requires_a_member_id(logs: OffsetsLogs, clock: ManualClock) -> None:
    async def scenario() -> None:
        coordinator = make_coordinator(logs, clock)
        result = await coordinator.join_group(
            group_id=GROUP,
            member_id="",
            require_known_member_id=True,
            client_id="client-1",
            client_host="/127.0.0.1",
            rebalance_timeout_ms=REBALANCE_MS,
            session_timeout_ms=SESSION_MS,
            protocol_type="consumer",
            protocols=[("range", b"x")],
        )
        assert code(result.error) == "member_id_required"
        prefix, _, suffix = result.member_id.partition("-")
        assert prefix == "client"
        assert suffix.startswith("1-") and len(suffix) == 2 + 36  # <client id>-<uuid>
        assert group_state(coordinator) is GroupState.EMPTY

    run(scenario)


def test_old_clients_are_added_on_the_first_join(logs: OffsetsLogs, clock: ManualClock) -> None:
    async def scenario() -> None:
        coordinator = make_coordinator(logs, clock)
        result = await coordinator.join_group(
            group_id=GROUP,
            member_id="",
            require_known_member_id=False,
            client_id="old",
            client_host="/127.0.0.1",
            rebalance_timeout_ms=SESSION_MS,
            session_timeout_ms=SESSION_MS,
            protocol_type="consumer",
            protocols=[("range", b"x")],
        )
        assert result.error is None
        assert result.generation_id == 1
        assert result.leader_id == result.member_id
        assert result.member_id.startswith("old-")
        assert [m.metadata for m in result.members] == [b"x"]

    run(scenario)


def test_two_members_join_and_sync(logs: OffsetsLogs, clock: ManualClock) -> None:
    async def scenario() -> None:
        coordinator = make_coordinator(logs, clock)
        a, b = await stable_pair(coordinator)
        assert a.heartbeat() == b.heartbeat() == "none"
        described = coordinator.describe_group(GROUP)
        assert described.error is None and described.summary is not None
        assert described.summary.state is GroupState.STABLE
        assert described.summary.protocol == "range"
        assert {m.member_id: m.assignment for m in described.summary.members} == {
            a.member_id: b"p0,p1",
            b.member_id: b"p2,p3",
        }
        listed = coordinator.list_groups()
        assert [(g.group_id, g.protocol_type, g.state) for g in listed.groups] == [
            (GROUP, "consumer", GroupState.STABLE)
        ]
        assert coordinator.list_groups(states=["empty"]).groups == ()
        # A follower's SyncGroup in a Stable group answers with its assignment at once.
        assert (await b.sync()).assignment == b"p2,p3"

    run(scenario)


def test_initial_rebalance_delay_gathers_members(logs: OffsetsLogs, clock: ManualClock) -> None:
    async def scenario() -> None:
        coordinator = make_coordinator(logs, clock, initial_delay_ms=3000)
        a, b = Member(coordinator, "a"), Member(coordinator, "b")
        a_join = a.join_in_background()
        await settle()
        clock.sleep(1000)
        b_join = b.join_in_background()
        await settle()
        clock.sleep(2000)
        coordinator.expire_deadlines()  # a new member arrived: wait another delay
        await settle()
        assert not a_join.done()
        clock.sleep(3000)
        coordinator.expire_deadlines()
        results = [await a_join, await b_join]
        assert {r.generation_id for r in results} == {1}
        assert len(results[0].members) == 2

    run(scenario)


def test_join_errors(logs: OffsetsLogs, clock: ManualClock) -> None:
    async def scenario() -> None:
        coordinator = make_coordinator(logs, clock)
        short = Member(coordinator, "s", session_timeout_ms=5999)
        assert code((await short.join()).error) == "invalid_session_timeout"
        long = Member(coordinator, "l", session_timeout_ms=1_800_001)
        assert code((await long.join()).error) == "invalid_session_timeout"
        assert code((await Member(coordinator, "x", group_id="").join()).error) == (
            "invalid_group_id"
        )
        stranger = Member(coordinator, "x")
        stranger.member_id = "x-not-a-member"
        assert code((await stranger.join()).error) == "unknown_member_id"
        a, _b = await stable_pair(coordinator)
        other = Member(coordinator, "o", protocol_type="connect")
        assert code((await other.join()).error) == "inconsistent_group_protocol"
        disjoint = Member(coordinator, "d", protocols=(("roundrobin", b""),))
        assert code((await disjoint.join()).error) == "inconsistent_group_protocol"
        a.generation = 1
        assert a.heartbeat() == "illegal_generation"
        assert code((await a.sync()).error) == "illegal_generation"

    run(scenario)


def test_coordinator_not_available_before_load(logs: OffsetsLogs, clock: ManualClock) -> None:
    async def scenario() -> None:
        coordinator = make_coordinator(logs, clock, load=False)
        assert code((await Member(coordinator, "a").join()).error) == "coordinator_not_available"
        assert code(coordinator.fetch_offsets(group_id=GROUP, partitions=None).error) == (
            "coordinator_not_available"
        )
        assert code(coordinator.list_groups().error) == "coordinator_not_available"

    run(scenario)


def test_a_new_member_in_completing_rebalance_resets_waiting_syncs(
    logs: OffsetsLogs, clock: ManualClock
) -> None:
    async def scenario() -> None:
        coordinator = make_coordinator(logs, clock)
        a, b = Member(coordinator, "a"), Member(coordinator, "b")
        await a.join()
        assert group_state(coordinator) is GroupState.COMPLETING_REBALANCE
        await a.sync({})
        b_join = b.join_in_background()
        await settle()
        assert a.heartbeat() == "rebalance_in_progress"
        assert code((await a.sync()).error) == "rebalance_in_progress"
        await a.join()
        await b_join
        assert a.generation == b.generation == 2
        # While CompletingRebalance, a follower's sync waits and a commit is refused.
        b_sync = asyncio.ensure_future(b.sync())
        await settle()
        tp = TopicPartition("t", 0)
        assert await b.commit({tp: 1}) == {tp: "rebalance_in_progress"}
        c = Member(coordinator, "c")
        c_join = c.join_in_background()
        await settle()
        assert code((await b_sync).error) == "rebalance_in_progress"
        await asyncio.gather(a.join(), b.join())
        await c_join
        assert a.generation == b.generation == c.generation == 3

    run(scenario)


# ====================================================================== leaving and expiry
def test_leave_triggers_a_rebalance(logs: OffsetsLogs, clock: ManualClock) -> None:
    async def scenario() -> None:
        coordinator = make_coordinator(logs, clock)
        a, b = await stable_pair(coordinator)
        assert b.leave() == "none"
        assert group_state(coordinator) is GroupState.PREPARING_REBALANCE
        assert a.heartbeat() == "rebalance_in_progress"
        result = await a.join()
        assert result.generation_id == 3
        assert [m.member_id for m in result.members] == [a.member_id]
        assert b.leave() == "unknown_member_id"
        assert b.heartbeat() == "unknown_member_id"
        await a.sync({a.member_id: b"all"})
        assert a.leave() == "none"
        # Nobody is left to rejoin: the rebalance ends in an Empty generation.
        assert group_state(coordinator) is GroupState.EMPTY
        assert coordinator.manager.get_group(GROUP).generation_id == 4  # type: ignore[union-attr]

    run(scenario)


def test_batch_leave_reports_each_member(logs: OffsetsLogs, clock: ManualClock) -> None:
    async def scenario() -> None:
        coordinator = make_coordinator(logs, clock)
        a, b = await stable_pair(coordinator)
        result = coordinator.leave_group(
            group_id=GROUP,
            members=[
                MemberIdentity(member_id=a.member_id),
                MemberIdentity(member_id="ghost"),
                MemberIdentity(member_id=b.member_id),
            ],
        )
        assert [code(e) for _m, e in result.members] == ["none", "unknown_member_id", "none"]
        assert group_state(coordinator) is GroupState.EMPTY
        unknown = coordinator.leave_group(
            group_id="no-such-group", members=[MemberIdentity(member_id="m")]
        )
        assert unknown.error is None
        assert [code(e) for _m, e in unknown.members] == ["unknown_member_id"]

    run(scenario)


def test_session_expiry_removes_the_silent_member(logs: OffsetsLogs, clock: ManualClock) -> None:
    async def scenario() -> None:
        coordinator = make_coordinator(logs, clock)
        a, b = await stable_pair(coordinator)
        clock.sleep(SESSION_MS // 2)
        assert a.heartbeat() == "none"
        coordinator.expire_deadlines()
        assert group_state(coordinator) is GroupState.STABLE
        clock.sleep(SESSION_MS // 2 + 1)
        coordinator.expire_deadlines()
        assert group_state(coordinator) is GroupState.PREPARING_REBALANCE
        assert b.heartbeat() == "unknown_member_id"
        assert a.heartbeat() == "rebalance_in_progress"
        result = await a.join()
        assert [m.member_id for m in result.members] == [a.member_id]

    run(scenario)


def test_members_that_do_not_rejoin_are_dropped_after_the_rebalance_timeout(
    logs: OffsetsLogs, clock: ManualClock
) -> None:
    async def scenario() -> None:
        coordinator = make_coordinator(logs, clock)
        a, b = await stable_pair(coordinator)
        c = Member(coordinator, "c")
        c_join = c.join_in_background()
        a_join = a.join_in_background()
        await settle()
        assert not a_join.done()  # b has not rejoined yet
        clock.sleep(REBALANCE_MS)
        coordinator.expire_deadlines()
        a_result, c_result = await a_join, await c_join
        assert a_result.generation_id == c_result.generation_id == 3
        assert {m.member_id for m in a_result.members} == {a.member_id, c.member_id}
        assert b.heartbeat() == "unknown_member_id"

    run(scenario)


def test_pending_member_expires_and_unblocks_the_rebalance(
    logs: OffsetsLogs, clock: ManualClock
) -> None:
    async def scenario() -> None:
        coordinator = make_coordinator(logs, clock)
        a, b = await stable_pair(coordinator)
        assert b.leave() == "none"
        first = await coordinator.join_group(
            group_id=GROUP,
            member_id="",
            require_known_member_id=True,
            client_id="late",
            client_host="/127.0.0.1",
            rebalance_timeout_ms=REBALANCE_MS,
            session_timeout_ms=SESSION_MS,
            protocol_type="consumer",
            protocols=[("range", b"")],
        )
        assert code(first.error) == "member_id_required"
        a_join = a.join_in_background()
        await settle()
        assert not a_join.done()  # waits for the pending member to join
        clock.sleep(SESSION_MS)
        coordinator.expire_deadlines()
        result = await a_join
        assert [m.member_id for m in result.members] == [a.member_id]

    run(scenario)


def test_members_waiting_in_sync_are_not_expired(logs: OffsetsLogs, clock: ManualClock) -> None:
    async def scenario() -> None:
        coordinator = make_coordinator(logs, clock)
        a, b = Member(coordinator, "a"), Member(coordinator, "b")
        await a.join()
        await a.sync({a.member_id: b"x"})
        b_join = b.join_in_background()
        await settle()
        await a.join()
        await b_join
        b_sync = asyncio.ensure_future(b.sync())
        await settle()
        clock.sleep(SESSION_MS + 1)
        coordinator.expire_deadlines()  # a is silent: it goes; b waits in SyncGroup: it stays
        assert code((await b_sync).error) == "rebalance_in_progress"
        group = coordinator.manager.get_group(GROUP)
        assert group is not None
        assert [m.member_id for m in group.members] == [b.member_id]

    run(scenario)


# ====================================================================== offsets
def test_commit_and_fetch(logs: OffsetsLogs, clock: ManualClock) -> None:
    async def scenario() -> None:
        coordinator = make_coordinator(logs, clock)
        a, b = await stable_pair(coordinator)
        t0, t1, t2 = (TopicPartition("orders", p) for p in range(3))
        assert await a.commit({t0: 10, t1: 11}) == {t0: "none", t1: "none"}
        assert await b.commit({t2: 22}) == {t2: "none"}
        fetched = coordinator.fetch_offsets(
            group_id=GROUP, partitions=[t0, t2, TopicPartition("x", 0)]
        )
        assert fetched.error is None
        assert {tp: (o.offset if o else None) for tp, o in fetched.offsets.items()} == {
            t0: 10,
            t2: 22,
            TopicPartition("x", 0): None,
        }
        everything = coordinator.fetch_offsets(group_id=GROUP, partitions=None)
        assert {tp: o.offset for tp, o in everything.offsets.items() if o} == {
            t0: 10,
            t1: 11,
            t2: 22,
        }
        assert everything.offsets[t0].metadata == "m10"  # type: ignore[union-attr]
        unknown = coordinator.fetch_offsets(group_id="nobody", partitions=[t0])
        assert unknown.offsets == {t0: None}

    run(scenario)


def test_commit_errors(logs: OffsetsLogs, clock: ManualClock) -> None:
    async def scenario() -> None:
        coordinator = make_coordinator(logs, clock)
        a, b = await stable_pair(coordinator)
        tp = TopicPartition("t", 0)
        b.generation = 1
        assert await b.commit({tp: 1}) == {tp: "illegal_generation"}
        stranger = Member(coordinator, "s")
        stranger.member_id, stranger.generation = "s-1", 2
        assert await stranger.commit({tp: 1}) == {tp: "unknown_member_id"}
        simple = Member(coordinator, "simple")  # no member id, generation -1
        assert await simple.commit({tp: 1}) == {tp: "unknown_member_id"}  # group has members
        late = Member(coordinator, "late", group_id="never-joined")
        late.generation = 3
        assert await late.commit({tp: 1}) == {tp: "illegal_generation"}
        big = await coordinator.commit_offsets(
            group_id=GROUP,
            member_id=a.member_id,
            generation_id=a.generation,
            offsets={
                tp: OffsetAndMetadata(offset=1, metadata="x" * 4097, commit_timestamp_ms=0),
                TopicPartition("t", 1): OffsetAndMetadata(offset=1, commit_timestamp_ms=0),
            },
        )
        assert [code(e) for e in big.values()] == ["offset_metadata_too_large", "none"]

    run(scenario)


def test_simple_consumers_commit_without_a_group(logs: OffsetsLogs, clock: ManualClock) -> None:
    async def scenario() -> None:
        coordinator = make_coordinator(logs, clock)
        simple = Member(coordinator, "simple", group_id="standalone")
        tp = TopicPartition("t", 0)
        assert await simple.commit({tp: 5}) == {tp: "none"}
        assert group_state(coordinator, "standalone") is GroupState.EMPTY
        fetched = coordinator.fetch_offsets(group_id="standalone", partitions=[tp])
        assert fetched.offsets[tp].offset == 5  # type: ignore[union-attr]
        described = coordinator.describe_group("standalone").summary
        assert described is not None
        assert (described.state, described.protocol_type, described.members) == (
            GroupState.EMPTY,
            "",
            (),
        )
        missing = coordinator.describe_group("missing").summary
        assert missing is not None and missing.state is GroupState.DEAD

    run(scenario)


def test_commit_writes_kafka_records_to_the_group_partition(
    logs: OffsetsLogs, clock: ManualClock
) -> None:
    async def scenario() -> None:
        coordinator = make_coordinator(logs, clock)
        a, _b = await stable_pair(coordinator)
        await a.commit({TopicPartition("orders", 1): 42})
        log = logs.get(partition_for(GROUP, NUM_PARTITIONS))
        records = [r for batch in log.read_batches(0) for r in batch.records()]
        # Two group records (generations 1 and 2), then the commit.
        assert [r.key[:2] for r in records if r.key] == [b"\x00\x02", b"\x00\x02", b"\x00\x01"]
        commit = records[-1]
        group_bytes = GROUP.encode()
        assert commit.key == (
            struct.pack(">hh", 1, len(group_bytes))
            + group_bytes
            + struct.pack(">h", 6)
            + b"orders"
            + struct.pack(">i", 1)
        )
        assert commit.value == (
            struct.pack(">hqih", 3, 42, -1, 3) + b"m42" + struct.pack(">q", 1_700_000_000_000)
        )
        assert log.high_watermark == log.log_end_offset == 3
        others = [p for p in range(NUM_PARTITIONS) if p != partition_for(GROUP, NUM_PARTITIONS)]
        assert all(logs.get(p).log_end_offset == 0 for p in others)

    run(scenario)


# ====================================================================== restart
def test_a_fresh_coordinator_sees_committed_offsets_and_groups(
    logs: OffsetsLogs, clock: ManualClock
) -> None:
    tp = TopicPartition("orders", 3)
    members: dict[str, Any] = {}

    async def before() -> None:
        coordinator = make_coordinator(logs, clock)
        a, b = await stable_pair(coordinator)
        await a.commit({tp: 100})
        await a.commit({tp: 150, TopicPartition("orders", 0): 7})
        members.update(a=a.member_id, b=b.member_id)
        await Member(coordinator, "simple", group_id="standalone").commit({tp: 9})
        await coordinator.shutdown()

    run(before)
    logs.close()
    logs.open()

    async def after() -> None:
        coordinator = make_coordinator(logs, clock)
        fetched = coordinator.fetch_offsets(group_id=GROUP, partitions=None)
        assert {k: v.offset for k, v in fetched.offsets.items() if v} == {
            tp: 150,
            TopicPartition("orders", 0): 7,
        }
        assert fetched.offsets[tp].metadata == "m150"  # type: ignore[union-attr]
        standalone = coordinator.fetch_offsets(group_id="standalone", partitions=[tp])
        assert standalone.offsets[tp].offset == 9  # type: ignore[union-attr]
        summary = coordinator.describe_group(GROUP).summary
        assert summary is not None and summary.state is GroupState.STABLE
        assert {m.member_id: m.assignment for m in summary.members} == {
            members["a"]: b"p0,p1",
            members["b"]: b"p2,p3",
        }
        # The members carry on with their generation, without a rebalance...
        a = Member(coordinator, "a")
        a.member_id, a.generation = members["a"], 2
        assert a.heartbeat() == "none"
        # ...until the silent one's session runs out.
        clock.sleep(SESSION_MS // 2)
        assert a.heartbeat() == "none"
        clock.sleep(SESSION_MS // 2 + 1)
        coordinator.expire_deadlines()
        assert a.heartbeat() == "rebalance_in_progress"
        assert (await a.join()).generation_id == 3

    run(after)


def test_an_emptied_group_keeps_its_generation_across_restarts(
    logs: OffsetsLogs, clock: ManualClock
) -> None:
    async def before() -> None:
        coordinator = make_coordinator(logs, clock)
        a, b = await stable_pair(coordinator)
        coordinator.leave_group(
            group_id=GROUP,
            members=[MemberIdentity(member_id=a.member_id), MemberIdentity(member_id=b.member_id)],
        )
        assert coordinator.manager.get_group(GROUP).generation_id == 3  # type: ignore[union-attr]
        await coordinator.shutdown()  # the Empty group's record is written in the background

    run(before)
    logs.close()
    logs.open()

    async def after() -> None:
        coordinator = make_coordinator(logs, clock)
        group = coordinator.manager.get_group(GROUP)
        assert group is not None
        assert (group.state, group.generation_id, group.size) == (GroupState.EMPTY, 3, 0)
        assert (await Member(coordinator, "n").join()).generation_id == 4

    run(after)


def test_shutdown_answers_parked_joins(logs: OffsetsLogs, clock: ManualClock) -> None:
    async def scenario() -> None:
        coordinator = make_coordinator(logs, clock)
        a, _b = await stable_pair(coordinator)
        c_join = Member(coordinator, "c").join_in_background()
        await settle()
        await coordinator.shutdown()
        assert code((await c_join).error) == "not_coordinator"
        assert a.heartbeat() == "coordinator_not_available"

    run(scenario)


def test_timer_task_fires_deadlines_on_the_real_clock(logs: OffsetsLogs) -> None:
    async def scenario() -> None:
        coordinator = GroupCoordinator(
            GroupCoordinatorConfig(
                offsets_topic_num_partitions=NUM_PARTITIONS,
                group_initial_rebalance_delay_ms=50,
                group_min_session_timeout_ms=100,
            ),
            logs.get,
            logs.replica_manager,
            SYSTEM_CLOCK,
        )
        await coordinator.startup()
        try:
            result = await Member(coordinator, "a", session_timeout_ms=200).join()
            assert result.generation_id == 1
            await asyncio.sleep(0.4)  # no heartbeat, no sync: the session expires
            group = coordinator.manager.get_group(GROUP)
            assert group is not None and group.state is GroupState.EMPTY
        finally:
            await coordinator.shutdown()

    run(scenario)
