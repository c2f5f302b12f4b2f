"""The transaction marker channel against three real broker processes on a real ZooKeeper:
the channel runs in this process with a ``MetadataCache`` that a ``ZkMetadataListener`` keeps
up to date from the cluster's ZooKeeper, as a broker's does, and writes the markers of
transactions whose batches were produced with raw requests (as a transactional producer
would send them) to partitions led by different brokers.

Each topic has one partition whose preferred leader is broker 1, 2 or 3 (explicit
assignments), so one transaction over the three topics needs markers on three brokers. The
batches come without a coordinator: the brokers do not verify transactions
(``NO_VERIFICATION``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from kio.schema.errors import ErrorCode

from embedded.ports import free_port
from embedded.zookeeper import ZooKeeperEnsemble
from storage_core.common import TopicPartition
from storage_core.coordinator.transaction.transaction_marker_channel import (
    TransactionMarkerChannelManager,
)
from storage_core.coordinator.transaction.transaction_metadata import TxnTransitMetadata
from storage_core.coordinator.transaction.transaction_results import (
    TransactionResult,
    TxnMarkers,
)
from storage_core.coordinator.transaction.transaction_state import TransactionState
from storage_core.replication.metadata_cache import (
    MetadataCache,
    MetadataImage,
    PartitionMetadata,
    TopicMetadata,
)
from storage_core.replication.zk_metadata_listener import ZkMetadataListener
from storage_core.server.listeners import inter_broker_client_security
from storage_core.zk.kafka_zk_client import KafkaZkClient
from storage_core.zk.zk_data import BrokerRegistration, EndPoint
from tests import cluster_support
from tests.broker_process import BrokerProcess
from tests.cluster_support import eventually
from tests.integration import raw_wire
from tests.integration.test_transaction_markers import NO_VERIFICATION, Wire, consume

cluster_support.require_java()
pytestmark = pytest.mark.timeout(240)

OBSERVER_ID = 99  # the metadata cache of this process: not a registered broker
TOPICS = {1: "marked-1", 2: "marked-2", 3: "marked-3"}  # preferred leader -> topic
ASSIGNMENTS = {1: [1, 2, 3], 2: [2, 3, 1], 3: [3, 1, 2]}


class Callbacks:
    def __init__(self) -> None:
        self.completed: list[str] = []
        self.failed: list[tuple[str, ErrorCode]] = []
        self.changed = threading.Condition()

    def on_complete(self, transactional_id: str) -> None:
        with self.changed:
            self.completed.append(transactional_id)
            self.changed.notify_all()

    def on_failed(self, transactional_id: str, error: ErrorCode) -> None:
        with self.changed:
            self.failed.append((transactional_id, error))
            self.changed.notify_all()

    def wait_completed(self, what: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        with self.changed:
            while what not in self.completed:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AssertionError(f"{what} not completed within {timeout_s} s")
                self.changed.wait(remaining)

    def wait(self, what: str, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        with self.changed:
            while what not in self.completed and what not in (f for f, _ in self.failed):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AssertionError(f"no callback for {what} within {timeout_s} s")
                self.changed.wait(remaining)


@contextmanager
def cluster(
    zookeeper: ZooKeeperEnsemble, directory: Path
) -> Iterator[tuple[dict[int, BrokerProcess], MetadataCache]]:
    """Three brokers with the three topics, and a metadata cache following them."""
    with cluster_support.three_brokers(
        zookeeper, directory, {"auto.create.topics.enable": "false", **NO_VERIFICATION}
    ) as (brokers, connect):
        client = cluster_support.admin(brokers)
        eventually(lambda: len(client.describe_cluster().result(10).nodes) == 3, what="3 brokers")
        futures = client.create_topics(
            [
                NewTopic(topic, num_partitions=1, replica_assignment=[ASSIGNMENTS[leader]])
                for leader, topic in TOPICS.items()
            ]
        )
        for future in futures.values():
            future.result(30)
        any_broker = brokers[1].bootstrap
        for leader, topic in TOPICS.items():
            eventually(
                lambda t=topic, b=leader: (
                    cluster_support.partition_states(any_broker, t).get(0, (-1, -1, ()))[0] == b
                    and len(cluster_support.partition_states(any_broker, t)[0][2]) == 3
                ),
                what=f"{topic} led by {leader} with 3 in sync",
            )
        zk = KafkaZkClient(connect, session_timeout_ms=cluster_support.SESSION_TIMEOUT_MS).start()
        cache = MetadataCache(OBSERVER_ID)
        listener = ZkMetadataListener(OBSERVER_ID, zk, cache)
        listener.start()
        try:
            yield brokers, cache
        finally:
            listener.stop()
            zk.close()


def channel_for(cache: MetadataCache, callbacks: Callbacks) -> TransactionMarkerChannelManager:
    return TransactionMarkerChannelManager(
        broker_id=OBSERVER_ID,
        metadata_cache=cache,
        inter_broker_listener_name="PLAINTEXT",
        on_complete=callbacks.on_complete,
        on_failed=callbacks.on_failed,
        request_timeout_ms=10_000,
        retry_backoff_ms=100,
    )


def markers(
    transactional_id: str, producer: tuple[int, int], result: TransactionResult
) -> TxnMarkers:
    partitions = frozenset(TopicPartition(t, 0) for t in TOPICS.values())
    complete = TxnTransitMetadata(
        producer_id=producer[0],
        last_producer_id=-1,
        producer_epoch=producer[1],
        last_producer_epoch=-1,
        txn_timeout_ms=60_000,
        txn_state=TransactionState.COMPLETE_COMMIT
        if result is TransactionResult.COMMIT
        else TransactionState.COMPLETE_ABORT,
        topic_partitions=frozenset(),
        txn_start_timestamp_ms=-1,
        txn_last_update_timestamp_ms=0,
    )
    return TxnMarkers(
        transactional_id=transactional_id,
        producer_id=producer[0],
        producer_epoch=producer[1],
        result=result,
        topic_partitions=partitions,
        complete=complete,
    )


def open_transaction(
    brokers: dict[int, BrokerProcess], values: dict[int, bytes]
) -> tuple[int, int]:
    """A producer id, and a transactional batch of ``values[leader]`` on each topic."""
    producer = None
    for leader, topic in TOPICS.items():
        wire = Wire(brokers[leader].port, topic)
        try:
            producer = producer or wire.producer_id()
            wire.produce(producer, values[leader], transactional=True)
            assert wire.latest(1) == 0  # open: the LSO stays at 0
        finally:
            wire.close()
    assert producer is not None
    return producer


def stable_offsets(broker: BrokerProcess, topic: str) -> tuple[int, int]:
    """(high watermark, last stable offset) as the broker's ListOffsets answers them."""
    wire = Wire(broker.port, topic)
    try:
        return wire.latest(0), wire.latest(1)
    finally:
        wire.close()


