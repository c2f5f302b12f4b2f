"""``jobs.delete_partitions`` on a cluster of three brokers: one run deletes the remote data of
a deleted tiered topic whose partitions were led by three different brokers, on behalf of
each partition's leader (the broker that marked it), with no broker id and no log dir.

    p0 on [1, 2], p1 on [2, 3], p2 on [3, 1]     each leader tiers its partition
                                                 (``storage-core tier`` with its config)
    DeleteTopics                                 each leader marks its own partition
    delete_partitions (one run, whole cluster)   every partition: remote -, FINISHED by
                                                 the broker that marked it
    quality (every broker's log dirs)            green
    delete_partitions again                      nothing to do
"""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import NewTopic
from kafka import KafkaProducer
from pyspark.sql import SparkSession

from embedded.zookeeper import ZooKeeperEnsemble
from jobs import delete_partitions, quality
from storage_core import cli
from storage_core.client import KafkaCluster
from storage_core.common import TopicIdPartition, TopicPartition
from storage_core.tiered.local_tiered_storage import LocalTieredStorage
from storage_core.tiered.metadata.states import RemotePartitionDeleteState
from storage_core.tiered.operations import marked_partitions_by_broker
from storage_core.tiered.remote_object_keys import parse_object_key
from tests import cluster_support
from tests.broker_process import BrokerProcess
from tests.integration.jobs.tiered_cluster import SEGMENT_BYTES, broker_log_dirs_args
from tests.tiered_broker_support import client_rlmm

pytestmark = pytest.mark.timeout(420)

TOPIC = "deleted-across-the-cluster"
ASSIGNMENT = [[1, 2], [2, 3], [3, 1]]
RECORDS = 120
CLIENT_TIMEOUT_S = 30.0


@pytest.fixture
def remote_dir(tmp_path: Path) -> Path:
    return tmp_path / "remote-tier"


@pytest.fixture
def brokers(
    zookeeper: ZooKeeperEnsemble, tmp_path: Path, remote_dir: Path
) -> Iterator[dict[int, BrokerProcess]]:
    settings = {
        "auto.create.topics.enable": "false",
        "remote.log.storage.system.enable": "true",
        "remote.log.storage.manager.class.name": "LocalTieredStorage",
        "rsm.config.local.storage.dir": str(remote_dir),
        "rsm.config.local.fsync": "false",
        "remote.log.metadata.topic.num.partitions": "1",
        "remote.log.metadata.topic.replication.factor": "1",
        "remote.log.manager.task.interval.ms": "200",
        "log.retention.check.interval.ms": "200",
        "log.segment.delete.delay.ms": "0",
        "replica.fetch.backoff.ms": "200",
    }
    with cluster_support.three_brokers(zookeeper, tmp_path, settings) as (started, _connect):
        yield started


def create_topic(brokers: dict[int, BrokerProcess]) -> list[TopicIdPartition]:
    admin = cluster_support.admin(brokers)  # kept alive until the answer is in
    new_topic = NewTopic(
        TOPIC,
        num_partitions=len(ASSIGNMENT),
        replica_assignment=ASSIGNMENT,
        config={"remote.storage.enable": "true", "segment.bytes": str(SEGMENT_BYTES)},
    )
    admin.create_topics([new_topic])[TOPIC].result(CLIENT_TIMEOUT_S)
    leaders = {p: replicas[0] for p, replicas in enumerate(ASSIGNMENT)}
    for broker_id, broker in brokers.items():
        cluster_support.eventually(
            lambda broker=broker: (
                {
                    p: leader
                    for p, (leader, _epoch) in cluster_support.partition_leaders(
                        broker.bootstrap, TOPIC
                    ).items()
                }
                == leaders
            ),
            what=f"broker {broker_id} to see the leaders {leaders}",
        )
    with KafkaCluster(brokers[1].bootstrap) as cluster:
        described = cluster.refresh_metadata([TOPIC]).topic(TOPIC)
    assert described is not None and described.topic_id is not None
    return [
        TopicIdPartition(described.topic_id, TopicPartition(TOPIC, p))
        for p in range(len(ASSIGNMENT))
    ]


def produce(bootstrap: str) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=0, retries=10)
    try:
        for partition in range(len(ASSIGNMENT)):
            for i in range(RECORDS):
                value = f"{partition}-{i:05d}-".encode() * 8
                producer.send(TOPIC, value=value, partition=partition).get(timeout=CLIENT_TIMEOUT_S)
    finally:
        producer.close()


