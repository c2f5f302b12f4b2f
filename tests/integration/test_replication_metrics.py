"""Replication metrics on /metrics, with Kafka's names, while a three-broker cluster loses and
regains a follower: three broker processes on a real ZooKeeper, each scraped over HTTP.

    kafka.server:type=ReplicaManager,name=UnderReplicatedPartitions|UnderMinIsrPartitionCount|
        AtMinIsrPartitionCount|IsrShrinksPerSec|IsrExpandsPerSec
    kafka.controller:type=KafkaController,name=OfflinePartitionsCount
    kafka.server:type=ReplicaFetcherManager,name=MaxLag,clientId=Replica

Broker 1 leads every partition of RF 3 (five of them, one with min.insync.replicas 3); broker 3
alone holds ``alone``. SIGKILL broker 3: broker 1's ISRs shrink, so its under-replicated count
is five; ``alone`` goes offline. Start it again: back to 0, the ISRs expand. SIGSTOP broker 2
while records pile up: once it runs again its fetcher's MaxLag shows the backlog, then 0.
"""

from __future__ import annotations

import os
import signal
import time
import urllib.request
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from embedded.ports import free_port
from tests import cluster_support
from tests.broker_process import BrokerProcess
from tests.cluster_support import SESSION_TIMEOUT_MS, eventually, partition_states
from tests.integration import raw_wire
from tests.process_pause import pause
from tests.prometheus_text import parse_exposition

cluster_support.require_java()

pytestmark = pytest.mark.timeout(180)

LAG_TIME_MAX_MS = 2000
REPLICATED = {"metered": 4, "strict": 1}  # topic -> partitions, all on [1, 2, 3] led by 1
URP = "kafka_server_replicamanager_underreplicatedpartitions_value"
UNDER_MIN_ISR = "kafka_server_replicamanager_underminisrpartitioncount_value"
AT_MIN_ISR = "kafka_server_replicamanager_atminisrpartitioncount_value"
SHRINKS = "kafka_server_replicamanager_isrshrinkspersec_count"
EXPANDS = "kafka_server_replicamanager_isrexpandspersec_count"
OFFLINE = "kafka_controller_kafkacontroller_offlinepartitionscount_value"
MAX_LAG = "kafka_server_replicafetchermanager_maxlag_value"
REPLICA = frozenset({("clientId", "Replica")})


class Metered:
    def __init__(self, brokers: dict[int, BrokerProcess], metrics_ports: dict[int, int]) -> None:
        self.brokers = brokers
        self.metrics_ports = metrics_ports

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values() if b.process is not None)

    def scrape(self, broker: int) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
        url = f"http://127.0.0.1:{self.metrics_ports[broker]}/metrics"
        with urllib.request.urlopen(url, timeout=5) as response:
            _, samples = parse_exposition(response.read().decode("utf-8"))
        return samples

    def value(
        self, broker: int, name: str, labels: frozenset[tuple[str, str]] = frozenset()
    ) -> float:
        return self.scrape(broker)[(name, labels)]

    def registered(self) -> set[int]:
        """The brokers broker 1's Metadata answer lists (registrations it has seen)."""
        with raw_wire.connect(self.brokers[1].port) as sock:
            answer = raw_wire.call(
                sock,
                3,
                12,
                topics=(),
                allow_auto_topic_creation=False,
                include_cluster_authorized_operations=False,
                include_topic_authorized_operations=False,
            )
        return {b.node_id for b in answer.brokers}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Metered]:
    metrics_ports = {b: free_port() for b in cluster_support.BROKER_IDS}
    with (
        cluster_support.zookeeper_ensemble(tmp_path_factory.mktemp("zk")) as zk,
        cluster_support.three_brokers(
            zk,
            tmp_path_factory.mktemp("brokers"),
            {
                "replica.lag.time.max.ms": str(LAG_TIME_MAX_MS),
                "min.insync.replicas": "2",
                "replica.fetch.max.bytes": "4096",  # a backlog takes many fetches to catch up
                "auto.create.topics.enable": "false",
            },
            per_broker={b: {"metrics.port": str(p)} for b, p in metrics_ports.items()},
        ) as (brokers, _connect),
    ):
        yield Metered(brokers, metrics_ports)


