"""restore_drill on a broker's chunked, encrypted tier (``tests/chunked_broker_support``).

chunked-tier: records 0..299, segments 0..k copied     topic_manifests writes its manifest;
group "readers" at 100                                  backup_consumer_offsets backs it up
drill (healthy bucket)          green: chunked-tier-0 restored into
                                restore-drill-20261130-chunked-tier, every batch of 0..E
                                compared (offsets, epoch, CRC), readers' offset in range;
                                then the scratch topic, its objects and readers' offset
                                under it are gone; the source's objects as they were
one byte of the last copied     red: --verify-checksums leaves the damaged segment out, the
segment's chunk flipped         restored range stops short of the source's tiered offset:
                                the failing checks are named; the scratch topic and its
                                objects are cleaned up all the same
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as ConfluentTopicPartition

from jobs import backup_consumer_offsets, restore_drill, topic_manifests
from storage_core.client import KafkaAdminClient, KafkaCluster
from storage_core.client.group_offsets import fetch_committed_offsets
from storage_core.tiered.metadata.metadata import RemoteLogSegmentMetadata
from storage_core.tiered.metadata.states import RemoteLogSegmentState
from tests.chunked_broker_support import TOPIC, ChunkedTier, chunked_tier
from tests.tiered_broker_support import client_rlmm

pytestmark = pytest.mark.timeout(300)

SCRATCH = f"restore-drill-20261130-{TOPIC}"


def job(tier: ChunkedTier, module: object, *extra: str) -> int:
    main = module.main  # type: ignore[attr-defined]
    argv = [
        "--bootstrap-server", tier.broker.bootstrap,
        "--broker-config", str(tier.broker.config_path),
        *extra,
    ]  # fmt: skip
    return int(main(argv))


def files_of(tier: ChunkedTier, marker: str) -> dict[Path, tuple[int, int]]:
    return {
        path: (path.stat().st_size, path.stat().st_mtime_ns)
        for path in tier.remote_dir.rglob("*")
        if path.is_file() and marker in str(path)
    }


def last_copied_segment(tier: ChunkedTier) -> RemoteLogSegmentMetadata:
    """The source's highest COPY_SEGMENT_FINISHED segment now (the broker's own tiering may
    have copied more than the fixture did)."""
    with client_rlmm(tier.broker.bootstrap) as rlmm:
        finished = [
            m
            for m in rlmm.list_remote_log_segments(tier.topic_id_partition)
            if m.state is RemoteLogSegmentState.COPY_SEGMENT_FINISHED
        ]
    return max(finished, key=lambda m: m.end_offset)


def drill(tier: ChunkedTier, tmp_path: Path, name: str) -> tuple[int, dict[str, object]]:
    summary_path = tmp_path / f"{name}.json"
    code = job(
        tier, restore_drill, "--night", "2026-11-30", "--report-dir", str(tmp_path / name),
        "--summary-path", str(summary_path), "--run-name", name,
    )  # fmt: skip
    return code, json.loads(summary_path.read_text())


def assert_cleaned_up(tier: ChunkedTier) -> None:
    with KafkaCluster(tier.broker.bootstrap) as cluster:
        topics = KafkaAdminClient(cluster).list_topics()
        offsets = fetch_committed_offsets(cluster, ["readers"])["readers"]
    assert [t for t in topics if t.startswith("restore-drill-")] == []
    assert files_of(tier, "restore-drill-") == {}
    assert {tp.topic for tp in offsets} == {TOPIC}


def test_the_drill_is_green_on_a_healthy_bucket_and_red_on_a_tampered_segment(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    with chunked_tier(tmp_path / "tier") as tier:
        bootstrap = tier.broker.bootstrap
        end = last_copied_segment(tier).end_offset
        assert job(tier, topic_manifests) == 0
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "readers"})
        consumer.commit(offsets=[ConfluentTopicPartition(TOPIC, 0, 100)], asynchronous=False)
        consumer.close()
        assert job(tier, backup_consumer_offsets) == 0
        source_id = str(tier.topic_id_partition.topic_id)
        before = files_of(tier, source_id)

        code, summary = drill(tier, tmp_path, "healthy")
        out = capsys.readouterr()
        assert code == 0, out.out + out.err
        counts = summary["counts"]
        assert counts["partitions_drilled"] == 1
        assert counts["batches_compared"] >= end + 1  # one record per batch, 0..E at least
        assert counts["group_offsets_checked"] == 1
        assert counts.get("failed_expectations", 0) == 0
        assert counts["scratch_topics_deleted"] == 1 and counts["scratch_offsets_deleted"] == 1
        assert counts["segments_deleted"] >= len(tier.copied)  # the broker may have copied more
        details = summary["details"]
        (drilled,) = details["drilled"]
        assert drilled["scratch_topic"] == SCRATCH
        assert drilled["restored_log_start_offset"] == 0
        assert drilled["restored_next_offset"] == end + 1
        assert Path(details["data_docs"]).is_file()
        assert f"restore_drill: {TOPIC}-0: suites passed" in out.err
        assert_cleaned_up(tier)
        assert files_of(tier, source_id) == before

        # the drill fails once its scratch topic is restored (the checks raise): red, and the
        # scratch topic, its remote data and the offsets under it are deleted all the same
        def checks_raise(*_: object) -> None:
            raise RuntimeError("the checks could not run")

        monkeypatch.setattr(restore_drill, "validate", checks_raise)
        code, summary = drill(tier, tmp_path, "checks-raise")
        monkeypatch.undo()
        assert code == 1
        assert "the checks could not run" in summary["errors"][0]["error"]  # type: ignore[index]
        counts = summary["counts"]
        assert counts["scratch_topics_deleted"] == 1 and counts["scratch_offsets_deleted"] == 1
        assert counts["segments_deleted"] >= len(tier.copied)
        assert_cleaned_up(tier)
        assert files_of(tier, source_id) == before

        # one byte of the last copied segment's first chunk flipped in the bucket: the
        # restore's --verify-checksums stops the partition, naming the chunk
        last = last_copied_segment(tier)
        tier.corrupt_chunk(last, 0)
        tampered = files_of(tier, source_id)
        code, summary = drill(tier, tmp_path, "tampered")
        out = capsys.readouterr()
        assert code == 1
        errors = " ".join(str(e["error"]) for e in summary["errors"])  # type: ignore[index]
        assert "expect_sampled_partition_restored" in errors
        assert f"segment {last.remote_log_segment_id.id}" in errors
        assert "chunk 0 of its .log fails its checksum" in errors
        assert "FAILED drill_partitions: expect_sampled_partition_restored" in out.err
        suites = summary["details"]["suites"]  # type: ignore[index]
        assert suites["drill_partitions"]["success"] is False
        assert_cleaned_up(tier)
        assert files_of(tier, source_id) == tampered