VALUES = {1: b"one", 2: b"two", 3: b"three"}


def test_markers_for_partitions_led_by_three_brokers_are_written(
    zookeeper: ZooKeeperEnsemble, tmp_path: Path
) -> None:
    with cluster(zookeeper, tmp_path) as (brokers, cache):
        committed = open_transaction(brokers, VALUES)
        aborted = open_transaction(brokers, {b: v + b"-aborted" for b, v in VALUES.items()})
        callbacks = Callbacks()
        channel = channel_for(cache, callbacks)
        # queued before the sender starts: each broker gets both markers in one request
        channel.add_txn_markers_to_send(
            5, markers("committed", committed, TransactionResult.COMMIT), txn_topic_partition=1
        )
        channel.add_txn_markers_to_send(
            5, markers("aborted", aborted, TransactionResult.ABORT), txn_topic_partition=2
        )
        channel.start()
        try:
            callbacks.wait("committed")
            callbacks.wait("aborted")
            assert sorted(callbacks.completed) == ["aborted", "committed"]
            assert callbacks.failed == []
            assert channel.requests_sent == 3  # one WriteTxnMarkers per destination broker
            assert channel.num_txns_with_pending_markers() == 0
        finally:
            channel.shutdown()
        for leader, topic in TOPICS.items():
            # two batches and two markers; nothing open any more
            assert stable_offsets(brokers[leader], topic) == (4, 4)
            assert consume(brokers[leader].bootstrap, topic, "read_committed", 4) == [
                VALUES[leader]
            ]


