"""DeleteGroups and OffsetDelete in the GroupCoordinator over real ``__consumer_offsets`` logs:
per-group and per-partition errors as Kafka answers them, the tombstones written, and a fresh
coordinator replaying the logs without bringing deleted groups or offsets back.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path

import pytest

from storage_core.clock import ManualClock
from storage_core.common import TopicPartition
from storage_core.coordinator.group import GroupCoordinator, GroupCoordinatorConfig, GroupState
from storage_core.coordinator.group.consumer_protocol import subscribed_topics
from storage_core.coordinator.group.offsets_records import (
    GroupMetadataKey,
    OffsetCommitKey,
    decode_key,
    partition_for,
)
from storage_core.errors import KafkaStorageError
from storage_core.log.log import Log
from tests.unit.test_group_coordinator import (
    GROUP,
    NUM_PARTITIONS,
    Member,
    OffsetsLogs,
    code,
    make_coordinator,
    run,
    stable_pair,
)

ORDERS_0 = TopicPartition("orders", 0)
ORDERS_1 = TopicPartition("orders", 1)
AUDIT_0 = TopicPartition("audit", 0)


@pytest.fixture
def logs(tmp_path: Path, clock: ManualClock) -> Iterator[OffsetsLogs]:
    opened = OffsetsLogs(tmp_path, clock)
    yield opened
    opened.close()


def subscription(*topics: str, version: int = 1) -> bytes:
    """A consumer-protocol subscription as Kafka's clients write it (v1: owned partitions)."""
    body = struct.pack(">hi", version, len(topics))
    for topic in topics:
        body += struct.pack(">h", len(topic)) + topic.encode()
    body += struct.pack(">i", -1)  # no user data
    return body + (struct.pack(">i", 0) if version >= 1 else b"")


def tombstones(logs: OffsetsLogs, group_id: str = GROUP) -> list[object]:
    """The keys of the group's null-value records in its offsets partition, in log order."""
    log = logs.get(partition_for(group_id, NUM_PARTITIONS))
    keys = [
        decode_key(r.key)
        for batch in log.read_batches(0)
        for r in batch.records()
        if r.key is not None and r.value is None
    ]
    return [k for k in keys if k.group == group_id]


async def deletions(coordinator: GroupCoordinator, *group_ids: str) -> dict[str, str]:
    return {g: code(e) for g, e in (await coordinator.delete_groups(list(group_ids))).items()}


async def consumer_group(coordinator: GroupCoordinator, *topics: str) -> Member:
    """One consumer subscribed to ``topics``, alone in a Stable group."""
    member = Member(coordinator, "c", protocols=(("range", subscription(*topics)),))
    await member.join()
    await member.sync({})
    assert coordinator.manager.get_group(GROUP).state is GroupState.STABLE  # type: ignore[union-attr]
    return member


# ====================================================================== DeleteGroups
def test_an_empty_group_is_deleted_with_its_offsets_and_stays_deleted(
    logs: OffsetsLogs, clock: ManualClock
) -> None:
    async def before() -> None:
        coordinator = make_coordinator(logs, clock)
        a, b = await stable_pair(coordinator)
        assert await a.commit({ORDERS_0: 5, ORDERS_1: 6}) == {ORDERS_0: "none", ORDERS_1: "none"}
        assert a.leave() == "none" and b.leave() == "none"
        assert coordinator.manager.get_group(GROUP).state is GroupState.EMPTY  # type: ignore[union-attr]
        assert await deletions(coordinator, GROUP) == {GROUP: "none"}
        assert coordinator.manager.get_group(GROUP) is None
        assert coordinator.fetch_offsets(group_id=GROUP, partitions=None).offsets == {}
        assert GROUP not in {g.group_id for g in coordinator.list_groups().groups}
        assert coordinator.describe_group(GROUP).summary.state is GroupState.DEAD  # type: ignore[union-attr]
        # Offsets first, then the group record, as Kafka writes them.
        assert tombstones(logs) == [
            OffsetCommitKey(group=GROUP, topic="orders", partition=0),
            OffsetCommitKey(group=GROUP, topic="orders", partition=1),
            GroupMetadataKey(group=GROUP),
        ]
        assert await deletions(coordinator, GROUP) == {GROUP: "group_id_not_found"}

    run(before)
    logs.close()
    logs.open()

    async def after() -> None:
        coordinator = make_coordinator(logs, clock)
        assert coordinator.manager.get_group(GROUP) is None
        assert coordinator.fetch_offsets(group_id=GROUP, partitions=None).offsets == {}
        assert await deletions(coordinator, GROUP) == {GROUP: "group_id_not_found"}
        # The id can be used again: a new group starts from generation 1.
        assert (await Member(coordinator, "n").join()).generation_id == 1

    run(after)


