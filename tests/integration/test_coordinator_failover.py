"""Committed offsets survive the loss of the group coordinator's broker: three broker processes
on a real ZooKeeper, ``__consumer_offsets`` with replication factor 3 and min.insync.replicas 2,
real consumers (confluent-kafka and kafka-python) as static members of a group.

    member 1:   reads 100 records, commits them, reads 30 more (not committed), closes
    SIGKILL     the broker FindCoordinator names for the group
    then:       the new leader of the group's __consumer_offsets partition loads the group:
                FindCoordinator names it, OffsetFetch answers the committed offsets, the static
                member is still there; member 2 (same group.instance.id) reads from the
                committed offsets on: the 30 uncommitted records again, none skipped

The killed broker starts again at the end of each test (once its session has expired).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Protocol

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer
from kafka import TopicPartition as KpTopicPartition
from kafka.structs import OffsetAndMetadata

from tests import cluster_support
from tests.broker_process import BrokerProcess
from tests.cluster_support import SESSION_TIMEOUT_MS, eventually, partition_states
from tests.integration import raw_wire

cluster_support.require_java()

pytestmark = pytest.mark.timeout(180)

PARTITIONS = 2
RECORDS_PER_PARTITION = 200
COMMITTED = 100  # records read and committed by member 1
UNCOMMITTED = 30  # read after the commit, never committed
MEMBER_SESSION_MS = 30_000  # longer than the failover: the loaded static member stays
DEATH_S = SESSION_TIMEOUT_MS / 1000 + 20  # a SIGKILLed broker's session expires, then some

Position = tuple[int, int]  # partition, offset


class Member(Protocol):
    def read(self, count: int, timeout_s: float = 60) -> list[Position]: ...
    def commit(self, next_offsets: dict[int, int]) -> None: ...
    def close(self) -> None: ...


class ConfluentMember:
    def __init__(self, servers: str, topic: str, group: str, instance_id: str) -> None:
        self.topic = topic
        self.consumer = Consumer(
            {
                "bootstrap.servers": servers,
                "group.id": group,
                "group.instance.id": instance_id,
                "session.timeout.ms": MEMBER_SESSION_MS,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
        self.consumer.subscribe([topic])

    def read(self, count: int, timeout_s: float = 60) -> list[Position]:
        read: list[Position] = []
        deadline = time.monotonic() + timeout_s
        while len(read) < count and time.monotonic() < deadline:
            for message in self.consumer.consume(count - len(read), 0.5):
                if message.error() is None:
                    read.append((int(message.partition() or 0), int(message.offset() or 0)))
        return read

    def commit(self, next_offsets: dict[int, int]) -> None:
        self.consumer.commit(
            offsets=[CkTopicPartition(self.topic, p, o) for p, o in next_offsets.items()],
            asynchronous=False,
        )

    def close(self) -> None:
        self.consumer.close()  # a static member sends no LeaveGroup


class KafkaPythonMember:
    def __init__(self, servers: str, topic: str, group: str, instance_id: str) -> None:
        self.topic = topic
        self.consumer = KafkaConsumer(
            topic,
            bootstrap_servers=servers,
            group_id=group,
            group_instance_id=instance_id,
            session_timeout_ms=MEMBER_SESSION_MS,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
        )

    def read(self, count: int, timeout_s: float = 60) -> list[Position]:
        read: list[Position] = []
        deadline = time.monotonic() + timeout_s
        while len(read) < count and time.monotonic() < deadline:
            batches = self.consumer.poll(timeout_ms=500, max_records=count - len(read))
            for records in batches.values():
                read.extend((r.partition, r.offset) for r in records)
        return read

    def commit(self, next_offsets: dict[int, int]) -> None:
        self.consumer.commit(
            {
                KpTopicPartition(self.topic, p): OffsetAndMetadata(o, "", -1)
                for p, o in next_offsets.items()
            }
        )

    def close(self) -> None:
        self.consumer.close(autocommit=False)


MEMBERS = {"confluent-kafka": ConfluentMember, "kafka-python": KafkaPythonMember}


@pytest.fixture(scope="module")
def brokers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[int, BrokerProcess]]:
    with (
        cluster_support.zookeeper_ensemble(tmp_path_factory.mktemp("zk")) as zk,
        cluster_support.three_brokers(
            zk,
            tmp_path_factory.mktemp("brokers"),
            {
                "offsets.topic.replication.factor": "3",
                "offsets.topic.num.partitions": "3",
                "min.insync.replicas": "2",
                "default.replication.factor": "3",
                "replica.lag.time.max.ms": "3000",
                "auto.create.topics.enable": "false",
            },
        ) as (started, _connect),
    ):
        yield started


def servers_of(brokers: dict[int, BrokerProcess]) -> str:
    return ",".join(b.bootstrap for b in brokers.values() if b.process is not None)


def registered(broker: BrokerProcess) -> set[int]:
    with raw_wire.connect(broker.port) as sock:
        answer = raw_wire.call(
            sock,
            3,
            12,
            topics=(),
            allow_auto_topic_creation=False,
            include_cluster_authorized_operations=False,
            include_topic_authorized_operations=False,
        )
    return {b.node_id for b in answer.brokers}


def produce(servers: str, topic: str) -> None:
    producer = Producer({"bootstrap.servers": servers, "acks": "all", "linger.ms": 5})
    for i in range(RECORDS_PER_PARTITION * PARTITIONS):
        producer.produce(topic, b"%06d" % i, partition=i % PARTITIONS)
    assert producer.flush(30) == 0


def describe(admin: AdminClient, group: str) -> tuple[int, str, list[str | None]]:
    """(coordinator id, state, static member ids) as the coordinator describes the group."""
    description = admin.describe_consumer_groups([group])[group].result(10)
    return (
        description.coordinator.id,
        description.state.name,
        [m.group_instance_id for m in description.members],
    )


def committed(admin: AdminClient, group: str, topic: str) -> dict[int, int]:
    request = ConsumerGroupTopicPartitions(
        group, [CkTopicPartition(topic, p) for p in range(PARTITIONS)]
    )
    answer = admin.list_consumer_group_offsets([request])[group].result(10)
    return {tp.partition: tp.offset for tp in answer.topic_partitions}


@pytest.mark.parametrize("client", sorted(MEMBERS))
def test_the_group_resumes_from_its_committed_offsets_on_a_new_coordinator(
    brokers: dict[int, BrokerProcess], client: str
) -> None:
    topic, group, instance = f"events-{client}", f"group-{client}", f"member-{client}"
    servers = servers_of(brokers)
    admin = AdminClient({"bootstrap.servers": servers})
    new = NewTopic(topic, num_partitions=PARTITIONS, replication_factor=3)
    admin.create_topics([new])[topic].result(30)
    produce(servers, topic)
    everything = {(p, o) for p in range(PARTITIONS) for o in range(RECORDS_PER_PARTITION)}

    first = MEMBERS[client](servers, topic, group, instance)
    before_commit = first.read(COMMITTED)
    assert len(before_commit) == COMMITTED
    next_offsets = {p: 0 for p in range(PARTITIONS)}
    for partition, offset in before_commit:
        next_offsets[partition] = max(next_offsets[partition], offset + 1)
    first.commit(next_offsets)
    after_commit = first.read(UNCOMMITTED)
    assert len(after_commit) == UNCOMMITTED
    first.close()

    coordinator, state, static = eventually(lambda: describe(admin, group), what="the group")
    assert (state, static) == ("STABLE", [instance])
    assert committed(admin, group, topic) == next_offsets
    # every replica of the group's __consumer_offsets partition has the commit (acks=-1)
    offsets_isrs = partition_states(brokers[coordinator].bootstrap, "__consumer_offsets")
    led = [isr for leader, _, isr in offsets_isrs.values() if leader == coordinator]
    assert led and all(len(isr) >= 2 for isr in led)

    brokers[coordinator].kill()
    admin = AdminClient({"bootstrap.servers": servers_of(brokers)})
    started = time.monotonic()
    new_coordinator, state, static = eventually(
        lambda: (d := describe(admin, group))[0] != coordinator and d,
        timeout_s=DEATH_S,
        what="the group on a new coordinator",
    )
    failover_s = time.monotonic() - started
    assert new_coordinator in brokers and brokers[new_coordinator].process is not None
    assert (state, static) == ("STABLE", [instance])  # the group metadata was loaded too
    assert committed(admin, group, topic) == next_offsets

    second = MEMBERS[client](servers_of(brokers), topic, group, instance)
    rest = second.read(len(everything) - COMMITTED)
    assert not second.read(1, timeout_s=3)  # nothing beyond
    second.close()
    print(f"{client}: coordinator {coordinator} -> {new_coordinator} in {failover_s:.1f} s")

    # member 2 started at the committed offsets: the uncommitted records again, then the rest
    for partition in range(PARTITIONS):
        offsets = [o for p, o in rest if p == partition]
        assert offsets == list(range(next_offsets[partition], RECORDS_PER_PARTITION))
    assert set(before_commit).isdisjoint(rest)
    assert set(after_commit) <= set(rest)
    assert set(before_commit) | set(rest) == everything

    # whole again for the next test
    survivor = next(b for b in brokers.values() if b.process is not None)
    eventually(
        lambda: coordinator not in registered(survivor),
        timeout_s=DEATH_S,
        what="the killed broker's registration expired",
    )
    brokers[coordinator].start()
    eventually(lambda: len(registered(survivor)) == 3, what="three brokers again")
