"""Controller decisions reach every broker's MetadataCache through ZooKeeper watches, in
order, with the partitions that changed reported to the broker (its LeaderAndIsr), and topic
deletion markers handed to every broker, which acknowledges once its replicas are gone."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest

from embedded.zookeeper import ZooKeeperEnsemble
from storage_core.common import TopicPartition, Uuid
from storage_core.replication.zk_metadata_listener import ZkMetadataListener
from storage_core.zk.kafka_zk_client import KafkaZkClient
from storage_core.zk.zk_data import (
    NO_LEADER,
    BrokerRegistration,
    EndPoint,
    LeaderAndIsr,
    ReplicaAssignment,
    TopicAssignment,
)
from tests import cluster_support
from tests.zk_cluster_support import Node, eventually

cluster_support.require_java()


@pytest.fixture
def cluster(zookeeper: ZooKeeperEnsemble) -> Iterator[dict[int, Node]]:
    connect = f"{zookeeper.connect_string}/m-{uuid.uuid4().hex[:8]}"
    nodes = {b: Node(b, connect).start() for b in (1, 2, 3)}
    yield nodes
    for node in nodes.values():
        node.stop()


def controller_of(nodes: dict[int, Node]) -> Node:
    return eventually(
        lambda: next((n for n in nodes.values() if n.controller and n.controller.is_active), None),
        what="an active controller",
    )


def test_every_cache_follows_the_controller(cluster: dict[int, Node]) -> None:
    controller = controller_of(cluster)
    assert controller.controller is not None
    for node in cluster.values():
        # The third broker registers last: a cache may know the controller before it.
        image = eventually(
            lambda n=node: (
                len(n.cache.image().brokers) == 3
                and n.cache.image().controller_id != -1
                and n.cache.image()
            ),
            what=f"broker {node.broker_id}'s cache with the controller and three brokers",
        )
        assert sorted(image.brokers) == [1, 2, 3]
        assert image.controller_id == controller.broker_id

    topic_id = Uuid.random()
    created = time.monotonic()
    controller.controller.create_topic(
        TopicAssignment(
            topic="events",
            topic_id=topic_id,
            partitions={
                p: ReplicaAssignment(replicas=(p % 3 + 1, (p + 1) % 3 + 1)) for p in range(6)
            },
        ),
        {"retention.ms": "60000"},
    ).result(timeout=10)

    def everywhere() -> bool:
        for node in cluster.values():
            topic = node.cache.image().topic("events")
            if topic is None or not all(p.is_online for p in topic.partitions):
                return False
        return True

    eventually(everywhere, what="the topic in every cache")
    print(f"metadata propagation, 6 partitions to 3 caches: {time.monotonic() - created:.3f} s")
    for node in cluster.values():
        topic = node.cache.image().topic("events")
        assert topic is not None
        assert topic.topic_id == topic_id
        assert topic.configs == {"retention.ms": "60000"}
        assert [p.leader for p in topic.partitions] == [p % 3 + 1 for p in range(6)]
        assert node.cache.image().topic_by_id(topic_id) is topic
        # each broker was told about every partition (it acts on those it hosts)
        reported = {tp for change in node.changes for tp in change}
        assert reported >= {TopicPartition("events", p) for p in range(6)}

    # a broker dies: its leaderships move, and the others' caches show it with its replicas offline
    dead = cluster[2]
    dead.crash()
    survivors = [n for b, n in cluster.items() if b != 2]

    def moved() -> bool:
        for node in survivors:
            image = node.cache.image()
            topic = image.topic("events")
            if 2 in image.brokers or topic is None:
                return False
            # the ISR shrink of a partition it only followed is a controller step of its own
            if any(p.leader == 2 or 2 in p.isr for p in topic.partitions):
                return False
        return True

    eventually(moved, what="leadership and ISR off broker 2 in the surviving caches")
    for node in survivors:
        topic = node.cache.image().topic("events")
        assert topic is not None
        for p in topic.partitions:
            if 2 in p.replicas:
                assert p.offline_replicas == (2,)
                assert 2 not in p.isr
                assert p.leader != NO_LEADER
        assert node.cache.image().under_replicated()


def test_deletion_markers_reach_each_broker_which_acknowledges(cluster: dict[int, Node]) -> None:
    controller = controller_of(cluster)
    assert controller.controller is not None

    def acknowledge(node: Node, topics: set[str]) -> None:
        assert node.zk is not None
        for topic in topics:  # a broker removes its replicas, then says so
            node.zk.acknowledge_topic_deletion(topic, node.broker_id)

    for node in cluster.values():
        node.on_marked = acknowledge
    controller.controller.create_topic(
        TopicAssignment(
            topic="gone",
            topic_id=Uuid.random(),
            partitions={0: ReplicaAssignment(replicas=(1, 2, 3))},
        ),
        {},
    ).result(timeout=10)
    eventually(lambda: all(n.cache.image().topic("gone") for n in cluster.values()))
    controller.controller.delete_topics(["gone"]).result(timeout=10)

    eventually(
        lambda: all(n.cache.image().topic("gone") is None for n in cluster.values()),
        what="topic gone everywhere",
    )
    for node in cluster.values():
        assert {"gone"} in node.marked
        last = [c for c in node.changes if TopicPartition("gone", 0) in c][-1]
        assert last[TopicPartition("gone", 0)] is None  # no longer exists: stop hosting it


def test_a_marker_deleted_and_made_again_between_two_reads_is_acknowledged_again(
    cluster: dict[int, Node],
) -> None:
    """A topic deleted, created again and marked again can replace its marker faster than a
    busy broker reads the markers: the broker sees the same name, but it is a new marker that
    waits for a new acknowledgement. One transaction makes the replacement land between two
    reads every time."""
    controller = controller_of(cluster)
    assert controller.controller is not None and controller.zk is not None
    controller.controller.create_topic(
        TopicAssignment(
            topic="again", topic_id=Uuid.random(), partitions={0: ReplicaAssignment(replicas=(1,))}
        ),
        {},
    ).result(timeout=10)
    eventually(lambda: all(n.cache.image().topic("again") for n in cluster.values()))
    controller.controller.delete_topics(["again"]).result(timeout=10)
    eventually(
        lambda: all(n.marked == [{"again"}] for n in cluster.values()),
        what="the first marker seen by every broker",
    )

    marker = "/admin/delete_topics/again"
    replace_marker = controller.zk.zk.transaction()
    replace_marker.delete(marker)
    replace_marker.create(marker)
    assert all(result is True or result == marker for result in replace_marker.commit())

    eventually(
        lambda: all(n.marked == [{"again"}, {"again"}] for n in cluster.values()),
        what="the new marker seen by every broker",
    )


def test_a_topic_is_listed_once_every_partition_has_its_state(
    zookeeper: ZooKeeperEnsemble,
) -> None:
    """The controller writes a topic's assignment, then its partitions' states one by one: a
    broker lists the topic only once every partition has one (its partitions added later only
    once all of them have one), never with partitions that merely have no state yet. A state
    without a leader (every replica down) is listed as it is. States are written here by hand,
    with pauses, so each step is seen by the broker; no controller runs."""
    connect = f"{zookeeper.connect_string}/m-{uuid.uuid4().hex[:8]}"
    writer = KafkaZkClient(connect, session_timeout_ms=4000).start()
    broker = Node(1, connect)
    broker.zk = KafkaZkClient(connect, session_timeout_ms=4000).start()
    broker.zk.register_broker(
        BrokerRegistration(
            broker_id=1, endpoints=(EndPoint(listener="PLAINTEXT", host="127.0.0.1", port=9001),)
        )
    )
    broker.listener = ZkMetadataListener(
        1,
        broker.zk,
        broker.cache,
        on_partitions=lambda image, _changes: broker.changes.append(
            {
                TopicPartition(t.name, p.partition): p
                for t in image.topics.values()
                for p in t.partitions
            }
        ),
    )
    broker.listener.start()
    try:
        epoch = writer.register_controller_and_increment_controller_epoch(99)
        assignment = TopicAssignment(
            topic="stepwise",
            topic_id=Uuid.random(),
            partitions={p: ReplicaAssignment(replicas=(1,)) for p in range(3)},
        )
        assert writer.create_topic(epoch, assignment, {})

        def state(leader: int) -> LeaderAndIsr:
            return LeaderAndIsr(
                leader=leader, leader_epoch=0, isr=(1,), controller_epoch=epoch.epoch
            )

        settle_s = 0.3  # far longer than a watch takes to reach the broker on loopback
        for partition in range(3):
            time.sleep(settle_s)
            assert broker.cache.image().topic("stepwise") is None, f"before state {partition}"
            writer.create_partition_states(epoch, {TopicPartition("stepwise", partition): state(1)})
        listed = eventually(lambda: broker.cache.image().topic("stepwise"), what="stepwise")
        assert [(p.partition, p.leader) for p in listed.partitions] == [(0, 1), (1, 1), (2, 1)]

        grown = TopicAssignment(
            topic="stepwise",
            topic_id=assignment.topic_id,
            partitions={p: ReplicaAssignment(replicas=(1,)) for p in range(5)},
        )
        assert writer.set_topic_assignment(epoch, grown, expected_version=0)
        for partition in (3, 4):
            time.sleep(settle_s)
            topic = broker.cache.image().topic("stepwise")
            assert topic is not None and len(topic.partitions) == 3, f"before state {partition}"
            # every replica down: no leader, and still a state
            writer.create_partition_states(
                epoch, {TopicPartition("stepwise", partition): state(NO_LEADER)}
            )
        grown_listed = eventually(
            lambda: (t := broker.cache.image().topic("stepwise")) and len(t.partitions) == 5 and t,
            what="the added partitions",
        )
        assert [(p.partition, p.leader) for p in grown_listed.partitions] == [
            (0, 1),
            (1, 1),
            (2, 1),
            (3, NO_LEADER),
            (4, NO_LEADER),
        ]
        # every picture the broker was handed had whole topics with states only
        for picture in broker.changes:
            counts = {tp.partition for tp in picture if tp.topic == "stepwise"}
            assert counts in (set(), set(range(3)), set(range(5))), picture
            assert all(p.partition_epoch >= 0 for p in picture.values()), picture
    finally:
        broker.listener.stop()
        broker.zk.close()
        writer.close()