def test_a_group_used_only_for_offsets_gets_no_group_tombstone(
    logs: OffsetsLogs, clock: ManualClock
) -> None:
    async def scenario() -> None:
        coordinator = make_coordinator(logs, clock)
        assert await Member(coordinator, "simple").commit({AUDIT_0: 3}) == {AUDIT_0: "none"}
        assert await deletions(coordinator, GROUP) == {GROUP: "none"}
        # Generation 0: no group record was ever written, so only the offset is tombstoned.
        assert tombstones(logs) == [OffsetCommitKey(group=GROUP, topic="audit", partition=0)]

    run(scenario)
    logs.close()
    logs.open()
    assert make_coordinator(logs, clock).manager.get_group(GROUP) is None


def test_delete_groups_answers_each_group(logs: OffsetsLogs, clock: ManualClock) -> None:
    async def scenario() -> None:
        coordinator = make_coordinator(logs, clock)
        await stable_pair(coordinator)
        await Member(coordinator, "s", group_id="offsets-only").commit({AUDIT_0: 1})
        assert await deletions(coordinator, GROUP, "unknown", "", "offsets-only", "unknown") == {
            GROUP: "non_empty_group",
            "unknown": "group_id_not_found",
            "": "group_id_not_found",  # an empty id is a valid DeleteGroups name in Kafka
            "offsets-only": "none",
        }
        assert coordinator.manager.get_group(GROUP).state is GroupState.STABLE  # type: ignore[union-attr]
        assert tombstones(logs) == []

    run(scenario)


def test_delete_groups_while_the_coordinator_cannot_serve(
    logs: OffsetsLogs, clock: ManualClock
) -> None:
    assert run(lambda: deletions(make_coordinator(logs, clock, load=False), GROUP)) == {
        GROUP: "coordinator_not_available"
    }
    failing = partition_for(GROUP, NUM_PARTITIONS)

    def get_log(partition: int) -> Log:
        if partition == failing:
            raise KafkaStorageError(f"__consumer_offsets-{partition} is offline")
        return logs.get(partition)

    coordinator = GroupCoordinator(
        GroupCoordinatorConfig(offsets_topic_num_partitions=NUM_PARTITIONS),
        get_log,
        logs.replica_manager,
        clock,
    )
    coordinator.load()
    assert run(lambda: deletions(coordinator, GROUP)) == {GROUP: "not_coordinator"}


# ====================================================================== OffsetDelete
async def offset_deletion(
    coordinator: GroupCoordinator, partitions: list[TopicPartition], group_id: str = GROUP
) -> str | dict[TopicPartition, str]:
    result = await coordinator.delete_offsets(group_id=group_id, partitions=partitions)
    if result.error is not None:
        assert result.partitions == {}
        return code(result.error)
    return {tp: code(e) for tp, e in result.partitions.items()}


