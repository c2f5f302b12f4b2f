"""restore_topic --dry-run on a broker's chunked, encrypted tier (``tests/chunked_broker_support``):
the plan read from the bucket's manifests alone equals what the cluster's metadata says, a
target that exists is refused by name, and a segment whose object went missing stops the
partition at the gap it leaves, unless gaps are allowed.

    remote: seg 0..k (COPY_SEGMENT_FINISHED)   plan: offsets 0..end of seg k, k+1 segments,
                                               next offset end + 1, epochs 0@0
    --target chunked-tier (the source)         exit 2, "exists on the cluster"
    seg 1's .index deleted                     seg 1 left out (its manifest lists it), seg 0
                                               below the gap; seg 1's offsets missing: the
                                               partition is stopped (exit 1)
    --allow-gaps                               segs 2..k restored, the gap named
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jobs import restore_topic, topic_manifests
from storage_core.tiered.remote_object_keys import RemoteObjectSuffix
from tests.chunked_broker_support import TOPIC, ChunkedTier, chunked_tier

pytestmark = pytest.mark.timeout(180)


def dry_run(tier: ChunkedTier, summary_path: Path, *extra: str) -> tuple[int, dict]:
    code = restore_topic.main(
        [
            "--bootstrap-server", tier.broker.bootstrap,
            "--broker-config", str(tier.broker.config_path),
            "--summary-path", str(summary_path),
            "--topic", TOPIC,
            "--dry-run",
            *extra,
        ]
    )  # fmt: skip
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    return code, summary


def test_the_plan_read_from_the_bucket_matches_the_clusters_metadata(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with chunked_tier(tmp_path / "tier") as tier:
        copied = tier.copied
        assert len(copied) >= 3
        end = copied[-1].end_offset
        argv = [
            "--bootstrap-server", tier.broker.bootstrap,
            "--broker-config", str(tier.broker.config_path),
        ]  # fmt: skip
        assert topic_manifests.main(argv) == 0
        capsys.readouterr()

        code, summary = dry_run(tier, tmp_path / "plan.json", "--target", "restored")
        out = capsys.readouterr().out
        assert code == 0, out
        assert summary["counts"]["segments_planned"] == len(copied)
        assert summary["counts"].get("segments_left_out", 0) == 0
        (line,) = [line for line in out.splitlines() if line.startswith("plan ")]
        assert f"partition={TOPIC}-0" in line and "target=restored-0" in line
        assert "log_start_offset=0" in line and f"end_offset={end}" in line
        assert f"next_offset={end + 1}" in line and "leader_epochs=0@0" in line
        assert f"topic_id={tier.topic_id_partition.topic_id}" in line
        stored = sum(
            tier.object_path(m, suffix).stat().st_size
            for m in copied
            for suffix in RemoteObjectSuffix
            if tier.object_path(m, suffix).exists()
        )
        assert summary["bytes"]["planned"] == stored

        code, _ = dry_run(tier, tmp_path / "exists.json")
        assert code == 2
        assert f"the target topic '{TOPIC}' exists on the cluster" in capsys.readouterr().err

        tier.object_path(copied[1], RemoteObjectSuffix.OFFSET_INDEX).unlink()
        code, summary = dry_run(tier, tmp_path / "gap.json", "--target", "restored")
        out = capsys.readouterr().out
        assert code == 1
        gap = f"offsets {copied[1].start_offset}..{copied[1].end_offset}"
        (stopped,) = [line for line in out.splitlines() if line.startswith("stopped ")]
        assert f"{gap} are missing from the bucket" in stopped
        left_out = {
            segment: line
            for line in out.splitlines()
            if line.startswith("left-out ")
            for segment in (copied[0], copied[1])
            if f"segment={segment.remote_log_segment_id.id}" in line
        }
        assert ".index object, which is missing" in left_out[copied[1]]
        assert f"below the gap at {gap}" in left_out[copied[0]]
        assert summary["counts"]["partitions_stopped"] == 1

        code, summary = dry_run(
            tier, tmp_path / "allowed.json", "--target", "restored", "--allow-gaps"
        )
        out = capsys.readouterr().out
        assert code == 0, out
        (line,) = [line for line in out.splitlines() if line.startswith("plan ")]
        assert f"log_start_offset={copied[2].start_offset}" in line
        assert f'gap="{gap}"' in line
        assert summary["counts"]["segments_planned"] == len(copied) - 2
