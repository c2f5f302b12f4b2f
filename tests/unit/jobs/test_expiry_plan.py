"""expire_remote's planners: what a plan deletes and why, and packing partitions by bytes."""

from __future__ import annotations

import pytest

from jobs.planning.expiry_plan import PartitionExpiry, describe_expiry, plan_expiry_units
from storage_core.common import TopicIdPartition, TopicPartition, Uuid
from storage_core.tiered.metadata.metadata import RemoteLogSegmentId, RemoteLogSegmentMetadata
from storage_core.tiered.metadata.states import RemoteLogSegmentState
from storage_core.tiered.operations import ExpiredSegment, ExpiryPlan, ExpiryReason

TOPIC_ID = Uuid.from_string("fQZ8ZtKuRjqUmbdf4t1OyQ")


def segment(topic: str, start: int, end: int, size: int) -> RemoteLogSegmentMetadata:
    tip = TopicIdPartition(TOPIC_ID, TopicPartition(topic, 0))
    return RemoteLogSegmentMetadata(
        remote_log_segment_id=RemoteLogSegmentId.generate_new(tip),
        start_offset=start,
        end_offset=end,
        max_timestamp_ms=1,
        broker_id=0,
        event_timestamp_ms=1,
        segment_size_in_bytes=size,
        segment_leader_epochs={0: start},
        state=RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
    )


def expiry(topic: str, *sizes: int, reason: ExpiryReason = ExpiryReason.RETENTION_MS):
    items = tuple(
        ExpiredSegment(metadata=segment(topic, 10 * i, 10 * i + 9, size), reason=reason)
        for i, size in enumerate(sizes)
    )
    plan = ExpiryPlan(expired=items, log_start_offset=10 * len(sizes) if sizes else None)
    return PartitionExpiry(
        partition=f"{topic}-0",
        topic=topic,
        partition_index=0,
        leader_epoch=3,
        plan=plan,
        leader_id=1,
    )


def test_describe_says_what_why_and_bytes() -> None:
    item = expiry("orders", 780, 700, reason=ExpiryReason.RETENTION_BYTES)
    rows = describe_expiry(item.partition, item.plan)
    assert [(r["start_offset"], r["end_offset"], r["bytes"]) for r in rows] == [
        (0, 9, 780),
        (10, 19, 700),
    ]
    assert {r["reason"] for r in rows} == {"RETENTION_BYTES"}
    assert {r["why"] for r in rows} == {"retention.bytes breach"}
    assert rows[0]["segment_id"] == str(item.plan.expired[0].metadata.remote_log_segment_id.id)
    assert item.size_bytes == 1480


def test_units_hold_only_partitions_with_deletions_balanced_by_bytes() -> None:
    plans = [expiry("a", 100, 100), expiry("b", 150), expiry("c", 40), expiry("idle")]
    units = plan_expiry_units(plans, 2)
    assert [[p.partition for p in unit] for unit in units] == [["a-0"], ["b-0", "c-0"]]
    assert plan_expiry_units([expiry("idle")], 4) == []
    with pytest.raises(ValueError, match="twice"):
        plan_expiry_units([expiry("a", 1), expiry("a", 2)], 2)
