"""A deleted topic's committed offsets go with it, as in Kafka (``onPartitionsDeleted``): real
clients over loopback, real broker processes.

    one broker:     groups commit offsets in ``orders`` (and one in ``audit``); ``orders`` is
                    deleted (confluent-kafka's AdminClient): OffsetFetch (confluent-kafka's
                    ``committed``, kafka-python's admin) answers no offset of it, the group
                    that had only those is gone from ListGroups; the broker restarts (it
                    replays ``__consumer_offsets``): still gone; ``orders`` created again: a
                    consumer of the group with auto.offset.reset=earliest reads from 0
    three brokers:  the group's coordinator is not the controller and hosts no replica of
                    the deleted topic; the offsets go, and stay gone after the coordinator's
                    broker restarts
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_INVALID, Consumer, Producer
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaAdminClient

from tests import cluster_support
from tests.broker_process import BrokerProcess
from tests.cluster_support import eventually

pytestmark = pytest.mark.timeout(180)

TOPIC = "orders"
OLD_OFFSETS = {0: 30, 1: 39, 2: 5}
RECORDS_PER_PARTITION = 40  # more than any old offset: resuming there would skip records


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    with BrokerProcess(tmp_path) as process:
        yield process


def create_topic(
    servers: str, topic: str, partitions: int, replica_assignment: list[list[int]] | None = None
) -> None:
    admin = AdminClient({"bootstrap.servers": servers})
    new = (
        NewTopic(topic, num_partitions=partitions)
        if replica_assignment is None
        else NewTopic(topic, num_partitions=partitions, replica_assignment=replica_assignment)
    )

    def created() -> bool:
        # A topic deleted a moment ago may still be marked: asked again until it is gone.
        admin.create_topics([new])[topic].result(30)
        return True

    eventually(created, timeout_s=30, what=f"{topic} created")


def delete_topic(servers: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": servers})
    admin.delete_topics([topic], operation_timeout=30)[topic].result(30)
    eventually(
        lambda: topic not in admin.list_topics(timeout=10).topics,
        what=f"{topic} deleted",
    )


def commit(servers: str, group: str, offsets: dict[tuple[str, int], int]) -> None:
    """Commit ``offsets`` for ``group`` with confluent-kafka (no subscription: generation -1)."""
    consumer = Consumer({"bootstrap.servers": servers, "group.id": group})
    try:
        consumer.commit(
            offsets=[CkTopicPartition(t, p, o) for (t, p), o in offsets.items()],
            asynchronous=False,
        )
    finally:
        consumer.close()


def confluent_committed(servers: str, group: str, partitions: int) -> dict[int, int]:
    """OffsetFetch of ``orders``' partitions through confluent-kafka's ``committed``; a
    partition without an offset answers OFFSET_INVALID."""
    consumer = Consumer({"bootstrap.servers": servers, "group.id": group})
    try:
        answer = consumer.committed(
            [CkTopicPartition(TOPIC, p) for p in range(partitions)], timeout=10
        )
    finally:
        consumer.close()
    return {tp.partition: tp.offset for tp in answer}


def all_committed(servers: str, group: str) -> dict[tuple[str, int], int]:
    """Every offset the group has, through kafka-python's admin (OffsetFetch of all)."""
    admin = KafkaAdminClient(bootstrap_servers=servers)
    try:
        offsets = admin.list_group_offsets(group)[group]
    finally:
        admin.close()
    return {(tp.topic, tp.partition): meta.offset for tp, meta in offsets.items()}


def listed_groups(servers: str) -> set[str]:
    admin = AdminClient({"bootstrap.servers": servers})  # held until the answer is in
    result = admin.list_consumer_groups().result(30)
    assert not result.errors
    return {g.group_id for g in result.valid}


def old_offsets(partitions: int) -> dict[tuple[str, int], int]:
    return {(TOPIC, p): OLD_OFFSETS[p] for p in range(partitions)}


def offsets_gone(servers: str, group: str, partitions: int) -> bool:
    return all(
        o == OFFSET_INVALID for o in confluent_committed(servers, group, partitions).values()
    ) and not any(t == TOPIC for t, _p in all_committed(servers, group))


