"""``jobs.reconcile`` against a broker process and S3 (moto): what a killed copy, a planted
orphan, an abandoned multipart upload and a crashed expiry leave behind is found and fixed.

    produce; a copy process uploads the first object of segment 0, SIGKILLed
                                  remote: seg 0 COPY_SEGMENT_STARTED (one object, stale)
    the next copy run             seg 0 again under a new id, then the rest (FINISHED)
    plant an orphan object, a foreign object and a multipart upload under the prefix
    reconcile --dry-run           plans: roll back the stale copy, delete the orphan
    reconcile                     stale copy DELETE_SEGMENT_FINISHED and its object gone,
                                  orphan gone, upload aborted; FINISHED objects and the
                                  foreign object untouched; consume from 0: every record
    reconcile                     nothing to do
    DELETE_SEGMENT_STARTED published for a segment (an expiry that crashed)
    reconcile --delete-retry-grace-s 0    the deletion finished, its objects gone
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from jobs import reconcile
from storage_core.common import Uuid
from storage_core.tiered.metadata.metadata import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
)
from storage_core.tiered.metadata.states import RemoteLogSegmentState
from storage_core.tiered.remote_object_keys import RemoteObjectSuffix, segment_key
from storage_core.tiered.remote_storage_manager import RemoteSegmentRef
from tests.broker_process import BrokerProcess
from tests.integration.jobs.tiered_cluster import (
    BROKER_SETTINGS,
    TieredCluster,
    local_store_settings,
)
from tests.s3_server import AWS_TEST_ENV, S3Server
from tests.tiered_broker_support import client_rlmm, wait_until

pytestmark = pytest.mark.timeout(300)

REPO = Path(__file__).resolve().parents[3]
BUCKET = "jobs-reconcile"
PREFIX = "cluster-r"
TOPIC = "reconciled"
RECORDS = 150


def run(cluster: TieredCluster, summary_path: Path, *extra: str) -> tuple[int, dict]:
    code = reconcile.main(
        cluster.job_args(
            "--summary-path",
            str(summary_path),
            "--copy-deadline-s",
            "1",
            "--orphan-grace-s",
            "0",
            *extra,
        )
    )
    return code, json.loads(summary_path.read_text())


def kill_copy_mid_upload(cluster: TieredCluster, tmp_path: Path) -> None:
    marker = tmp_path / "first-object-uploaded"
    log = tmp_path / "copy-worker.log"
    rsm_config = {k: v for k, v in cluster.store_settings.items() if k.startswith("rsm.config.")}
    with log.open("wb") as out:
        worker = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.integration.copy_worker",
                "--bootstrap",
                cluster.bootstrap,
                "--partition-dir",
                str(cluster.broker.log_dir / f"{TOPIC}-0"),
                "--topic",
                TOPIC,
                "--rsm-config",
                json.dumps(rsm_config),
                "--hang-after-first-object",
                str(marker),
            ],
            cwd=REPO,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_until(lambda: marker.exists() or worker.poll() is not None, "the first object", 60)
        assert worker.poll() is None, log.read_text()
        os.kill(worker.pid, signal.SIGKILL)
    finally:
        if worker.poll() is None:
            worker.kill()
        worker.wait()


def test_reconcile_fixes_a_stale_copy_an_orphan_an_upload_and_a_stuck_delete(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in AWS_TEST_ENV.items():
        monkeypatch.setenv(name, value)
    with S3Server(tmp_path / "moto") as s3:
        s3.create_bucket(BUCKET)
        settings = {
            "remote.log.storage.manager.class.name": "S3RemoteStorageManager",
            "rsm.config.s3.bucket.name": BUCKET,
            "rsm.config.s3.key.prefix": PREFIX,
            "rsm.config.s3.endpoint.url": s3.endpoint_url,
            "rsm.config.s3.path.style.access.enabled": "true",
            "rsm.config.s3.region": AWS_TEST_ENV["AWS_DEFAULT_REGION"],
        }
        client = s3.client()
        with BrokerProcess(tmp_path / "broker", overrides={**BROKER_SETTINGS, **settings}) as b:
            cluster = TieredCluster(b, settings)
            (tip,) = cluster.create_topic(TOPIC)
            cluster.produce(TOPIC, RECORDS)

            kill_copy_mid_upload(cluster, tmp_path)
            (stale,) = cluster.segments(tip)
            assert stale.state is RemoteLogSegmentState.COPY_SEGMENT_STARTED
            stale_keys = [
                k for k in cluster.object_keys(tip) if str(stale.remote_log_segment_id.id) in k
            ]
            assert len(stale_keys) == 1
            copied = cluster.copy(tip)
            assert copied[0].start_offset == 0 and len(copied) >= 3
            live_keys = sorted(set(cluster.object_keys(tip)) - set(stale_keys))

            orphan = RemoteSegmentRef(
                topic=TOPIC,
                topic_id=tip.topic_id,
                partition=0,
                segment_id=Uuid.random(),
                start_offset=0,
            )
            orphan_key = segment_key(PREFIX, orphan, RemoteObjectSuffix.LOG)
            foreign_key = f"{PREFIX}/NOTES.txt"
            client.put_object(Bucket=BUCKET, Key=orphan_key, Body=b"x" * 100)
            client.put_object(Bucket=BUCKET, Key=foreign_key, Body=b"kept")
            upload_key = segment_key(PREFIX, orphan, RemoteObjectSuffix.OFFSET_INDEX)
            client.create_multipart_upload(Bucket=BUCKET, Key=upload_key)
            time.sleep(1.5)  # past the 1 s copy deadline of these runs

            code, plan = run(cluster, tmp_path / "plan.json", "--dry-run")
            assert code == 0, plan
            assert plan["counts"]["planned_copies_rolled_back"] == 1
            assert plan["counts"]["planned_orphan_segments"] == 1
            assert plan["counts"]["foreign_objects"] == 1
            assert [a["action"] for a in plan["details"]["actions"]] == [
                "roll_back_copy",
                "delete_orphans",
            ]
            assert client.list_multipart_uploads(Bucket=BUCKET).get("Uploads")
            assert orphan_key in cluster.object_keys()

            started = time.monotonic()
            code, done = run(cluster, tmp_path / "run.json")
            print(f"reconcile: {time.monotonic() - started:.1f} s")
            assert code == 0, done
            assert done["counts"]["copies_rolled_back"] == 1
            assert done["counts"]["orphan_segments"] == 1
            assert done["counts"]["orphan_objects_deleted"] == 1
            assert done["bytes"]["orphans_deleted"] == 100
            assert done["counts"]["multipart_uploads_aborted"] == 1
            assert not client.list_multipart_uploads(Bucket=BUCKET).get("Uploads")
            segments = cluster.segments(tip)
            assert stale.remote_log_segment_id not in {m.remote_log_segment_id for m in segments}
            assert all(m.state is RemoteLogSegmentState.COPY_SEGMENT_FINISHED for m in segments)
            assert sorted(cluster.object_keys(tip)) == live_keys
            assert foreign_key in cluster.object_keys()

            code, again = run(cluster, tmp_path / "again.json")
            assert code == 0
            assert again["counts"]["planned_copies_rolled_back"] == 0
            assert again["counts"]["planned_orphan_segments"] == 0

            # An expiry that crashed after DELETE_SEGMENT_STARTED.
            victim = segments[0]
            with client_rlmm(cluster.bootstrap) as rlmm:
                rlmm.update_remote_log_segment_metadata(
                    RemoteLogSegmentMetadataUpdate(
                        remote_log_segment_id=victim.remote_log_segment_id,
                        event_timestamp_ms=int(time.time() * 1000) - 10_000,
                        state=RemoteLogSegmentState.DELETE_SEGMENT_STARTED,
                        broker_id=0,
                    )
                )
            code, retried = run(cluster, tmp_path / "retry.json", "--delete-retry-grace-s", "0")
            assert code == 0, retried
            assert retried["counts"]["deletes_retried"] == 1
            victim_id = str(victim.remote_log_segment_id.id)
            assert not [k for k in cluster.object_keys(tip) if victim_id in k]
            assert victim.remote_log_segment_id not in {
                m.remote_log_segment_id for m in cluster.segments(tip)
            }


def test_reconcile_on_a_local_directory(spark: SparkSession, tmp_path: Path) -> None:
    """A dead copy (COPY_SEGMENT_STARTED long ago, one object written) and an orphan file in
    the directory store: both removed, the copied segments untouched."""
    settings = local_store_settings(tmp_path / "remote")
    with BrokerProcess(tmp_path / "broker", overrides={**BROKER_SETTINGS, **settings}) as b:
        cluster = TieredCluster(b, settings)
        (tip,) = cluster.create_topic("reconciled-locally")
        cluster.produce("reconciled-locally", RECORDS)
        copied = cluster.copy(tip)
        live_keys = sorted(cluster.object_keys(tip))

        dead = RemoteLogSegmentMetadata(
            remote_log_segment_id=RemoteLogSegmentId.generate_new(tip),
            start_offset=copied[-1].end_offset + 1,
            end_offset=copied[-1].end_offset + 5,
            max_timestamp_ms=0,
            broker_id=0,
            event_timestamp_ms=int(time.time() * 1000) - 3_600_000,
            segment_size_in_bytes=5,
            segment_leader_epochs={0: copied[-1].end_offset + 1},
        )
        with client_rlmm(cluster.bootstrap) as rlmm:
            rlmm.add_remote_log_segment_metadata(dead)
        store = Path(settings["rsm.config.local.storage.dir"])
        dead_file = store / segment_key("", RemoteSegmentRef.of(dead), RemoteObjectSuffix.LOG)
        dead_file.write_bytes(b"12345")
        orphan = RemoteSegmentRef(
            topic="reconciled-locally",
            topic_id=tip.topic_id,
            partition=0,
            segment_id=Uuid.random(),
            start_offset=0,
        )
        orphan_file = store / segment_key("", orphan, RemoteObjectSuffix.TIME_INDEX)
        orphan_file.write_bytes(b"orphan")

        code, done = run(cluster, tmp_path / "local.json")
        assert code == 0, done
        assert (done["counts"]["copies_rolled_back"], done["counts"]["orphan_segments"]) == (1, 1)
        assert "multipart_uploads_aborted" not in done["counts"]
        assert not dead_file.exists() and not orphan_file.exists()
        assert sorted(cluster.object_keys(tip)) == live_keys
        assert [m.remote_log_segment_id for m in cluster.segments(tip)] == [
            m.remote_log_segment_id for m in copied
        ]


def test_reconcile_reports_finished_segments_whose_objects_are_gone_and_keeps_them(
    spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The store lost the objects of two COPY_SEGMENT_FINISHED segments (deleted by hand):
    reconcile reports both, in its lines, counts, details and errors (exit 1), dry run or
    not, and leaves their metadata FINISHED and every other object alone."""
    settings = local_store_settings(tmp_path / "remote")
    with BrokerProcess(tmp_path / "broker", overrides={**BROKER_SETTINGS, **settings}) as b:
        cluster = TieredCluster(b, settings)
        (tip,) = cluster.create_topic("lost-objects")
        cluster.produce("lost-objects", RECORDS)
        copied = cluster.copy(tip)
        assert len(copied) >= 3
        lost = copied[:2]
        store = Path(settings["rsm.config.local.storage.dir"])
        for segment in lost:
            for suffix in RemoteObjectSuffix:
                path = store / segment_key("", RemoteSegmentRef.of(segment), suffix)
                path.unlink(missing_ok=True)
        kept_keys = sorted(cluster.object_keys(tip))
        lost_ids = [str(m.remote_log_segment_id.id) for m in lost]

        for extra in (("--dry-run",), ()):
            capsys.readouterr()
            code, done = run(cluster, tmp_path / "lost.json", *extra)
            lines = [
                line
                for line in capsys.readouterr().out.splitlines()
                if "action=lost_segment" in line
            ]
            assert code == 1, done
            assert done["counts"]["lost_segments"] == 2, done
            assert [d["segment_id"] for d in done["details"]["lost_segments"]] == lost_ids
            assert all(
                d["state"] == "COPY_SEGMENT_FINISHED" for d in done["details"]["lost_segments"]
            )
            assert len(done["errors"]) == 2 and all("lost" in e["error"] for e in done["errors"])
            assert len(lines) == 2 and all("status=reported" in line for line in lines), lines
            assert all(f"segment_id={i}" in line for i, line in zip(lost_ids, lines, strict=True))
            assert done["counts"].get("copies_rolled_back", 0) == 0
        states = {str(m.remote_log_segment_id.id): m.state for m in cluster.segments(tip)}
        assert [states[i] for i in lost_ids] == [RemoteLogSegmentState.COPY_SEGMENT_FINISHED] * 2
        assert sorted(cluster.object_keys(tip)) == kept_keys
