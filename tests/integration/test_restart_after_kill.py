"""A broker SIGKILLed and started again at once comes back.

The killed broker's registration, ``/brokers/ids/<id>``, outlives it: ZooKeeper keeps the
ephemeral znode until the dead session expires, ``zookeeper.session.timeout.ms`` after its last
heartbeat. Kafka's ZooKeeper mode exits at such a start ("already registered"), so a service
manager's restart loop fails until then. Here a registration at the broker's own endpoint,
found by a broker whose log dirs were already its own (their ``meta.properties``), is taken for
its previous run's: the broker logs the session it waits for and the deadline, registers once
ZooKeeper has removed it, and serves its data. A registration at another endpoint, or at its
endpoint when its log dirs are new, is another broker's: refused at once, naming it.

Real processes and signals: a real ZooKeeper, ``storage-core broker`` processes, SIGKILL,
kafka-python clients.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kazoo.client import KazooClient

from embedded.zookeeper import ZooKeeperEnsemble
from storage_core.server.cluster_membership import PREVIOUS_SESSION_EXPIRY_MARGIN_MS
from tests.broker_process import BrokerProcess
from tests.cluster_support import metadata, require_java
from tests.integration import raw_wire

require_java()

pytestmark = pytest.mark.timeout(240)

SESSION_TIMEOUT_MS = 6000  # the test ensemble's tick is 500 ms: sessions of 1-10 s
START_S = 20.0  # a broker process's own start on a busy machine, registration aside
TOPIC = "survives"
RECORDS = 50


@pytest.fixture
def broker(zookeeper: ZooKeeperEnsemble, tmp_path: Path) -> Iterator[BrokerProcess]:
    connect = f"{zookeeper.connect_string}/restart-{uuid.uuid4().hex[:8]}"
    process = BrokerProcess(
        tmp_path / "broker-1",
        overrides={
            "broker.id": "1",
            "zookeeper.connect": connect,
            "zookeeper.session.timeout.ms": str(SESSION_TIMEOUT_MS),
            "offsets.topic.replication.factor": "1",
            "log.flush.interval.messages": "1",
        },
    )
    with process:
        yield process


def zookeeper_connect(broker: BrokerProcess) -> str:
    return broker.config_path.read_text().split("zookeeper.connect=")[1].split()[0]


def registration_session(broker: BrokerProcess) -> str:
    """The ZooKeeper session that holds broker 1's registration, as ZooKeeper shows it."""
    client = KazooClient(hosts=zookeeper_connect(broker))
    client.start(timeout=15)
    try:
        stat = client.exists("/brokers/ids/1")
    finally:
        client.stop()
        client.close()
    assert stat is not None, "broker 1 is not registered"
    return f"0x{stat.ephemeralOwner:x}"


def log(broker: BrokerProcess) -> str:
    return broker.output_path.read_text(errors="replace")


def run_broker(directory: Path, overrides: dict[str, str]) -> tuple[int, str, float]:
    """``storage-core broker`` to its end: exit code, stderr, seconds taken."""
    config = BrokerProcess(directory, overrides=overrides).config_path
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "storage_core.cli", "broker", "--config", str(config)],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return result.returncode, result.stderr, time.monotonic() - started


def error_line(stderr: str) -> str:
    assert "Traceback" not in stderr, stderr
    (line,) = [line for line in stderr.splitlines() if line.startswith("error:")]
    return line


def produce(broker: BrokerProcess, values: list[bytes]) -> None:
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all", linger_ms=0)
    for value in values:
        producer.send(TOPIC, value, partition=0).get(timeout=30)
    producer.close(10)


def consume_all(broker: BrokerProcess, count: int) -> list[bytes]:
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, consumer_timeout_ms=15_000)
    partition = TopicPartition(TOPIC, 0)
    consumer.assign([partition])
    consumer.seek(partition, 0)
    values = []
    for record in consumer:
        values.append(record.value)
        if len(values) == count:
            break
    consumer.close()
    return values