def test_a_deleted_topics_offsets_are_gone_and_a_new_topic_of_its_name_is_read_from_zero(
    broker: BrokerProcess,
) -> None:
    servers = broker.bootstrap
    create_topic(servers, TOPIC, 3)
    create_topic(servers, "audit", 1)
    commit(servers, "readers", {**old_offsets(3), ("audit", 0): 7})
    commit(servers, "orders-only", old_offsets(3))
    assert all_committed(servers, "readers") == {**old_offsets(3), ("audit", 0): 7}
    assert confluent_committed(servers, "orders-only", 3) == OLD_OFFSETS
    assert {"readers", "orders-only"} <= listed_groups(servers)

    delete_topic(servers, TOPIC)

    def as_kafka_leaves_them() -> bool:
        return (
            offsets_gone(servers, "readers", 3)
            and all_committed(servers, "readers") == {("audit", 0): 7}
            and offsets_gone(servers, "orders-only", 3)
            and "orders-only" not in listed_groups(servers)
        )

    eventually(as_kafka_leaves_them, timeout_s=15, what="offsets of the deleted topic gone")
    assert "readers" in listed_groups(servers)

    broker.restart()  # replays __consumer_offsets: the tombstones keep them deleted
    eventually(as_kafka_leaves_them, timeout_s=15, what="offsets still gone after a restart")

    create_topic(servers, TOPIC, 3)
    producer = Producer({"bootstrap.servers": servers, "linger.ms": 5})
    for i in range(RECORDS_PER_PARTITION * 3):
        producer.produce(TOPIC, b"%04d" % i, partition=i % 3)
    assert producer.flush(30) == 0
    consumer = Consumer(
        {
            "bootstrap.servers": servers,
            "group.id": "readers",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    read: set[tuple[int, int]] = set()
    try:
        consumer.subscribe([TOPIC])
        deadline = time.monotonic() + 60
        while len(read) < RECORDS_PER_PARTITION * 3 and time.monotonic() < deadline:
            for message in consumer.consume(100, 0.5):
                assert message.error() is None, message.error()
                read.add((int(message.partition() or 0), int(message.offset() or 0)))
    finally:
        consumer.close()
    assert read == {(p, o) for p in range(3) for o in range(RECORDS_PER_PARTITION)}


def test_the_coordinator_on_another_broker_than_the_controller_drops_them(
    tmp_path: Path,
) -> None:
    cluster_support.require_java()
    with (
        cluster_support.zookeeper_ensemble(tmp_path / "zk") as zk,
        # Replication factor 3: __consumer_offsets is created once all three are up, its
        # partitions led by each of them.
        cluster_support.three_brokers(
            zk, tmp_path / "brokers", {"offsets.topic.replication.factor": "3"}
        ) as (brokers, _connect),
    ):
        servers = ",".join(b.bootstrap for b in brokers.values())
        admin = cluster_support.admin(brokers)
        controller = eventually(
            lambda: (c := cluster_support.controller_id(servers.split(",")[0])) > 0 and c,
            what="a controller",
        )
        # The topic lives on the controller only: the coordinator learns of its deletion
        # from the cluster metadata, not from deleting replicas of its own.
        create_topic(servers, TOPIC, 2, replica_assignment=[[controller], [controller]])
        candidates = [f"readers-{i}" for i in range(12)]

        def coordinators() -> dict[str, int]:
            described = admin.describe_consumer_groups(candidates)
            return {g: f.result(10).coordinator.id for g, f in described.items()}

        group = next(g for g, c in eventually(coordinators).items() if c != controller)
        coordinator = coordinators()[group]
        commit(servers, group, old_offsets(2))
        assert confluent_committed(servers, group, 2) == {0: 30, 1: 39}

        delete_topic(servers, TOPIC)
        eventually(
            lambda: offsets_gone(servers, group, 2) and group not in listed_groups(servers),
            timeout_s=15,
            what=f"offsets of {group} (coordinator {coordinator}) gone",
        )

        # Its partitions move to the other replicas, which load them from the replicated
        # log, then it starts again and replays its own copy.
        brokers[coordinator].restart()
        eventually(
            lambda: offsets_gone(servers, group, 2) and all_committed(servers, group) == {},
            timeout_s=30,
            what="offsets still gone after the coordinator's broker restarted",
        )
