"""``storage-core tier --rewrite`` against a broker process: key rotation and a new chunk
size, copy-then-swap, while a consumer reads the tiered offsets.

Story (``tests/chunked_broker_support``: 300 records, ring k1 + k2, copied with k1 in 1 KiB
chunks, the first segments only remote)::

    consumer (kafka-python) reads offsets 0..299 again and again from a thread
    tier --rewrite, encryption.key.pair.id=k2, chunk.size=3000
        per segment: new copy STARTED -> FINISHED (same offsets), grace, old copy
        DELETE_SEGMENT_STARTED -> objects -> DELETE_SEGMENT_FINISHED
    every pass of the consumer: each record once, in order (during the swap too)
    after: one FINISHED copy per segment, key k2, 3000-byte chunks; no object of an old copy;
    dump-log reads a new copy with k2 alone; a second --rewrite rewrites nothing

Interrupted (``test_a_rewrite_interrupted_...``)::

    segment 0 rewritten to FINISHED, its old copy left FINISHED beside it (killed before
    the swap); a COPY_SEGMENT_STARTED of segment 1 with nothing uploaded (killed after it)
    tier --rewrite                 segment 0: old copy deleted, not rewritten again;
                                   the others rewritten; readers never saw the STARTED one
    jobs.reconcile's plan          rolls back exactly the stale STARTED copy (past its deadline)
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka import KafkaConsumer, TopicPartition

from jobs.planning.reconcile_plan import ReconcileActionKind, plan_reconcile
from storage_core.tiered.metadata.metadata import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
)
from storage_core.tiered.metadata.states import RemoteLogSegmentState
from storage_core.tiered.operations.fencing import LeaderEpochFence
from storage_core.tiered.operations.rewrite import (
    chunked_manager,
    format_difference,
    is_referenced_segment,
    largest_timestamp,
    plan_rewrite,
    read_original_segment,
    rewrite_segment,
)
from storage_core.tiered.remote_object_keys import RemoteObjectSuffix
from storage_core.tiered.rsm_loader import load_remote_storage_manager
from tests.chunked_broker_support import (
    RECORDS,
    TOPIC,
    ChunkedTier,
    chunked_tier,
    tier_settings,
    value_of,
)
from tests.tiered_broker_support import client_rlmm

pytestmark = pytest.mark.timeout(240)

NEW_CHUNK_BYTES = 3000
FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED
EXPECTED = [(i, value_of(i)) for i in range(RECORDS)]


@pytest.fixture
def tier(tmp_path: Path) -> Iterator[ChunkedTier]:
    with chunked_tier(tmp_path, key_ids=("k1", "k2")) as tier:
        yield tier


def consume_all(bootstrap: str) -> list[tuple[int, bytes]]:
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        consumer_timeout_ms=20_000,
        max_partition_fetch_bytes=4096,
    )
    try:
        tp = TopicPartition(TOPIC, 0)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        out: list[tuple[int, bytes]] = []
        for message in consumer:
            out.append((message.offset, message.value))
            if len(out) == RECORDS:
                break
        return out
    finally:
        consumer.close()


class Reader(threading.Thread):
    """Reads every record from offset 0 in passes until stopped; keeps each pass."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__(daemon=True)
        self.bootstrap = bootstrap
        self.stop = threading.Event()
        self.passes: list[list[tuple[int, bytes]]] = []

    def run(self) -> None:
        while not self.stop.is_set():
            self.passes.append(consume_all(self.bootstrap))


def run_tier_rewrite(tier: ChunkedTier, *rsm_config: str) -> subprocess.CompletedProcess[str]:
    """``storage-core tier --rewrite`` with ``--rsm-config`` items (or other ``--`` flags)."""
    argv = [
        sys.executable, "-m", "storage_core.cli", "tier", "--rewrite",
        "--bootstrap-server", tier.broker.bootstrap,
        "--log-dir", str(tier.broker.log_dir),
        "--broker-config", str(tier.broker.config_path),
    ]  # fmt: skip
    for item in rsm_config:
        argv += [item] if item.startswith("--") else ["--rsm-config", item]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)


def finished_segments(tier: ChunkedTier) -> list[RemoteLogSegmentMetadata]:
    with client_rlmm(tier.broker.bootstrap) as rlmm:
        return [
            m for m in rlmm.list_remote_log_segments(tier.topic_id_partition) if m.state is FINISHED
        ]


def ranges(segments: list[RemoteLogSegmentMetadata]) -> list[tuple[int, int]]:
    return sorted((m.start_offset, m.end_offset) for m in segments)


def stored_segment_ids(tier: ChunkedTier) -> set[str]:
    return {path.name.split(".")[0].split("-", 1)[1] for path in tier.remote_dir.rglob("*.log")}