def test_a_killed_broker_started_again_at_once_waits_for_its_old_session_and_serves(
    broker: BrokerProcess,
) -> None:
    raw_wire.create_topic(broker.port, TOPIC, partitions=1)
    before = [f"before-{i}".encode() for i in range(RECORDS)]
    produce(broker, before)
    old_session = registration_session(broker)

    broker.kill()
    killed = time.monotonic()
    limit_s = (SESSION_TIMEOUT_MS + PREVIOUS_SESSION_EXPIRY_MARGIN_MS) / 1000 + START_S
    broker.start(timeout_s=limit_s)  # raises if the process exits
    took_s = time.monotonic() - killed
    print(f"killed broker serving again after {took_s:.1f} s")

    output = log(broker)
    waited = re.search(
        r"broker.id=1 is registered at this broker's endpoints (\S+) by the session of its"
        r" previous run.* session=(0x[0-9a-f]+) path=/brokers/ids/1 deadline=(\S+)",
        output,
    )
    assert waited is not None, output
    assert waited.group(1) == f"PLAINTEXT://{broker.bootstrap}"
    assert waited.group(2) == old_session
    assert registration_session(broker) not in ("0x0", old_session)
    expired = re.search(
        r"the previous run's registration expired, registered broker_id=1 waited_s=([0-9.]+)",
        output,
    )
    assert expired is not None, output
    # ZooKeeper expires a session within its timeout (plus a 0.5 s tick) of its last heartbeat,
    # which came before the kill
    assert float(expired.group(1)) <= SESSION_TIMEOUT_MS / 1000 + 1.5, output

    # registered under its endpoint, its data intact, serving
    (registered,) = metadata(broker.bootstrap, TOPIC).brokers
    assert (registered.node_id, registered.port) == (1, broker.port)
    assert consume_all(broker, RECORDS) == before
    produce(broker, [b"after"])
    assert consume_all(broker, RECORDS + 1) == [*before, b"after"]


def test_the_broker_id_of_a_live_broker_at_another_endpoint_is_refused_at_once(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    """Even on a copy of the live broker's log dir (its meta.properties: this broker.id, this
    cluster), a registration at another endpoint is another broker's."""
    copy = tmp_path / "copy"
    shutil.copytree(broker.log_dir, copy / "kafka-logs")
    code, stderr, took_s = run_broker(
        copy,
        {
            "broker.id": "1",
            "zookeeper.connect": zookeeper_connect(broker),
            "zookeeper.session.timeout.ms": "10000",  # a wait would take 15 s or more
        },
    )
    assert code != 0
    line = error_line(stderr)
    assert (
        f"broker.id=1 is already registered in ZooKeeper by a live broker at PLAINTEXT://{broker.bootstrap}"
        in line
    ), stderr
    assert "give this broker another broker.id" in line
    assert took_s < 10, f"refused after {took_s:.1f} s: {stderr}"
    assert "waiting for it" not in stderr

    # the live broker keeps its registration and serves
    assert broker.process is not None and broker.process.poll() is None
    (registered,) = metadata(broker.bootstrap, TOPIC).brokers
    assert (registered.node_id, registered.port) == (1, broker.port)


def test_its_own_endpoint_with_new_log_dirs_is_refused_at_once(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    """A broker on new log dirs has no previous run: a registration at its endpoint left by a
    killed broker is refused at once, saying why it was not waited for."""
    broker.kill()
    code, stderr, took_s = run_broker(
        tmp_path / "new",
        {
            "broker.id": "1",
            "listeners": f"PLAINTEXT://{broker.bootstrap}",
            "zookeeper.connect": zookeeper_connect(broker),
            "zookeeper.session.timeout.ms": str(SESSION_TIMEOUT_MS),
        },
    )
    assert code != 0
    line = error_line(stderr)
    assert f"by a live broker at PLAINTEXT://{broker.bootstrap}" in line, stderr
    assert "the log dirs were not this broker's before this start" in line
    assert took_s < (SESSION_TIMEOUT_MS + PREVIOUS_SESSION_EXPIRY_MARGIN_MS) / 1000, stderr
