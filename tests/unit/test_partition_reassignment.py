"""Reassignment planning (Kafka's ``ReplicaAssignment.reassignTo``, ``validateReplicas``,
``isReassignmentComplete``), the broker's rule for deleting a replica reassigned away, and the
reassignment JSON of ``storage-core reassign-partitions``."""

from __future__ import annotations

import json

import pytest

from storage_core.client.reassignments import PartitionReassignment
from storage_core.common import TopicPartition, Uuid
from storage_core.controller import reassignment
from storage_core.replication.metadata_cache import (
    MetadataImage,
    PartitionMetadata,
    TopicMetadata,
    removed_by_reassignment,
)
from storage_core.tools.reassign_partitions import (
    PartitionReassignmentState,
    ReassignmentCommandError,
    format_current_reassignments,
    format_reassignment_json,
    format_reassignment_states,
    parse_reassignment_json,
)
from storage_core.zk.zk_data import (
    LeaderAndIsr,
    ReplicaAssignment,
    TopicAssignment,
    ZNodeDataError,
    decode_partition_reassignment,
    decode_topic_assignment,
    encode_partition_reassignment,
    encode_topic_assignment,
)


def ra(replicas: tuple[int, ...], adding: tuple[int, ...] = (), removing: tuple[int, ...] = ()):
    return ReplicaAssignment(replicas=replicas, adding_replicas=adding, removing_replicas=removing)


def isr_state(*isr: int, leader: int = 1) -> LeaderAndIsr:
    return LeaderAndIsr(leader=leader, leader_epoch=3, isr=isr, controller_epoch=1)


# --- reassign_to: Kafka's examples ------------------------------------------------------------


@pytest.mark.parametrize(
    ("current", "target", "expected"),
    [
        # ORS 1,2,3 -> TRS 4,5,6 (the table in KafkaController.onPartitionReassignment)
        (ra((1, 2, 3)), (4, 5, 6), ra((4, 5, 6, 1, 2, 3), (4, 5, 6), (1, 2, 3))),
        # overlapping: target first, in its order
        (ra((1, 2, 3)), (3, 4, 2), ra((3, 4, 2, 1), (4,), (1,))),
        # a reorder adds and removes nothing: not reassigning
        (ra((1, 2, 3)), (3, 2, 1), ra((3, 2, 1))),
        # only removing
        (ra((1, 2, 3)), (2, 3), ra((2, 3, 1), (), (1,))),
        # replacing a pending one: computed from its origin replicas, not its RS
        (ra((1, 2, 4, 3), (4,), (3,)), (1, 2, 5), ra((1, 2, 5, 3), (5,), (3,))),
        # cancelling = reassigning to the origin replicas
        (ra((1, 2, 4, 3), (4,), (3,)), (1, 2, 3), ra((1, 2, 3))),
    ],
)
def test_reassign_to(
    current: ReplicaAssignment, target: tuple[int, ...], expected: ReplicaAssignment
) -> None:
    built = current.reassign_to(target)
    assert built == expected
    # the origin replicas, though not always in their order: Kafka's documented limit (with
    # [1,2,3] -> [3,4,2] the znode holds [3,4,2,1]; a cancellation gives [3,2,1])
    assert sorted(built.origin_replicas) == sorted(current.origin_replicas)
    assert built.target_replicas == target


def test_build_reassignment_cancels_only_what_is_in_progress() -> None:
    pending = ra((1, 2, 4, 3), (4,), (3,))
    assert reassignment.build_reassignment(pending, None) == ra((1, 2, 3))
    assert reassignment.build_reassignment(ra((1, 2, 3)), None) is None
    assert reassignment.build_reassignment(ra((1, 2, 3)), (2, 3)) == ra((2, 3, 1), (), (1,))


