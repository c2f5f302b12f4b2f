"""The controller against a real ZooKeeper with three broker sessions (and the single-node
store with one): one active controller, failover when its broker dies, leadership of a dead
broker's partitions, elections, controlled shutdown, topic deletion waiting for every replica,
and no leader epoch bump when nothing changed."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from embedded.zookeeper import ZooKeeperEnsemble
from storage_core.common import TopicPartition, Uuid
from storage_core.controller.replica_assignment import BrokerMetadata, assign_replicas_to_brokers
from storage_core.zk import zk_data
from storage_core.zk.controller_zk import ControllerMovedError
from storage_core.zk.kafka_zk_client import KafkaZkClient
from storage_core.zk.local_znode_tree import LocalZNodeTree
from storage_core.zk.zk_data import (
    NO_LEADER,
    LeaderAndIsr,
    ReplicaAssignment,
    TopicAssignment,
)
from tests import cluster_support
from tests.zk_cluster_support import SESSION_TIMEOUT_MS, Node, eventually

cluster_support.require_java()


@pytest.fixture
def cluster(zookeeper: ZooKeeperEnsemble) -> Iterator[dict[int, Node]]:
    connect = f"{zookeeper.connect_string}/c-{uuid.uuid4().hex[:8]}"
    nodes = {b: Node(b, connect).start() for b in (1, 2, 3)}
    yield nodes
    for node in nodes.values():
        node.stop()


def active(nodes: dict[int, Node]) -> Node:
    def one() -> Node | None:
        live = [n for n in nodes.values() if n.controller is not None and n.controller.is_active]
        return live[0] if len(live) == 1 else None

    return eventually(one, what="exactly one active controller")


def states(node: Node, topic: str, count: int) -> dict[int, LeaderAndIsr]:
    assert node.zk is not None
    read = node.zk.get_partition_states([TopicPartition(topic, p) for p in range(count)])
    return {tp.partition: s for tp, s in read.items()}


def create(node: Node, topic: str, replicas: dict[int, tuple[int, ...]]) -> None:
    assert node.controller is not None
    assignment = TopicAssignment(
        topic=topic,
        topic_id=Uuid.random(),
        partitions={p: ReplicaAssignment(replicas=r) for p, r in replicas.items()},
    )
    assert node.controller.create_topic(assignment, {}).result(timeout=10)


def test_one_controller_and_failover_with_offline_partitions(cluster: dict[int, Node]) -> None:
    controller = active(cluster)
    others = [n for n in cluster.values() if n is not controller]
    eventually(
        lambda: all(
            n.controller and n.controller.active_controller_id == controller.broker_id
            for n in others
        )
    )

    placement = assign_replicas_to_brokers(
        [BrokerMetadata(broker_id=b) for b in (1, 2, 3)], 6, 1, fixed_start_index=0
    )
    create(controller, "events", placement)
    first = eventually(lambda: (s := states(controller, "events", 6)) and len(s) == 6 and s)
    assert {p: s.leader for p, s in first.items()} == {p: r[0] for p, r in placement.items()}
    assert {s.leader_epoch for s in first.values()} == {0}
    # a second creation of the same topic writes nothing
    assert controller.controller is not None
    again = TopicAssignment(
        topic="events", topic_id=Uuid.random(), partitions={0: ReplicaAssignment(replicas=(1,))}
    )
    assert not controller.controller.create_topic(again, {}).result(timeout=10)

    dead_id = controller.broker_id
    started = time.monotonic()
    controller.crash()
    survivor = active({b: n for b, n in cluster.items() if b != dead_id})
    failover_s = time.monotonic() - started
    print(f"controller failover: {failover_s:.2f} s (session timeout {SESSION_TIMEOUT_MS} ms)")

    led_by_dead = [p for p, r in placement.items() if r[0] == dead_id]
    after = eventually(
        lambda: (
            (s := states(survivor, "events", 6))
            and all(s[p].leader == NO_LEADER for p in led_by_dead)
            and s
        )
    )
    for p in led_by_dead:
        assert after[p].leader_epoch == 1
        assert after[p].isr == (dead_id,)  # the last in-sync replica is remembered
    for p in set(range(6)) - set(led_by_dead):
        assert (after[p].leader, after[p].leader_epoch) == (first[p].leader, 0)

    # the broker returns: its partitions come back with higher leader epochs
    cluster[dead_id] = Node(dead_id, cluster[dead_id].connect).start()
    back = eventually(
        lambda: (
            (s := states(survivor, "events", 6))
            and all(s[p].leader == dead_id for p in led_by_dead)
            and s
        )
    )
    assert all(back[p].leader_epoch == 2 for p in led_by_dead)


def test_a_new_controller_takes_replicas_of_dead_brokers_out_of_the_isrs(
    cluster: dict[int, Node],
) -> None:
    """The controller's broker dies while it follows a partition: no live controller saw it
    go (no broker change), so the next one, at failover, takes it out of the ISR (Kafka's
    replica state machine startup); otherwise acks=all would wait for it forever."""
    controller = active(cluster)
    dead_id = controller.broker_id
    leader_id = next(b for b in cluster if b != dead_id)
    create(controller, "followed", {0: (leader_id, dead_id)})
    eventually(
        lambda: (s := states(controller, "followed", 1)) and s[0].isr == (leader_id, dead_id)
    )
    controller.crash()
    survivor = active({b: n for b, n in cluster.items() if b != dead_id})
    after = eventually(
        lambda: (s := states(survivor, "followed", 1)) and s[0].isr == (leader_id,) and s,
        what="the dead controller's broker out of the ISR",
    )
    assert after[0].leader == leader_id and after[0].leader_epoch == 1


def test_elections_controlled_shutdown_and_a_lost_race(cluster: dict[int, Node]) -> None:
    controller = active(cluster)
    assert controller.controller is not None
    victim = next(b for b in (1, 2, 3) if b != controller.broker_id)
    other = next(b for b in (1, 2, 3) if b not in (victim, controller.broker_id))
    create(controller, "rf2", {0: (victim, other), 1: (other, victim)})
    eventually(lambda: len(states(controller, "rf2", 2)) == 2)

    moved = controller.controller.controlled_shutdown(victim).result(timeout=10)
    assert moved == []
    after = states(controller, "rf2", 2)
    assert (after[0].leader, after[0].isr, after[0].leader_epoch) == (other, (other,), 1)
    assert victim not in after[1].isr

    # the preferred replica is out of the ISR: a preferred election is refused
    outcome = controller.controller.elect_leaders([TopicPartition("rf2", 0)], unclean=False).result(
        timeout=10
    )
    assert outcome[TopicPartition("rf2", 0)].error == "preferred_leader_not_available"
    # where the preferred replica leads already, nothing is needed
    outcome = controller.controller.elect_leaders([TopicPartition("rf2", 1)], unclean=False).result(
        timeout=10
    )
    assert outcome[TopicPartition("rf2", 1)].error == "election_not_needed"
    unknown = controller.controller.elect_leaders(
        [TopicPartition("nope", 0)], unclean=False
    ).result(timeout=10)
    assert unknown[TopicPartition("nope", 0)].error == "unknown_topic_or_partition"

    # a broker that is not the controller refuses controller work
    follower = cluster[other].controller
    assert follower is not None
    with pytest.raises(ControllerMovedError):
        follower.elect_leaders([TopicPartition("rf2", 0)], unclean=False).result(timeout=10)


def test_unclean_election_only_where_enabled(cluster: dict[int, Node]) -> None:
    controller = active(cluster)
    assert controller.controller is not None
    a, b = (x for x in (1, 2, 3) if x != controller.broker_id)
    create(controller, "clean", {0: (a, b)})
    create(controller, "unclean-ok", {0: (a, b)})
    eventually(
        lambda: (
            len(states(controller, "clean", 1)) == 1
            and len(states(controller, "unclean-ok", 1)) == 1
        )
    )
    # b leaves the ISRs (a clean shutdown), comes back, then a dies: b is out of sync
    controller.controller.controlled_shutdown(b).result(timeout=10)
    cluster[b].crash()
    cluster[b] = Node(b, cluster[b].connect).start()
    time.sleep(0.5)
    cluster[a].crash()
    clean = eventually(
        lambda: (s := states(controller, "clean", 1)) and s[0].leader == NO_LEADER and s
    )
    assert clean[0].isr == (a,)
    unclean = eventually(
        lambda: (s := states(controller, "unclean-ok", 1)) and s[0].leader == b and s
    )
    assert unclean[0].isr == (b,)
    # an operator may still choose an unclean election for the clean topic
    outcome = controller.controller.elect_leaders(
        [TopicPartition("clean", 0)], unclean=True
    ).result(timeout=10)
    assert outcome[TopicPartition("clean", 0)].error is None
    assert states(controller, "clean", 1)[0].leader == b


def test_topic_deletion_waits_for_every_replica(cluster: dict[int, Node]) -> None:
    controller = active(cluster)
    assert controller.controller is not None and controller.zk is not None
    create(controller, "gone", {0: (1, 2), 1: (2, 3)})
    eventually(lambda: len(states(controller, "gone", 2)) == 2)
    controller.controller.delete_topics(["gone"]).result(timeout=10)
    stopped = eventually(
        lambda: (
            (s := states(controller, "gone", 2))
            and all(x.leader == NO_LEADER for x in s.values())
            and s
        )
    )
    assert len(stopped) == 2
    for broker_id in (1, 2):
        controller.zk.acknowledge_topic_deletion("gone", broker_id)
    time.sleep(0.5)
    assert "gone" in controller.zk.get_all_topics()  # broker 3 still holds a replica
    controller.zk.acknowledge_topic_deletion("gone", 3)
    eventually(lambda: "gone" not in controller.zk.get_all_topics())  # type: ignore[union-attr]
    # The deletion marker goes last (delete_topic_znodes), a moment after the topic's znodes.
    eventually(lambda: controller.zk.get_topics_marked_for_deletion() == [])  # type: ignore[union-attr]
    assert controller.zk.get_topics_marked_for_deletion() == []
    assert controller.zk.get_topic_config("gone") == {}


def test_a_deletion_marker_left_for_a_gone_topic_does_not_hold_back_its_name(
    zookeeper: ZooKeeperEnsemble,
) -> None:
    """A controller killed while deleting a topic's znodes one by one can leave its deletion
    marker behind the topic. The next controller finds that marker at failover for a topic
    it does not know: it removes the marker, and a topic created later under the same name
    gets its partitions' states (Kafka ignores deletions of topics that do not exist)."""
    connect = f"{zookeeper.connect_string}/c-{uuid.uuid4().hex[:8]}"
    leftovers = KafkaZkClient(connect, session_timeout_ms=SESSION_TIMEOUT_MS).start()
    leftovers.mark_topic_for_deletion("reborn")
    for broker_id in (1, 2):  # the old topic's replicas had acknowledged
        leftovers.acknowledge_topic_deletion("reborn", broker_id)
    leftovers.close()
    nodes = {b: Node(b, connect).start() for b in (1, 2, 3)}
    try:
        controller = active(nodes)
        assert controller.zk is not None
        eventually(
            lambda: controller.zk.get_topics_marked_for_deletion() == [],  # type: ignore[union-attr]
            what="the marker of a topic that does not exist removed",
        )
        create(controller, "reborn", {0: (1, 2), 1: (2, 3)})
        born = eventually(
            lambda: (s := states(controller, "reborn", 2)) and len(s) == 2 and s,
            what="the states of the topic created under the marker's name",
        )
        assert {p: s.leader for p, s in born.items()} == {0: 1, 1: 2}
    finally:
        for node in nodes.values():
            node.stop()


