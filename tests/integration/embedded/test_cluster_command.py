"""``python -m embedded.cluster --brokers 3 --zookeeper-nodes 3``: the printed bootstrap servers
serve real clients, the cluster keeps working when the ZooKeeper leader is SIGKILLed, SIGTERM
stops everything (no process mentions the directory afterwards), and a directory the command
did not create is refused."""

from __future__ import annotations

import signal
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer, KafkaProducer

from embedded.zookeeper import ZooKeeperUnavailableError, java_executable, server_mode
from tests import cluster_support
from tests.integration.embedded.process_tree import mentioning

try:
    java_executable()
except ZooKeeperUnavailableError as missing:
    pytest.skip(str(missing), allow_module_level=True)

pytestmark = pytest.mark.timeout(300)

REPO = Path(__file__).resolve().parents[3]
COMMAND = (sys.executable, "-m", "embedded.cluster")
T = TypeVar("T")


@dataclass
class RunningCluster:
    process: subprocess.Popen[str]
    directory: Path
    bootstrap: str
    zookeeper_connect: str
    output: list[str]


def eventually(check: Callable[[], T], *, what: str = "") -> T:
    return cluster_support.eventually(check, timeout_s=60.0, what=what, poll_s=0.5)


def printed(lines: list[str], label: str) -> str:
    return next(line.split(": ", 1)[1].strip() for line in lines if line.startswith(label))


def start_command(directory: Path, *args: str) -> RunningCluster:
    """``python -m embedded.cluster`` until it prints the ZooKeeper address (or exits)."""
    process = subprocess.Popen(
        [*COMMAND, "--dir", str(directory), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=REPO,
    )
    assert process.stdout is not None
    lines: list[str] = []
    for line in process.stdout:
        lines.append(line)
        if line.startswith("zookeeper.connect:"):
            break
    assert process.poll() is None, "".join(lines)
    return RunningCluster(
        process=process,
        directory=directory,
        bootstrap=printed(lines, "bootstrap servers:"),
        zookeeper_connect=printed(lines, "zookeeper.connect:"),
        output=lines,
    )


def stop_command(cluster: RunningCluster, signum: int = signal.SIGTERM) -> str:
    """SIGTERM (or Ctrl-C's SIGINT); the rest of its output."""
    if cluster.process.poll() is None:
        cluster.process.send_signal(signum)
    assert cluster.process.wait(120) == 0
    assert cluster.process.stdout is not None
    return cluster.process.stdout.read()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningCluster]:
    directory = tmp_path_factory.mktemp("cmd") / "cluster-data"
    running = start_command(directory, "--brokers", "3", "--zookeeper-nodes", "3")
    try:
        yield running
    finally:
        if running.process.poll() is None:
            running.process.send_signal(signal.SIGTERM)
            running.process.wait(120)


def produce_and_consume(bootstrap: str, topic: str, count: int) -> list[bytes]:
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    for i in range(count):
        producer.send(topic, value=f"{topic}-{i}".encode()).get(timeout=30)
    producer.close(10)
    return consume(bootstrap, topic, count)


def consume(bootstrap: str, topic: str, count: int) -> list[bytes]:
    """``count`` records of ``topic`` from the earliest offsets, in a new consumer group."""
    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=f"g-{uuid.uuid4().hex[:6]}",
        auto_offset_reset="earliest",
        consumer_timeout_ms=20_000,
    )
    values = []
    for record in consumer:
        values.append(record.value)
        if len(values) == count:
            break
    consumer.commit()
    consumer.close()
    return sorted(values)


def create_topic(bootstrap: str, topic: str) -> bool:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept until the answer comes
    futures = admin.create_topics(
        [NewTopic(topic, num_partitions=3, replication_factor=1)], request_timeout=15
    )
    futures[topic].result(30)
    return True


def expected(topic: str, count: int) -> list[bytes]:
    return sorted(f"{topic}-{i}".encode() for i in range(count))


def test_prints_a_bootstrap_that_real_clients_use(cluster: RunningCluster) -> None:
    assert len(cluster.bootstrap.split(",")) == 3
    assert cluster.zookeeper_connect.count(",") == 2  # three ZooKeeper servers
    assert len(list(cluster.directory.glob("broker-*/server.properties"))) == 3
    create_topic(cluster.bootstrap, "before")
    assert produce_and_consume(cluster.bootstrap, "before", 30) == expected("before", 30)


def test_keeps_working_without_the_zookeeper_leader(cluster: RunningCluster) -> None:
    ports = {
        int(line.split("=", 1)[1]): config
        for config in cluster.directory.glob("zookeeper/zookeeper-*/zoo.cfg")
        for line in config.read_text().splitlines()
        if line.startswith("clientPort=")
    }
    leader = next(config for port, config in ports.items() if server_mode(port) == "leader")
    (pid,) = mentioning(str(leader))
    subprocess.run(["kill", "-KILL", str(pid)], check=True)
    eventually(lambda: not mentioning(str(leader)), what="the ZooKeeper leader gone")
    survivors = [port for port, config in ports.items() if config != leader]
    eventually(
        lambda: any(server_mode(port) == "leader" for port in survivors),
        what="a new ZooKeeper leader",
    )

    eventually(lambda: create_topic(cluster.bootstrap, "after"), what="CreateTopics")
    assert produce_and_consume(cluster.bootstrap, "after", 30) == expected("after", 30)
    assert consume(cluster.bootstrap, "before", 30) == expected("before", 30)


def test_sigterm_stops_every_process(cluster: RunningCluster) -> None:
    # the brokers and the surviving ZooKeeper servers run with the directory in their commands
    assert len(mentioning(str(cluster.directory))) >= 5
    rest = stop_command(cluster)
    assert "stopped" in rest, "".join(cluster.output) + rest
    assert mentioning(str(cluster.directory)) == []


def test_refuses_a_directory_it_did_not_create(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    result = subprocess.run(
        [*COMMAND, "--dir", str(tmp_path)],
        check=False,
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stderr.startswith("error: ") and "was not created" in result.stderr
    assert (tmp_path / "notes.txt").read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_reuses_its_directory_after_a_broker_was_killed(tmp_path: Path) -> None:
    # ZooKeeper keeps the killed broker's session, and with it /brokers/ids/1, into the next
    # run: the command waits for that session to expire instead of the broker being refused
    directory = tmp_path / "cluster-data"
    first = start_command(directory, "--brokers", "1")
    try:
        create_topic(first.bootstrap, "kept")
        assert produce_and_consume(first.bootstrap, "kept", 5) == expected("kept", 5)
        (broker,) = mentioning(str(directory / "broker-1" / "server.properties"))
        subprocess.run(["kill", "-KILL", str(broker)], check=True)
        eventually(lambda: "broker 1 exited" in first.process.stdout.readline(), what="reported")
    finally:
        stop_command(first)

    second = start_command(directory, "--brokers", "1")
    try:
        assert consume(second.bootstrap, "kept", 5) == expected("kept", 5)
    finally:
        rest = stop_command(second, signal.SIGINT)  # Ctrl-C
    assert "SIGINT: stopping brokers, then ZooKeeper\nstopped" in rest, rest
    assert mentioning(str(directory)) == []