def test_markers_follow_a_leader_killed_on_the_way(
    zookeeper: ZooKeeperEnsemble, tmp_path: Path
) -> None:
    with cluster(zookeeper, tmp_path) as (brokers, cache):
        producer = open_transaction(brokers, VALUES)  # acks=-1: every replica has the batch
        brokers[2].kill()
        callbacks = Callbacks()
        channel = channel_for(cache, callbacks)
        channel.start()
        try:
            # the cache still names broker 2 as the leader of marked-2: the first request
            # fails to connect and is retried until the controller has elected broker 3
            assert cache.image().partition(TopicPartition(TOPICS[2], 0)).leader == 2  # type: ignore[union-attr]
            channel.add_txn_markers_to_send(
                5, markers("moved", producer, TransactionResult.COMMIT), txn_topic_partition=0
            )
            callbacks.wait("moved", timeout_s=90)
            time.sleep(1.0)  # more answers would come within the retry back-off
            assert callbacks.completed == ["moved"]
            assert callbacks.failed == []
            assert channel.requests_sent > 3  # the dead leader's request failed at least once
        finally:
            channel.shutdown()
        new_leader = cache.image().partition(TopicPartition(TOPICS[2], 0)).leader  # type: ignore[union-attr]
        assert new_leader in (1, 3)
        assert stable_offsets(brokers[new_leader], TOPICS[2]) == (2, 2)
        assert consume(brokers[new_leader].bootstrap, TOPICS[2], "read_committed", 2) == [VALUES[2]]


def test_a_stale_coordinator_epoch_is_fenced_and_stops(
    zookeeper: ZooKeeperEnsemble, tmp_path: Path
) -> None:
    with cluster(zookeeper, tmp_path) as (brokers, cache):
        callbacks = Callbacks()
        channel = channel_for(cache, callbacks)
        channel.start()
        try:
            producer = open_transaction(brokers, VALUES)
            channel.add_txn_markers_to_send(
                5, markers("fenced", producer, TransactionResult.COMMIT), txn_topic_partition=0
            )
            callbacks.wait("fenced")
            assert callbacks.completed == ["fenced"]
            # the next transaction of the producer, ended by a coordinator of an older epoch
            for leader, topic in TOPICS.items():
                wire = Wire(brokers[leader].port, topic)
                wire.sequences[producer[0]] = 1
                wire.produce(producer, b"late", transactional=True)
                wire.close()
            callbacks.completed.clear()
            channel.add_txn_markers_to_send(
                4, markers("fenced", producer, TransactionResult.COMMIT), txn_topic_partition=0
            )
            callbacks.wait("fenced")
            time.sleep(1.0)
            assert callbacks.failed == [("fenced", ErrorCode.transaction_coordinator_fenced)]
            assert callbacks.completed == []
            assert channel.num_txns_with_pending_markers() == 0
        finally:
            channel.shutdown()
        for leader, topic in TOPICS.items():
            assert stable_offsets(brokers[leader], topic) == (3, 2)  # still open from 2


BROKER_LOGIN = ("txnbroker", "txnbroker-secret")


