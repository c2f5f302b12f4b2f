"""The restore planner: which segments of the bucket bring a partition's log back."""

from __future__ import annotations

import pytest

from storage_core.common import TopicIdPartition, TopicPartition, Uuid
from storage_core.log.leader_epoch_cache import EpochEntry
from storage_core.tiered.chunked.chunk_index import ChunkIndex
from storage_core.tiered.chunked.segment_manifest import SegmentDescription, SegmentManifest
from storage_core.tiered.metadata import RemoteLogSegmentId, RemoteLogSegmentMetadata
from storage_core.tiered.recovery.bucket_inventory import BucketSegment, PartitionInBucket
from storage_core.tiered.recovery.restore_plan import (
    OffsetGap,
    epochs_from,
    is_within_lineage,
    plan_partition,
)
from storage_core.tiered.remote_storage_manager import RemoteSegmentRef

TIP = TopicIdPartition(Uuid(1, 2), TopicPartition("orders", 0))


def segment(
    start: int,
    end: int,
    epochs: dict[int, int],
    lineage: list[tuple[int, int]],
    *,
    problems: tuple[str, ...] = (),
) -> BucketSegment:
    segment_id = Uuid.random()
    metadata = RemoteLogSegmentMetadata(
        remote_log_segment_id=RemoteLogSegmentId(topic_id_partition=TIP, id=segment_id),
        start_offset=start,
        end_offset=end,
        max_timestamp_ms=1_700_000_000_000 + end,
        broker_id=0,
        event_timestamp_ms=1_700_000_000_000,
        segment_size_in_bytes=(end - start + 1) * 100,
        segment_leader_epochs=epochs,
    )
    manifest = SegmentManifest(
        chunk_index=ChunkIndex(
            chunk_size=4096, original_size=100, stored_sizes=(100,), checksums=(7,)
        ),
        compression=False,
        encryption=None,
        objects={},
        description=SegmentDescription(
            metadata=metadata, leader_epochs=tuple(EpochEntry(e, o) for e, o in lineage)
        ),
    )
    ref = RemoteSegmentRef(
        topic="orders",
        topic_id=TIP.topic_id,
        partition=0,
        segment_id=segment_id,
        start_offset=start,
    )
    return BucketSegment(
        ref=ref, manifest=manifest, stored_bytes=(end - start + 1) * 10, problems=problems
    )


def partition(*segments: BucketSegment) -> PartitionInBucket:
    return PartitionInBucket(TIP, list(segments))


def offsets(plan_segments: tuple[BucketSegment, ...]) -> list[tuple[int, int]]:
    return [(s.metadata.start_offset, s.metadata.end_offset) for s in plan_segments]


def test_a_contiguous_log_is_restored_whole_with_its_epochs() -> None:
    a = segment(0, 99, {0: 0}, [(0, 0)])
    b = segment(100, 199, {0: 100, 2: 150}, [(0, 0), (2, 150)])
    c = segment(200, 299, {2: 200}, [(0, 0), (2, 150)])
    plan = plan_partition(partition(c, a, b), allow_gaps=False)
    assert offsets(plan.segments) == [(0, 99), (100, 199), (200, 299)]
    assert (plan.log_start_offset, plan.end_offset, plan.next_offset) == (0, 299, 300)
    assert plan.leader_epochs == (EpochEntry(0, 0), EpochEntry(2, 150))
    assert plan.stored_bytes == 3000
    assert plan.gap is None and plan.stopped is None and plan.left_out == ()


def test_a_second_copy_of_the_same_offsets_is_left_out() -> None:
    a = segment(0, 99, {0: 0}, [(0, 0)])
    twin = segment(0, 99, {0: 0}, [(0, 0)])
    b = segment(100, 199, {0: 100}, [(0, 0)])
    plan = plan_partition(partition(a, twin, b), allow_gaps=False)
    assert offsets(plan.segments) == [(0, 99), (100, 199)]
    assert len(plan.left_out) == 1
    assert "another copy of the same offsets" in plan.left_out[0].reason


def test_a_deposed_leaders_segment_is_off_the_lineage() -> None:
    # Epoch 1's leader wrote 100..149 and copied it; epoch 2's leader truncated it away and
    # wrote 100.. again: the lineage says epoch 2 starts at 100 and epoch 1 has no offsets.
    a = segment(0, 99, {0: 0}, [(0, 0)])
    deposed = segment(100, 149, {1: 100}, [(0, 0), (1, 100)])
    b = segment(100, 199, {2: 100}, [(0, 0), (2, 100)])
    plan = plan_partition(partition(a, deposed, b), allow_gaps=False)
    assert offsets(plan.segments) == [(0, 99), (100, 199)]
    assert [item.ref for item in plan.left_out] == [deposed.ref]
    assert "off the leader-epoch lineage" in plan.left_out[0].reason


def test_a_gap_stops_the_partition_unless_gaps_are_allowed() -> None:
    a = segment(0, 99, {0: 0}, [(0, 0)])
    c = segment(200, 299, {0: 200, 1: 250}, [(0, 0), (1, 250)])
    stopped = plan_partition(partition(a, c), allow_gaps=False)
    assert stopped.segments == ()
    assert stopped.gap == OffsetGap(100, 199)
    assert stopped.stopped is not None and "offsets 100..199 are missing" in stopped.stopped
    allowed = plan_partition(partition(a, c), allow_gaps=True)
    assert offsets(allowed.segments) == [(200, 299)]
    assert allowed.gap == OffsetGap(100, 199)
    assert allowed.leader_epochs == (EpochEntry(0, 200), EpochEntry(1, 250))
    assert [item.reason for item in allowed.left_out] == ["below the gap at offsets 100..199"]


