"""``jobs.copy_segments`` and ``jobs.expire_remote`` on the shared Spark session against a
broker process, with the remote tier in a local directory and on S3 (moto's server).

Pictures as in ``tests/scenarios`` (segments of 10 records of ~780 bytes)::

    produce jobs-size 0..44 (local.retention.bytes=1000, retention.bytes=2000)
            jobs-plain 0..24
    copy_segments --dry-run   plans 4 + 2 segments, changes nothing
    copy_segments             jobs-size:  local: [30-39][40-44]*  remote: [0-9][10-19][20-29][30-39]
                              jobs-plain: local: [0-9][10-19][20-24]*  remote: [0-9][10-19]
    copy_segments again       copies nothing
    a run while another holds the lock: status=skipped, nothing done
    expire_remote --dry-run   plans [0-9] of jobs-size (RETENTION_BYTES), changes nothing
    expire_remote             jobs-size: remote: [10-19][20-29][30-39], earliest=10
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from jobs import copy_segments, expire_remote
from jobs.common import log_dir_locks
from tests.broker_process import BrokerProcess
from tests.s3_server import AWS_TEST_ENV, S3Server
from tests.scenarios.conftest import BROKER_SETTINGS
from tests.scenarios.tiered import RemoteStore, TieredStage, stage_of, topic_configs

pytestmark = pytest.mark.timeout(300)
BUCKET = "jobs-copy-expire"


@pytest.fixture(scope="module", params=["local", "s3"])
def stage(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TieredStage]:
    with pytest.MonkeyPatch.context() as patch:
        for key, value in AWS_TEST_ENV.items():
            patch.setenv(key, value)
        if request.param == "local":
            store = RemoteStore(
                name="local",
                broker_settings={
                    "remote.log.storage.manager.class.name": "LocalTieredStorage",
                    "rsm.config.local.storage.dir": str(tmp_path_factory.mktemp("remote")),
                    "rsm.config.local.fsync": "false",
                },
            )
            yield from _stage(store, tmp_path_factory)
            return
        with S3Server(tmp_path_factory.mktemp("moto")) as s3:
            s3.create_bucket(BUCKET)
            store = RemoteStore(
                name="s3",
                broker_settings={
                    "remote.log.storage.manager.class.name": "S3RemoteStorageManager",
                    "rsm.config.s3.bucket.name": BUCKET,
                    "rsm.config.s3.key.prefix": "jobs",
                    "rsm.config.s3.endpoint.url": s3.endpoint_url,
                    "rsm.config.s3.path.style.access.enabled": "true",
                    "rsm.config.s3.region": AWS_TEST_ENV["AWS_DEFAULT_REGION"],
                },
            )
            yield from _stage(store, tmp_path_factory)


def _stage(store: RemoteStore, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TieredStage]:
    directory = tmp_path_factory.mktemp(f"broker-{store.name}")
    overrides = {**BROKER_SETTINGS, **store.broker_settings}
    with BrokerProcess(directory, overrides=overrides) as broker, stage_of(broker, store) as s:
        yield s


def job_args(stage: TieredStage, tmp_path: Path, summary: str, *extra: str) -> list[str]:
    return [
        "--bootstrap-server",
        stage.bootstrap,
        "--broker-config",
        str(stage.broker.config_path),
        "--spark-master",
        "local[2]",
        "--lock-dir",
        str(tmp_path / "locks"),
        "--summary-path",
        str(tmp_path / summary),
        *extra,
    ]


def lines_of(out: str, prefix: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith(prefix)]


def test_copy_then_expire_on_spark(
    spark: SparkSession, stage: TieredStage, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    size_id = stage.create_topic(
        "jobs-size",
        topic_configs(
            remote_storage_enable="true", local_retention_bytes="1000", retention_bytes="2000"
        ),
    )
    plain_id = stage.create_topic("jobs-plain", topic_configs(remote_storage_enable="true"))
    stage.produce("jobs-size", 45)
    stage.produce("jobs-plain", 25)
    untiered = (
        "local: [0-9][10-19][20-29][30-39][40-44]* remote: - | earliest=0 local=0 tiered=-1 end=45"
    )
    stage.expect("jobs-size", size_id, untiered)
    capsys.readouterr()

    # dry run: the plan, nothing copied
    assert copy_segments.main(job_args(stage, tmp_path, "plan.json", "--dry-run")) == 0
    out = capsys.readouterr().out
    planned = lines_of(out, "partition=jobs-")
    assert any("jobs-size-0 event=planned" in line and "segments=4" in line for line in planned)
    assert any("jobs-plain-0 event=planned" in line and "segments=2" in line for line in planned)
    plan = json.loads((tmp_path / "plan.json").read_text())
    assert plan["dry_run"] is True and plan["status"] == "ok"
    assert plan["counts"]["segments_planned"] == 6
    assert "segments_copied" not in plan["counts"]
    stage.expect("jobs-size", size_id, untiered)

    # the copy
    assert copy_segments.main(job_args(stage, tmp_path, "copy.json", "--num-work-units", "2")) == 0
    out, err = capsys.readouterr()
    assert any(
        line.startswith("partition=jobs-size-0 event=copied") and "status=ok segments=4" in line
        for line in out.splitlines()
    ), out
    summary = json.loads((tmp_path / "copy.json").read_text())
    assert summary["job"] == "copy_segments" and summary["status"] == "ok"
    assert summary["counts"]["segments_copied"] == 6
    assert summary["counts"]["work_units"] == 2
    assert summary["bytes"]["copied"] == summary["bytes"]["planned"] > 0
    assert summary["errors"] == []
    # the last progress line counts what was copied
    *_, last = lines_of(err, "progress job=copy_segments ")
    copied = summary["bytes"]["copied"]
    assert f" done=2 total=2 bytes={copied} percent=100 " in last, err
    assert {p["partition"] for p in summary["partitions"]} == {"jobs-size-0", "jobs-plain-0"}
    stage.expect(
        "jobs-size",
        size_id,
        "local: [30-39][40-44]* remote: [0-9][10-19][20-29][30-39]"
        " | earliest=0 local=30 tiered=39 end=45",
    )
    stage.expect(
        "jobs-plain",
        plain_id,
        "local: [0-9][10-19][20-24]* remote: [0-9][10-19] | earliest=0 local=0 tiered=19 end=25",
    )

    # idempotent: a second run copies nothing
    assert copy_segments.main(job_args(stage, tmp_path, "again.json")) == 0
    again = json.loads((tmp_path / "again.json").read_text())
    assert again["counts"].get("segments_planned", 0) == 0
    assert again["counts"].get("segments_copied", 0) == 0

    # a concurrent run (the lock held) does nothing and says so
    log_dirs = [stage.broker.log_dir]
    with log_dir_locks(tmp_path / "locks", "copy_segments", log_dirs, wait_s=0) as held:
        assert held is None
        assert copy_segments.main(job_args(stage, tmp_path, "busy.json")) == 0
    busy = json.loads((tmp_path / "busy.json").read_text())
    assert busy["status"] == "skipped" and "another run holds" in busy["details"]["skipped"]
    capsys.readouterr()

    # expire: the dry run plans [0-9] by retention.bytes and changes nothing
    assert expire_remote.main(job_args(stage, tmp_path, "expire-plan.json", "--dry-run")) == 0
    out = capsys.readouterr().out
    plan_lines = lines_of(out, "plan ")
    assert len(plan_lines) == 1, out
    assert "partition=jobs-size-0" in plan_lines[0]
    assert "start_offset=0 end_offset=9" in plan_lines[0]
    assert "reason=RETENTION_BYTES" in plan_lines[0]
    expire_plan = json.loads((tmp_path / "expire-plan.json").read_text())
    (size_entry,) = [p for p in expire_plan["partitions"] if p["partition"] == "jobs-size-0"]
    assert size_entry["status"] == "planned" and size_entry["log_start_offset"] == 10
    assert size_entry["plan"][0]["why"] == "retention.bytes breach"
    stage.expect(
        "jobs-size",
        size_id,
        "local: [30-39][40-44]* remote: [0-9][10-19][20-29][30-39]"
        " | earliest=0 local=30 tiered=39 end=45",
    )

    # the real run
    assert expire_remote.main(job_args(stage, tmp_path, "expire.json")) == 0
    expired = json.loads((tmp_path / "expire.json").read_text())
    assert expired["status"] == "ok"
    assert expired["counts"]["segments_deleted"] == 1
    assert expired["bytes"]["deleted"] == expired["bytes"]["planned"] > 0
    stage.expect(
        "jobs-size",
        size_id,
        "local: [30-39][40-44]* remote: [10-19][20-29][30-39]"
        " | earliest=10 local=30 tiered=39 end=45",
    )
    stage.expect(
        "jobs-plain",
        plain_id,
        "local: [0-9][10-19][20-24]* remote: [0-9][10-19] | earliest=0 local=0 tiered=19 end=25",
    )