def tier(broker: BrokerProcess, bootstrap: str) -> list[str]:
    """That broker's tiering (``storage-core tier`` with its own config): its led partitions."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = cli.main(
            [
                "tier",
                "--bootstrap-server",
                bootstrap,
                "--broker-config",
                str(broker.config_path),
                "--topic",
                TOPIC,
            ]
        )
    lines = out.getvalue().splitlines()
    assert code == 0, lines
    return lines


def stored_segments(remote_dir: Path, tip: TopicIdPartition) -> set[object]:
    store = LocalTieredStorage(remote_dir, fsync=False)
    return {
        parsed.segment.segment_id
        for parsed in (
            parse_object_key(i.key, store.prefix)
            for i in store.list_objects()
            if not i.key.endswith("/topic-manifest.json")  # the topic's, not a segment's
        )
        if parsed.segment.topic_id_partition == tip
    }


def cluster_run_args(bootstrap: str, remote_dir: Path, tmp_path: Path, summary: Path) -> list[str]:
    """A job's options for a cluster-wide run: no broker id, no broker config, no log dir."""
    return [
        "--bootstrap-server",
        bootstrap,
        "--rsm-config",
        f"local.storage.dir={remote_dir}",
        "--rsm-config",
        "local.fsync=false",
        "--spark-master",
        "local[2]",
        "--lock-dir",
        str(tmp_path / "locks"),
        "--summary-path",
        str(summary),
    ]


def run_job(bootstrap: str, remote_dir: Path, tmp_path: Path, name: str) -> tuple[int, dict]:
    summary_path = tmp_path / f"{name}.json"
    code = delete_partitions.main(
        [*cluster_run_args(bootstrap, remote_dir, tmp_path, summary_path), "--topic", TOPIC]
    )
    return code, json.loads(summary_path.read_text())


def test_one_run_deletes_the_partitions_every_leader_marked(
    spark: SparkSession,
    brokers: dict[int, BrokerProcess],
    remote_dir: Path,
    tmp_path: Path,
) -> None:
    bootstrap = ",".join(b.bootstrap for b in brokers.values())
    tips = create_topic(brokers)
    leaders = {tip: ASSIGNMENT[tip.topic_partition.partition][0] for tip in tips}
    produce(bootstrap)
    for broker in brokers.values():
        tier(broker, bootstrap)
    with client_rlmm(bootstrap) as rlmm:
        segments = {tip: list(rlmm.list_remote_log_segments(tip)) for tip in tips}
    for tip in tips:
        assert len(segments[tip]) >= 2, (tip, segments[tip])
        assert stored_segments(remote_dir, tip) == {
            m.remote_log_segment_id.id for m in segments[tip]
        }

    admin = cluster_support.admin(brokers)  # kept alive until the answer is in
    admin.delete_topics([TOPIC])[TOPIC].result(CLIENT_TIMEOUT_S)

    def marked() -> list[tuple[TopicIdPartition, int]]:
        with KafkaCluster(bootstrap) as cluster:
            return marked_partitions_by_broker(cluster, TOPIC)

    # Each partition is marked by its own leader only: three brokers' decisions.
    cluster_support.eventually(
        lambda: sorted(marked(), key=lambda m: m[1]) == sorted(leaders.items(), key=lambda m: m[1]),
        what=f"each partition marked by its leader {leaders}",
    )

    code, summary = run_job(bootstrap, remote_dir, tmp_path, "run")
    assert code == 0, summary
    assert summary["counts"]["partitions"] == 3
    assert summary["counts"]["partitions_finished"] == 3
    assert summary["counts"]["segments_deleted"] == sum(len(s) for s in segments.values())
    assert summary["counts"].get("segments_failed", 0) == 0
    assert {(p["partition"], p["status"], p["marked_by"]) for p in summary["partitions"]} == {
        (str(tip.topic_partition), "ok", leader) for tip, leader in leaders.items()
    }
    with client_rlmm(bootstrap) as rlmm:
        for tip, leader in leaders.items():
            assert list(rlmm.list_remote_log_segments(tip)) == []
            finished = rlmm.remote_partition_delete_metadata(tip)
            assert finished is not None
            assert finished.state is RemotePartitionDeleteState.DELETE_PARTITION_FINISHED
            assert finished.broker_id == leader
            assert stored_segments(remote_dir, tip) == set()
    assert not any(path.is_file() for path in remote_dir.rglob("*"))
    # quality over every broker's log dirs is green once the topic's remote data is deleted
    report_dir = tmp_path / "quality"
    checked = quality.main(
        [
            *cluster_run_args(bootstrap, remote_dir, tmp_path, tmp_path / "quality.json"),
            *broker_log_dirs_args(brokers),
            "--report-dir",
            str(report_dir),
        ]
    )
    report = json.loads((report_dir / quality.SUMMARY_FILE).read_text())
    assert checked == 0 and report["success"] and report["warnings"] == [], report

    code, again = run_job(bootstrap, remote_dir, tmp_path, "again")
    assert code == 0, again
    assert again["counts"]["partitions"] == 0
    assert again["partitions"] == []
