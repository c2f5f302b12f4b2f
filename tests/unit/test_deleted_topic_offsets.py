"""A deleted topic's committed offsets go with it (Kafka's ``onPartitionsDeleted``): the
GroupCoordinator over real ``__consumer_offsets`` logs drops them from every group with
tombstones, deletes groups left Empty without offsets, and a coordinator replaying the logs
later does not bring them back. Deletions told while a partition loads, or before the
coordinator started, are applied once its groups are in.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from storage_core.clock import ManualClock
from storage_core.common import TopicPartition
from storage_core.coordinator.group import GroupCoordinator, GroupState
from storage_core.coordinator.group.offsets_records import (
    GroupMetadataKey,
    OffsetCommitKey,
    partition_for,
)
from tests.unit.test_group_coordinator import (
    GROUP,
    NUM_PARTITIONS,
    Member,
    OffsetsLogs,
    make_coordinator,
    run,
    settle,
    stable_pair,
)
from tests.unit.test_group_deletion import tombstones

ORDERS_0 = TopicPartition("orders", 0)
ORDERS_1 = TopicPartition("orders", 1)
AUDIT_0 = TopicPartition("audit", 0)
OTHER = "other-group"


@pytest.fixture
def logs(tmp_path: Path, clock: ManualClock) -> Iterator[OffsetsLogs]:
    opened = OffsetsLogs(tmp_path, clock)
    yield opened
    opened.close()


def committed(coordinator: GroupCoordinator, group_id: str = GROUP) -> dict[TopicPartition, int]:
    result = coordinator.fetch_offsets(group_id=group_id, partitions=None)
    assert result.error is None
    return {tp: o.offset for tp, o in result.offsets.items() if o is not None}


def listed(coordinator: GroupCoordinator) -> set[str]:
    return {g.group_id for g in coordinator.list_groups().groups}


def test_offsets_of_a_deleted_topic_leave_every_group_and_stay_gone(
    logs: OffsetsLogs, clock: ManualClock
) -> None:
    async def before() -> None:
        coordinator = make_coordinator(logs, clock)
        a, _b = await stable_pair(coordinator)
        assert await a.commit({ORDERS_0: 30, ORDERS_1: 39, AUDIT_0: 5}) == dict.fromkeys(
            (ORDERS_0, ORDERS_1, AUDIT_0), "none"
        )
        simple = Member(coordinator, "simple", group_id=OTHER)
        assert await simple.commit({ORDERS_1: 7}) == {ORDERS_1: "none"}

        removed = await coordinator.handle_deleted_partitions([ORDERS_0, ORDERS_1])

        assert removed == 3
        # The Stable group keeps its other offsets; the offsets-only group, left Empty without
        # offsets, is Dead and gone (generation 0: no group record to tombstone).
        assert committed(coordinator) == {AUDIT_0: 5}
        assert group_state(coordinator) is GroupState.STABLE
        assert coordinator.manager.get_group(OTHER) is None
        assert listed(coordinator) == {GROUP}
        assert tombstones(logs)[-2:] == [
            OffsetCommitKey(group=GROUP, topic="orders", partition=0),
            OffsetCommitKey(group=GROUP, topic="orders", partition=1),
        ]
        assert tombstones(logs, OTHER) == [
            OffsetCommitKey(group=OTHER, topic="orders", partition=1)
        ]
        # Told again (a retried deletion): nothing left to write.
        assert await coordinator.handle_deleted_partitions([ORDERS_0, ORDERS_1]) == 0
        assert len(tombstones(logs)) == 2

    run(before)
    logs.close()
    logs.open()

    async def after() -> None:
        coordinator = make_coordinator(logs, clock)
        assert committed(coordinator) == {AUDIT_0: 5}
        assert coordinator.manager.get_group(OTHER) is None

    run(after)


def group_state(coordinator: GroupCoordinator, group_id: str = GROUP) -> GroupState:
    group = coordinator.manager.get_group(group_id)
    assert group is not None
    return group.state


def test_an_empty_group_left_without_offsets_is_deleted_with_its_group_record(
    logs: OffsetsLogs, clock: ManualClock
) -> None:
    async def before() -> None:
        coordinator = make_coordinator(logs, clock)
        a, b = await stable_pair(coordinator)
        assert await a.commit({ORDERS_0: 30}) == {ORDERS_0: "none"}
        assert a.leave() == "none" and b.leave() == "none"
        assert group_state(coordinator) is GroupState.EMPTY

        assert await coordinator.handle_deleted_partitions([ORDERS_0, ORDERS_1]) == 1

        assert coordinator.manager.get_group(GROUP) is None
        assert GROUP not in listed(coordinator)
        assert coordinator.describe_group(GROUP).summary.state is GroupState.DEAD  # type: ignore[union-attr]
        assert tombstones(logs) == [
            OffsetCommitKey(group=GROUP, topic="orders", partition=0),
            GroupMetadataKey(group=GROUP),
        ]

    run(before)
    logs.close()
    logs.open()
    coordinator = make_coordinator(logs, clock)
    assert coordinator.manager.get_group(GROUP) is None


def test_groups_without_offsets_of_the_topic_are_left_alone(
    logs: OffsetsLogs, clock: ManualClock
) -> None:
    async def scenario() -> None:
        coordinator = make_coordinator(logs, clock)
        a, b = await stable_pair(coordinator)
        assert a.leave() == "none" and b.leave() == "none"
        simple = Member(coordinator, "simple", group_id=OTHER)
        assert await simple.commit({AUDIT_0: 1}) == {AUDIT_0: "none"}

        assert await coordinator.handle_deleted_partitions([ORDERS_0]) == 0

        assert group_state(coordinator) is GroupState.EMPTY
        assert committed(coordinator, OTHER) == {AUDIT_0: 1}
        assert tombstones(logs) == [] and tombstones(logs, OTHER) == []

    run(scenario)


def test_a_deletion_told_while_the_partition_loads_is_applied_once_loaded(
    logs: OffsetsLogs, clock: ManualClock
) -> None:
    async def commit() -> None:
        coordinator = make_coordinator(logs, clock)
        assert await Member(coordinator, "simple").commit({ORDERS_0: 30, AUDIT_0: 5}) == {
            ORDERS_0: "none",
            AUDIT_0: "none",
        }

    run(commit)
    partition = partition_for(GROUP, NUM_PARTITIONS)

    async def elected() -> None:
        # This broker was just elected: the replay runs on another thread while the
        # deletion arrives on the loop.
        coordinator = make_coordinator(logs, clock)
        coordinator.manager.unload_partition(partition)
        coordinator.manager.begin_loading(partition)
        assert await coordinator.handle_deleted_partitions([ORDERS_0]) == 0
        coordinator.manager.load_partition(partition)
        assert committed(coordinator) == {ORDERS_0: 30, AUDIT_0: 5}
        coordinator.manager.complete_deferred(partition)
        await settle()
        assert committed(coordinator) == {AUDIT_0: 5}
        assert tombstones(logs) == [OffsetCommitKey(group=GROUP, topic="orders", partition=0)]

    run(elected)


def test_a_deletion_told_before_startup_is_applied_once_loaded(
    logs: OffsetsLogs, clock: ManualClock
) -> None:
    async def scenario() -> None:
        writer = make_coordinator(logs, clock)
        assert await Member(writer, "simple").commit({ORDERS_0: 30, AUDIT_0: 5}) == {
            ORDERS_0: "none",
            AUDIT_0: "none",
        }
        coordinator = make_coordinator(logs, clock, load=False)
        coordinator.on_partitions_deleted([ORDERS_0])
        await coordinator.startup()
        try:
            for _ in range(50):
                if ORDERS_0 not in committed(coordinator):
                    break
                await settle()
            assert committed(coordinator) == {AUDIT_0: 5}
            assert tombstones(logs) == [OffsetCommitKey(group=GROUP, topic="orders", partition=0)]
        finally:
            await coordinator.shutdown()

    run(scenario)


def test_a_deletion_told_right_after_an_election_is_applied_once_loaded(
    logs: OffsetsLogs, clock: ManualClock
) -> None:
    partition = partition_for(GROUP, NUM_PARTITIONS)

    async def scenario() -> None:
        writer = make_coordinator(logs, clock)
        assert await Member(writer, "simple").commit({ORDERS_0: 30, AUDIT_0: 5}) == {
            ORDERS_0: "none",
            AUDIT_0: "none",
        }
        coordinator = make_coordinator(logs, clock, load=False)
        await coordinator.startup(lambda p: p != partition)
        try:
            # As the broker tells them on one thread: the election, then the topics marked.
            coordinator.on_leadership_changes(elected=[partition], resigned=[])
            coordinator.on_partitions_deleted([ORDERS_0])
            for _ in range(200):
                group = coordinator.manager.get_group(GROUP)
                if group is not None and ORDERS_0 not in group.committed:
                    break
                await asyncio.sleep(0.01)
            assert committed(coordinator) == {AUDIT_0: 5}
            assert tombstones(logs) == [OffsetCommitKey(group=GROUP, topic="orders", partition=0)]
        finally:
            await coordinator.shutdown()

    run(scenario)