def test_a_topic_marked_for_deletion_before_the_controller_loaded_it_waits_for_its_replicas(
    cluster: dict[int, Node],
) -> None:
    """A topic a broker wrote on its own (as automatic creation does) and a deletion marker,
    in one transaction with the marker first: the controller hears of the deletion before it
    has loaded the topic. It reads the topic then, and deletes it the usual way (leaders
    stopped, every replica's acknowledgement awaited) instead of taking it for a leftover
    marker and wiping its znodes under the brokers' logs."""
    controller = active(cluster)
    assert controller.zk is not None
    assignment = TopicAssignment(
        topic="sudden",
        topic_id=Uuid.random(),
        partitions={0: ReplicaAssignment(replicas=(1, 2))},
    )
    transaction = controller.zk.zk.transaction()
    transaction.create(zk_data.delete_topic_path("sudden"))
    transaction.create(zk_data.topic_config_path("sudden"), zk_data.encode_topic_config({}))
    transaction.create(zk_data.topic_path("sudden"), zk_data.encode_topic_assignment(assignment))
    assert not [r for r in transaction.commit() if isinstance(r, Exception)]
    time.sleep(1.0)  # the controller handles both watches
    assert "sudden" in controller.zk.get_all_topics()
    assert controller.zk.get_topics_marked_for_deletion() == ["sudden"]
    for broker_id in (1, 2):
        controller.zk.acknowledge_topic_deletion("sudden", broker_id)
    eventually(
        lambda: controller.zk.get_topics_marked_for_deletion() == [],  # type: ignore[union-attr]
        what="the deletion finished once both replicas acknowledged",
    )
    assert "sudden" not in controller.zk.get_all_topics()


