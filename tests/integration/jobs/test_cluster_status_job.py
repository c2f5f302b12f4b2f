"""``python -m jobs.cluster_status`` against three broker processes on a real ZooKeeper, with
the options a three-broker Airflow connection gives it (every broker as a bootstrap server,
each broker's log dir in ``--broker-log-dirs``).

Story::

    orders: 3 partitions, replicas [1,2,3] [2,3,1] [3,1,2], remote storage on; 200 records each
    snapshot 1   brokers 1, 2, 3 and the controller as confluent-kafka's AdminClient describes
                 them; per partition the leader, epoch, replicas and ISR it describes; no
                 under-replicated partition; offsets read from each leader's own log dir
    broker 3 killed (its session expires): orders-2 moves to broker 1
    snapshot 2   brokers 1, 2; orders-2 led by 1 at a higher epoch; every orders partition
                 under-replicated (ISR without 3), listed as such; still read from the leaders
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer, TopicCollection
from confluent_kafka.admin import AdminClient, NewTopic

from embedded.zookeeper import ZooKeeperEnsemble
from tests import cluster_support
from tests.broker_process import BrokerProcess
from tests.cluster_support import SESSION_TIMEOUT_MS, eventually, partition_states

cluster_support.require_java()

pytestmark = pytest.mark.timeout(300)

REPO = Path(__file__).resolve().parents[3]
TOPIC = "orders"
ASSIGNMENT = [[1, 2, 3], [2, 3, 1], [3, 1, 2]]
RECORDS = 200
DEATH_S = SESSION_TIMEOUT_MS / 1000 + 30


@pytest.fixture(scope="module")
def brokers(
    zookeeper: ZooKeeperEnsemble, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[int, BrokerProcess]]:
    root = tmp_path_factory.mktemp("status-cluster")
    settings = {
        "auto.create.topics.enable": "false",
        "remote.log.storage.system.enable": "true",
        "remote.log.storage.manager.class.name": "LocalTieredStorage",
        "rsm.config.local.storage.dir": str(root / "remote-tier"),
        "rsm.config.local.fsync": "false",
        "remote.log.metadata.topic.num.partitions": "1",
        "remote.log.metadata.topic.replication.factor": "1",
        "replica.fetch.backoff.ms": "200",
    }
    with cluster_support.three_brokers(zookeeper, root, settings) as (started, _connect):
        admin = cluster_support.admin(started)
        new = NewTopic(
            TOPIC,
            num_partitions=len(ASSIGNMENT),
            replica_assignment=ASSIGNMENT,
            config={"remote.storage.enable": "true", "segment.bytes": "4096"},
        )
        admin.create_topics([new])[TOPIC].result(30)
        bootstrap = started[1].bootstrap
        eventually(
            lambda: all(len(s[2]) == 3 for s in partition_states(bootstrap, TOPIC).values()),
            what=f"{TOPIC} online with full ISRs",
        )
        producer = Producer(
            {"bootstrap.servers": servers(started), "acks": "all", "batch.size": 2048}
        )
        errors: list[str] = []
        for partition in range(len(ASSIGNMENT)):
            for i in range(RECORDS):
                producer.produce(
                    TOPIC,
                    f"record-{i:05d}".encode() * 4,
                    partition=partition,
                    on_delivery=lambda e, _m: errors.append(str(e)) if e else None,
                )
                producer.poll(0)
        assert producer.flush(30) == 0
        assert errors == []
        yield started


def servers(brokers: dict[int, BrokerProcess]) -> str:
    return ",".join(b.bootstrap for b in brokers.values())


def job_options(brokers: dict[int, BrokerProcess]) -> list[str]:
    """What the operator passes, from a three-broker connection (the plugin's own code)."""
    sys.path.insert(0, str(REPO / "plugins"))
    from tiered_storage_plugin.hooks import ClusterSettings  # noqa: PLC0415 - on the path now

    settings = ClusterSettings.from_connection(
        host=servers(brokers),
        port=None,
        extra={"broker_log_dirs": {str(i): [str(b.log_dir)] for i, b in brokers.items()}},
    )
    return settings.job_arguments()


def snapshot(brokers: dict[int, BrokerProcess], tmp_path: Path) -> dict[str, Any]:
    summary_path = tmp_path / "summary.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "jobs.cluster_status",
            *job_options(brokers),
            "--summary-path",
            str(summary_path),
            "--dag-id",
            "tiering",
            "--run-id",
            "manual__test",
            "--task-id",
            "status",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    summary: dict[str, Any] = json.loads(summary_path.read_text())
    return summary


def described(admin: AdminClient) -> tuple[int, dict[int, str], dict[str, dict[str, Any]]]:
    """The controller, brokers and orders' partitions as confluent-kafka describes them."""
    cluster = admin.describe_cluster().result(30)
    brokers = {n.id: f"{n.host}:{n.port}" for n in cluster.nodes}
    (topic,) = admin.describe_topics(TopicCollection([TOPIC])).values()
    partitions = {
        f"{TOPIC}-{p.id}": {
            "leader": p.leader.id,
            "replicas": [r.id for r in p.replicas],
            "isr": sorted(r.id for r in p.isr),
        }
        for p in topic.result(30).partitions
    }
    return cluster.controller.id, brokers, partitions


def by_name(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {r["partition"]: r for r in rows if r["partition"].startswith(f"{TOPIC}-")}


def test_the_snapshot_shows_the_cluster_and_follows_leadership(
    brokers: dict[int, BrokerProcess], tmp_path: Path
) -> None:
    admin = cluster_support.admin(brokers)
    summary = snapshot(brokers, tmp_path)
    controller, nodes, partitions = described(admin)
    cluster = summary["details"]["cluster"]
    assert cluster["controller_id"] == controller
    assert {b["id"]: b["address"] for b in cluster["brokers"]} == nodes
    assert set(nodes) == {1, 2, 3}
    rows = by_name(cluster["partitions"])
    for name, expected in partitions.items():
        row = rows[name]
        got = {"leader": row["leader"], "replicas": row["replicas"], "isr": sorted(row["isr"])}
        assert got == expected, name
        assert row["preferred_leader"] == expected["replicas"][0]
        assert row["under_replicated"] is False
    assert not [p for p in cluster["under_replicated_partitions"] if p.startswith(TOPIC)]
    assert summary["details"]["dag_id"] == "tiering"
    assert summary["details"]["run_id"] == "manual__test"
    tiered = by_name(summary["partitions"])
    assert set(tiered) == set(partitions)
    for name, row in tiered.items():
        assert row["status"] == "ok", row
        assert row["leader"] == partitions[name]["leader"]
        assert row["high_watermark"] == RECORDS
        assert row["local_bytes"] > 0
        # the LSO and producers, asked of each partition's own leader: no transaction here
        assert (row["last_stable_offset"], row["open_transactions"]) == (RECORDS, 0), row
    epoch_before = tiered[f"{TOPIC}-2"]["leader_epoch"]

    # broker 3 dies: orders-2 moves to broker 1 and every ISR loses 3
    brokers[3].kill()
    bootstrap = brokers[1].bootstrap
    eventually(
        lambda: all(
            3 not in isr and leader in (1, 2)
            for leader, _epoch, isr in partition_states(bootstrap, TOPIC).values()
        ),
        timeout_s=DEATH_S,
        what="broker 3 out of every ISR of orders",
    )
    alive = {i: b for i, b in brokers.items() if i != 3}
    summary = snapshot(alive, tmp_path)
    controller, nodes, partitions = described(cluster_support.admin(alive))
    cluster = summary["details"]["cluster"]
    assert cluster["controller_id"] == controller
    assert {b["id"] for b in cluster["brokers"]} == {1, 2}
    rows = by_name(cluster["partitions"])
    for name, expected in partitions.items():
        row = rows[name]
        assert row["leader"] == expected["leader"], name
        assert sorted(row["isr"]) == expected["isr"] == sorted(set(expected["replicas"]) - {3})
        assert row["under_replicated"] is True
    assert rows[f"{TOPIC}-2"]["leader"] == 1
    assert rows[f"{TOPIC}-2"]["leader_epoch"] > epoch_before
    assert sorted(p for p in cluster["under_replicated_partitions"] if p.startswith(TOPIC)) == [
        f"{TOPIC}-0",
        f"{TOPIC}-1",
        f"{TOPIC}-2",
    ]
    assert summary["counts"]["under_replicated_partitions"] >= 3
    tiered = by_name(summary["partitions"])
    assert tiered[f"{TOPIC}-2"]["status"] == "ok"
    assert tiered[f"{TOPIC}-2"]["high_watermark"] == RECORDS  # read from broker 1's dir now
    assert tiered[f"{TOPIC}-2"]["last_stable_offset"] == RECORDS
    assert "transactions_error" not in tiered[f"{TOPIC}-2"]