def test_validate_replicas_as_kafka() -> None:
    current, live = ra((1, 2, 3)), {1, 2, 3, 4}

    def error(target: tuple[int, ...], **kw: bool) -> str | None:
        outcome = reassignment.validate_replicas(current, target, live, **kw)
        return None if outcome is None else outcome.error

    assert error(()) == "invalid_replica_assignment"
    assert error((1, 1)) == "invalid_replica_assignment"
    assert error((1, -2)) == "invalid_replica_assignment"
    assert error((1, 2, 9)) == "invalid_replica_assignment"  # adds a broker not alive
    assert error((1, 2, 4)) is None
    # a replica that is already assigned may be on a dead broker (only added ones must live)
    assert reassignment.validate_replicas(ra((1, 2, 9)), (9, 1), live) is None
    assert error((1, 2), allow_replication_factor_change=False) == "invalid_replication_factor"
    assert error((3, 2, 1), allow_replication_factor_change=False) is None
    assert error(tuple(range(1001))) == "invalid_replica_assignment"


def test_complete_once_every_target_replica_is_in_sync() -> None:
    pending = ra((2, 3, 4, 1), (4,), (1,))
    assert not reassignment.is_reassignment_complete(pending, isr_state(1, 2, 3))
    assert reassignment.is_reassignment_complete(pending, isr_state(1, 2, 3, 4))
    assert not reassignment.is_reassignment_complete(pending, None)
    assert reassignment.is_reassignment_complete(ra((1, 2)), None)  # nothing reassigning


def test_leader_moves_when_not_a_target_or_dead() -> None:
    assert reassignment.leader_must_move((2, 3), isr_state(1, 2, 3, leader=1), {1, 2, 3})
    assert reassignment.leader_must_move((2, 3), isr_state(2, 3, leader=2), {3})
    assert not reassignment.leader_must_move((2, 3), isr_state(2, 3, leader=2), {2, 3})


def test_topic_znode_round_trip_keeps_adding_and_removing() -> None:
    topic = TopicAssignment(
        topic="t",
        topic_id=Uuid.random(),
        partitions={0: ra((2, 3, 4, 1), (4,), (1,)), 1: ra((1, 2))},
    )
    data = encode_topic_assignment(topic)
    assert json.loads(data)["adding_replicas"] == {"0": [4]}
    assert json.loads(data)["removing_replicas"] == {"0": [1]}
    assert decode_topic_assignment("t", data) == topic


def test_reassign_partitions_znode_as_kafka_writes_it() -> None:
    asked = {TopicPartition("t", 1): (2, 3), TopicPartition("t", 0): (1,)}
    data = encode_partition_reassignment(asked)
    assert data == (
        b'{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1]},'
        b'{"topic":"t","partition":1,"replicas":[2,3]}]}'
    )
    assert decode_partition_reassignment(data) == asked
    with pytest.raises(ZNodeDataError, match="replicas of t-0"):
        decode_partition_reassignment(b'{"partitions":[{"topic":"t","partition":0}]}')


# --- the broker's rule for deleting a replica ------------------------------------------------


def image(replicas: tuple[int, ...], *, topic_id: Uuid, marked: bool = False) -> MetadataImage:
    partition = PartitionMetadata(partition=0, replicas=replicas, leader=2, leader_epoch=1, isr=())
    topic = TopicMetadata(
        name="t", topic_id=topic_id, partitions=(partition,), marked_for_deletion=marked
    )
    return MetadataImage(topics={"t": topic})


def test_a_replica_is_deleted_only_when_a_reassignment_took_it_off() -> None:
    tp, topic_id = TopicPartition("t", 0), Uuid.random()
    old = image((1, 2, 3), topic_id=topic_id)
    assert removed_by_reassignment(old, image((2, 3), topic_id=topic_id), 1, [tp]) == [tp]
    assert removed_by_reassignment(old, image((2, 3, 1), topic_id=topic_id), 1, [tp]) == []
    # the topic went (or came back as another topic), or is being deleted: not this path
    assert removed_by_reassignment(old, MetadataImage(), 1, [tp]) == []
    assert removed_by_reassignment(old, image((2, 3), topic_id=Uuid.random()), 1, [tp]) == []
    assert (
        removed_by_reassignment(old, image((2, 3), topic_id=topic_id, marked=True), 1, [tp]) == []
    )
    # never hosted here in the previous picture (a restart reads everything afresh)
    assert removed_by_reassignment(MetadataImage(), image((2, 3), topic_id=topic_id), 1, [tp]) == []