def test_an_acknowledgement_added_while_a_marker_is_deleted_goes_with_it(
    zookeeper: ZooKeeperEnsemble, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every broker acknowledges a deletion, replica or not, so the last acknowledgement can
    land while the controller deletes the marker: it is deleted on a second pass instead of
    failing the deletion (which made the controller resign)."""
    connect = f"{zookeeper.connect_string}/c-{uuid.uuid4().hex[:8]}"
    controller = KafkaZkClient(connect, session_timeout_ms=SESSION_TIMEOUT_MS).start()
    late_broker = KafkaZkClient(connect, session_timeout_ms=SESSION_TIMEOUT_MS).start()
    try:
        epoch = controller.register_controller_and_increment_controller_epoch(1, timestamp_ms=0)
        controller.mark_topic_for_deletion("late")
        controller.acknowledge_topic_deletion("late", 1)
        listed = controller._subtree
        marker = zk_data.delete_topic_path("late")

        acknowledged_late: list[int] = []

        def listed_then_acknowledged(path: str) -> list[str]:
            paths = listed(path)
            if path == marker and not acknowledged_late:
                late_broker.acknowledge_topic_deletion("late", 3)  # after the first listing
                acknowledged_late.append(3)
            return paths

        monkeypatch.setattr(controller, "_subtree", listed_then_acknowledged)
        controller.delete_topic_znodes(epoch, "late")
        assert acknowledged_late == [3]
        assert controller.get_topics_marked_for_deletion() == []
        assert late_broker.get_topic_deletion_acknowledgements("late") == set()
    finally:
        late_broker.close()
        controller.close()


def test_partitions_added_get_leaders(cluster: dict[int, Node]) -> None:
    controller = active(cluster)
    assert controller.controller is not None
    create(controller, "grow", {0: (1,)})
    controller.controller.add_partitions(
        "grow", {1: ReplicaAssignment(replicas=(2,)), 2: ReplicaAssignment(replicas=(3,))}
    ).result(timeout=10)
    grown = eventually(lambda: (s := states(controller, "grow", 3)) and len(s) == 3 and s)
    assert [grown[p].leader for p in range(3)] == [1, 2, 3]


def test_single_node_store_restart_keeps_leader_epochs(tmp_path: Path) -> None:
    node = Node(0, "single-node", tree=LocalZNodeTree(tmp_path)).start()
    try:
        assert active({0: node}) is node
        create(node, "t", {0: (0,), 1: (0,)})
        eventually(lambda: len(states(node, "t", 2)) == 2)
    finally:
        node.stop()
    restarted = Node(0, "single-node", tree=LocalZNodeTree(tmp_path)).start()
    try:
        assert active({0: restarted}) is restarted
        assert restarted.zk is not None
        epoch = restarted.zk.get_controller_epoch()
        assert epoch is not None and epoch.epoch == 2
        after = states(restarted, "t", 2)
        assert {s.leader for s in after.values()} == {0}
        assert {s.leader_epoch for s in after.values()} == {0}  # no bump at restart
    finally:
        restarted.stop()


def test_a_restored_topic_leads_above_its_restored_epochs(tmp_path: Path) -> None:
    """remote.log.restore.leader.epoch=E: the new partitions' first leader epoch is E + 1, so
    the restored records' epochs stay below every epoch the new leaders write."""
    node = Node(0, "single-node", tree=LocalZNodeTree(tmp_path)).start()
    try:
        assert active({0: node}) is node
        assert node.controller is not None
        for topic, configs in (
            ("restored", {"remote.log.restore.leader.epoch": "7"}),
            ("fresh", {}),
            ("unreadable", {"remote.log.restore.leader.epoch": "seven"}),
        ):
            assignment = TopicAssignment(
                topic=topic,
                topic_id=Uuid.random(),
                partitions={p: ReplicaAssignment(replicas=(0,)) for p in (0, 1)},
            )
            assert node.controller.create_topic(assignment, configs).result(timeout=10)
        eventually(lambda: all(len(states(node, t, 2)) == 2 for t in ("restored", "fresh")))
        eventually(lambda: len(states(node, "unreadable", 2)) == 2)
        assert {s.leader_epoch for s in states(node, "restored", 2).values()} == {8}
        assert {s.leader_epoch for s in states(node, "fresh", 2).values()} == {0}
        assert {s.leader_epoch for s in states(node, "unreadable", 2).values()} == {0}
    finally:
        node.stop()
