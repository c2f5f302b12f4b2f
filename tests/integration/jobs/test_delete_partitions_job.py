"""``jobs.delete_partitions`` against a broker process: a deleted remote-enabled topic loses
every remote object and reaches DELETE_PARTITION_FINISHED, on a local directory and on S3
(moto); a run SIGKILLed between segments is finished by the next run with nothing orphaned.

    produce, copy              remote: [seg][seg][seg]... per partition (FINISHED)
    topic_manifests            the topic's manifest beside its segments
    delete the topic           DELETE_PARTITION_MARKED, objects stay
    delete_partitions --dry-run    plans every segment, changes nothing
    delete_partitions          remote: - ; DELETE_PARTITION_FINISHED; summary counts; the
                               topic manifest gone (a cluster restore must not bring it back)
    delete_partitions          nothing to do
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from jobs import delete_partitions, topic_manifests
from storage_core.common import TopicIdPartition
from storage_core.tiered.metadata.states import RemoteLogSegmentState, RemotePartitionDeleteState
from storage_core.tiered.remote_object_keys import topic_manifest_key
from tests.broker_process import BrokerProcess
from tests.integration.jobs.tiered_cluster import (
    BROKER_SETTINGS,
    TieredCluster,
    local_store_settings,
)
from tests.s3_server import AWS_TEST_ENV, S3Server
from tests.tiered_broker_support import wait_until

pytestmark = pytest.mark.timeout(300)

REPO = Path(__file__).resolve().parents[3]
RECORDS = 150
BUCKET = "jobs-delete"


@pytest.fixture(scope="module")
def local_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TieredCluster]:
    directory = tmp_path_factory.mktemp("delete-partitions")
    settings = local_store_settings(directory / "remote")
    with BrokerProcess(directory / "broker", overrides={**BROKER_SETTINGS, **settings}) as broker:
        yield TieredCluster(broker, settings)


def tiered_topic(cluster: TieredCluster, topic: str, partitions: int) -> list[TopicIdPartition]:
    tips = cluster.create_topic(topic, partitions)
    for tip in tips:
        cluster.produce(topic, RECORDS, tip.topic_partition.partition)
        copied = cluster.copy(tip)
        assert len(copied) >= 3, copied
    return tips


def run_job(cluster: TieredCluster, summary_path: Path, *extra: str) -> tuple[int, dict]:
    code = delete_partitions.main(
        cluster.job_args("--summary-path", str(summary_path), "--topic", *extra)
    )
    return code, json.loads(summary_path.read_text())


def assert_all_gone(cluster: TieredCluster, tips: list[TopicIdPartition]) -> None:
    for tip in tips:
        assert cluster.object_keys(tip) == []
        assert cluster.segments(tip) == []
        assert cluster.delete_state(tip) is RemotePartitionDeleteState.DELETE_PARTITION_FINISHED


def test_deleted_topic_loses_every_remote_object(
    spark: SparkSession, local_cluster: TieredCluster, tmp_path: Path, capsys
) -> None:
    topic = "deleted-two-partitions"
    tips = tiered_topic(local_cluster, topic, 2)
    assert topic_manifests.main(local_cluster.job_args("--topic", topic)) == 0
    manifest = topic_manifest_key("", topic, tips[0].topic_id)
    assert manifest in local_cluster.object_keys()
    segments = {tip: local_cluster.segments(tip) for tip in tips}
    stored = {tip: local_cluster.object_keys(tip) for tip in tips}
    local_cluster.delete_topic(topic, tips)

    code, plan = run_job(local_cluster, tmp_path / "plan.json", topic, "--dry-run")
    assert code == 0
    assert plan["status"] == "ok" and plan["dry_run"] is True
    assert plan["counts"]["segments_planned"] == sum(len(s) for s in segments.values())
    assert {tip: local_cluster.object_keys(tip) for tip in tips} == stored
    assert all(
        local_cluster.delete_state(tip) is RemotePartitionDeleteState.DELETE_PARTITION_MARKED
        for tip in tips
    )

    started = time.monotonic()
    code, summary = run_job(local_cluster, tmp_path / "run.json", topic)
    print(f"delete_partitions: {time.monotonic() - started:.1f} s")
    assert code == 0, summary
    assert summary["status"] == "ok"
    assert summary["counts"]["partitions"] == 2
    assert summary["counts"]["partitions_finished"] == 2
    assert summary["counts"]["segments_deleted"] == sum(len(s) for s in segments.values())
    assert summary["bytes"]["deleted"] == sum(
        m.segment_size_in_bytes for s in segments.values() for m in s
    )
    assert sorted(p["partition"] for p in summary["partitions"]) == [f"{topic}-0", f"{topic}-1"]
    lines = [
        line for line in capsys.readouterr().out.splitlines() if "event=delete_partition" in line
    ]
    assert any(line.startswith(f"partition={topic}-0 ") and "status=ok" in line for line in lines)
    assert_all_gone(local_cluster, tips)
    assert summary["counts"]["topic_manifests_deleted"] == 1
    assert manifest not in local_cluster.object_keys()

    code, again = run_job(local_cluster, tmp_path / "again.json", topic)
    assert code == 0
    assert again["counts"]["partitions"] == 0


def test_run_killed_between_segments_is_finished_by_the_next_run(
    spark: SparkSession, local_cluster: TieredCluster, tmp_path: Path
) -> None:
    topic = "deleted-then-killed"
    (tip,) = tiered_topic(local_cluster, topic, 1)
    total = len(local_cluster.segments(tip))
    local_cluster.delete_topic(topic, [tip])

    markers = tmp_path / "deleted-segments"
    storage_dir = local_cluster.store_settings["rsm.config.local.storage.dir"]
    output = tmp_path / "killed-run.log"
    with output.open("wb") as out:
        worker = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "jobs.delete_partitions",
                *local_cluster.job_args(
                    "--topic",
                    topic,
                    "--remote-storage-manager",
                    "tests.integration.jobs.slow_storage.SlowLocalTieredStorage",
                    "--rsm-config",
                    f"local.storage.dir={storage_dir}",
                    "--rsm-config",
                    f"slow.marker.dir={markers}",
                    "--rsm-config",
                    "slow.delete.sleep.ms=60000",
                ),
            ],
            cwd=REPO,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONPATH": str(REPO), "PYSPARK_PYTHON": sys.executable},
            start_new_session=True,
        )
    try:
        wait_until(
            lambda: (markers.is_dir() and any(markers.iterdir())) or worker.poll() is not None,
            "the first segment's objects to be deleted",
            120,
        )
        assert worker.poll() is None, output.read_text()[-4000:]
        os.killpg(worker.pid, signal.SIGKILL)  # the driver, its JVM and the Python workers
    finally:
        if worker.poll() is None:
            os.killpg(worker.pid, signal.SIGKILL)
        worker.wait()

    # Killed between segments: some deleted objects without DELETE_SEGMENT_FINISHED.
    left = local_cluster.segments(tip)
    assert 0 < len(left) <= total
    assert any(m.state is RemoteLogSegmentState.DELETE_SEGMENT_STARTED for m in left)
    assert local_cluster.delete_state(tip) is RemotePartitionDeleteState.DELETE_PARTITION_STARTED

    code, summary = run_job(local_cluster, tmp_path / "resumed.json", topic)
    assert code == 0, summary
    assert summary["counts"]["partitions_finished"] == 1
    assert_all_gone(local_cluster, [tip])
    assert local_cluster.object_keys(tip) == []


def test_on_s3(spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in AWS_TEST_ENV.items():
        monkeypatch.setenv(name, value)
    with S3Server(tmp_path / "moto") as s3:
        s3.create_bucket(BUCKET)
        settings = {
            "remote.log.storage.manager.class.name": "S3RemoteStorageManager",
            "rsm.config.s3.bucket.name": BUCKET,
            "rsm.config.s3.key.prefix": "jobs",
            "rsm.config.s3.endpoint.url": s3.endpoint_url,
            "rsm.config.s3.path.style.access.enabled": "true",
            "rsm.config.s3.region": AWS_TEST_ENV["AWS_DEFAULT_REGION"],
        }
        with BrokerProcess(tmp_path / "broker", overrides={**BROKER_SETTINGS, **settings}) as b:
            cluster = TieredCluster(b, settings)
            topic = "deleted-on-s3"
            (tip,) = tiered_topic(cluster, topic, 1)
            stored = cluster.object_keys(tip)
            assert stored
            cluster.delete_topic(topic, [tip])

            # The store out of reach: the run names its endpoint, and loses nothing.
            closed = socket.socket()
            closed.bind(("127.0.0.1", 0))
            away_url = f"http://127.0.0.1:{closed.getsockname()[1]}"
            closed.close()
            away = ["--rsm-config", f"s3.endpoint.url={away_url}"]
            away += ["--rsm-config", "s3.retry.max.attempts=2"]
            code, failed = run_job(cluster, tmp_path / "away.json", topic, *away)
            assert code == 1, failed
            assert failed["counts"].get("partitions_finished", 0) == 0
            assert failed["counts"]["segments_failed"] == len(cluster.segments(tip))
            assert all(
                away_url in e["error"] and "reachable" in e["error"] for e in failed["errors"]
            )
            assert cluster.object_keys(tip) == stored
            assert cluster.delete_state(tip) is RemotePartitionDeleteState.DELETE_PARTITION_STARTED

            code, summary = run_job(cluster, tmp_path / "s3.json", topic)
            assert code == 0, summary
            assert summary["counts"]["partitions_finished"] == 1
            assert_all_gone(cluster, [tip])
            listed = s3.client().list_objects_v2(Bucket=BUCKET, Prefix="jobs/")
            assert listed.get("KeyCount", 0) == 0
