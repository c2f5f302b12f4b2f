"""Each log dir of a broker process holds Kafka's ``meta.properties`` (written at its first
start), and a broker started on a log dir of another broker id or of another cluster exits
at once, code 2, with Kafka's message naming the dir; the directory is left untouched and its
own broker starts on it again with its data."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from embedded.zookeeper import ZooKeeperEnsemble, ZooKeeperUnavailableError, java_executable
from storage_core.client.cluster import KafkaCluster
from storage_core.log.meta_properties import META_PROPERTIES_FILE
from tests.broker_process import BrokerProcess
from tests.integration.test_cluster_startup_failures import error_lines, run_broker

try:
    java_executable()
except ZooKeeperUnavailableError as missing:
    pytest.skip(str(missing), allow_module_level=True)

pytestmark = pytest.mark.timeout(240)

TOPIC = "meta-properties"


@pytest.fixture(scope="module")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with ZooKeeperEnsemble(tmp_path_factory.mktemp("zk"), size=1) as zk:
        yield zk.connect_string


def chroot(connect: str) -> str:
    return f"{connect}/meta-{uuid.uuid4().hex[:8]}"


def overrides(broker_id: int, connect: str, log_dirs: str) -> dict[str, str]:
    return {
        "broker.id": str(broker_id),
        "zookeeper.connect": connect,
        "log.dirs": log_dirs,
        "offsets.topic.replication.factor": "1",
    }


def tree(directory: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``directory`` with its size and modification time."""
    return {
        str(p.relative_to(directory)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


def test_log_dirs_are_stamped_and_refused_to_another_broker_or_cluster(
    zookeeper: str, tmp_path: Path
) -> None:
    cluster_a = chroot(zookeeper)
    first, second = tmp_path / "logs-a", tmp_path / "logs-b"
    log_dirs = f"{first},{second}"
    broker = BrokerProcess(tmp_path / "broker-1", overrides=overrides(1, cluster_a, log_dirs))
    with broker:
        with KafkaCluster(broker.bootstrap) as cluster:
            cluster_id = cluster.refresh_metadata([]).cluster_id
        producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all")
        producer.send(TOPIC, b"kept", partition=0).get(timeout=30)
        producer.close(10)
    assert cluster_id
    for log_dir in (first, second):  # a fresh dir gets the file, each of the broker's dirs
        lines = (log_dir / META_PROPERTIES_FILE).read_text().splitlines()
        assert lines[0] == "#"
        assert sorted(lines[2:]) == sorted(
            ["version=0", "broker.id=1", f"cluster.id={cluster_id}"]
        ), lines
    before = {d: tree(d) for d in (first, second)}

    # another broker.id on the same dirs: Kafka's InconsistentBrokerIdException message
    code, _, stderr, _ = run_broker(tmp_path / "broker-2", overrides(2, cluster_a, log_dirs))
    assert code == 2, stderr
    (line,) = error_lines(stderr)
    assert "Configured broker.id 2 doesn't match stored broker.id 1 in meta.properties" in line
    assert f"log dir {first}" in line and "remove all data" in line, line

    # the same broker id on another cluster: Kafka's InconsistentClusterIdException message
    code, _, stderr, _ = run_broker(
        tmp_path / "broker-1-elsewhere", overrides(1, chroot(zookeeper), log_dirs)
    )
    assert code == 2, stderr
    (line,) = error_lines(stderr)
    assert f"doesn't match stored clusterId {cluster_id} in meta.properties" in line
    assert "trying to join the wrong cluster" in line and f"log dir {first}" in line, line

    # refused starts left every file as it was (no clean-shutdown marker, no rewrite)
    after = {d: tree(d) for d in (first, second)}
    changed = {
        (str(d), name)
        for d in (first, second)
        for name in set(before[d]) | set(after[d])
        if before[d].get(name) != after[d].get(name)
    }
    assert not changed

    # its own broker starts on them again and serves what they hold
    with BrokerProcess(tmp_path / "broker-1", overrides=overrides(1, cluster_a, log_dirs)) as again:
        consumer = KafkaConsumer(bootstrap_servers=again.bootstrap, consumer_timeout_ms=15_000)
        partition = TopicPartition(TOPIC, 0)
        consumer.assign([partition])
        consumer.seek(partition, 0)
        assert next(iter(consumer)).value == b"kept"
        consumer.close()