def test_offsets_of_an_empty_group_are_deleted_and_the_last_deletes_the_group(
    logs: OffsetsLogs, clock: ManualClock
) -> None:
    async def before() -> None:
        coordinator = make_coordinator(logs, clock)
        member = await consumer_group(coordinator, "orders")
        await member.commit({ORDERS_0: 10, ORDERS_1: 11, AUDIT_0: 12})
        assert member.leave() == "none"
        assert await offset_deletion(coordinator, [ORDERS_0, TopicPartition("orders", 9)]) == {
            ORDERS_0: "none",
            TopicPartition("orders", 9): "none",  # nothing committed: nothing to delete
        }
        assert tombstones(logs) == [OffsetCommitKey(group=GROUP, topic="orders", partition=0)]
        fetched = coordinator.fetch_offsets(group_id=GROUP, partitions=None).offsets
        assert {tp: o.offset for tp, o in fetched.items() if o} == {ORDERS_1: 11, AUDIT_0: 12}

    run(before)
    logs.close()
    logs.open()

    async def after() -> None:
        coordinator = make_coordinator(logs, clock)
        fetched = coordinator.fetch_offsets(group_id=GROUP, partitions=None).offsets
        assert {tp: o.offset for tp, o in fetched.items() if o} == {ORDERS_1: 11, AUDIT_0: 12}
        assert await offset_deletion(coordinator, [ORDERS_1, AUDIT_0]) == {
            ORDERS_1: "none",
            AUDIT_0: "none",
        }
        assert coordinator.manager.get_group(GROUP) is None  # Empty and no offsets: deleted
        assert tombstones(logs)[-1] == GroupMetadataKey(group=GROUP)
        assert await offset_deletion(coordinator, [ORDERS_1]) == "group_id_not_found"

    run(after)


def test_an_active_consumer_group_keeps_the_offsets_of_subscribed_topics(
    logs: OffsetsLogs, clock: ManualClock
) -> None:
    async def scenario() -> None:
        coordinator = make_coordinator(logs, clock)
        member = await consumer_group(coordinator, "orders")
        await member.commit({ORDERS_0: 10, AUDIT_0: 12})
        assert await offset_deletion(coordinator, [ORDERS_0, AUDIT_0]) == {
            ORDERS_0: "group_subscribed_to_topic",
            AUDIT_0: "none",
        }
        fetched = coordinator.fetch_offsets(group_id=GROUP, partitions=None).offsets
        assert {tp: o.offset for tp, o in fetched.items() if o} == {ORDERS_0: 10}
        assert coordinator.manager.get_group(GROUP).state is GroupState.STABLE  # type: ignore[union-attr]

    run(scenario)


def test_offset_delete_group_errors(logs: OffsetsLogs, clock: ManualClock) -> None:
    async def scenario() -> None:
        coordinator = make_coordinator(logs, clock)
        assert await offset_deletion(coordinator, [ORDERS_0], "nobody") == "group_id_not_found"
        assert await offset_deletion(coordinator, [ORDERS_0], "") == "invalid_group_id"
        connect = Member(coordinator, "w", protocol_type="connect", group_id="workers")
        await connect.join()
        await connect.sync({})
        await connect.commit({AUDIT_0: 1})
        assert await offset_deletion(coordinator, [AUDIT_0], "workers") == "non_empty_group"
        # A consumer group whose subscriptions do not parse is taken to consume everything.
        garbled = await consumer_group(coordinator)
        await garbled.commit({AUDIT_0: 1})
        group = coordinator.manager.get_group(GROUP)
        assert group is not None
        group.subscribed_topics = None
        assert await offset_deletion(coordinator, [AUDIT_0]) == {
            AUDIT_0: "group_subscribed_to_topic"
        }

    run(scenario)


def test_subscribed_topics_follow_kafka() -> None:
    orders, audit = subscription("orders", version=0), subscription("audit", "orders")
    assert subscribed_topics("consumer", "range", [orders, audit]) == {"orders", "audit"}
    assert subscribed_topics("consumer", None, []) == frozenset()
    assert subscribed_topics("consumer", None, [orders]) is None  # no protocol selected yet
    assert subscribed_topics("connect", "default", [orders]) is None
    assert subscribed_topics("consumer", "range", [orders, b"\x00\x01\x00\x00\x00\x05"]) is None
    assert subscribed_topics("consumer", "range", [orders[:-1]]) is None
