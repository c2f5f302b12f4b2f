"""Static membership (KIP-345) in the GroupCoordinator over real ``__consumer_offsets`` logs:
a restarted static member takes its old place without a rebalance, stale member ids are
fenced, missed rebalances do not drop static members, and only their session does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from storage_core.clock import ManualClock
from storage_core.common import TopicPartition
from storage_core.coordinator.group import GroupCoordinator, GroupState, MemberIdentity
from storage_core.coordinator.group.group_metadata import (
    GroupMetadata,
)
from storage_core.coordinator.group.member_metadata import JoinGroupResult, SyncGroupResult
from storage_core.coordinator.group.offset_and_metadata import (
    OffsetAndMetadata,
)
from storage_core.coordinator.group.offsets_records import (
    OFFSETS_TOPIC_NAME,
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadataValue,
    encode_group_metadata_value,
    encode_key,
)
from storage_core.records import SimpleRecord, build_batch
from tests.unit.test_group_coordinator import (
    GROUP,
    REBALANCE_MS,
    SESSION_MS,
    Member,
    OffsetsLogs,
    code,
    make_coordinator,
    run,
    settle,
)

TP = TopicPartition("orders", 0)


@pytest.fixture
def logs(tmp_path: Path, clock: ManualClock) -> Iterator[OffsetsLogs]:
    opened = OffsetsLogs(tmp_path, clock)
    yield opened
    opened.close()


class StaticMember:
    """A client with a ``group.instance.id`` speaking JoinGroup v5+."""

    def __init__(
        self,
        coordinator: GroupCoordinator,
        instance_id: str,
        *,
        protocols: tuple[tuple[str, bytes], ...] | None = None,
        session_timeout_ms: int = SESSION_MS,
    ) -> None:
        self.coordinator = coordinator
        self.instance_id = instance_id
        self.member_id = ""
        self.generation = -1
        self.protocols = protocols or (("range", f"sub-{instance_id}".encode()),)
        self.session_timeout_ms = session_timeout_ms

    def restarted(self, coordinator: GroupCoordinator | None = None) -> StaticMember:
        """The same instance id in a new process: no member id, no generation."""
        return StaticMember(
            coordinator or self.coordinator,
            self.instance_id,
            protocols=self.protocols,
            session_timeout_ms=self.session_timeout_ms,
        )

    async def join(self, *, skip_assignment_supported: bool = False) -> JoinGroupResult:
        result = await self.coordinator.join_group(
            group_id=GROUP,
            member_id=self.member_id,
            group_instance_id=self.instance_id,
            require_known_member_id=True,
            client_id=f"client-{self.instance_id}",
            client_host="/127.0.0.1",
            rebalance_timeout_ms=REBALANCE_MS,
            session_timeout_ms=self.session_timeout_ms,
            protocol_type="consumer",
            protocols=self.protocols,
            supports_skip_assignment=skip_assignment_supported,
        )
        if result.error is None:
            self.member_id = result.member_id
            self.generation = result.generation_id
        return result

    def join_in_background(self) -> asyncio.Task[JoinGroupResult]:
        return asyncio.ensure_future(self.join())

    async def sync(self, assignments: dict[str, bytes] | None = None) -> SyncGroupResult:
        return await self.coordinator.sync_group(
            group_id=GROUP,
            generation_id=self.generation,
            member_id=self.member_id,
            group_instance_id=self.instance_id,
            assignments=assignments or {},
        )

    def heartbeat(self) -> str:
        return code(
            self.coordinator.heartbeat(
                group_id=GROUP,
                member_id=self.member_id,
                group_instance_id=self.instance_id,
                generation_id=self.generation,
            )
        )

    async def commit(self, offset: int) -> str:
        result = await self.coordinator.commit_offsets(
            group_id=GROUP,
            member_id=self.member_id,
            group_instance_id=self.instance_id,
            generation_id=self.generation,
            offsets={TP: OffsetAndMetadata(offset=offset, commit_timestamp_ms=1)},
        )
        return code(result[TP])

    def leave(self) -> str:
        result = self.coordinator.leave_group(
            group_id=GROUP,
            members=[MemberIdentity(member_id=self.member_id, group_instance_id=self.instance_id)],
        )
        assert result.error is None
        return code(result.members[0][1])


def the_group(coordinator: GroupCoordinator) -> GroupMetadata:
    group = coordinator.manager.get_group(GROUP)
    assert group is not None
    return group


async def stable_static_pair(coordinator: GroupCoordinator) -> tuple[StaticMember, StaticMember]:
    """Static members ``a`` (leader) and ``b`` in a Stable group of generation 2."""
    a, b = StaticMember(coordinator, "a"), StaticMember(coordinator, "b")
    first = await a.join()
    assert first.error is None  # no MEMBER_ID_REQUIRED round trip for static members
    assert a.member_id.startswith("a-") and first.generation_id == 1
    await a.sync({a.member_id: b"all"})
    b_join = b.join_in_background()
    await settle()
    assert a.heartbeat() == "rebalance_in_progress"
    assert (await a.join()).generation_id == 2
    assert (await b_join).generation_id == 2
    b_sync = asyncio.ensure_future(b.sync())
    await settle()
    await a.sync({a.member_id: b"p0", b.member_id: b"p1"})
    assert (await b_sync).assignment == b"p1"
    assert the_group(coordinator).state is GroupState.STABLE
    return a, b


def test_a_restarted_static_member_takes_its_place_without_a_rebalance(
    logs: OffsetsLogs, clock: ManualClock
) -> None:
    async def scenario() -> None:
        coordinator = make_coordinator(logs, clock)
        a, b = await stable_static_pair(coordinator)
        old_b = b.member_id
        b2 = b.restarted()
        rejoined = await b2.join()
        assert rejoined.error is None
        assert rejoined.generation_id == 2 and b2.member_id not in (old_b, "")
        assert rejoined.leader_id == a.member_id and rejoined.members == ()
        group = the_group(coordinator)
        assert group.state is GroupState.STABLE and group.generation_id == 2
        assert {m.member_id for m in group.members} == {a.member_id, b2.member_id}
        # The other member notices nothing; the new process gets the old assignment.
        assert a.heartbeat() == "none"
        assert (await b2.sync()).assignment == b"p1"
        assert b2.heartbeat() == "none" and (await b2.commit(5)) == "none"
        # The old process (same instance id, old member id) is fenced everywhere.
        assert b.heartbeat() == "fenced_instance_id"
        assert code((await b.sync()).error) == "fenced_instance_id"
        assert await b.commit(6) == "fenced_instance_id"
        assert code((await b.join()).error) == "fenced_instance_id"
        assert b.leave() == "fenced_instance_id"
        assert group.state is GroupState.STABLE and group.size == 2

    run(scenario)


def test_a_restarted_static_leader_is_told_to_skip_the_assignment(
    logs: OffsetsLogs, clock: ManualClock
) -> None:
    async def scenario() -> None:
        coordinator = make_coordinator(logs, clock)
        a, b = await stable_static_pair(coordinator)
        old_a = a.member_id
        before_v9 = a.restarted()
        result = await before_v9.join()
        # Before JoinGroup v9 the old leader id comes back: the new process does not lead.
        assert (result.leader_id, result.members, result.skip_assignment) == (old_a, (), False)
        v9 = a.restarted()
        result = await v9.join(skip_assignment_supported=True)
        assert result.leader_id == v9.member_id and result.skip_assignment
        assert {m.member_id for m in result.members} == {v9.member_id, b.member_id}
        assert result.generation_id == 2 and the_group(coordinator).state is GroupState.STABLE
        assert b.heartbeat() == "none"
        assert (await v9.sync()).assignment == b"p0"

    run(scenario)


def test_a_static_member_changing_the_selected_protocol_rebalances(
    logs: OffsetsLogs, clock: ManualClock
) -> None:
    async def scenario() -> None:
        coordinator = make_coordinator(logs, clock)
        a = StaticMember(coordinator, "a", protocols=(("range", b"r"), ("roundrobin", b"rr")))
        await a.join()
        await a.sync({a.member_id: b"x"})
        a2 = a.restarted()
        a2.protocols = (("roundrobin", b"rr"), ("range", b"r"))
        result = await a2.join()  # the only member rejoined: the rebalance completes at once
        assert result.error is None
        assert (result.generation_id, result.protocol_name) == (2, "roundrobin")
        assert the_group(coordinator).state is GroupState.COMPLETING_REBALANCE

    run(scenario)


def test_a_static_member_rejoining_during_completing_rebalance_restarts_it(
    logs: OffsetsLogs, clock: ManualClock
) -> None:
    async def scenario() -> None:
        coordinator = make_coordinator(logs, clock)
        a, b = await stable_static_pair(coordinator)
        c = Member(coordinator, "c")
        c_join = c.join_in_background()
        await settle()
        a_join = a.join_in_background()
        b_join = b.join_in_background()
        assert (await a_join).generation_id == (await b_join).generation_id == 3
        await c_join
        b_sync = asyncio.ensure_future(b.sync())  # b waits for the leader's assignment
        await settle()
        assert the_group(coordinator).state is GroupState.COMPLETING_REBALANCE
        b2 = b.restarted()
        b2_join = b2.join_in_background()
        await settle()
        assert code((await b_sync).error) == "fenced_instance_id"
        assert the_group(coordinator).state is GroupState.PREPARING_REBALANCE
        a_join = a.join_in_background()
        c_join = c.join_in_background()
        assert (await b2_join).generation_id == (await a_join).generation_id == 4
        assert (await c_join).generation_id == 4

    run(scenario)


def test_static_members_survive_missed_rebalances_until_their_session_expires(
    logs: OffsetsLogs, clock: ManualClock
) -> None:
    async def scenario() -> None:
        coordinator = make_coordinator(logs, clock)
        a = StaticMember(coordinator, "a")
        b = StaticMember(coordinator, "b", session_timeout_ms=60_000)
        await a.join()
        await a.sync()
        b_join = b.join_in_background()
        await settle()
        await a.join()
        await b_join
        await a.sync()
        await b.sync()
        # A dynamic member joins; b (stopped, session 60 s) does not rejoin in time.
        c = Member(coordinator, "c")
        c_join = c.join_in_background()
        await settle()
        a_join = a.join_in_background()
        await settle()
        clock.sleep(REBALANCE_MS)
        coordinator.expire_deadlines()
        a_result, c_result = await a_join, await c_join
        assert a_result.generation_id == c_result.generation_id == 3
        assert {m.member_id for m in a_result.members} == {a.member_id, b.member_id, c.member_id}
        group = the_group(coordinator)
        assert group.has(b.member_id)  # a dynamic member would have been dropped here
        # b comes back within its session: it takes its place (a new rebalance, as the
        # leader may be assigning to its old member id).
        b2 = b.restarted()
        b2_join = b2.join_in_background()
        await settle()
        assert group.state is GroupState.PREPARING_REBALANCE
        a_join, c_join = a.join_in_background(), c.join_in_background()
        assert (await b2_join).generation_id == (await a_join).generation_id == 4
        await c_join
        await asyncio.gather(a.sync(), b2.sync(), c.sync())
        assert group.state is GroupState.STABLE
        # Now b2 stops for good; a and c heartbeat every 5 s. b2's 60 s session expiry
        # removes it and rebalances.
        beats = []
        for _ in range(13):
            clock.sleep(5_000)
            beats.append((a.heartbeat(), c.heartbeat()))
            coordinator.expire_deadlines()
        assert beats[:11] == [("none", "none")] * 11
        assert beats[-1] == ("rebalance_in_progress", "rebalance_in_progress")
        assert not group.has(b2.member_id)
        assert group.current_static_member_id("b") is None
        assert group.state is GroupState.PREPARING_REBALANCE

    run(scenario)


def test_leave_group_by_instance_id(logs: OffsetsLogs, clock: ManualClock) -> None:
    async def scenario() -> None:
        coordinator = make_coordinator(logs, clock)
        a, b = await stable_static_pair(coordinator)
        result = coordinator.leave_group(
            group_id=GROUP,
            members=[
                MemberIdentity(member_id="", group_instance_id="b"),
                MemberIdentity(member_id="", group_instance_id="nobody"),
                MemberIdentity(member_id="a-stale", group_instance_id="a"),
            ],
        )
        assert [(m.group_instance_id, code(e)) for m, e in result.members] == [
            ("b", "none"),
            ("nobody", "unknown_member_id"),
            ("a", "fenced_instance_id"),
        ]
        group = the_group(coordinator)
        assert not group.has(b.member_id) and group.has(a.member_id)
        assert group.state is GroupState.PREPARING_REBALANCE

    run(scenario)


def test_static_members_are_known_again_after_a_coordinator_restart(
    logs: OffsetsLogs, clock: ManualClock
) -> None:
    members: dict[str, StaticMember] = {}

    async def before() -> None:
        coordinator = make_coordinator(logs, clock)
        members["a"], members["b"] = await stable_static_pair(coordinator)
        await coordinator.shutdown()

    run(before)
    logs.close()
    logs.open()

    async def after() -> None:
        coordinator = make_coordinator(logs, clock)
        a = members["a"]
        a.coordinator = coordinator
        b2 = members["b"].restarted(coordinator)
        result = await b2.join()
        assert (result.error, result.generation_id) == (None, 2)
        assert the_group(coordinator).state is GroupState.STABLE
        assert a.heartbeat() == "none"
        assert (await b2.sync()).assignment == b"p1"

    run(after)


def test_a_group_record_with_a_repeated_instance_id_is_refused_at_load(
    logs: OffsetsLogs, clock: ManualClock
) -> None:
    coordinator = make_coordinator(logs, clock)
    twins = tuple(
        MemberMetadataValue(
            member_id=f"m{i}",
            group_instance_id="same",
            client_id="c",
            client_host="/127.0.0.1",
            rebalance_timeout_ms=REBALANCE_MS,
            session_timeout_ms=SESSION_MS,
            subscription=b"",
            assignment=b"",
        )
        for i in range(2)
    )
    record = GroupMetadataValue(
        protocol_type="consumer",
        generation=1,
        protocol="range",
        leader="m0",
        current_state_timestamp_ms=0,
        members=twins,
    )
    # Appended as a corrupt or foreign writer would have.
    tp = TopicPartition(OFFSETS_TOPIC_NAME, coordinator.partition_for(GROUP))
    batch = build_batch(
        [
            SimpleRecord(
                key=encode_key(GroupMetadataKey(group=GROUP)),
                value=encode_group_metadata_value(record),
                timestamp=0,
            )
        ]
    )
    appended = run(
        lambda: logs.replica_manager.append_records({tp: batch}, required_acks=-1, timeout_ms=1000)
    )
    assert appended[tp].error is None
    logs.close()
    logs.open()
    reloaded = make_coordinator(logs, clock)
    assert code(reloaded.describe_group(GROUP).error) == "not_coordinator"
