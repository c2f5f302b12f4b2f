"""The controller's ZooKeeper writes are batched: a topic's partition states, the elections and
ISR shrinks of a controlled shutdown go out in multi-op transactions of up to 200 operations,
pipelined, and the states are read in multiRead requests, so the controller sends a few
requests and waits for ZooKeeper a few times per event, not once per partition (three broker
sessions on a real ZooKeeper); the single-node store writes its file once per batch."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from embedded.zookeeper import ZooKeeperEnsemble
from storage_core.common import TopicPartition, Uuid
from storage_core.zk import local_znode_tree
from storage_core.zk.kafka_zk_client import KafkaZkClient
from storage_core.zk.local_znode_tree import LocalZNodeTree
from storage_core.zk.zk_data import LeaderAndIsr, ReplicaAssignment, TopicAssignment
from tests import cluster_support
from tests.zk_cluster_support import Node, eventually
from tests.zk_round_trips import RoundTrips

cluster_support.require_java()

CONTROLLER_THREAD = "controller-event-thread"


@pytest.fixture
def cluster(zookeeper: ZooKeeperEnsemble) -> Iterator[dict[int, Node]]:
    connect = f"{zookeeper.connect_string}/batch-{uuid.uuid4().hex[:8]}"
    nodes = {b: Node(b, connect).start() for b in (1, 2, 3)}
    yield nodes
    for node in nodes.values():
        node.stop()


def active(nodes: dict[int, Node]) -> Node:
    def one() -> Node | None:
        live = [n for n in nodes.values() if n.controller is not None and n.controller.is_active]
        return live[0] if len(live) == 1 else None

    return eventually(one, what="exactly one active controller")


def rf3_assignment(topic: str, partitions: int) -> TopicAssignment:
    """Leaders spread over brokers 1-3, every broker a replica of every partition."""
    return TopicAssignment(
        topic=topic,
        topic_id=Uuid.random(),
        partitions={
            p: ReplicaAssignment(replicas=tuple((p + i) % 3 + 1 for i in range(3)))
            for p in range(partitions)
        },
    )


def states(zk: KafkaZkClient, topic: str, count: int) -> dict[int, LeaderAndIsr]:
    read = zk.get_partition_states([TopicPartition(topic, p) for p in range(count)])
    return {tp.partition: s for tp, s in read.items()}


def create_counted(node: Node, counter: RoundTrips, topic: str, partitions: int) -> int:
    """Round trips of the controller's thread while it creates the topic."""
    assert node.controller is not None
    counter.reset()
    assert node.controller.create_topic(rf3_assignment(topic, partitions), {}).result(60)
    return counter.round_trips


def test_creating_a_topic_takes_as_many_round_trips_for_600_partitions_as_for_6(
    cluster: dict[int, Node],
) -> None:
    controller = active(cluster)
    assert controller.zk is not None
    counter = RoundTrips.install(controller.zk, thread_prefix=CONTROLLER_THREAD)

    small = create_counted(controller, counter, "small", 6)
    big = create_counted(controller, counter, "big", 600)
    requests = counter.requests

    # every partition has its first state: the first replica leads, all three in sync
    written = states(controller.zk, "big", 600)
    assert len(written) == 600
    for partition, state in written.items():
        replicas = tuple((partition + i) % 3 + 1 for i in range(3))
        assert (state.leader, state.leader_epoch, state.isr) == (replicas[0], 0, replicas)
    # 1,200 znodes in a few fenced transactions, waited for together: a few requests and round
    # trips per topic, whatever its partition count (one of each per znode before)
    assert requests <= 30, requests
    assert big <= small + 2, (small, big)
    assert big <= 12, big


def test_a_controlled_shutdown_of_600_partitions_moves_them_in_a_few_round_trips(
    cluster: dict[int, Node],
) -> None:
    controller = active(cluster)
    assert controller.zk is not None and controller.controller is not None
    victim = next(b for b in (1, 2, 3) if b != controller.broker_id)
    assert controller.controller.create_topic(rf3_assignment("wide", 600), {}).result(60)
    before = states(controller.zk, "wide", 600)
    led = {p for p, s in before.items() if s.leader == victim}
    assert len(led) == 200
    counter = RoundTrips.install(controller.zk, thread_prefix=CONTROLLER_THREAD)

    still_led = controller.controller.controlled_shutdown(victim).result(60)

    round_trips, requests = counter.round_trips, counter.requests
    assert still_led == []
    after = states(controller.zk, "wide", 600)
    for partition, state in after.items():
        assert state.leader != victim, (partition, state)
        assert victim not in state.isr, (partition, state)
        if partition in led:  # a new leader, one epoch on
            assert state.leader_epoch == before[partition].leader_epoch + 1, state
    # 600 states read and 600 written (200 elections, 400 ISR shrinks): a few requests, waited
    # for together
    assert requests <= 12, requests
    assert round_trips <= 8, round_trips


def test_the_single_node_store_writes_its_file_once_for_a_topic_of_600_partitions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rewrites: list[Path] = []
    write = local_znode_tree.write_atomically

    def counted(path: Path, *args: Any, **kwargs: Any) -> None:
        rewrites.append(path)
        write(path, *args, **kwargs)

    monkeypatch.setattr(local_znode_tree, "write_atomically", counted)
    node = Node(1, "", tree=LocalZNodeTree(tmp_path)).start()
    try:
        controller = eventually(
            lambda: node if node.controller is not None and node.controller.is_active else None,
            what="the single node's controller active",
        )
        assert controller.controller is not None
        assignment = TopicAssignment(
            topic="single",
            topic_id=Uuid.random(),
            partitions={p: ReplicaAssignment(replicas=(1,)) for p in range(600)},
        )
        rewrites.clear()
        assert controller.controller.create_topic(assignment, {}).result(60)
        # the topic (one transaction), then its 600 partitions' znodes and states (one batch)
        assert len(rewrites) <= 3, len(rewrites)
    finally:
        node.stop()
    # what was written is on disk: a fresh store on the same file holds every state
    reopened = KafkaZkClient.single_node(LocalZNodeTree(tmp_path)).start()
    try:
        written = states(reopened, "single", 600)
        assert len(written) == 600
        assert all(s.leader == 1 and s.isr == (1,) for s in written.values())
    finally:
        reopened.close()


def test_states_that_moved_under_the_controller_are_read_again_in_one_batch(
    cluster: dict[int, Node],
) -> None:
    controller = active(cluster)
    assert controller.zk is not None and controller.controller is not None
    assert controller.controller.create_topic(rf3_assignment("moved", 300), {}).result(60)
    created = states(controller.zk, "moved", 300)
    # every leader rewrote its state (an ISR change the controller has not read): each znode
    # is one version past the controller's copy
    leader_writes = controller.zk.update_isrs_as_leader(
        [(TopicPartition("moved", p), s) for p, s in created.items()]
    )
    assert None not in leader_writes
    counter = RoundTrips.install(controller.zk, thread_prefix=CONTROLLER_THREAD)

    controller.controller.delete_topics(["moved"]).result(60)

    # the deletion stopped every partition (no leader, one epoch on) despite the stale copy:
    # each write failed on its version, was read again and written again
    stopped = states(controller.zk, "moved", 300)
    for partition, state in stopped.items():
        assert state.leader == -1, state
        assert state.leader_epoch == created[partition].leader_epoch + 1, state
        assert state.zk_version == created[partition].zk_version + 2, state
    # the 300 rereads in one batch, not one round trip each
    assert counter.round_trips <= 15, counter.round_trips
