"""The reconcile job and the quality tables on a damaged chunked tier (a broker process,
``tests/chunked_broker_support``: chunked, zstd, AES-256-GCM on the local store).

    seg 0: its .log cut 10 bytes short        a listing shows it (sizes vs the copy's
                                              custom metadata): reconcile reports it
                                              damaged, the quality row names the problem
    seg 1: one byte of chunk 3 flipped        same size: only a read shows it; reconcile
                                              --verify-chunks reads every chunk and reports
                                              it (CRC32C), the others verify clean
    quality                                   exit 1: expect_finished_segment_objects_complete
                                              fails on seg 0's row
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from jobs import quality, reconcile
from jobs.common import job_parser, parse_job_args
from storage_core.tiered.remote_object_keys import RemoteObjectSuffix
from tests.chunked_broker_support import ChunkedTier, chunked_tier

pytestmark = pytest.mark.timeout(240)


def run_reconcile(tier: ChunkedTier, summary_path: Path, *extra: str) -> tuple[int, dict]:
    code = reconcile.main(
        [
            "--bootstrap-server", tier.broker.bootstrap,
            "--broker-config", str(tier.broker.config_path),
            "--spark-master", "local[1]",
            "--summary-path", str(summary_path),
            "--lock-dir", str(summary_path.parent / "locks"),
            "--orphan-grace-s", "0",
            *extra,
        ]
    )  # fmt: skip
    return code, json.loads(summary_path.read_text())


def test_reconcile_and_quality_report_a_damaged_chunked_segment(
    spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with chunked_tier(tmp_path / "tier") as tier:
        cut, flipped = tier.copied[0], tier.copied[1]
        log = tier.object_path(cut, RemoteObjectSuffix.LOG)
        log.write_bytes(log.read_bytes()[:-10])
        tier.corrupt_chunk(flipped, 3)
        capsys.readouterr()

        code, summary = run_reconcile(tier, tmp_path / "listing.json")
        out = capsys.readouterr().out
        assert code == 1
        assert summary["counts"]["damaged_segments"] == 1
        assert summary["counts"]["lost_segments"] == 0
        (reported,) = summary["details"]["damaged_segments"]
        assert reported["segment_id"] == str(cut.remote_log_segment_id.id)
        assert "cut short" in reported["reason"]
        assert "action=damaged_segment" in out and "status=reported" in out

        code, summary = run_reconcile(tier, tmp_path / "verify.json", "--verify-chunks")
        assert code == 1
        assert summary["counts"]["damaged_segments"] == 2
        assert summary["counts"]["chunked_segments_verified"] == len(tier.copied) - 1
        by_id = {d["segment_id"]: d["reason"] for d in summary["details"]["damaged_segments"]}
        reason = by_id[str(flipped.remote_log_segment_id.id)]
        assert ".log chunk 3" in reason and "CRC32C" in reason
        assert set(by_id) == {
            str(cut.remote_log_segment_id.id),
            str(flipped.remote_log_segment_id.id),
        }

        args = [
            "--bootstrap-server", tier.broker.bootstrap,
            "--broker-config", str(tier.broker.config_path),
        ]  # fmt: skip
        rows = quality.gather(parse_job_args(job_parser("quality", None), args, job="quality"))
        problems = {
            row["segment_id"]: row["objects_problem"]
            for row in rows["remote_segments"]
            if row["current_state"] == "COPY_SEGMENT_FINISHED"
        }
        assert len(problems) == len(tier.copied)
        assert "cut short" in problems.pop(str(cut.remote_log_segment_id.id))
        assert set(problems.values()) == {None}  # an in-place change needs a read to be seen
        chunked_rows = [r for r in rows["remote_segments"] if r["chunked_stored_size_bytes"]]
        assert len(chunked_rows) == len(tier.copied)

        report_dir = tmp_path / "report"
        code = quality.main(
            [*args, "--spark-master", "local[1]", "--report-dir", str(report_dir),
             "--summary-path", str(tmp_path / "quality.json")]
        )  # fmt: skip
        report = json.loads((report_dir / quality.SUMMARY_FILE).read_text())
        assert code == 1
        (failed,) = report["suites"]["remote_segments"]["failed_expectations"]
        assert failed["expectation"] == "expect_finished_segment_objects_complete"
        assert [row["segment_id"] for row in failed["rows"]] == [str(cut.remote_log_segment_id.id)]
