"""Three broker processes on a real ZooKeeper whose inter-broker listener is TLS with client
certificates (REPLICATION, ssl.client.auth=required): replica fetchers and the brokers' own
clients connect over it. A topic of replication factor 3 with min.insync.replicas=3 takes
acks=all writes only while every follower fetches over TLS; its records are then read back
from each replica as leader. Clients on the PLAINTEXT listener and on the SSL one are each told
their own listener's ports, and a broker that lacks a client's listener is left out."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from embedded.ports import free_port
from embedded.zookeeper import ZooKeeperEnsemble
from tests.broker_process import BrokerProcess
from tests.cluster_support import BROKER_IDS, eventually, require_java, three_brokers
from tests.security_support import TestPki, ssl_listener_props

require_java()
pytestmark = pytest.mark.timeout(300)

RECORDS = 200


@pytest.fixture(scope="module")
def cluster(
    zookeeper: ZooKeeperEnsemble, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[dict[int, BrokerProcess], dict[int, int], dict[int, int], TestPki]]:
    directory = tmp_path_factory.mktemp("tls-cluster")
    pki = TestPki(directory)
    replication_ports = {b: free_port() for b in BROKER_IDS}
    ssl_ports = {b: free_port() for b in BROKER_IDS}
    plain_ports = {b: free_port() for b in BROKER_IDS}
    per_broker: dict[int, dict[str, str]] = {}
    for broker_id in BROKER_IDS:
        certificate = pki.issue(f"broker-{broker_id}", f"CN=broker-{broker_id},OU=brokers,O=test")
        # broker 3 has no SSL client listener: clients on SSL are not told about it
        listeners = [
            f"PLAINTEXT://127.0.0.1:{plain_ports[broker_id]}",
            f"REPLICATION://127.0.0.1:{replication_ports[broker_id]}",
        ]
        if broker_id != 3:
            listeners.append(f"SSL://127.0.0.1:{ssl_ports[broker_id]}")
        per_broker[broker_id] = {
            "listeners": ",".join(listeners),
            **ssl_listener_props(pki, certificate),
            "listener.name.replication.ssl.client.auth": "required",
        }
    overrides = {
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,REPLICATION:SSL",
        "inter.broker.listener.name": "REPLICATION",
        "offsets.topic.replication.factor": "3",
        "replica.fetch.wait.max.ms": "100",
    }
    brokers: dict[int, BrokerProcess] = {}
    with three_brokers(zookeeper, directory, overrides, per_broker=per_broker) as (started, _):
        brokers.update(started)
        for broker_id, broker in brokers.items():
            broker.port = plain_ports[broker_id]  # the client listener's, for .bootstrap
        yield brokers, ssl_ports, replication_ports, pki


def test_a_topic_of_three_replicas_takes_acks_all_writes_over_tls_replication(
    cluster: tuple[dict[int, BrokerProcess], dict[int, int], dict[int, int], TestPki],
) -> None:
    brokers, _ssl_ports, _replication_ports, _pki = cluster
    bootstrap = ",".join(b.bootstrap for b in brokers.values())
    topic = f"tls-rf3-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [
            NewTopic(
                topic,
                num_partitions=3,
                replication_factor=3,
                config={"min.insync.replicas": "3"},
            )
        ]
    )
    futures[topic].result(30)
    eventually(
        lambda: all(
            len(p.isrs) == 3
            for p in admin.list_topics(topic, timeout=5).topics[topic].partitions.values()
        ),
        what="every replica in sync",
    )
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
    failures: list[str] = []
    for i in range(RECORDS):
        producer.produce(
            topic,
            value=f"v{i}".encode(),
            key=f"k{i}".encode(),
            on_delivery=lambda err, _msg: failures.append(str(err)) if err else None,
        )
    assert producer.flush(60) == 0
    assert failures == []  # NOT_ENOUGH_REPLICAS here would mean a follower fell out

    # every replica holds every record: read each partition from each broker as leader
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{topic}"})
    try:
        partitions = admin.list_topics(topic, timeout=5).topics[topic].partitions
        total = 0
        for partition in partitions.values():
            assert sorted(partition.isrs) == sorted(BROKER_IDS)
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition.id), 10)
            total += high - low
        assert total == RECORDS
    finally:
        consumer.close()
    for broker in brokers.values():
        assert "cannot connect to broker" not in broker.output()


def test_each_client_is_told_its_own_listeners_ports(
    cluster: tuple[dict[int, BrokerProcess], dict[int, int], dict[int, int], TestPki],
) -> None:
    brokers, ssl_ports, _replication_ports, pki = cluster

    def brokers_seen(config: dict[str, Any]) -> dict[int, int]:
        metadata = AdminClient(config).list_topics(timeout=15)
        return {b.id: b.port for b in metadata.brokers.values()}

    assert brokers_seen({"bootstrap.servers": brokers[1].bootstrap}) == {
        b: p.port for b, p in brokers.items()
    }
    # broker 3 has no SSL listener: a client on SSL is not told about it (Kafka's rule)
    assert brokers_seen(
        {
            "bootstrap.servers": f"127.0.0.1:{ssl_ports[2]}",
            "security.protocol": "SSL",
            "ssl.ca.location": str(pki.ca_pem),
        }
    ) == {1: ssl_ports[1], 2: ssl_ports[2]}
    # DescribeCluster answers the same way
    ssl_admin = AdminClient(
        {
            "bootstrap.servers": f"127.0.0.1:{ssl_ports[1]}",
            "security.protocol": "SSL",
            "ssl.ca.location": str(pki.ca_pem),
        }
    )
    described = ssl_admin.describe_cluster(request_timeout=15).result(20)
    assert {n.id: n.port for n in described.nodes} == {1: ssl_ports[1], 2: ssl_ports[2]}


def test_a_partition_led_by_a_broker_without_the_clients_listener_has_no_leader_for_it(
    cluster: tuple[dict[int, BrokerProcess], dict[int, int], dict[int, int], TestPki],
) -> None:
    brokers, ssl_ports, _replication_ports, pki = cluster
    topic = f"tls-led-by-3-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": brokers[1].bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=1, replica_assignment=[[3, 1, 2]])])[
        topic
    ].result(30)
    eventually(
        lambda: admin.list_topics(topic, timeout=5).topics[topic].partitions[0].leader == 3,
        what="broker 3 leads the partition",
    )
    ssl_admin = AdminClient(
        {
            "bootstrap.servers": f"127.0.0.1:{ssl_ports[1]}",
            "security.protocol": "SSL",
            "ssl.ca.location": str(pki.ca_pem),
        }
    )
    deadline = time.monotonic() + 20
    while True:
        partition = ssl_admin.list_topics(topic, timeout=5).topics[topic].partitions[0]
        if partition.error is not None or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert partition.leader == -1
    assert partition.error is not None and partition.error.code() == 72  # LISTENER_NOT_FOUND