# --- the reassignment JSON -------------------------------------------------------------------


def test_parse_and_format_kafkas_reassignment_json() -> None:
    text = (
        '{"version":1,"partitions":[{"topic":"b","partition":1,"replicas":[2,3]},'
        '{"topic":"a","partition":0,"replicas":[1],"log_dirs":["any"]}]}'
    )
    parsed = parse_reassignment_json(text)
    assert parsed == {TopicPartition("b", 1): (2, 3), TopicPartition("a", 0): (1,)}
    assert format_reassignment_json(parsed) == (
        '{"version":1,"partitions":[{"topic":"a","partition":0,"replicas":[1],'
        '"log_dirs":["any"]},{"topic":"b","partition":1,"replicas":[2,3],'
        '"log_dirs":["any","any"]}]}'
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "not JSON"),
        ('{"version":2,"partitions":[]}', "Not supported version field value 2"),
        ('{"version":1,"partitions":[]}', "Partition reassignment list cannot be empty"),
        (
            '{"partitions":[{"topic":"t","partition":0,"replicas":[]}]}',
            "Partition replica list cannot be empty",
        ),
        (
            '{"partitions":[{"topic":"t","partition":0,"replicas":[1]},'
            '{"topic":"t","partition":0,"replicas":[2]}]}',
            "Partition reassignment contains duplicate topic partitions: t-0",
        ),
        (
            '{"partitions":[{"topic":"t","partition":0,"replicas":[1,1,2]}]}',
            "Partition replica lists may not contain duplicate entries: t-0 contains multiple"
            " entries for 1",
        ),
        (
            '{"partitions":[{"topic":"t","partition":0,"replicas":[1],"log_dirs":["/d"]}]}',
            "moving replicas between log dirs is not supported",
        ),
        ('{"partitions":[{"topic":"t","partition":"0","replicas":[1]}]}', "'partition'"),
    ],
)
def test_parse_refuses_what_kafka_refuses(text: str, message: str) -> None:
    with pytest.raises(ReassignmentCommandError, match=message):
        parse_reassignment_json(text)


def test_status_lines_as_kafka() -> None:
    states = {
        TopicPartition("t", 1): PartitionReassignmentState(
            current_replicas=(1, 2), target_replicas=(1, 2), done=True
        ),
        TopicPartition("t", 0): PartitionReassignmentState(
            current_replicas=(1, 2, 4, 3), target_replicas=(1, 2, 4), done=False
        ),
        TopicPartition("t", 2): PartitionReassignmentState(
            current_replicas=(1, 2, 3), target_replicas=(1, 2, 4), done=True
        ),
    }
    assert format_reassignment_states(states).splitlines() == [
        "Status of partition reassignment:",
        "Reassignment of partition t-0 is still in progress.",
        "Reassignment of partition t-1 is completed.",
        "There is no active reassignment of partition t-2, but replica set is 1,2,3 rather"
        " than 1,2,4.",
    ]
    assert format_current_reassignments({}) == "No partition reassignments found."
    ongoing = {
        TopicPartition("t", 0): PartitionReassignment(
            replicas=(1, 2, 4, 3), adding_replicas=(4,), removing_replicas=(3,)
        ),
        TopicPartition("s", 0): PartitionReassignment(
            replicas=(2, 1), adding_replicas=(), removing_replicas=(1,)
        ),
    }
    assert format_current_reassignments(ongoing).splitlines() == [
        "Current partition reassignments:",
        "s-0: replicas: 2,1. removing: 1.",
        "t-0: replicas: 1,2,4,3. adding: 4. removing: 3.",
    ]
