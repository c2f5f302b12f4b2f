"""``jobs.quality`` against a broker process with the remote tier in a local directory: green
suites, the JSON summaries and the Data Docs after a clean copy; then an orphaned object
planted in the store (a valid key of an unknown segment id) fails
``expect_no_objects_without_live_metadata`` with exit 1. The suites run on pandas (a few
rows) and, asked with ``--validation-engine spark``, on the shared Spark session, with the
same outcome.

    produce quality-tiered 0..59   segments of ~4 KiB
    copy_segments                  remote: the closed segments (COPY_SEGMENT_FINISHED)
    gather                         the tables: every segment ON_LINEAGE with its objects,
                                   Ry = ListOffsets -5 = the last copied offset
    quality                        exit 0, both suites green, index.html written
    plant <prefix>/<topic>-<id>/0/<offset>-<new id>.log
    quality                        exit 1, remote_segments fails on the orphan
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from pyspark.sql import SparkSession

from jobs import copy_segments, quality
from jobs.common import job_parser, parse_job_args
from storage_core.common import TopicIdPartition, Uuid
from storage_core.tiered.remote_object_keys import RemoteObjectSuffix, segment_key
from storage_core.tiered.remote_storage_manager import RemoteSegmentRef
from tests.broker_process import BrokerProcess
from tests.integration.jobs.tiered_cluster import (
    BROKER_SETTINGS,
    TieredCluster,
    local_store_settings,
)
from tests.integration.test_transaction_markers import Wire
from tests.tiered_broker_support import wait_until
from tests.unit.expectations.test_data_docs import observed_values

pytestmark = pytest.mark.timeout(300)

TOPIC = "quality-tiered"
RECORDS = 60
ORPHAN_EXPECTATION = "expect_no_objects_without_live_metadata"
TIER_SUITES = {"remote_segments", "partition_offsets"}
SUITES = TIER_SUITES | {"replicas", "replica_warnings"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TieredCluster]:
    directory = tmp_path_factory.mktemp("quality")
    settings = local_store_settings(directory / "remote")
    with BrokerProcess(directory / "broker", overrides={**BROKER_SETTINGS, **settings}) as broker:
        yield TieredCluster(broker, settings)


def run_quality(
    cluster: TieredCluster, report_dir: Path, summary_path: Path, *engine: str
) -> tuple[int, dict[str, Any], dict[str, Any]]:
    code = quality.main(
        cluster.job_args(
            "--report-dir", str(report_dir), "--summary-path", str(summary_path), *engine
        )
    )
    report = json.loads((report_dir / quality.SUMMARY_FILE).read_text())
    return code, report, json.loads(summary_path.read_text())


def test_quality_green_then_orphan_object_fails(
    spark: SparkSession,
    cluster: TieredCluster,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    (tip,) = cluster.create_topic(TOPIC)
    cluster.produce(TOPIC, RECORDS)
    copy_args = ["--lock-dir", str(tmp_path / "locks"), "--summary-path", str(tmp_path / "c.json")]
    assert copy_segments.main(cluster.job_args(*copy_args)) == 0
    copied = sorted(cluster.segments(tip), key=lambda m: m.start_offset)
    assert len(copied) >= 2, copied
    last_copied = copied[-1].end_offset
    job_args = parse_job_args(job_parser("quality", None), cluster.job_args(), job="quality")
    wait_until(
        lambda: (
            quality.gather(job_args)["partition_offsets"][0]["highest_remote_offset"] == last_copied
        ),
        "the broker to report the last tiered offset (ListOffsets -5)",
    )

    # the tables the suites check
    tables = quality.gather(job_args)
    segments, offsets = tables["remote_segments"], tables["partition_offsets"]
    assert [(r["start_offset"], r["end_offset"]) for r in segments] == [
        (m.start_offset, m.end_offset) for m in copied
    ]
    for row in segments:
        assert row["current_state"] == "COPY_SEGMENT_FINISHED", row
        assert row["lineage"] == "ON_LINEAGE", row
        assert row["missing_objects"] == [] and row["objects_problem"] is None, row
        assert row["log_object_size_bytes"] == row["segment_size_bytes"] > 0, row
        assert row["objects_without_live_metadata"] is False, row
    (offsets_row,) = offsets
    assert offsets_row["remote_log_start_offset"] == 0
    assert offsets_row["remote_log_end_offset"] == last_copied
    assert offsets_row["remote_segment_count"] == len(copied)
    assert offsets_row["log_end_offset"] == RECORDS
    assert offsets_row["local_log_start_offset"] <= last_copied + 1
    # the single-broker form: that broker's one replica, the leader
    (replica_row,) = tables["replicas"]
    assert replica_row["role"] == "leader" and replica_row["in_isr"] is True, replica_row
    assert replica_row["high_watermark_source"] == "LIST_OFFSETS"
    assert replica_row["log_end_offset"] == replica_row["high_watermark"] == RECORDS
    assert replica_row["leader_epoch_entries"] == [{"epoch": 0, "start_offset": 0}]
    for row in segments:
        assert row["off_leader_lineage"] is None, row
    capsys.readouterr()

    # clean: both suites green, Data Docs written
    report_dir = tmp_path / "report"
    code, report, green = run_quality(cluster, report_dir, tmp_path / "green.json")
    err = capsys.readouterr().err
    assert code == 0, (report, err)
    assert report["success"] is True
    assert set(report["suites"]) == SUITES
    for name, suite in report["suites"].items():
        assert suite["success"] is True, (name, suite)
        assert suite["failed_expectations"] == []
        assert suite["evaluated_expectations"] >= (9 if name in TIER_SUITES else 1)
    assert report["warnings"] == []
    assert green["status"] == "ok" and green["errors"] == []
    assert green["counts"]["remote_segments"] == len(copied)
    assert green["counts"]["partitions"] == 1
    assert green["counts"]["replicas"] == 1
    assert green["details"]["suites"] == report["suites"]
    docs = Path(report["data_docs"])
    assert docs == report_dir / "gx" / "uncommitted" / "data_docs" / "local_site" / "index.html"
    assert docs.is_file() and docs.stat().st_size > 0
    pages = docs.parent / "validations"
    assert len(list(pages.rglob("*.html"))) == len(SUITES)  # one validation page per suite
    assert "quality: suites passed" in err
    assert green["details"]["validation_engine"] == "pandas"  # a few rows: pandas
    # the same suites on Spark (what tables beyond PANDAS_ROWS_MAX rows run on) agree
    spark_dir = tmp_path / "report-spark"
    engine = ("--validation-engine", "spark")
    code, on_spark, _ = run_quality(cluster, spark_dir, tmp_path / "green-spark.json", *engine)
    assert code == 0, on_spark
    assert on_spark["suites"] == report["suites"]
    capsys.readouterr()

    # an orphan: a .log under a valid key whose segment id no metadata names
    rsm = cluster.rsm()
    try:
        prefix: str = rsm.prefix  # type: ignore[attr-defined]
    finally:
        rsm.close()
    orphan_id = Uuid.random()
    ref = RemoteSegmentRef(
        topic=TOPIC,
        topic_id=tip.topic_id,
        partition=tip.topic_partition.partition,
        segment_id=orphan_id,
        start_offset=last_copied + 1,
    )
    key = segment_key(prefix, ref, RemoteObjectSuffix.LOG)
    orphan = Path(cluster.store_settings["rsm.config.local.storage.dir"]) / key
    orphan.parent.mkdir(parents=True, exist_ok=True)
    orphan.write_bytes(b"not a segment")
    assert key in cluster.object_keys(tip)

    code, report, summary = run_quality(cluster, report_dir, tmp_path / "orphan.json")
    err = capsys.readouterr().err
    assert code == 1, (report, err)
    assert report["success"] is False
    assert report["suites"]["partition_offsets"]["success"] is True
    segments_suite = report["suites"]["remote_segments"]
    assert segments_suite["success"] is False
    (failed,) = segments_suite["failed_expectations"]
    assert failed["expectation"] == ORPHAN_EXPECTATION
    assert failed["unexpected_count"] == 1
    assert failed["element_count"] == len(copied) + 1
    assert [row["segment_id"] for row in failed["rows"]] == [str(orphan_id)]
    assert str(orphan_id) in failed["reason"]
    assert summary["status"] == "error"
    assert any(ORPHAN_EXPECTATION in e["error"] for e in summary["errors"]), summary["errors"]
    assert f"quality: FAILED remote_segments: {ORPHAN_EXPECTATION}" in err
    assert str(orphan_id) in err
    assert "quality: suites FAILED" in err
    code, on_spark, _ = run_quality(cluster, spark_dir, tmp_path / "orphan-spark.json", *engine)
    assert code == 1 and on_spark["suites"] == report["suites"], on_spark
    assert docs.is_file()
    assert len(list(pages.rglob("*.html"))) == 2 * len(SUITES)
    with capsys.disabled():
        print(f"\nquality runs: green {green['duration_s']} s, orphan {summary['duration_s']} s")


LOST_EXPECTATION = "expect_finished_segment_objects_complete"


def test_quality_fails_naming_finished_segments_whose_objects_are_gone(
    spark: SparkSession,
    cluster: TieredCluster,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The store lost every object of two COPY_SEGMENT_FINISHED segments (an emptied part of
    the bucket): the remote_segments suite fails on ``expect_finished_segment_objects_complete``
    naming exactly those segments and what is missing."""
    topic = "quality-lost"
    (tip,) = cluster.create_topic(topic)
    cluster.produce(topic, RECORDS)
    copy_args = ["--lock-dir", str(tmp_path / "locks"), "--summary-path", str(tmp_path / "c.json")]
    assert copy_segments.main(cluster.job_args(*copy_args)) == 0
    copied = sorted(cluster.segments(tip), key=lambda m: m.start_offset)
    assert len(copied) >= 2, copied
    rsm = cluster.rsm()
    try:
        prefix: str = rsm.prefix  # type: ignore[attr-defined]
    finally:
        rsm.close()
    store = Path(cluster.store_settings["rsm.config.local.storage.dir"])
    lost = copied[:2]
    for segment in lost:
        for suffix in RemoteObjectSuffix:
            (store / segment_key(prefix, RemoteSegmentRef.of(segment), suffix)).unlink(
                missing_ok=True
            )
    lost_ids = sorted(str(m.remote_log_segment_id.id) for m in lost)
    capsys.readouterr()

    code, report, summary = run_quality(cluster, tmp_path / "report", tmp_path / "lost.json")
    err = capsys.readouterr().err
    assert code == 1, (report, err)
    segments_suite = report["suites"]["remote_segments"]
    failed = {f["expectation"]: f for f in segments_suite["failed_expectations"]}
    assert LOST_EXPECTATION in failed, segments_suite
    rows = [row for row in failed[LOST_EXPECTATION]["rows"] if row["topic"] == topic]
    assert sorted(row["segment_id"] for row in rows) == lost_ids, failed[LOST_EXPECTATION]
    for segment_id in lost_ids:
        assert segment_id in failed[LOST_EXPECTATION]["reason"]
        assert segment_id in err
    assert "missing .index, .leader-epoch-checkpoint, .log, .timeindex" in json.dumps(rows)
    assert f"quality: FAILED remote_segments: {LOST_EXPECTATION}" in err
    assert any(LOST_EXPECTATION in e["error"] for e in summary["errors"]), summary["errors"]


