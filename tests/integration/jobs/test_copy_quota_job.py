"""``jobs.copy_segments`` under KIP-956's copy quota, on the shared Spark session against a
broker process (segments of 10 records of ~780 bytes, the scenarios' stage)::

    produce quota-a 0..204, quota-b 0..204     20 closed segments each (~15.6 KB a partition)
    kafka-configs --entity-default             remote.log.manager.copy.max.bytes.per.second
      --add-config ...=8000                    = 8000 (IncrementalAlterConfigs, BROKER "")
    copy_segments --num-work-units 2           reads the rate from the broker (DescribeConfigs),
      (local[2]: both units at once)           4000 B/s per unit; every segment copied; the
                                               run's bytes / its copy time within 10% of 8000
    --bytes-per-second 1e9 on a later topic    the argument overrides the broker's rate

and ``storage-core tier`` (one copier) under a 4000 B/s default: 20 segments, ~15.6 KB, at
the rate within 10% (its partition line's seconds: from the first copy to the last).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from jobs import copy_segments
from storage_core.client import (
    AlterConfigOp,
    AlterConfigOpType,
    ConfigResourceType,
    KafkaAdminClient,
    KafkaCluster,
)
from tests.broker_process import BrokerProcess
from tests.scenarios.conftest import BROKER_SETTINGS
from tests.scenarios.tiered import RemoteStore, TieredStage, stage_of, topic_configs

pytestmark = pytest.mark.timeout(180)

RATE = 8000  # bytes per second for the whole run
RECORDS = 205  # 20 closed segments and the active one
COPY_QUOTA = "remote.log.manager.copy.max.bytes.per.second"


@pytest.fixture
def stage(tmp_path: Path) -> Iterator[TieredStage]:
    store = RemoteStore(
        name="local",
        broker_settings={
            "remote.log.storage.manager.class.name": "LocalTieredStorage",
            "rsm.config.local.storage.dir": str(tmp_path / "remote"),
            "rsm.config.local.fsync": "false",
        },
    )
    overrides = {**BROKER_SETTINGS, **store.broker_settings}
    with (
        BrokerProcess(tmp_path / "broker", overrides=overrides) as broker,
        stage_of(broker, store) as s,
    ):
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
        "--num-work-units",
        "2",
        *extra,
    ]


def set_default_copy_quota(stage: TieredStage, bytes_per_second: int) -> None:
    with KafkaCluster(stage.bootstrap) as cluster:
        KafkaAdminClient(cluster).incremental_alter_configs(
            ConfigResourceType.BROKER,
            "",  # the cluster-wide default (kafka-configs --entity-default)
            [AlterConfigOp(name=COPY_QUOTA, op=AlterConfigOpType.SET, value=str(bytes_per_second))],
        )


def test_copy_job_holds_the_brokers_copy_quota(
    spark: SparkSession, stage: TieredStage, tmp_path: Path
) -> None:
    for topic in ("quota-a", "quota-b"):
        stage.create_topic(topic, topic_configs(remote_storage_enable="true"))
        stage.produce(topic, RECORDS)
    set_default_copy_quota(stage, RATE)

    assert copy_segments.main(job_args(stage, tmp_path, "copy.json")) == 0
    summary = json.loads((tmp_path / "copy.json").read_text())
    assert summary["status"] == "ok" and summary["errors"] == []
    assert summary["counts"]["segments_copied"] == 40
    copied = summary["bytes"]["copied"]
    assert copied == summary["bytes"]["planned"] > 3 * RATE  # several seconds at the rate
    assert summary["details"]["copy_quota"] == {
        "bytes_per_second": RATE,
        "source": "broker 0",
        "concurrent_units": 2,
        "unit_bytes_per_second": RATE / 2,
    }
    details = summary["details"]
    # From the first upload's start to the last one's end (each unit 20 segments at 4000
    # B/s: its first second's worth goes at once, so about 20/19 of the rate at most).
    rate = copied / details["upload_s"]
    print(
        f"copy quota {RATE} B/s: {copied} bytes uploaded in {details['upload_s']} s"
        f" ({rate:.0f} B/s); the Spark job {details['copy_s']} s with its tasks' start-up"
        f" ({details['copy_bytes_per_second']} B/s); waited {details['copy_throttled_ms']} ms"
    )
    assert rate == pytest.approx(details["upload_bytes_per_second"], rel=0.01)
    assert abs(rate - RATE) <= 0.1 * RATE, f"uploaded at {rate:.0f} B/s, quota {RATE} B/s"
    assert details["copy_bytes_per_second"] <= 1.1 * RATE
    assert details["copy_throttled_ms"] > 0

    # The job's argument (the tiering DAG's param) overrides the brokers' rate.
    stage.create_topic("quota-c", topic_configs(remote_storage_enable="true"))
    stage.produce("quota-c", 25)
    fast = job_args(stage, tmp_path, "fast.json", "--bytes-per-second", "1000000000")
    assert copy_segments.main(fast) == 0
    summary = json.loads((tmp_path / "fast.json").read_text())
    assert summary["counts"]["segments_copied"] == 2
    assert summary["details"]["copy_quota"]["source"] == "argument"
    assert summary["details"]["copy_quota"]["bytes_per_second"] == 1e9


def test_tier_command_holds_the_brokers_copy_quota(stage: TieredStage) -> None:
    rate = 4000
    stage.create_topic("quota-tier", topic_configs(remote_storage_enable="true"))
    stage.produce("quota-tier", RECORDS)  # 20 closed segments
    set_default_copy_quota(stage, rate)
    lines = stage.tier("quota-tier")
    (line,) = [line for line in lines if line.startswith("partition=quota-tier-0 ")]
    fields = dict(part.split("=", 1) for part in line.split() if "=" in part)
    assert (fields["status"], fields["segments"]) == ("ok", "20")
    size_bytes, seconds = int(fields["bytes"]), float(fields["seconds"])
    print(f"storage-core tier, copy quota {rate} B/s: {size_bytes} bytes in {seconds} s")
    assert abs(size_bytes / seconds - rate) <= 0.1 * rate