def test_markers_go_over_the_sasl_listener_and_wait_for_cluster_action(tmp_path: Path) -> None:
    """The channel logs in on the inter-broker SASL_PLAINTEXT listener with the broker's own
    credentials (``inter_broker_client_security`` of the broker's properties); the ACL
    authorizer refuses WriteTxnMarkers until its principal has ClusterAction: reported, and
    written once an operator grants it."""
    port, internal_port = free_port(), free_port()
    props = {
        "listeners": f"PLAINTEXT://127.0.0.1:{port},INTERNAL://127.0.0.1:{internal_port}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:SASL_PLAINTEXT",
        "inter.broker.listener.name": "INTERNAL",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "listener.name.internal.sasl.enabled.mechanisms": "PLAIN",
        "listener.name.internal.plain.sasl.jaas.config": (
            "org.apache.kafka.common.security.plain.PlainLoginModule required"
            f' username="{BROKER_LOGIN[0]}" password="{BROKER_LOGIN[1]}"'
            f' user_{BROKER_LOGIN[0]}="{BROKER_LOGIN[1]}";'
        ),
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:ANONYMOUS",  # the plaintext clients of this test
        "auto.create.topics.enable": "false",
        **NO_VERIFICATION,
    }
    with BrokerProcess(tmp_path, port=port, overrides=props) as broker:
        raw_wire.create_topic(port, "guarded")
        wire = Wire(port, "guarded")
        producer = wire.producer_id()
        wire.produce(producer, b"kept", transactional=True)
        wire.close()
        cache = MetadataCache(0)
        cache.set_image(
            MetadataImage(
                brokers={
                    0: BrokerRegistration(
                        broker_id=0,
                        endpoints=(
                            EndPoint(listener="PLAINTEXT", host="127.0.0.1", port=port),
                            EndPoint(
                                listener="INTERNAL",
                                host="127.0.0.1",
                                port=internal_port,
                                security_protocol="SASL_PLAINTEXT",
                            ),
                        ),
                    )
                },
                topics={
                    "guarded": TopicMetadata(
                        name="guarded",
                        topic_id=None,
                        partitions=(
                            PartitionMetadata(
                                partition=0, replicas=(0,), leader=0, leader_epoch=0, isr=(0,)
                            ),
                        ),
                    )
                },
            )
        )
        callbacks = Callbacks()
        channel = TransactionMarkerChannelManager(
            broker_id=0,
            metadata_cache=cache,
            inter_broker_listener_name="INTERNAL",
            on_complete=callbacks.on_complete,
            on_failed=callbacks.on_failed,
            security=inter_broker_client_security(props),
        )
        channel.start()
        try:
            txn = TxnMarkers(
                transactional_id="guarded-txn",
                producer_id=producer[0],
                producer_epoch=producer[1],
                result=TransactionResult.COMMIT,
                topic_partitions=frozenset({TopicPartition("guarded", 0)}),
                complete=markers("x", producer, TransactionResult.COMMIT).complete,
            )
            channel.add_txn_markers_to_send(5, txn, txn_topic_partition=0)
            callbacks.wait("guarded-txn")
            assert callbacks.failed == [("guarded-txn", ErrorCode.cluster_authorization_failed)]
            assert callbacks.completed == []
            assert stable_offsets(broker, "guarded") == (1, 0)  # still open
            grant = AclBinding(
                ResourceType.BROKER,  # the cluster resource
                "kafka-cluster",
                ResourcePatternType.LITERAL,
                f"User:{BROKER_LOGIN[0]}",
                "*",
                AclOperation.CLUSTER_ACTION,
                AclPermissionType.ALLOW,
            )
            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            admin.create_acls([grant])[grant].result(30)
            callbacks.wait_completed("guarded-txn", timeout_s=30)
            assert callbacks.completed == ["guarded-txn"]
            assert callbacks.failed == [("guarded-txn", ErrorCode.cluster_authorization_failed)]
        finally:
            channel.shutdown()
        assert stable_offsets(broker, "guarded") == (2, 2)
        assert consume(broker.bootstrap, "guarded", "read_committed", 2) == [b"kept"]
