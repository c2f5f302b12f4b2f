"""Cluster metadata: how fast controller decisions are made and reach every broker.

Three broker processes on a real ZooKeeper (from the jars pyspark ships), all on loopback:

- creating a topic of ``--partitions`` partitions (default 1,000) until every broker's Metadata
  shows a leader for each, against a baseline measured in the same run: writing the same
  znodes (the assignment, then one state per partition) straight to ZooKeeper with kazoo, the
  floor any ZooKeeper-based controller pays;
- metadata propagation: a one-partition topic until every broker's Metadata shows it (median
  of ``--rounds``), against ZooKeeper's own write-to-watch latency (median, same run);
- controller failover: SIGKILL the controller's broker until another broker reports itself
  controller, as a ratio of ``zookeeper.session.timeout.ms`` (the time ZooKeeper needs to
  notice the dead session, which bounds any failover from below).

    .venv/bin/python benchmarks/cluster_metadata.py [--partitions 1000] [--rounds 10]
"""

from __future__ import annotations

import argparse
import socket
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaAdminClient
from kazoo.client import KazooClient

from embedded.ports import free_port
from embedded.processes import ProcessGroup
from embedded.zookeeper import ZooKeeperEnsemble

SESSION_TIMEOUT_MS = 6000


def start_brokers(base: Path, connect: str, count: int = 3) -> dict[int, tuple[ProcessGroup, int]]:
    brokers = {}
    for broker_id in range(1, count + 1):
        directory = base / f"broker-{broker_id}"
        directory.mkdir(parents=True)
        port = free_port()
        config = directory / "server.properties"
        config.write_text(
            "\n".join(
                [
                    f"broker.id={broker_id}",
                    f"listeners=PLAINTEXT://127.0.0.1:{port}",
                    f"log.dirs={directory / 'logs'}",
                    f"zookeeper.connect={connect}",
                    f"zookeeper.session.timeout.ms={SESSION_TIMEOUT_MS}",
                    "offsets.topic.replication.factor=1",
                    "auto.leader.rebalance.enable=false",
                ]
            )
            + "\n"
        )
        group = ProcessGroup(
            f"broker-{broker_id}",
            [sys.executable, "-m", "storage_core.cli", "broker", "--config", str(config)],
            log_path=directory / "broker.log",
        ).start()
        brokers[broker_id] = (group, port)
    for broker_id, (_group, port) in brokers.items():
        wait(lambda p=port: controller_of(p) is not None, f"broker {broker_id}")
    return brokers


def controller_of(port: int) -> int | None:
    """The controller as the broker on ``port`` reports it (None while it does not answer)."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
        admin = KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{port}", request_timeout_ms=3000)
    except Exception:
        return None
    try:
        return int(admin.describe_cluster()["controller_id"])
    except Exception:
        return None
    finally:
        admin.close()


def leaders_everywhere(ports: list[int], topic: str, partitions: int) -> bool:
    for port in ports:
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"})
        metadata = admin.list_topics(topic, timeout=10)
        described = metadata.topics.get(topic)
        if described is None or described.error is not None:
            return False
        if len(described.partitions) != partitions:
            return False
        if any(p.leader < 0 for p in described.partitions.values()):
            return False
    return True


def wait(condition: object, what: str, timeout_s: float = 120.0) -> float:
    started = time.monotonic()
    while not condition():  # type: ignore[operator]
        if time.monotonic() - started > timeout_s:
            raise SystemExit(f"{what}: not within {timeout_s:.0f} s")
        time.sleep(0.01)
    return time.monotonic() - started


def zookeeper_create_baseline(connect: str, partitions: int) -> float:
    """The same znodes a topic creation writes, straight to ZooKeeper (async, pipelined)."""
    client = KazooClient(hosts=connect)
    client.start(timeout=10)
    root = f"/baseline-{uuid.uuid4().hex[:6]}"
    started = time.monotonic()
    client.ensure_path(f"{root}/partitions")
    client.create(f"{root}/assignment", b"x" * (12 * partitions))
    pending = [
        client.create_async(f"{root}/partitions/{p}", b'{"leader":1,"leader_epoch":0}')
        for p in range(partitions)
    ]
    for result in pending:
        result.get(timeout=60)
    elapsed = time.monotonic() - started
    client.delete(root, recursive=True)
    client.stop()
    return elapsed


def zookeeper_watch_latency(connect: str, rounds: int) -> float:
    writer = KazooClient(hosts=connect)
    watcher = KazooClient(hosts=connect)
    writer.start(timeout=10)
    watcher.start(timeout=10)
    path = f"/latency-{uuid.uuid4().hex[:6]}"
    writer.create(path, b"0")
    samples = []
    for i in range(rounds):
        fired = threading.Event()
        watcher.get(path, watch=lambda _event, fired=fired: fired.set())
        started = time.monotonic()
        writer.set(path, str(i).encode())
        fired.wait(10)
        samples.append(time.monotonic() - started)
    writer.delete(path)
    writer.stop()
    watcher.stop()
    return statistics.median(samples)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="cluster-bench-") as tmp:
        base = Path(tmp)
        with ZooKeeperEnsemble(base / "zk", size=1) as zookeeper:
            connect = f"{zookeeper.connect_string}/bench"
            brokers = start_brokers(base, connect)
            ports = [port for _group, port in brokers.values()]
            try:
                admin = AdminClient(
                    {"bootstrap.servers": ",".join(f"127.0.0.1:{p}" for p in ports)}
                )

                baseline_s = zookeeper_create_baseline(zookeeper.connect_string, args.partitions)
                started = time.monotonic()
                admin.create_topics([NewTopic("big", args.partitions, 1)])["big"].result(300)
                wait(lambda: leaders_everywhere(ports, "big", args.partitions), "big topic")
                create_s = time.monotonic() - started
                print(
                    f"create {args.partitions} partitions, seen with leaders by 3 brokers:"
                    f" {create_s:.2f} s; ZooKeeper writes alone {baseline_s:.2f} s;"
                    f" ratio {baseline_s / create_s:.2f}"
                )

                floor_s = zookeeper_watch_latency(zookeeper.connect_string, args.rounds)
                samples = []
                for i in range(args.rounds):
                    name = f"small-{i}"
                    started = time.monotonic()
                    admin.create_topics([NewTopic(name, 1, 1)])[name].result(60)
                    wait(lambda name=name: leaders_everywhere(ports, name, 1), name)
                    samples.append(time.monotonic() - started)
                propagation_s = statistics.median(samples)
                print(
                    f"metadata propagation (create, then every broker's Metadata shows the"
                    f" leader), median of {args.rounds}: {propagation_s * 1000:.1f} ms;"
                    f" ZooKeeper write-to-watch {floor_s * 1000:.2f} ms;"
                    f" ratio {floor_s / propagation_s:.3f}"
                )

                controller = controller_of(ports[0])
                assert controller is not None
                group, _port = brokers[controller]
                survivor = next(p for b, (_g, p) in brokers.items() if b != controller)
                started = time.monotonic()
                group.kill()
                wait(
                    lambda: controller_of(survivor) not in (None, controller),
                    "a new controller",
                )
                failover_s = time.monotonic() - started
                print(
                    f"controller failover after SIGKILL: {failover_s:.2f} s;"
                    f" zookeeper.session.timeout.ms={SESSION_TIMEOUT_MS};"
                    f" ratio to the session timeout {failover_s * 1000 / SESSION_TIMEOUT_MS:.2f}"
                )
            finally:
                for group, _port in brokers.values():
                    group.stop(grace_s=10)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
