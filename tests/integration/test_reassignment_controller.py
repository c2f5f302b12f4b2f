"""The controller's reassignment flow against a real ZooKeeper with four broker sessions (and
the single-node store): a pending reassignment completes when its state znode shows every
target replica in the ISR, written there as a ZooKeeper-mode leader wrote an ISR expansion
(followers do not fetch yet, so no leader here expands an ISR itself)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from embedded.zookeeper import ZooKeeperEnsemble
from storage_core.common import TopicPartition, Uuid
from storage_core.controller.reassignment import ACCEPTED, NO_REASSIGNMENT_IN_PROGRESS
from storage_core.zk import zk_data
from storage_core.zk.local_znode_tree import LocalZNodeTree
from storage_core.zk.zk_data import LeaderAndIsr, ReplicaAssignment, TopicAssignment
from tests import cluster_support
from tests.zk_cluster_support import Node, eventually

cluster_support.require_java()

TP = TopicPartition("moves", 0)


@pytest.fixture
def cluster(zookeeper: ZooKeeperEnsemble) -> Iterator[dict[int, Node]]:
    connect = f"{zookeeper.connect_string}/r-{uuid.uuid4().hex[:8]}"
    nodes = {b: Node(b, connect).start() for b in (1, 2, 3, 4)}
    yield nodes
    for node in nodes.values():
        node.stop()


def active(nodes: dict[int, Node]) -> Node:
    def one() -> Node | None:
        live = [n for n in nodes.values() if n.controller is not None and n.controller.is_active]
        return live[0] if len(live) == 1 else None

    return eventually(one, what="exactly one active controller")


def create(node: Node, topic: str, replicas: dict[int, tuple[int, ...]]) -> None:
    assert node.controller is not None
    assignment = TopicAssignment(
        topic=topic,
        topic_id=Uuid.random(),
        partitions={p: ReplicaAssignment(replicas=r) for p, r in replicas.items()},
    )
    assert node.controller.create_topic(assignment, {}).result(timeout=10)


def state(node: Node, tp: TopicPartition = TP) -> LeaderAndIsr | None:
    assert node.zk is not None
    return node.zk.get_partition_states([tp]).get(tp)


def assignment(node: Node, tp: TopicPartition = TP) -> ReplicaAssignment:
    assert node.zk is not None
    read = node.zk.get_topic_assignment(tp.topic)
    assert read is not None
    return read[0].partitions[tp.partition]


def test_a_pending_reassignment_completes_once_the_targets_are_in_sync(
    cluster: dict[int, Node],
) -> None:
    controller = active(cluster)
    assert controller.controller is not None
    create(controller, "moves", {0: (1, 2, 3)})
    eventually(lambda: state(controller) is not None, what="the partition online")

    outcome = controller.controller.alter_partition_reassignments({TP: [2, 3, 4]}).result(10)
    assert outcome == {TP: ACCEPTED}
    # U1: RS = TRS + ORS with AR and RR in the topic znode; A1: the leader epoch bumped
    pending = ReplicaAssignment(replicas=(2, 3, 4, 1), adding_replicas=(4,), removing_replicas=(1,))
    assert assignment(controller) == pending
    assert controller.controller.list_partition_reassignments().result(10) == {TP: pending}
    before = state(controller)
    assert before is not None and (before.leader, before.leader_epoch, before.isr) == (
        1,
        1,
        (1, 2, 3),
    )
    # every broker learns it; broker 4 among the replicas
    for node in cluster.values():
        eventually(
            lambda n=node: (p := n.cache.image().partition(TP)) and p.replicas == (2, 3, 4, 1),
            what=f"broker {node.broker_id} sees the reassigning replicas",
        )

    # broker 4 caught up: its leader adds it to the ISR in the state znode
    assert controller.zk is not None
    controller.zk.zk.set(
        zk_data.partition_state_path(TP),
        zk_data.encode_leader_and_isr(
            LeaderAndIsr(leader=1, leader_epoch=1, isr=(1, 2, 3, 4), controller_epoch=0)
        ),
        version=before.zk_version,
    )
    done = ReplicaAssignment(replicas=(2, 3, 4))
    eventually(lambda: assignment(controller) == done, what="the reassignment completed")
    after = state(controller)
    assert after is not None
    # B3: leader 1 is not a target: broker 2 elected (epoch 2); B4: 1 leaves the ISR (epoch 3)
    assert (after.leader, after.leader_epoch, after.isr) == (2, 3, (2, 3, 4))
    assert controller.controller.list_partition_reassignments().result(10) == {}
    for node in cluster.values():
        eventually(
            lambda n=node: (
                (p := n.cache.image().partition(TP))
                and (p.replicas, p.leader, p.isr) == ((2, 3, 4), 2, (2, 3, 4))
            ),
            what=f"broker {node.broker_id} sees the completed reassignment",
        )


def test_a_replaced_reassignment_drops_the_replicas_it_no_longer_needs(
    cluster: dict[int, Node],
) -> None:
    controller = active(cluster)
    assert controller.controller is not None
    create(controller, "moves", {0: (1, 2, 3)})
    eventually(lambda: state(controller) is not None, what="the partition online")
    assert controller.controller.alter_partition_reassignments({TP: [1, 2, 4]}).result(10) == {
        TP: ACCEPTED
    }
    # replaced by one that only reorders the original replicas: complete at once, 4 dropped
    assert controller.controller.alter_partition_reassignments({TP: [3, 1, 2]}).result(10) == {
        TP: ACCEPTED
    }
    assert assignment(controller) == ReplicaAssignment(replicas=(3, 1, 2))
    final = state(controller)
    assert final is not None and (final.leader, final.isr) == (1, (1, 2, 3))
    assert controller.controller.alter_partition_reassignments({TP: None}).result(10) == {
        TP: NO_REASSIGNMENT_IN_PROGRESS
    }


def test_single_node_store_reassigns_through_the_same_code(tmp_path: Path) -> None:
    node = Node(0, "single-node", tree=LocalZNodeTree(tmp_path)).start()
    try:
        assert active({0: node}) is node
        assert node.controller is not None
        create(node, "moves", {0: (0, 5)})  # broker 5 never registered
        eventually(lambda: state(node) is not None, what="the partition online")
        assert node.controller.alter_partition_reassignments({TP: [0, 6]}).result(10)[TP].error == (
            "invalid_replica_assignment"
        )
        assert node.controller.alter_partition_reassignments({TP: [0]}).result(10) == {TP: ACCEPTED}
        assert assignment(node) == ReplicaAssignment(replicas=(0,))
    finally:
        node.stop()
    restarted = Node(0, "single-node", tree=LocalZNodeTree(tmp_path)).start()
    try:
        assert active({0: restarted}) is restarted
        assert assignment(restarted) == ReplicaAssignment(replicas=(0,))
        assert restarted.controller is not None
        assert restarted.controller.list_partition_reassignments().result(10) == {}
    finally:
        restarted.stop()


def test_reassignments_asked_in_zookeeper(cluster: dict[int, Node]) -> None:
    """``/admin/reassign_partitions`` (Kafka's ReassignPartitionsZNode): the controller starts
    what it asks and removes each entry once done, refused or superseded by the API; the znode
    goes when empty, and a new one is seen."""
    controller = active(cluster)
    assert controller.controller is not None and controller.zk is not None
    create(controller, "moves", {0: (1, 2, 3), 1: (1, 2, 3)})
    tp1 = TopicPartition("moves", 1)
    eventually(lambda: state(controller, tp1) is not None, what="the partitions online")
    zk = controller.zk.zk
    asked = {TP: (2, 3), tp1: (1, 2, 4), TopicPartition("gone", 0): (1,)}
    zk.create(zk_data.REASSIGN_PARTITIONS_PATH, zk_data.encode_partition_reassignment(asked))

    # moves-0 completes at once, "gone" is refused: both leave the znode; moves-1 is pending
    eventually(
        lambda: (
            controller.zk is not None
            and controller.zk.get_partition_reassignment() == {tp1: (1, 2, 4)}
        ),
        what="only the pending reassignment left in the znode",
    )
    assert assignment(controller) == ReplicaAssignment(replicas=(2, 3))
    assert assignment(controller, tp1) == ReplicaAssignment(
        replicas=(1, 2, 4, 3), adding_replicas=(4,), removing_replicas=(3,)
    )
    # cancelled through the API: the znode goes
    assert controller.controller.alter_partition_reassignments({tp1: None}).result(10) == {
        tp1: ACCEPTED
    }
    assert controller.zk.get_partition_reassignment() is None
    assert assignment(controller, tp1) == ReplicaAssignment(replicas=(1, 2, 3))

    # a new znode is seen (the watch was renewed after the delete)
    zk.create(
        zk_data.REASSIGN_PARTITIONS_PATH, zk_data.encode_partition_reassignment({tp1: (3, 2, 1)})
    )
    eventually(
        lambda: assignment(controller, tp1) == ReplicaAssignment(replicas=(3, 2, 1)),
        what="the second znode's reassignment done",
    )
    eventually(
        lambda: controller.zk is not None and controller.zk.get_partition_reassignment() is None,
        what="the znode removed once done",
    )
