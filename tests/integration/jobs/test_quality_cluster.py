"""``jobs.quality`` across a 3-broker cluster on a real ZooKeeper, reading every broker's log
dir (``--broker-log-dirs``): the replicas of a tiered RF=3 partition agree; a killed follower
is an under-replicated warning that leaves the job green; its leader-epoch-checkpoint,
rewritten while it is down, fails ``expect_follower_epochs_agree_with_leader``.

    create quality-replicated (RF 3, remote.storage.enable), produce 0..59 acks=all
    copy_segments on the leader        remote: the closed segments
    quality --broker-log-dirs 1,2,3    exit 0, every suite green, 3 replicas rows
    SIGKILL follower F, ISR shrinks    exit 0, replica_warnings fails on F's row (a warning)
    F's leader-epoch-checkpoint gets an epoch the leader never had, below F's LEO
    quality                            exit 1, replicas fails naming F and the entries
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaProducer
from pyspark.sql import SparkSession

from embedded.zookeeper import ZooKeeperEnsemble
from jobs import copy_segments, quality
from storage_core.client import KafkaAdminClient, KafkaCluster
from storage_core.log.leader_epoch_cache import (
    LEADER_EPOCH_CHECKPOINT_FILENAME,
    EpochEntry,
    LeaderEpochCheckpointFile,
)
from tests.broker_process import BrokerProcess
from tests.cluster_support import eventually, partition_states, require_java, three_brokers
from tests.integration.jobs.tiered_cluster import (
    SEGMENT_BYTES,
    broker_log_dirs_args,
    replicated_settings,
)

require_java()

pytestmark = pytest.mark.timeout(600)

TOPIC = "quality-replicated"
RECORDS = 60
SUITES = {"remote_segments", "partition_offsets", "replicas", "replica_warnings"}
DIVERGENCE = "expect_follower_epochs_agree_with_leader"
UNDER_REPLICATED = "expect_no_under_replicated_partition"


@pytest.fixture
def brokers(zookeeper: ZooKeeperEnsemble, tmp_path: Path) -> Iterator[dict[int, BrokerProcess]]:
    settings = replicated_settings(tmp_path / "remote")
    with three_brokers(zookeeper, tmp_path, settings) as (started, _connect):
        yield started


def bootstrap(brokers: dict[int, BrokerProcess]) -> str:
    return ",".join(b.bootstrap for b in brokers.values() if b.process is not None)


def produce(servers: str, count: int) -> None:
    producer = KafkaProducer(bootstrap_servers=servers, acks="all", linger_ms=0)
    try:
        for i in range(count):
            producer.send(TOPIC, value=f"{TOPIC}-{i:05d}-".encode() * 6, partition=0).get(
                timeout=10
            )
    finally:
        producer.close()


def run_quality(
    brokers: dict[int, BrokerProcess], remote_dir: Path, report_dir: Path, summary_path: Path
) -> tuple[int, dict[str, Any], dict[str, Any]]:
    code = quality.main(
        [
            "--bootstrap-server",
            bootstrap(brokers),
            *broker_log_dirs_args(brokers),
            "--remote-storage-manager",
            "LocalTieredStorage",
            f"--rsm-config=local.storage.dir={remote_dir}",
            "--spark-master",
            "local[2]",
            "--report-dir",
            str(report_dir),
            "--summary-path",
            str(summary_path),
        ]
    )
    report = json.loads((report_dir / quality.SUMMARY_FILE).read_text())
    return code, report, json.loads(summary_path.read_text())


def test_quality_across_three_brokers_warns_on_a_dead_follower_and_fails_on_its_epochs(
    spark: SparkSession,
    brokers: dict[int, BrokerProcess],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    remote_dir = tmp_path / "remote"
    with KafkaCluster(bootstrap(brokers)) as cluster:
        KafkaAdminClient(cluster).create_topic(
            TOPIC,
            num_partitions=1,
            replication_factor=3,
            configs={"remote.storage.enable": "true", "segment.bytes": str(SEGMENT_BYTES)},
        )
    any_broker = brokers[1].bootstrap
    leader, _epoch, isr = eventually(
        lambda: (
            (state := partition_states(any_broker, TOPIC).get(0)) and len(state[2]) == 3 and state
        ),
        what="the partition led with all three replicas in sync",
    )
    produce(bootstrap(brokers), RECORDS)
    follower = next(b for b in sorted(isr) if b != leader)
    copy_args = [
        "--bootstrap-server",
        bootstrap(brokers),
        "--broker-config",
        str(brokers[leader].config_path),
        "--spark-master",
        "local[2]",
        "--lock-dir",
        str(tmp_path / "locks"),
        "--summary-path",
        str(tmp_path / "copy.json"),
    ]
    assert copy_segments.main(copy_args) == 0
    copied = json.loads((tmp_path / "copy.json").read_text())["counts"]
    assert copied.get("segments_copied", 0) >= 2, copied
    capsys.readouterr()

    # every broker's log dir: green
    report_dir = tmp_path / "report"
    code, report, green = run_quality(brokers, remote_dir, report_dir, tmp_path / "green.json")
    err = capsys.readouterr().err
    assert code == 0, (report, err)
    assert set(report["suites"]) == SUITES
    for name, suite in report["suites"].items():
        assert suite["success"] is True, (name, suite)
    assert report["warnings"] == []
    assert green["status"] == "ok" and green["counts"]["replicas"] == 3, green["counts"]
    assert green["counts"]["partitions"] == 1
    assert "quality: suites passed; Data Docs" in err

    # a follower dies: under-replicated, a warning only
    brokers[follower].kill()
    eventually(
        lambda: follower not in partition_states(brokers[leader].bootstrap, TOPIC)[0][2],
        timeout_s=60,
        what=f"broker {follower} out of the ISR",
    )
    code, report, warned = run_quality(brokers, remote_dir, report_dir, tmp_path / "warn.json")
    err = capsys.readouterr().err
    assert code == 0, (report, err)
    assert report["success"] is True
    warnings_suite = report["suites"]["replica_warnings"]
    assert warnings_suite["success"] is False and warnings_suite["severity"] == "warning"
    (failed,) = warnings_suite["failed_expectations"]
    assert failed["expectation"] == UNDER_REPLICATED
    assert [row["broker_id"] for row in failed["rows"]] == [follower]
    for name in SUITES - {"replica_warnings"}:
        assert report["suites"][name]["success"] is True, (name, report["suites"][name])
    assert warned["status"] == "ok" and warned["errors"] == []
    assert warned["counts"]["warnings"] == 1
    assert any(UNDER_REPLICATED in w for w in warned["details"]["warnings"])
    assert f"quality: WARNING replica_warnings: {UNDER_REPLICATED}" in err
    assert "quality: suites passed with 1 warnings" in err

    # the dead follower's leader-epoch-checkpoint gets an epoch its leader never had
    checkpoint = LeaderEpochCheckpointFile(
        brokers[follower].log_dir / f"{TOPIC}-0" / LEADER_EPOCH_CHECKPOINT_FILENAME
    )
    entries = checkpoint.read()
    assert entries and entries[-1].start_offset < RECORDS - 1, entries
    forged = [*entries, EpochEntry(entries[-1].epoch + 7, RECORDS - 1)]
    checkpoint.write(forged)
    code, report, red = run_quality(brokers, remote_dir, report_dir, tmp_path / "red.json")
    err = capsys.readouterr().err
    assert code == 1, (report, err)
    assert report["success"] is False
    replicas_suite = report["suites"]["replicas"]
    (failed,) = replicas_suite["failed_expectations"]
    assert failed["expectation"] == DIVERGENCE
    assert [row["broker_id"] for row in failed["rows"]] == [follower]
    forged_text = f"{forged[-1].epoch}@{forged[-1].start_offset}"
    assert forged_text in failed["reason"]
    assert f"quality: FAILED replicas: {DIVERGENCE}" in err and forged_text in err
    assert red["status"] == "error"
    assert any(DIVERGENCE in e["error"] for e in red["errors"]), red["errors"]
    assert "quality: suites FAILED with 1 warnings" in err
