"""KafkaZkClient against a real ZooKeeper: registrations, the controller election and its
fencing, conditional partition-state writes, topic znodes, and an unreachable server."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from embedded.zookeeper import (
    ZooKeeperEnsemble,
    free_port,
)
from storage_core.common import TopicPartition, Uuid
from storage_core.errors import CorruptCheckpointError
from storage_core.zk import zk_data
from storage_core.zk.controller_zk import ControllerMovedError
from storage_core.zk.kafka_zk_client import BrokerIdInUseError, KafkaZkClient
from storage_core.zk.local_znode_tree import LocalZNodeTree
from storage_core.zk.zk_data import (
    BrokerRegistration,
    EndPoint,
    LeaderAndIsr,
    ReplicaAssignment,
    TopicAssignment,
)
from storage_core.zk.zookeeper_client import ZooKeeperConnectionError, split_chroot
from tests import cluster_support

cluster_support.require_java()


@pytest.fixture
def connect(zookeeper: ZooKeeperEnsemble) -> str:
    """A fresh chroot per test: each test sees an empty cluster."""
    return f"{zookeeper.connect_string}/cluster-{uuid.uuid4().hex[:8]}"


OpenClient = Callable[[], KafkaZkClient]


@pytest.fixture(params=["zookeeper", "single-node"])
def open_client(
    request: pytest.FixtureRequest, connect: str, tmp_path: Path
) -> Iterator[OpenClient]:
    """Sessions on one store: a real ZooKeeper, or the single-node store of a broker without
    zookeeper.connect. Both must behave the same for everything the controller relies on."""
    opened: list[KafkaZkClient] = []
    tree = LocalZNodeTree(tmp_path) if request.param == "single-node" else None

    def open_one() -> KafkaZkClient:
        if tree is not None:
            client = KafkaZkClient.single_node(tree).start()
        else:
            client = KafkaZkClient(
                connect, session_timeout_ms=6000, connection_timeout_ms=10_000
            ).start()
        opened.append(client)
        return client

    yield open_one
    for client in opened:
        client.close()


@pytest.fixture
def clients(connect: str) -> Iterator[list[KafkaZkClient]]:
    opened: list[KafkaZkClient] = []
    yield opened
    for client in opened:
        client.close()


def _open(clients: list[KafkaZkClient], connect: str) -> KafkaZkClient:
    client = KafkaZkClient(connect, session_timeout_ms=6000, connection_timeout_ms=10_000).start()
    clients.append(client)
    return client


def _registration(broker_id: int, port: int) -> BrokerRegistration:
    return BrokerRegistration(
        broker_id=broker_id,
        endpoints=(EndPoint(listener="PLAINTEXT", host="127.0.0.1", port=port),),
    )


def test_split_chroot() -> None:
    assert split_chroot("a:1,b:2/x/y") == ("a:1,b:2", "/x/y")
    assert split_chroot("a:1") == ("a:1", "")
    with pytest.raises(ZooKeeperConnectionError, match="names no server"):
        split_chroot("/chroot")


def test_unreachable_zookeeper_fails_within_the_connection_timeout() -> None:
    connect = f"127.0.0.1:{free_port()}/storage-core"
    client = KafkaZkClient(connect, connection_timeout_ms=1500)
    started = time.monotonic()
    with pytest.raises(
        ZooKeeperConnectionError, match=r"zookeeper.connect=127.0.0.1:\d+/storage-core"
    ):
        client.start()
    assert time.monotonic() - started < 10


def test_chroot_persistent_paths_and_cluster_id(
    zookeeper: ZooKeeperEnsemble, connect: str, clients: list[KafkaZkClient]
) -> None:
    first = _open(clients, connect)
    assert first.get_or_create_cluster_id("cluster-A") == "cluster-A"
    second = _open(clients, connect)
    assert second.get_or_create_cluster_id("cluster-B") == "cluster-A"
    root = KazooClient(hosts=zookeeper.connect_string)
    root.start(timeout=10)
    try:
        chroot = split_chroot(connect)[1]
        assert set(root.get_children(chroot)) >= {"brokers", "config", "admin", "cluster"}
        assert set(root.get_children(f"{chroot}/brokers")) >= {"ids", "topics"}
    finally:
        root.stop()


def test_broker_registration_epoch_and_duplicate_id(open_client: OpenClient) -> None:
    first = open_client()
    epoch = first.register_broker(_registration(1, 19091))
    assert epoch > 0
    assert first.register_broker(_registration(1, 19091)) == epoch  # our own node: same epoch
    other = open_client()
    with pytest.raises(BrokerIdInUseError, match=r"broker.id=1 .* PLAINTEXT://127.0.0.1:19091"):
        other.register_broker(_registration(1, 19092))
    assert other.register_broker(_registration(2, 19092)) > epoch
    brokers = other.get_all_brokers()
    assert sorted(brokers) == [1, 2]
    assert brokers[1].broker_epoch == epoch

    first.close()  # the session ends: its ephemeral registration goes with it
    assert sorted(other.get_all_brokers()) == [2]
    again = open_client()
    assert again.register_broker(_registration(1, 19093)) > epoch  # a new broker epoch


def test_a_registration_at_the_same_endpoints_is_waited_for_when_asked(
    open_client: OpenClient,
) -> None:
    """With ``previous_run_wait_ms`` (the broker found the holder to be its previous run), a
    registration at the same endpoints is waited for, never taken: it is registered once its
    session ends, and refused if it is still there after that long. Another endpoint is
    refused at once."""
    first = open_client()
    epoch = first.register_broker(_registration(1, 19091))
    other = open_client()

    started = time.monotonic()
    with pytest.raises(BrokerIdInUseError, match=r"live broker at PLAINTEXT://127.0.0.1:19091"):
        other.register_broker(_registration(1, 19092), previous_run_wait_ms=10_000)
    assert time.monotonic() - started < 2  # another endpoint: at once

    started = time.monotonic()
    with pytest.raises(BrokerIdInUseError, match=r"still after waiting 800 ms") as refused:
        other.register_broker(_registration(1, 19091), previous_run_wait_ms=800)
    assert 0.8 <= time.monotonic() - started < 5
    assert refused.value.holder.endpoints == _registration(1, 19091).endpoints
    assert other.get_all_brokers()[1].broker_epoch == epoch  # the holder keeps it

    closing = threading.Timer(0.5, first.close)  # the holder's session ends meanwhile
    closing.start()
    started = time.monotonic()
    assert other.register_broker(_registration(1, 19091), previous_run_wait_ms=10_000) > epoch
    assert 0.5 <= time.monotonic() - started < 5
    closing.join()


def test_one_controller_at_a_time_and_a_deposed_one_is_fenced(open_client: OpenClient) -> None:
    a = open_client()
    b = open_client()
    a_epoch = a.register_controller_and_increment_controller_epoch(1)
    assert a_epoch.epoch == 1
    with pytest.raises(ControllerMovedError, match="lost the controller election"):
        b.register_controller_and_increment_controller_epoch(2)
    controller = b.get_controller()
    assert controller is not None
    assert controller.broker_id == 1

    tp = TopicPartition("t", 0)
    assignment = TopicAssignment(
        topic="t", topic_id=Uuid.random(), partitions={0: ReplicaAssignment(replicas=(1, 2))}
    )
    assert a.create_topic(a_epoch, assignment, {"retention.ms": "1000"})
    state = LeaderAndIsr(leader=1, leader_epoch=0, isr=(1, 2), controller_epoch=1)
    assert a.create_partition_states(a_epoch, {tp: state})[tp].zk_version == 0

    # a's session is taken for dead: /controller goes away and b wins a higher epoch
    a.zk.delete(zk_data.CONTROLLER_PATH)
    b_epoch = b.register_controller_and_increment_controller_epoch(2)
    assert b_epoch.epoch == 2

    # a still believes it is controller: every write it tries is refused, none half-done
    read = a.get_partition_states([tp])[tp]
    moved = LeaderAndIsr(
        leader=2, leader_epoch=1, isr=(2,), controller_epoch=1, zk_version=read.zk_version
    )
    with pytest.raises(ControllerMovedError, match="controller epoch 1 was superseded"):
        a.update_leader_and_isr(a_epoch, {tp: moved})
    with pytest.raises(ControllerMovedError):
        a.create_topic(a_epoch, TopicAssignment(topic="u", topic_id=None), {})
    assert b.get_partition_states([tp])[tp].leader == 1
    assert b.get_topic_assignment("u") is None


def test_partition_state_updates_are_conditional_on_the_version_read(
    open_client: OpenClient,
) -> None:
    zk = open_client()
    epoch = zk.register_controller_and_increment_controller_epoch(1)
    topic_id = Uuid.random()
    assignment = TopicAssignment(
        topic="events",
        topic_id=topic_id,
        partitions={p: ReplicaAssignment(replicas=(1, 2, 3)) for p in range(2)},
    )
    assert zk.create_topic(epoch, assignment, {})
    assert not zk.create_topic(epoch, assignment, {})  # exists: nothing written
    read_back = zk.get_topic_assignment("events")
    assert read_back is not None
    assert read_back[0] == assignment

    tps = [TopicPartition("events", p) for p in range(2)]
    initial = LeaderAndIsr(leader=1, leader_epoch=0, isr=(1, 2, 3), controller_epoch=1)
    zk.create_partition_states(epoch, dict.fromkeys(tps, initial))
    states = zk.get_partition_states(tps)
    stale = states[tps[0]]
    bumped = LeaderAndIsr(
        leader=2, leader_epoch=1, isr=(2, 3), controller_epoch=1, zk_version=stale.zk_version
    )
    result = zk.update_leader_and_isr(epoch, {tps[0]: bumped})
    assert result.retry == ()
    assert result.finished[tps[0]].zk_version == stale.zk_version + 1

    # a second writer that read before the first wrote gets the partition back to retry
    again = LeaderAndIsr(
        leader=3, leader_epoch=1, isr=(3,), controller_epoch=1, zk_version=stale.zk_version
    )
    assert zk.update_leader_and_isr(epoch, {tps[0]: again}).retry == (tps[0],)
    assert zk.get_partition_states([tps[0]])[tps[0]].leader == 2


def test_topic_deletion_removes_every_znode_of_the_topic(open_client: OpenClient) -> None:
    zk = open_client()
    epoch = zk.register_controller_and_increment_controller_epoch(1)
    assignment = TopicAssignment(
        topic="gone", topic_id=Uuid.random(), partitions={0: ReplicaAssignment(replicas=(1,))}
    )
    zk.create_topic(epoch, assignment, {"cleanup.policy": "delete"})
    tp = TopicPartition("gone", 0)
    zk.create_partition_states(
        epoch, {tp: LeaderAndIsr(leader=1, leader_epoch=0, isr=(1,), controller_epoch=1)}
    )
    zk.mark_topic_for_deletion("gone")
    assert zk.get_topics_marked_for_deletion() == ["gone"]
    assert zk.get_topic_config("gone") == {"cleanup.policy": "delete"}
    zk.delete_topic_znodes(epoch, "gone")
    assert zk.get_all_topics() == []
    assert zk.get_topics_marked_for_deletion() == []
    assert zk.get_topic_config("gone") == {}
    assert zk.get_partition_states([tp]) == {}


def test_partition_state_written_by_the_client_is_what_kafka_reads(
    open_client: OpenClient,
) -> None:
    zk = open_client()
    epoch = zk.register_controller_and_increment_controller_epoch(4)
    tp = TopicPartition("x", 0)
    zk.create_topic(
        epoch,
        TopicAssignment(topic="x", topic_id=None, partitions={0: ReplicaAssignment(replicas=(4,))}),
        {},
    )
    zk.create_partition_states(
        epoch, {tp: LeaderAndIsr(leader=4, leader_epoch=0, isr=(4,), controller_epoch=epoch.epoch)}
    )
    raw, _ = zk.zk.get("/brokers/topics/x/partitions/0/state")
    assert raw == b'{"version":1,"leader":4,"leader_epoch":0,"controller_epoch":1,"isr":[4]}'
    epoch_raw, _ = zk.zk.get("/controller_epoch")
    assert epoch_raw == b"1"


def test_single_node_store_keeps_persistent_znodes_across_restarts(tmp_path: Path) -> None:
    first = KafkaZkClient.single_node(LocalZNodeTree(tmp_path)).start()
    epoch = first.register_controller_and_increment_controller_epoch(0)
    broker_epoch = first.register_broker(_registration(0, 19090))
    assignment = TopicAssignment(
        topic="kept", topic_id=Uuid.random(), partitions={0: ReplicaAssignment(replicas=(0,))}
    )
    first.create_topic(epoch, assignment, {"retention.ms": "5"})
    first.close()

    # a restart: the topic, its config and the controller epoch remain; ephemerals do not
    second = KafkaZkClient.single_node(LocalZNodeTree(tmp_path)).start()
    assert second.get_all_brokers() == {}
    assert second.get_controller() is None
    read = second.get_topic_assignment("kept")
    assert read is not None
    assert read[0] == assignment
    assert second.get_topic_config("kept") == {"retention.ms": "5"}
    assert second.register_controller_and_increment_controller_epoch(0).epoch == 2
    assert second.register_broker(_registration(0, 19090)) > broker_epoch


def test_a_damaged_single_node_store_is_named_and_left_in_place(tmp_path: Path) -> None:
    store = tmp_path / "metadata-store.json"
    store.write_text('{"version": 1, "zxid": "x"')
    with pytest.raises(CorruptCheckpointError, match=r"metadata-store\.json"):
        LocalZNodeTree(tmp_path)
    assert store.read_text() == '{"version": 1, "zxid": "x"'
