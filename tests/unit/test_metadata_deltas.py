"""A broker applies the controller's partition state changes as deltas and in batches: a burst
of changes that arrives while it is busy reaches it as one batch (its LeaderAndIsr), and a
change touches only its own topic in the broker's metadata image.

The single-node metadata store runs the watches as the writes happen, which makes the moment a
change is reported exact."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

import pytest

from storage_core.common import TopicPartition, Uuid
from storage_core.replication.metadata_cache import MetadataCache, MetadataImage, PartitionMetadata
from storage_core.replication.zk_metadata_listener import ZkMetadataListener
from storage_core.zk import zk_data
from storage_core.zk.kafka_zk_client import KafkaZkClient
from storage_core.zk.local_znode_tree import LocalZNodeTree
from storage_core.zk.zk_data import (
    BrokerRegistration,
    EndPoint,
    LeaderAndIsr,
    ReplicaAssignment,
    TopicAssignment,
)
from tests.zk_round_trips import RoundTrips

PARTITIONS = 1000


@dataclass
class Broker:
    """What the listener tells a broker, and a gate that holds the listener inside a call."""

    calls: list[Mapping[TopicPartition, PartitionMetadata | None]] = field(default_factory=list)
    hold_next: bool = False
    entered: threading.Event = field(default_factory=threading.Event)
    gate: threading.Event = field(default_factory=threading.Event)

    def on_partitions(
        self, _image: MetadataImage, changes: Mapping[TopicPartition, PartitionMetadata | None]
    ) -> None:
        self.calls.append(dict(changes))
        if self.hold_next:
            self.hold_next = False
            self.entered.set()
            self.gate.wait(timeout=60)


@pytest.fixture
def zk() -> Iterator[KafkaZkClient]:
    client = KafkaZkClient.single_node(LocalZNodeTree(None)).start()
    for broker_id in (1, 2):
        register(client, broker_id)
    yield client


def register(zk: KafkaZkClient, broker_id: int) -> None:
    endpoint = EndPoint(listener="PLAINTEXT", host="127.0.0.1", port=9000 + broker_id)
    zk.register_broker(BrokerRegistration(broker_id=broker_id, endpoints=(endpoint,)))


def create_assignment(zk: KafkaZkClient, name: str, partitions: int) -> None:
    """The topic's assignment (and configs), without its partitions' states."""
    assignment = TopicAssignment(
        topic=name,
        topic_id=Uuid.random(),
        partitions={p: ReplicaAssignment(replicas=(1, 2)) for p in range(partitions)},
    )
    assert zk.create_topic(None, assignment, {})


def create_topic(zk: KafkaZkClient, name: str, partitions: int) -> None:
    create_assignment(zk, name, partitions)
    for p in range(partitions):
        zk.zk.create(
            zk_data.partition_state_path(TopicPartition(name, p)),
            zk_data.encode_leader_and_isr(state(leader_epoch=0)),
            makepath=True,
        )


def state(*, leader_epoch: int) -> LeaderAndIsr:
    return LeaderAndIsr(leader=1, leader_epoch=leader_epoch, isr=(1, 2), controller_epoch=1)


def move_leader_epoch(zk: KafkaZkClient, tp: TopicPartition, leader_epoch: int) -> None:
    zk.zk.set(
        zk_data.partition_state_path(tp),
        zk_data.encode_leader_and_isr(state(leader_epoch=leader_epoch)),
    )


def test_changes_that_arrive_while_the_broker_is_busy_reach_it_as_one_batch(
    zk: KafkaZkClient,
) -> None:
    broker = Broker()
    listener = ZkMetadataListener(1, zk, MetadataCache(1), on_partitions=broker.on_partitions)
    listener.start()
    try:
        create_topic(zk, "events", PARTITIONS)
        listener.sync()
        broker.calls.clear()

        broker.hold_next = True
        move_leader_epoch(zk, TopicPartition("events", 0), 1)
        assert broker.entered.wait(timeout=30), "the first change never reached the broker"
        for p in range(1, PARTITIONS):  # while the broker applies the first change
            move_leader_epoch(zk, TopicPartition("events", p), 1)
        broker.gate.set()
        listener.sync()

        assert [len(changes) for changes in broker.calls] == [1, PARTITIONS - 1]
        assert all(m is not None and m.leader_epoch == 1 for m in broker.calls[1].values())
        topic = listener.cache.image().topic("events")
        assert topic is not None
        assert {p.leader_epoch for p in topic.partitions} == {1}
    finally:
        broker.gate.set()
        listener.stop()


def test_a_change_touches_only_its_own_topic_in_the_image(zk: KafkaZkClient) -> None:
    cache = MetadataCache(1)
    listener = ZkMetadataListener(1, zk, cache)
    listener.start()
    try:
        create_topic(zk, "quiet", 50)
        create_topic(zk, "busy", 50)
        listener.sync()
        before = cache.image()

        move_leader_epoch(zk, TopicPartition("busy", 7), 3)
        listener.sync()
        after = cache.image()

        assert after.topics["quiet"] is before.topics["quiet"]
        busy = after.topics["busy"]
        assert busy.partitions[7].leader_epoch == 3
        assert [p for i, p in enumerate(busy.partitions) if i != 7] == [
            p for i, p in enumerate(before.topics["busy"].partitions) if i != 7
        ]
    finally:
        listener.stop()


def test_a_broker_that_leaves_is_an_offline_replica_of_every_topic(zk: KafkaZkClient) -> None:
    cache = MetadataCache(1)
    listener = ZkMetadataListener(1, zk, cache)
    listener.start()
    try:
        create_topic(zk, "a", 3)
        create_topic(zk, "b", 3)
        listener.sync()
        assert cache.image().partition(TopicPartition("a", 0)).offline_replicas == ()  # type: ignore[union-attr]

        zk.zk.delete(zk_data.broker_path(2))
        listener.sync()
        image = cache.image()
        assert {p.offline_replicas for t in image.topics.values() for p in t.partitions} == {(2,)}

        register(zk, 2)
        listener.sync()
        image = cache.image()
        assert {p.offline_replicas for t in image.topics.values() for p in t.partitions} == {()}
    finally:
        listener.stop()


def test_a_new_topic_read_before_its_states_exist_costs_a_few_round_trips(
    zk: KafkaZkClient,
) -> None:
    """The controller writes a topic's assignment before its partitions' states: a broker
    that reads the topic in between waits for them in a few round trips, not one per
    partition. Here each partition's znode is created before its state (as a controller that
    died between the two would leave them): each state is still reported."""
    listener = ZkMetadataListener(1, zk, MetadataCache(1))
    listener.start()
    try:
        counter = RoundTrips.install(zk, thread_prefix="metadata-listener")
        create_assignment(zk, "events", PARTITIONS)
        listener.sync()
        assert listener.cache.image().topic("events") is None  # not listed without states
        assert counter.round_trips <= 10, counter.round_trips

        for p in range(PARTITIONS):  # the controller's states: each watch reports one
            zk.zk.create(
                zk_data.partition_state_path(TopicPartition("events", p)),
                zk_data.encode_leader_and_isr(state(leader_epoch=0)),
                makepath=True,
            )
        listener.sync()
        topic = listener.cache.image().topic("events")
        assert topic is not None and all(p.leader == 1 for p in topic.partitions)
    finally:
        listener.stop()


def test_a_new_topic_waits_for_its_states_with_one_watch_and_reads_each_once(
    zk: KafkaZkClient,
) -> None:
    """A broker that sees a new topic before the controller has given its partitions their
    znodes reads no missing state: the children watch on ``partitions`` reports them, and
    each state is then read once, in batches, as the controller's transactions land."""
    listener = ZkMetadataListener(1, zk, MetadataCache(1))
    listener.start()
    try:
        counter = RoundTrips.install(zk, thread_prefix="metadata-listener")
        create_assignment(zk, "events", PARTITIONS)
        listener.sync()
        assert listener.cache.image().topic("events") is None
        # the topics, its assignment, config and config watch, its partitions and their watch
        assert counter.requests <= 6, counter.requests

        counter.reset()
        zk.zk.ensure_path(zk_data.partitions_path("events"))
        batches = [range(start, start + 100) for start in range(0, PARTITIONS, 100)]
        for batch in batches:  # as the controller writes them: znode and state together
            transaction = zk.zk.transaction()
            for p in batch:
                tp = TopicPartition("events", p)
                transaction.create(zk_data.partition_state_path(tp).rsplit("/", 1)[0], b"")
                transaction.create(
                    zk_data.partition_state_path(tp),
                    zk_data.encode_leader_and_isr(state(leader_epoch=0)),
                )
            assert all(not isinstance(r, Exception) for r in transaction.commit())
        listener.sync()

        topic = listener.cache.image().topic("events")
        assert topic is not None and all(p.leader == 1 for p in topic.partitions)
        # each state read once, plus one listing of the children per batch at most
        assert counter.requests <= PARTITIONS + len(batches) + 2, counter.requests
    finally:
        listener.stop()
