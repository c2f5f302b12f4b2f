"""``jobs.copy_segments`` and ``jobs.expire_remote`` following leadership across a cluster of
three brokers (``--broker-log-dirs`` for all three; one remote tier all brokers share)::

    topics     led-by-1 on [1, 2, 3], led-by-2 on [2, 3, 1], led-by-3 on [3, 1, 2]
               (segments of 12 records, retention.bytes=2000, local.retention.bytes=1000)
    locked     a run holding broker 3's log dir keeps a cluster run out
    copy       one run copies the closed segments of all three, each read from its
               leader's log dir and published as its leader
    expire     one run deletes what retention.bytes drops, on all three
    quality    green after the copy and after the expiry (every replica, epoch and offset
               suite)

    hosts      broker 1 advertises itself as localhost, brokers 2 and 3 as 127.0.0.1: the
               work units group the partitions by leader host and each asks Spark for its
               leader's host; everything is copied all the same

    follow     a topic on [2, 3, 1]: copy (from broker 2), SIGKILL broker 2, broker 3 leads
               in epoch 1, more records, copy again: from broker 3's log dir, the chain
               goes on along the epoch lineage (no gap, nothing twice); every acknowledged
               record is read from offset 0; quality is green, with broker 2 dead reported
               as an under-replicated warning
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from embedded.zookeeper import ZooKeeperEnsemble
from jobs import copy_segments, expire_remote, quality
from jobs.common import log_dir_locks
from storage_core.tiered.metadata.metadata import RemoteLogSegmentMetadata
from storage_core.tiered.metadata.states import RemoteLogSegmentState
from tests.scenarios.tiered_replication.stage import TieredStage

pytestmark = pytest.mark.timeout(600)
SEGMENT_BYTES = "1000"  # 12 records of 78 bytes
LOCAL_RETENTION_BYTES = "2500"
LEADERS = {"led-by-1": (1, 2, 3), "led-by-2": (2, 3, 1), "led-by-3": (3, 1, 2)}


@pytest.fixture
def stage(zookeeper: ZooKeeperEnsemble, tmp_path: Path) -> Iterator[TieredStage]:
    with TieredStage(zookeeper, tmp_path) as stage:
        yield stage


@pytest.fixture
def two_host_stage(zookeeper: ZooKeeperEnsemble, tmp_path: Path) -> Iterator[TieredStage]:
    """The stage with broker 1 advertised as ``localhost`` (the same loopback address under
    another name: Metadata gives two leader hosts)."""
    stage = TieredStage(zookeeper, tmp_path)
    first = stage.brokers[1]
    with first.config_path.open("a") as config:
        config.write(f"advertised.listeners=PLAINTEXT://localhost:{first.port}\n")
    with stage:
        yield stage


def job_args(stage: TieredStage, tmp_path: Path, summary: str, *extra: str) -> list[str]:
    """The cluster form: every broker's log dir, the shared store named on the command line
    (no broker config)."""
    maps = [f"--broker-log-dirs={b}={broker.log_dir}" for b, broker in stage.brokers.items()]
    return [
        "--bootstrap-server",
        stage.bootstrap,
        *maps,
        "--remote-storage-manager",
        "LocalTieredStorage",
        f"--rsm-config=local.storage.dir={stage.remote_dir}",
        "--rsm-config=local.fsync=false",
        "--spark-master",
        "local[2]",
        "--lock-dir",
        str(tmp_path / "locks"),
        "--summary-path",
        str(tmp_path / summary),
        *extra,
    ]


def run(job: Any, stage: TieredStage, tmp_path: Path, summary: str) -> dict[str, Any]:
    assert job.main(job_args(stage, tmp_path, summary)) == 0
    result: dict[str, Any] = json.loads((tmp_path / summary).read_text())
    print(f"{summary}: {result['counts']} {result['partitions']}")
    return result


def check_quality(stage: TieredStage, tmp_path: Path, name: str) -> dict[str, Any]:
    """The quality job over every broker's log dir: exit 0 with every suite passed (the
    under-replicated warning aside); the report, for what a test asserts further."""
    maps = [f"--broker-log-dirs={b}={broker.log_dir}" for b, broker in stage.brokers.items()]
    report_dir = tmp_path / f"quality-{name}"
    code = quality.main(
        [
            "--bootstrap-server",
            stage.bootstrap,
            *maps,
            "--remote-storage-manager",
            "LocalTieredStorage",
            f"--rsm-config=local.storage.dir={stage.remote_dir}",
            "--spark-master",
            "local[2]",
            "--report-dir",
            str(report_dir),
            "--summary-path",
            str(tmp_path / f"quality-{name}.json"),
        ]
    )
    report: dict[str, Any] = json.loads((report_dir / quality.SUMMARY_FILE).read_text())
    failing = {
        suite: outcome
        for suite, outcome in report["suites"].items()
        if not outcome["success"] and suite != "replica_warnings"
    }
    assert code == 0 and report["success"] and failing == {}, (name, failing)
    return report


def finished(stage: TieredStage, topic: str) -> list[RemoteLogSegmentMetadata]:
    return sorted(
        (
            s
            for s in stage.remote_segments(topic)
            if s.state is RemoteLogSegmentState.COPY_SEGMENT_FINISHED
        ),
        key=lambda s: (s.start_offset, s.end_offset),
    )


def create(stage: TieredStage, topic: str, replicas: tuple[int, ...], **configs: str) -> None:
    stage.create_topic(
        topic,
        replicas,
        **{
            "remote_storage_enable": "true",
            "segment_bytes": SEGMENT_BYTES,
            "local_retention_bytes": LOCAL_RETENTION_BYTES,
            **configs,
        },
    )


def values(prefix: str, count: int) -> list[str]:
    return [f"{prefix}-{i:06d}" for i in range(count)]


def test_one_run_copies_and_expires_the_partitions_of_every_leader(
    spark: SparkSession, stage: TieredStage, tmp_path: Path
) -> None:
    for topic, replicas in LEADERS.items():
        create(stage, topic, replicas, retention_bytes="2000", local_retention_bytes="1000")
        stage.produce(topic, values(topic, 40))  # segments [0-11] [12-23] [24-35], active 36

    # the run locks cover every broker's log dir: a run holding broker 3's keeps this one out
    with log_dir_locks(tmp_path / "locks", "copy_segments", [stage.brokers[3].log_dir], wait_s=0):
        busy = run(copy_segments, stage, tmp_path, "busy.json")
    assert busy["status"] == "skipped" and "another run holds" in busy["details"]["skipped"]
    assert finished(stage, "led-by-1") == []

    copied = run(copy_segments, stage, tmp_path, "copy.json")
    assert copied["status"] == "ok" and copied["errors"] == []
    by_partition = {p["partition"]: p for p in copied["partitions"]}
    for topic, (leader, *_followers) in LEADERS.items():
        assert by_partition[f"{topic}-0"]["status"] == "ok"
        segments = finished(stage, topic)
        assert [(s.start_offset, s.end_offset) for s in segments] == [(0, 11), (12, 23), (24, 35)]
        # read from the leader's log dir and published as the leader
        assert {s.broker_id for s in segments} == {leader}, (topic, segments)
    assert copied["counts"]["segments_copied"] == 9
    check_quality(stage, tmp_path, "after-copy")
    # each work unit records its leaders' hosts (Metadata's broker endpoints); the three
    # brokers share one host here, so no unit asks Spark for a host (plain parallelize)
    units = copied["details"]["work_units"]
    assert all(unit["leader_hosts"] == ["127.0.0.1"] for unit in units), units
    assert all(unit["preferred_hosts"] == [] for unit in units), units

    expired = run(expire_remote, stage, tmp_path, "expire.json")
    assert expired["status"] == "ok" and expired["errors"] == []
    assert {p["partition"] for p in expired["partitions"]} == {f"{t}-0" for t in LEADERS}
    for topic in LEADERS:
        remaining = finished(stage, topic)
        # retention.bytes=2000 of ~3100 bytes: the oldest remote segments are gone
        assert remaining and remaining[0].start_offset > 0, (topic, remaining)
        assert remaining[-1].end_offset == 35
    assert expired["counts"]["segments_deleted"] >= 3
    check_quality(stage, tmp_path, "after-expire")


def test_work_units_follow_their_leaders_hosts(
    spark: SparkSession, two_host_stage: TieredStage, tmp_path: Path
) -> None:
    stage = two_host_stage
    for topic, replicas in LEADERS.items():
        create(stage, topic, replicas)
        stage.produce(topic, values(topic, 40))  # segments [0-11] [12-23] [24-35], active 36

    copied = run(copy_segments, stage, tmp_path, "copy.json")
    assert copied["status"] == "ok" and copied["counts"]["segments_copied"] == 9, copied
    for topic, (leader, *_followers) in LEADERS.items():
        segments = finished(stage, topic)
        assert [(s.start_offset, s.end_offset) for s in segments] == [(0, 11), (12, 23), (24, 35)]
        assert {s.broker_id for s in segments} == {leader}, (topic, segments)
    units = copied["details"]["work_units"]
    print(f"work units: {units}")
    placed = {p: unit["preferred_hosts"] for unit in units for p in unit["partitions"]}
    assert placed == {
        "led-by-1-0": ["localhost"],
        "led-by-2-0": ["127.0.0.1"],
        "led-by-3-0": ["127.0.0.1"],
    }
    # a unit holds one leader host's partitions
    assert all(unit["leader_hosts"] == unit["preferred_hosts"] for unit in units), units


def test_after_the_leader_is_killed_the_next_run_copies_from_the_new_leader(
    spark: SparkSession, stage: TieredStage, tmp_path: Path
) -> None:
    topic = "follow"
    create(stage, topic, (2, 3, 1))
    acked = dict(zip(stage.produce(topic, values("a", 30)), values("a", 30), strict=True))
    first = run(copy_segments, stage, tmp_path, "first.json")
    assert first["counts"]["segments_copied"] == 2
    before = finished(stage, topic)
    assert [s.broker_id for s in before] == [2, 2] and before[0].start_offset == 0
    copied_before = before[-1].end_offset

    stage.kill(2)
    state = stage.wait_state(topic, leader=3, isr=[1, 3])
    assert state.leader_epoch == 1
    more = values("b", 30)
    acked.update(zip(stage.produce(topic, more), more, strict=True))

    second = run(copy_segments, stage, tmp_path, "second.json")
    assert second["status"] == "ok", second
    assert second["counts"]["segments_copied"] >= 2, second
    chain = finished(stage, topic)
    print(f"chain: {[(s.start_offset, s.end_offset, s.broker_id) for s in chain]}")
    spans = [(s.start_offset, s.end_offset) for s in chain]
    assert len(set(spans)) == len(spans), spans  # nothing committed twice
    covered = -1
    for start, end in spans:
        assert start <= covered + 1, f"gap before {start}: {spans}"
        covered = max(covered, end)
    assert covered > copied_before + 12, spans
    # the second run read broker 3's log dir and published as broker 3, in epoch 1
    new = [s for s in chain if s.start_offset > copied_before]
    assert new and {s.broker_id for s in new} == {3}, chain
    assert all(1 in s.segment_leader_epochs for s in new), chain
    # green with broker 2 still dead: its partition is under-replicated, a warning only
    report = check_quality(stage, tmp_path, "after-failover")
    (warning,) = report["warnings"]
    assert "expect_no_under_replicated_partition" in warning and "broker_id=2" in warning
    # the remote tier holds what the old leader copied and what the new one did
    read = dict(stage.consume(topic))
    missing = {o: v for o, v in acked.items() if read.get(o) != v}
    assert not missing, sorted(missing.items())[:5]
    assert min(read) == 0