def produce(servers: str, topic: str, partitions: int, count: int, *, acks: str) -> None:
    # small batches: a fetch returns at least one whole batch whatever replica.fetch.max.bytes
    # says, so a backlog of big ones is caught up in a fetch or two and the lag never shows
    producer = Producer(
        {"bootstrap.servers": servers, "acks": acks, "linger.ms": 5, "batch.size": 8192}
    )
    for i in range(count):
        while True:
            try:
                producer.produce(topic, b"v%06d" % i + b"x" * 500, partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    assert producer.flush(60) == 0


def test_isr_shrink_expand_offline_and_fetcher_lag(cluster: Metered) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    topics = [
        NewTopic("metered", num_partitions=4, replica_assignment=[[1, 2, 3]] * 4),
        NewTopic(
            "strict",
            num_partitions=1,
            replica_assignment=[[1, 2, 3]],
            config={"min.insync.replicas": "3"},
        ),
        NewTopic("alone", num_partitions=1, replica_assignment=[[3]]),
    ]
    for future in admin.create_topics(topics).values():
        future.result(30)
    for topic, partitions in REPLICATED.items():
        eventually(
            lambda t=topic, n=partitions: (
                partition_states(cluster.brokers[1].bootstrap, t)
                == {p: (1, 0, (1, 2, 3)) for p in range(n)}
            ),
            what=f"{topic} led by broker 1 with the full ISR",
        )
    produce(cluster.bootstrap, "metered", 4, 200, acks="all")
    replicated = sum(REPLICATED.values())
    # at min ISR from the start: "strict" (ISR 3 of min 3) and the RF 1 partitions of
    # __consumer_offsets broker 1 leads (Kafka's effective min ISR is at most the replica count)
    offsets_led = sum(
        leader == 1
        for leader, _, _ in partition_states(
            cluster.brokers[1].bootstrap, "__consumer_offsets"
        ).values()
    )
    before = cluster.scrape(1)
    assert before[(URP, frozenset())] == 0
    assert before[(UNDER_MIN_ISR, frozenset())] == 0
    assert before[(AT_MIN_ISR, frozenset())] == 1 + offsets_led
    assert all(cluster.value(b, OFFLINE) == 0 for b in (1, 2, 3))

    # broker 3 dies; records arrive that it never fetches, so after replica.lag.time.max.ms
    # broker 1 drops it from every ISR (a follower that was caught up to an idle leader's end
    # stays in sync, as in Kafka: only the controller takes a dead broker out of idle ISRs)
    cluster.brokers[3].kill()
    produce(cluster.bootstrap, "metered", 4, 40, acks="1")
    produce(cluster.bootstrap, "strict", 1, 10, acks="1")
    eventually(lambda: cluster.value(1, URP) == replicated, what="5 under-replicated on broker 1")
    after_kill = cluster.scrape(1)
    assert after_kill[(SHRINKS, frozenset())] - before[(SHRINKS, frozenset())] == replicated
    # "metered": ISR of 2, min.insync.replicas 2
    assert after_kill[(AT_MIN_ISR, frozenset())] == 4 + offsets_led
    assert after_kill[(UNDER_MIN_ISR, frozenset())] == 1  # "strict" wants 3
    assert cluster.value(2, URP) == 0  # a follower counts nothing
    # once its session expires, its lone partition has no leader: offline on every broker
    eventually(
        lambda: 3 not in cluster.registered(),
        timeout_s=SESSION_TIMEOUT_MS / 1000 + 15,
        what="broker 3's registration gone",
    )
    for broker in (1, 2):
        eventually(lambda b=broker: cluster.value(b, OFFLINE) == 1, what="alone-0 offline")

    # broker 3 is back: it catches up, rejoins every ISR, and "alone" has its leader again
    cluster.brokers[3].start()
    eventually(lambda: cluster.value(1, URP) == 0, what="nothing under-replicated on broker 1")
    back = cluster.scrape(1)
    # one expand per partition; a follower lagging past replica.lag.time.max.ms meanwhile (a
    # loaded machine) adds a shrink and the expand that brings it back
    again = back[(SHRINKS, frozenset())] - after_kill[(SHRINKS, frozenset())]
    assert back[(EXPANDS, frozenset())] - after_kill[(EXPANDS, frozenset())] == replicated + again
    assert back[(UNDER_MIN_ISR, frozenset())] == 0
    assert back[(AT_MIN_ISR, frozenset())] == 1 + offsets_led
    for broker in (1, 2, 3):
        eventually(lambda b=broker: cluster.value(b, OFFLINE) == 0, what="alone-0 online")

    # broker 2 stands still (SIGSTOP, within its session) while records pile up on broker 1
    assert cluster.value(2, MAX_LAG, REPLICA) == 0
    pid = cluster.brokers[2].process.pid  # type: ignore[union-attr]
    pause(pid)
    try:
        produce(cluster.bootstrap, "metered", 4, 4000, acks="1")  # ~2 MB
        # broker 1 drops broker 2 from the ISRs and its HW moves on (while broker 2 is in the
        # ISR the HW waits for it, and a lag measured from the HW stays 0)
        eventually(
            lambda: cluster.value(1, URP) == 4,
            timeout_s=SESSION_TIMEOUT_MS / 1000 - 1,
            what="broker 2 out of the ISRs of metered",
        )
    finally:
        os.kill(pid, signal.SIGCONT)
    lags = []
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not any(lag > 0 for lag in lags):
        lags.append(cluster.value(2, MAX_LAG, REPLICA))
        time.sleep(0.02)
    assert max(lags) > 0, lags
    eventually(lambda: cluster.value(2, MAX_LAG, REPLICA) == 0, what="broker 2 caught up")
    eventually(lambda: cluster.value(1, URP) == 0, what="broker 2 back in every ISR")


BYTES_IN = "kafka_server_brokertopicmetrics_bytesinpersec_count"
BYTES_OUT = "kafka_server_brokertopicmetrics_bytesoutpersec_count"
REPLICATION_IN = "kafka_server_brokertopicmetrics_replicationbytesinpersec_count"
REPLICATION_OUT = "kafka_server_brokertopicmetrics_replicationbytesoutpersec_count"


def test_replication_bytes_are_counted_apart_from_the_clients_bytes(cluster: Metered) -> None:
    """As Kafka's BrokerTopicStats: what the followers fetch is ReplicationBytesOutPerSec on
    the leader and ReplicationBytesInPerSec on each follower, broker-wide only; a client's
    BytesOutPerSec does not count it."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for future in admin.create_topics(
        [NewTopic("copied", num_partitions=1, replica_assignment=[[1, 2, 3]])]
    ).values():
        future.result(30)
    eventually(
        lambda: partition_states(cluster.brokers[1].bootstrap, "copied") == {0: (1, 0, (1, 2, 3))},
        what="copied led by broker 1 with the full ISR",
    )
    everywhere = frozenset[tuple[str, str]]()
    before = {b: cluster.scrape(b) for b in (1, 2, 3)}
    produce(cluster.bootstrap, "copied", 1, 300, acks="all")  # nobody consumes it

    copied = frozenset({("topic", "copied")})
    appended = cluster.value(1, BYTES_IN, copied)
    assert appended > 300 * 500
    for follower in (2, 3):
        eventually(
            lambda b=follower: (
                cluster.value(b, REPLICATION_IN) - before[b][(REPLICATION_IN, everywhere)]
                >= appended
            ),
            what=f"broker {follower} counted the bytes it appended",
        )
    leader = cluster.scrape(1)
    assert (
        leader[(REPLICATION_OUT, everywhere)] - before[1][(REPLICATION_OUT, everywhere)]
        >= 2 * appended
    )
    assert leader[(BYTES_OUT, copied)] == 0  # the followers' fetches are not client traffic
    assert not any(name.startswith(REPLICATION_OUT) and labels for name, labels in leader)