def test_expired_history_is_no_gap() -> None:
    b = segment(100, 199, {0: 100, 1: 150}, [(0, 0), (1, 150)])
    c = segment(200, 299, {1: 200}, [(0, 0), (1, 150)])
    plan = plan_partition(partition(b, c), allow_gaps=False)
    assert offsets(plan.segments) == [(100, 199), (200, 299)]
    assert plan.gap is None
    assert plan.leader_epochs == (EpochEntry(0, 100), EpochEntry(1, 150))


def test_overlapping_segments_of_one_lineage_chain_through_the_overlap() -> None:
    a = segment(0, 99, {0: 0}, [(0, 0)])
    later = segment(50, 149, {0: 50, 1: 120}, [(0, 0), (1, 120)])
    plan = plan_partition(partition(a, later), allow_gaps=False)
    assert offsets(plan.segments) == [(0, 99), (50, 149)]
    assert plan.end_offset == 149


def test_a_damaged_segment_below_the_readable_ones_stops_the_partition() -> None:
    a = segment(0, 99, {0: 0}, [(0, 0)], problems=("its .index object is missing",))
    b = segment(100, 199, {0: 100}, [(0, 0)])
    stopped = plan_partition(partition(a, b), allow_gaps=False)
    assert stopped.segments == ()
    assert stopped.stopped is not None
    assert f"segment {a.ref.segment_id} from offset 0: its .index object is missing" in (
        stopped.stopped
    )
    assert "allow gaps to restore 100..199 only" in stopped.stopped
    allowed = plan_partition(partition(a, b), allow_gaps=True)
    assert offsets(allowed.segments) == [(100, 199)]
    assert [item.reason for item in allowed.left_out] == ["its .index object is missing"]


def test_a_damaged_newest_segment_stops_the_partition() -> None:
    a = segment(0, 99, {0: 0}, [(0, 0)])
    b = segment(100, 199, {0: 100}, [(0, 0)], problems=("chunk 3 of its .log fails",))
    stopped = plan_partition(partition(a, b), allow_gaps=False)
    assert stopped.segments == () and stopped.stopped is not None
    assert f"segment {b.ref.segment_id} from offset 100" in stopped.stopped
    assert offsets(plan_partition(partition(a, b), allow_gaps=True).segments) == [(0, 99)]


def test_a_damaged_copy_of_offsets_the_chain_holds_is_only_left_out() -> None:
    a = segment(0, 99, {0: 0}, [(0, 0)])
    twin = segment(0, 99, {0: 0}, [(0, 0)], problems=("its .index object is missing",))
    b = segment(100, 199, {0: 100}, [(0, 0)])
    plan = plan_partition(partition(a, twin, b), allow_gaps=False)
    assert plan.stopped is None
    assert offsets(plan.segments) == [(0, 99), (100, 199)]
    assert [item.reason for item in plan.left_out] == ["its .index object is missing"]


def test_a_partition_whose_only_segment_is_damaged_is_stopped() -> None:
    a = segment(0, 99, {0: 0}, [(0, 0)], problems=("format version 2",))
    stopped = plan_partition(partition(a), allow_gaps=False)
    assert stopped.stopped is not None and "nothing else is readable" in stopped.stopped
    assert plan_partition(partition(a), allow_gaps=True).stopped is None


def test_a_partition_with_nothing_readable_restores_empty() -> None:
    plan = plan_partition(partition(), allow_gaps=False)
    assert (plan.segments, plan.next_offset, plan.end_offset) == ((), 0, -1)


@pytest.mark.parametrize(
    ("epochs", "end", "within"),
    [
        ({0: 0}, 99, True),
        ({0: 10}, 99, True),  # the epoch began in an older segment
        ({0: 90, 2: 100}, 120, True),
        ({0: 90, 2: 101}, 120, False),  # epoch 2 starts elsewhere in the lineage
        ({1: 100}, 120, False),  # epoch 1 is not in the lineage
        ({0: 50}, 120, False),  # epoch 0 ends at 99 in the lineage
        ({2: 150}, 201, False),  # beyond the lineage's end
    ],
)
def test_within_lineage(epochs: dict[int, int], end: int, within: bool) -> None:
    lineage = [EpochEntry(0, 0), EpochEntry(2, 100)]
    start = min(epochs.values())
    metadata = segment(start, end, epochs, [(0, 0)]).metadata
    assert is_within_lineage(metadata, lineage, 200) is within


def test_epochs_from_a_later_start() -> None:
    lineage = [EpochEntry(0, 0), EpochEntry(2, 100), EpochEntry(5, 300)]
    assert epochs_from(lineage, 0) == tuple(lineage)
    assert epochs_from(lineage, 150) == (EpochEntry(2, 150), EpochEntry(5, 300))
    assert epochs_from(lineage, 300) == (EpochEntry(5, 300),)
    assert epochs_from(lineage, 400) == (EpochEntry(5, 400),)
