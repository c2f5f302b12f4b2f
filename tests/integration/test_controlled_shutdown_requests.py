"""A broker asking again to shut down is served again (Kafka's broker retries ControlledShutdown
``controlled.shutdown.max.retries`` times): a leadership that could not move on the first
request (no other replica in sync yet) moves on the next, once a follower caught up. Three
broker sessions on a real ZooKeeper."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator

import pytest

from embedded.zookeeper import ZooKeeperEnsemble
from storage_core.common import TopicPartition, Uuid
from storage_core.zk.zk_data import LeaderAndIsr, ReplicaAssignment, TopicAssignment
from tests import cluster_support
from tests.zk_cluster_support import Node, eventually

cluster_support.require_java()


@pytest.fixture
def cluster(zookeeper: ZooKeeperEnsemble) -> Iterator[dict[int, Node]]:
    connect = f"{zookeeper.connect_string}/retry-{uuid.uuid4().hex[:8]}"
    nodes = {b: Node(b, connect).start() for b in (1, 2, 3)}
    yield nodes
    for node in nodes.values():
        node.stop()


def test_a_second_request_moves_what_the_first_could_not(
    cluster: dict[int, Node], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="storage_core.controller.kafka_controller")
    controller = eventually(
        lambda: next(
            (n for n in cluster.values() if n.controller and n.controller.is_active), None
        ),
        what="an active controller",
    )
    assert controller.controller is not None and controller.zk is not None
    leaving, follower = (b for b in (1, 2, 3) if b != controller.broker_id)
    node = cluster[leaving]
    assert node.zk is not None
    tp = TopicPartition("retried", 0)
    assignment = TopicAssignment(
        topic=tp.topic,
        topic_id=Uuid.random(),
        partitions={0: ReplicaAssignment(replicas=(leaving, follower))},
    )
    assert controller.controller.create_topic(assignment, {}).result(10)
    first = eventually(lambda: node.zk.get_partition_states([tp]).get(tp), what="a first state")  # type: ignore[union-attr]
    # the follower fell behind: the leader took it out of the ISR
    shrunk = LeaderAndIsr(
        leader=leaving,
        leader_epoch=first.leader_epoch,
        isr=(leaving,),
        controller_epoch=first.controller_epoch,
        zk_version=first.zk_version,
    )
    (shrunk_version,) = node.zk.update_isrs_as_leader([(tp, shrunk)])
    assert shrunk_version is not None
    broker_epoch = node.zk.get_all_brokers()[leaving].broker_epoch

    node.zk.request_controlled_shutdown(leaving, broker_epoch)
    served = f"controlled shutdown served, broker={leaving} "
    eventually(lambda: caplog.text.count(served) == 1, what="the first request served")
    state = node.zk.get_partition_states([tp])[tp]
    assert (state.leader, state.isr) == (leaving, (leaving,))  # nobody else could lead

    # the follower caught up and is back in the ISR; the broker asks again
    expanded = LeaderAndIsr(
        leader=leaving,
        leader_epoch=state.leader_epoch,
        isr=(leaving, follower),
        controller_epoch=state.controller_epoch,
        zk_version=state.zk_version,
    )
    assert node.zk.update_isrs_as_leader([(tp, expanded)]) != [None]
    node.zk.request_controlled_shutdown(leaving, broker_epoch)

    moved = eventually(
        lambda: (s := node.zk.get_partition_states([tp])[tp]).leader == follower and s,  # type: ignore[union-attr]
        what="the leadership moved on the second request",
    )
    assert moved.isr == (follower,)
    assert moved.leader_epoch == state.leader_epoch + 1
    assert caplog.text.count(served) == 2