COPY_LSO_EXPECTATION = "expect_copied_segment_end_below_last_stable_offset"
TXN_TOPIC = "quality-txn"


def test_copies_planned_below_an_open_transaction_pass_the_copy_lso_rule(
    spark: SparkSession,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A transaction open at offset 40 holds the LSO there while closed segments lie above
    it. The copy job copies only below it and records, per copy, the HW and LSO it was
    planned with (``copied-segments.json`` beside its summary); the quality job given that
    record checks each copy's end against its LSO: green, every copied segment checked.

        plain 0..39 | transaction open 40..42 | plain 43..102     HW 103, LSO 40
        copy_segments      remote: the closed segments ending below 40
        quality --copied-segments    expect_copied_segment_end_below_last_stable_offset green
    """
    settings = local_store_settings(tmp_path / "remote")
    with BrokerProcess(tmp_path / "broker", overrides={**BROKER_SETTINGS, **settings}) as broker:
        txn_cluster = TieredCluster(broker, settings)
        (tip,) = txn_cluster.create_topic(TXN_TOPIC)
        txn_cluster.produce(TXN_TOPIC, 40)
        writer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "open"})
        writer.init_transactions(30)
        writer.begin_transaction()
        for i in range(3):
            writer.produce(TXN_TOPIC, value=f"undecided-{i}".encode(), partition=0)
            writer.flush(30)
        try:
            check_copies_below_the_open_transaction(txn_cluster, tip, tmp_path, capsys)
        finally:
            writer.abort_transaction(30)
            del writer  # destroyed before the broker stops (no reconnect noise)


def check_copies_below_the_open_transaction(
    txn_cluster: TieredCluster,
    tip: TopicIdPartition,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Plain records above the open transaction, the copy, its record, the quality job."""
    broker = txn_cluster.broker
    txn_cluster.produce(TXN_TOPIC, 60)
    wire = Wire(broker.port, TXN_TOPIC)
    assert (wire.latest(0), wire.latest(1)) == (103, 40)
    wire.close()

    summary_path = tmp_path / "copy" / "summary.json"
    copy_args = ["--lock-dir", str(tmp_path / "locks"), "--summary-path", str(summary_path)]
    assert copy_segments.main(txn_cluster.job_args(*copy_args)) == 0
    record = json.loads((summary_path.parent / "copied-segments.json").read_text())
    copied = record["segments"]
    assert len(copied) == json.loads(summary_path.read_text())["counts"]["segments_copied"]
    assert copied and max(s["end_offset"] for s in copied) < 40, copied
    for entry in copied:
        assert entry["partition"] == f"{TXN_TOPIC}-0", entry
        assert (entry["high_watermark_at_copy"], entry["last_stable_offset_at_copy"]) == (
            103,
            40,
        ), entry
    assert {s["segment_id"] for s in copied} == {
        str(m.remote_log_segment_id.id) for m in txn_cluster.segments(tip)
    }
    # the planning stopped at the LSO: closed segments above it stayed local
    bases = sorted(int(p.stem) for p in (broker.log_dir / f"{TXN_TOPIC}-0").glob("*.log"))
    assert any(base > 42 for base in bases[:-1]), bases
    capsys.readouterr()

    report_dir = tmp_path / "report"
    code = quality.main(
        txn_cluster.job_args(
            "--report-dir",
            str(report_dir),
            "--summary-path",
            str(tmp_path / "quality.json"),
            "--copied-segments",
            str(summary_path.parent / "copied-segments.json"),
        )
    )
    report = json.loads((report_dir / quality.SUMMARY_FILE).read_text())
    assert code == 0, (report, capsys.readouterr().err)
    assert report["suites"]["remote_segments"]["success"] is True
    (page,) = report_dir.glob(
        "gx/uncommitted/data_docs/local_site/validations/remote_segments/*/*/*.html"
    )
    assert observed_values(page)[COPY_LSO_EXPECTATION] == (
        f"none of {len(copied)} remote segment{'s' if len(copied) > 1 else ''} breaks the rule"
    )
