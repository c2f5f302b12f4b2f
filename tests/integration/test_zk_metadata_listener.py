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
from storage_core.controller.zk_data import NO_LEADER, ReplicaAssignment, TopicAssignment
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