def test_key_rotation_and_a_new_chunk_size_rewrite_every_segment_while_a_consumer_reads(
    tier: ChunkedTier, tmp_path: Path
) -> None:
    before = finished_segments(tier)
    assert ranges(before) == ranges(tier.copied)
    planned = run_tier_rewrite(
        tier, "encryption.key.pair.id=k2", f"chunk.size={NEW_CHUNK_BYTES}", "--dry-run"
    )
    assert planned.returncode == 0, planned.stderr
    assert f"action=rewrite status=planned segments={len(before)} " in planned.stdout
    assert finished_segments(tier) == before  # nothing changed
    reader = Reader(tier.broker.bootstrap)
    reader.start()
    while not reader.passes:  # reading before the rewrite starts
        reader.join(0.05)
    result = run_tier_rewrite(tier, "encryption.key.pair.id=k2", f"chunk.size={NEW_CHUNK_BYTES}")
    passes_during = len(reader.passes)
    reader.join(0.5)
    while len(reader.passes) <= passes_during:  # and one whole pass after it
        reader.join(0.05)
    reader.stop.set()
    reader.join(30)

    assert result.returncode == 0, result.stderr + result.stdout
    assert len(reader.passes) >= 2
    for number, got in enumerate(reader.passes):
        assert got == EXPECTED, f"pass {number} of {len(reader.passes)}"
    lines = result.stdout.splitlines()
    (status,) = [line for line in lines if line.startswith(f"partition={TOPIC}-0 action=rewrite")]
    assert "status=ok" in status
    assert f"segments={len(before)}" in status and f"deleted={len(before)}" in status
    assert sum(line.startswith("plan=rewrite ") for line in lines) == len(before)
    assert "key pair k1, not the active k2" in result.stdout
    assert lines[-1].startswith(f"summary action=rewrite partitions=1 segments={len(before)}")

    after = finished_segments(tier)
    assert ranges(after) == ranges(before)
    assert not {m.remote_log_segment_id for m in after} & {m.remote_log_segment_id for m in before}
    for metadata in after:
        manifest = tier.manifest(metadata)
        assert manifest.encryption is not None
        assert manifest.encryption.wrapped_data_key.key_id == "k2"
        assert manifest.chunk_index.chunk_size == NEW_CHUNK_BYTES
    assert stored_segment_ids(tier) == {str(m.remote_log_segment_id.id) for m in after}

    only_k2 = tier_settings(tmp_path, ("k2",), "k2")
    dump = subprocess.run(
        [sys.executable, "-m", "storage_core.cli", "dump-log", "--print-data", "--json",
         str(tier.object_path(after[0], RemoteObjectSuffix.LOG)),
         *[arg for k, v in only_k2.items() for arg in ("--rsm-config", f"{k}={v}")]],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    records = [json.loads(line) for line in dump.stdout.splitlines()]
    first = [r["offset"] for r in records if r["type"] == "record"]
    assert first == list(range(after[0].start_offset, after[0].end_offset + 1))

    again = run_tier_rewrite(tier, "encryption.key.pair.id=k2", f"chunk.size={NEW_CHUNK_BYTES}")
    assert again.returncode == 0, again.stderr
    assert f"partition={TOPIC}-0 action=rewrite status=ok segments=0" in again.stdout
    assert ranges(finished_segments(tier)) == ranges(before)


def test_a_rewrite_interrupted_before_the_swap_or_after_a_start_converges_when_run_again(
    tier: ChunkedTier, tmp_path: Path
) -> None:
    settings = {**tier.rsm_config, "rsm.config.encryption.key.pair.id": "k2"}
    rsm = chunked_manager(load_remote_storage_manager("LocalTieredStorage", settings))
    fence = LeaderEpochFence(planned_leader_epoch=0, current_leader_epoch=lambda: 0)
    with client_rlmm(tier.broker.bootstrap) as rlmm:
        listed = list(rlmm.list_remote_log_segments(tier.topic_id_partition))
        plan = plan_rewrite(
            listed,
            lambda m: format_difference(rsm.segment_manifest(m), rsm.config),
            lambda m: is_referenced_segment(rlmm, m),
        )
        assert len(plan) == len(tier.copied)
        first, second = plan[0].source, plan[1].source
        assert first is not None and second is not None
        # killed between the new copy's FINISHED and the old one's deletion
        new_first = rewrite_segment(first, rsm=rsm, rlmm=rlmm, fence=fence, broker_id=0)
        # killed right after publishing a new copy's COPY_SEGMENT_STARTED
        stale = RemoteLogSegmentMetadata(
            remote_log_segment_id=RemoteLogSegmentId.generate_new(tier.topic_id_partition),
            start_offset=second.start_offset,
            end_offset=second.end_offset,
            max_timestamp_ms=second.max_timestamp_ms,
            broker_id=0,
            event_timestamp_ms=second.event_timestamp_ms,
            segment_size_in_bytes=second.segment_size_in_bytes,
            segment_leader_epochs=dict(second.segment_leader_epochs),
            state=RemoteLogSegmentState.COPY_SEGMENT_STARTED,
            txn_idx_empty=second.txn_idx_empty,
        )
        rlmm.add_remote_log_segment_metadata(stale)
    rsm.close()
    assert consume_all(tier.broker.bootstrap) == EXPECTED  # both copies of 0 FINISHED

    result = run_tier_rewrite(tier, "encryption.key.pair.id=k2")
    assert result.returncode == 0, result.stderr + result.stdout
    assert "plan=delete-superseded" in result.stdout and 'reason="superseded copy"' in result.stdout
    rewritten = len(tier.copied) - 1
    assert (
        f"action=rewrite status=ok segments={rewritten} " in result.stdout
        and f"deleted={len(tier.copied)} " in result.stdout
    ), result.stdout

    after = finished_segments(tier)
    assert ranges(after) == ranges(tier.copied)
    assert new_first.remote_log_segment_id in {m.remote_log_segment_id for m in after}
    for metadata in after:
        encryption = tier.manifest(metadata).encryption
        assert encryption is not None and encryption.wrapped_data_key.key_id == "k2"
    assert consume_all(tier.broker.bootstrap) == EXPECTED

    with client_rlmm(tier.broker.bootstrap) as rlmm:
        listing = {
            tier.topic_id_partition: list(rlmm.list_remote_log_segments(tier.topic_id_partition))
        }
    reconcile = plan_reconcile(
        listing,
        [],
        now_ms=stale.event_timestamp_ms + 10_000,
        copy_deadline_ms=5_000,
        orphan_grace_ms=3_600_000,
    )
    roll_backs = reconcile.of_kind(ReconcileActionKind.ROLL_BACK_COPY)
    assert [a.segment_id for a in roll_backs] == [stale.remote_log_segment_id.id]


def test_a_segment_recorded_with_largest_timestamp_0_is_rewritten_with_its_batches_largest(
    tier: ChunkedTier, tmp_path: Path
) -> None:
    """Copies made while the broker rolled their segment recorded a largest timestamp of 0
    (remote retention by time would have expired them at once). ``tier --rewrite`` finds
    them by their time index and rewrites them with the largest timestamp of their batches;
    run again, it rewrites nothing."""
    rsm = chunked_manager(load_remote_storage_manager("LocalTieredStorage", tier.rsm_config))
    good = tier.copied[1]
    assert good.max_timestamp_ms > 0
    with client_rlmm(tier.broker.bootstrap) as rlmm:
        data = read_original_segment(rsm, good, tmp_path)
        assert largest_timestamp(data.log_segment) == good.max_timestamp_ms
        wrong = dataclasses.replace(
            good,
            remote_log_segment_id=RemoteLogSegmentId.generate_new(tier.topic_id_partition),
            max_timestamp_ms=0,
            state=RemoteLogSegmentState.COPY_SEGMENT_STARTED,
            custom_metadata=None,
        )
        rlmm.add_remote_log_segment_metadata(wrong)
        custom = rsm.copy_log_segment_data(wrong, data)
        rlmm.update_remote_log_segment_metadata(
            RemoteLogSegmentMetadataUpdate(
                remote_log_segment_id=wrong.remote_log_segment_id,
                event_timestamp_ms=wrong.event_timestamp_ms,
                state=FINISHED,
                broker_id=0,
                custom_metadata=custom,
            )
        )
    rsm.close()
    timestamps = {m.remote_log_segment_id: m.max_timestamp_ms for m in finished_segments(tier)}
    assert timestamps[wrong.remote_log_segment_id] == 0  # the copy readers now resolve

    result = run_tier_rewrite(tier, "--dry-run")
    assert result.returncode == 0, result.stderr + result.stdout
    assert "largest timestamp recorded as 0, its time index holds" in result.stdout
    result = run_tier_rewrite(tier)
    assert result.returncode == 0, result.stderr + result.stdout
    assert "action=rewrite status=ok segments=1 " in result.stdout, result.stdout

    after = finished_segments(tier)
    assert ranges(after) == ranges(tier.copied)  # one copy per segment, the others deleted
    assert all(m.max_timestamp_ms > 0 for m in after)
    (repaired,) = [m for m in after if m.start_offset == good.start_offset]
    assert repaired.max_timestamp_ms == good.max_timestamp_ms
    assert consume_all(tier.broker.bootstrap) == EXPECTED
    again = run_tier_rewrite(tier)
    assert "action=rewrite status=ok segments=0 " in again.stdout, again.stdout
