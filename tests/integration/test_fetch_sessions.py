"""Fetch sessions (KIP-227) between three real broker processes on ZooKeeper.

Broker 1 declines sessions (``max.incremental.fetch.session.cache.slots=0``: its followers
keep sending full fetches, as before sessions), brokers 2 and 3 keep them. Each leads a third
of the partitions, so the bytes each receives from its followers while nothing is produced
compare the two in one run: the leaders keeping sessions receive a fraction of what broker 1
does (``ss`` reads the kernel's byte counts of each connection to a broker's port), and their
metrics count the partitions cached in their followers' sessions. Then records produced with
acks=all replicate to every replica of every partition, a broker that restarts (its sessions
lost) is back in every ISR, and clients (librdkafka, kafka-python) consume everything.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CTopicPartition
from confluent_kafka.admin import NewTopic
from kafka import KafkaConsumer
from kafka import TopicPartition as KTopicPartition
from kafka.record import MemoryRecords

from embedded.ports import free_port
from tests import cluster_support
from tests.broker_process import BrokerProcess
from tests.prometheus_text import parse_exposition

cluster_support.require_java()
if shutil.which("ss") is None:
    pytest.skip("ss (iproute2) reads the bytes of each connection", allow_module_level=True)

TOPIC = "idle"
PARTITIONS = 30
RECORDS_PER_PARTITION = 20
MEASURE_S = 6.0
METRICS_PORTS = {broker_id: free_port() for broker_id in cluster_support.BROKER_IDS}


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[dict[int, BrokerProcess]]:
    directory: Path = tmp_path_factory.mktemp("fetch-sessions")
    per_broker = {
        broker_id: {
            "metrics.port": str(port),
            **({"max.incremental.fetch.session.cache.slots": "0"} if broker_id == 1 else {}),
        }
        for broker_id, port in METRICS_PORTS.items()
    }
    with (
        cluster_support.zookeeper_ensemble(directory / "zk") as zookeeper,
        cluster_support.three_brokers(
            zookeeper, directory, {"min.insync.replicas": "2"}, per_broker=per_broker
        ) as (brokers, _connect),
    ):
        admin = cluster_support.admin(brokers)
        for future in admin.create_topics(
            [NewTopic(TOPIC, num_partitions=PARTITIONS, replication_factor=3)]
        ).values():
            future.result(60)
        _wait_all_in_sync(brokers)
        yield brokers


def _states(brokers: dict[int, BrokerProcess]) -> dict[int, tuple[int, int, tuple[int, ...]]]:
    return cluster_support.partition_states(brokers[2].bootstrap, TOPIC)


def _wait_all_in_sync(brokers: dict[int, BrokerProcess]) -> None:
    cluster_support.eventually(
        lambda: (
            len(states := _states(brokers)) == PARTITIONS
            and all(len(isr) == 3 and leader >= 0 for leader, _epoch, isr in states.values())
        ),
        timeout_s=90,
        what="every partition led, with all three replicas in sync",
    )


def _bytes_received(port: int) -> int:
    """The bytes received so far on every open connection to ``port`` (the kernel's count)."""
    out = subprocess.run(
        ["ss", "-tinH", "state", "established", f"( sport = :{port} )"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return sum(int(n) for n in re.findall(r"bytes_received:(\d+)", out))


def _metric(broker_id: int, name: str) -> float:
    url = f"http://127.0.0.1:{METRICS_PORTS[broker_id]}/metrics"
    with urllib.request.urlopen(url, timeout=10) as response:
        _types, samples = parse_exposition(response.read().decode())
    wanted = f"kafka_server_fetchsessioncache_{name.lower()}_value"
    return next(value for (sample, _labels), value in samples.items() if sample == wanted)


def test_idle_followers_of_a_session_leader_send_a_fraction_of_the_bytes(
    cluster: dict[int, BrokerProcess],
) -> None:
    led = {b: sum(1 for s in _states(cluster).values() if s[0] == b) for b in cluster}
    assert all(count >= PARTITIONS // 6 for count in led.values()), led
    # Each follower of broker 2 and 3 holds one session with the partitions it follows there.
    for broker_id in (2, 3):
        cluster_support.eventually(
            lambda b=broker_id: _metric(b, "NumIncrementalFetchPartitionsCached") == 2 * led[b],
            what=f"broker {broker_id}'s followers' partitions in its sessions",
        )
        assert _metric(broker_id, "NumIncrementalFetchSessions") == 2
    assert _metric(1, "NumIncrementalFetchSessions") == 0

    time.sleep(2)  # settled: the followers are caught up and idle
    before = {b: _bytes_received(cluster[b].port) for b in cluster}
    time.sleep(MEASURE_S)
    per_partition = {b: (_bytes_received(cluster[b].port) - before[b]) / led[b] for b in cluster}
    # Full fetches carry every partition (about 40 bytes each) every fetch wait; an
    # incremental fetch of an idle session carries none.
    for broker_id in (2, 3):
        assert per_partition[broker_id] * 4 < per_partition[1], per_partition


def test_records_replicate_and_a_restarted_leader_rejoins(
    cluster: dict[int, BrokerProcess],
) -> None:
    _produce(cluster, "first")
    _wait_every_replica_at(cluster, RECORDS_PER_PARTITION)
    # Broker 2 restarts: its followers' sessions are gone, and its own fetchers start over.
    cluster[2].restart()
    _wait_all_in_sync(cluster)
    _produce(cluster, "second")
    _wait_every_replica_at(cluster, 2 * RECORDS_PER_PARTITION)
    assert _consume_confluent(cluster) == 2 * RECORDS_PER_PARTITION * PARTITIONS
    assert _consume_kafka_python(cluster) == 2 * RECORDS_PER_PARTITION * PARTITIONS


def _produce(cluster: dict[int, BrokerProcess], tag: str) -> None:
    producer = Producer(
        {"bootstrap.servers": ",".join(b.bootstrap for b in cluster.values()), "acks": "all"}
    )
    for partition in range(PARTITIONS):
        for i in range(RECORDS_PER_PARTITION):
            producer.produce(TOPIC, value=f"{tag}-{i}".encode(), partition=partition)
    assert producer.flush(60) == 0


def _wait_every_replica_at(cluster: dict[int, BrokerProcess], offset: int) -> None:
    """Every broker's log of every partition ends at ``offset`` (each broker answers
    ListOffsets for the partitions it leads; the followers' logs are read from disk)."""

    def all_there() -> bool:
        for broker in cluster.values():
            for partition in range(PARTITIONS):
                log_dir = broker.log_dir / f"{TOPIC}-{partition}"
                if _log_end(log_dir) != offset:
                    return False
        return True

    cluster_support.eventually(all_there, timeout_s=60, what=f"every replica at {offset}")


def _log_end(log_dir: Path) -> int:
    """The end offset of a partition's log as its segment files hold it: records are
    ``RECORDS_PER_PARTITION``-record batches or smaller, read with kafka-python's decoder."""
    end = 0
    for segment in sorted(log_dir.glob("*.log")):
        records = MemoryRecords(segment.read_bytes())
        while (batch := records.next_batch()) is not None:
            end = batch.base_offset + batch.last_offset_delta + 1
    return end


def _consume_confluent(cluster: dict[int, BrokerProcess]) -> int:
    consumer = Consumer(
        {
            "bootstrap.servers": cluster[1].bootstrap,
            "group.id": "fetch-sessions-check",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    consumer.assign([CTopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    seen = 0
    deadline = time.monotonic() + 60
    while seen < 2 * RECORDS_PER_PARTITION * PARTITIONS and time.monotonic() < deadline:
        for message in consumer.consume(500, timeout=1):
            assert message.error() is None, message.error()
            seen += 1
    consumer.close()
    return seen


def _consume_kafka_python(cluster: dict[int, BrokerProcess]) -> int:
    consumer = KafkaConsumer(
        bootstrap_servers=cluster[3].bootstrap, group_id=None, enable_auto_commit=False
    )
    consumer.assign([KTopicPartition(TOPIC, p) for p in range(PARTITIONS)])
    consumer.seek_to_beginning()
    seen = 0
    deadline = time.monotonic() + 60
    while seen < 2 * RECORDS_PER_PARTITION * PARTITIONS and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=1000).values():
            seen += len(records)
    consumer.close()
    return seen
