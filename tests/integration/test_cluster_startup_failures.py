"""A broker that cannot join the cluster exits at start, non-zero, with one line saying why:
ZooKeeper unreachable (within about ``zookeeper.connection.timeout.ms``, naming
``zookeeper.connect``), or its ``broker.id`` registered by a live broker (naming that broker's
endpoint; the live broker carries on serving)."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from embedded.zookeeper import (
    ZooKeeperEnsemble,
    ZooKeeperUnavailableError,
    free_port,
    java_executable,
)
from tests.broker_process import BrokerProcess
from tests.integration.test_cluster_brokers import metadata

try:
    java_executable()
except ZooKeeperUnavailableError as missing:
    pytest.skip(str(missing), allow_module_level=True)

pytestmark = pytest.mark.timeout(180)

CONNECTION_TIMEOUT_MS = 3000
EXIT_WITHIN_S = CONNECTION_TIMEOUT_MS / 1000 + 30  # the interpreter's start-up on a busy machine


@pytest.fixture(scope="module")
def live_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    base = tmp_path_factory.mktemp("startup")
    with ZooKeeperEnsemble(base / "zk", size=1) as zk:
        connect = f"{zk.connect_string}/startup-{uuid.uuid4().hex[:8]}"
        with BrokerProcess(
            base / "broker-1",
            overrides={
                "broker.id": "1",
                "zookeeper.connect": connect,
                "offsets.topic.replication.factor": "1",
            },
        ) as broker:
            yield broker


def run_broker(directory: Path, overrides: dict[str, str]) -> tuple[int, str, str, float]:
    """``storage-core broker`` to its end: exit code, stdout, stderr, seconds taken."""
    config = BrokerProcess(directory, overrides=overrides).config_path
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "storage_core.cli", "broker", "--config", str(config)],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return result.returncode, result.stdout, result.stderr, time.monotonic() - started


def error_lines(stderr: str) -> list[str]:
    assert "Traceback" not in stderr, stderr
    return [line for line in stderr.splitlines() if line.startswith("error:")]


def test_zookeeper_unreachable_exits_naming_zookeeper_connect(tmp_path: Path) -> None:
    connect = f"127.0.0.1:{free_port()}/kafka"  # nothing listens there
    code, _, stderr, took_s = run_broker(
        tmp_path,
        {
            "broker.id": "7",
            "zookeeper.connect": connect,
            "zookeeper.connection.timeout.ms": str(CONNECTION_TIMEOUT_MS),
        },
    )
    assert code != 0
    assert CONNECTION_TIMEOUT_MS / 1000 <= took_s < EXIT_WITHIN_S, stderr
    (line,) = error_lines(stderr)
    assert f"zookeeper.connect={connect}" in line, stderr
    assert f"zookeeper.connection.timeout.ms={CONNECTION_TIMEOUT_MS}" in line
    assert stderr.rstrip().endswith(line)


def test_broker_id_held_by_a_live_broker_is_refused(
    live_broker: BrokerProcess, tmp_path: Path
) -> None:
    connect = live_broker.config_path.read_text().split("zookeeper.connect=")[1].split()[0]
    code, _, stderr, _ = run_broker(tmp_path, {"broker.id": "1", "zookeeper.connect": connect})
    assert code != 0
    (line,) = error_lines(stderr)
    assert "broker.id=1" in line and f"PLAINTEXT://{live_broker.bootstrap}" in line, stderr

    # the live broker keeps its registration and serves
    assert live_broker.process is not None and live_broker.process.poll() is None
    (registered,) = metadata(live_broker.bootstrap).brokers
    assert (registered.node_id, registered.port) == (1, live_broker.port)
    producer = KafkaProducer(bootstrap_servers=live_broker.bootstrap, acks="all")
    producer.send("after-refusal", b"still here", partition=0).get(timeout=30)
    producer.close(10)
    consumer = KafkaConsumer(bootstrap_servers=live_broker.bootstrap, consumer_timeout_ms=15_000)
    partition = TopicPartition("after-refusal", 0)
    consumer.assign([partition])
    consumer.seek(partition, 0)
    assert next(iter(consumer)).value == b"still here"
    consumer.close()
