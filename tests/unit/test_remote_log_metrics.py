"""``copy_lag`` and ``remote_log_size``: what the broker reports of the copy jobs' progress."""

from __future__ import annotations

from storage_core.common import TopicIdPartition, TopicPartition, Uuid
from storage_core.log.retention import SegmentSummary
from storage_core.tiered.metadata.metadata import RemoteLogSegmentId, RemoteLogSegmentMetadata
from storage_core.tiered.metadata.states import RemoteLogSegmentState
from storage_core.tiered.remote_log_metrics import CopyLag, copy_lag, remote_log_size

TIP = TopicIdPartition(Uuid.random(), TopicPartition("t", 0))


def segments(*bounds: tuple[int, int | None, int]) -> list[SegmentSummary]:
    return [
        SegmentSummary(base_offset=b, next_base_offset=n, size_bytes=s, largest_timestamp_ms=0)
        for b, n, s in bounds
    ]


LOG = segments((0, 100, 10), (100, 200, 20), (200, 300, 30), (300, None, 40))


def test_every_closed_segment_below_the_high_watermark_is_lag_when_nothing_is_copied() -> None:
    lag = copy_lag(LOG, highest_remote_offset=-1, local_log_start_offset=0, last_stable_offset=300)
    assert lag == CopyLag(segment_count=3, size_bytes=60)


def test_segments_at_or_above_the_high_watermark_and_the_active_one_are_not_lag() -> None:
    lag = copy_lag(LOG, highest_remote_offset=-1, local_log_start_offset=0, last_stable_offset=250)
    assert lag == CopyLag(segment_count=2, size_bytes=30)


def test_copied_segments_are_not_lag_and_a_partly_copied_one_is() -> None:
    copied = copy_lag(
        LOG, highest_remote_offset=199, local_log_start_offset=0, last_stable_offset=400
    )
    assert copied == CopyLag(segment_count=1, size_bytes=30)
    partly = copy_lag(
        LOG, highest_remote_offset=150, local_log_start_offset=0, last_stable_offset=400
    )
    assert partly == CopyLag(segment_count=2, size_bytes=50)
    done = copy_lag(
        LOG, highest_remote_offset=299, local_log_start_offset=0, last_stable_offset=400
    )
    assert done == CopyLag(segment_count=0, size_bytes=0)


def test_segments_below_the_local_log_start_are_not_lag() -> None:
    lag = copy_lag(
        LOG, highest_remote_offset=-1, local_log_start_offset=200, last_stable_offset=300
    )
    assert lag == CopyLag(segment_count=1, size_bytes=30)


def metadata(
    start: int, end: int, size: int, state: RemoteLogSegmentState
) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(
        remote_log_segment_id=RemoteLogSegmentId.generate_new(TIP),
        start_offset=start,
        end_offset=end,
        max_timestamp_ms=0,
        broker_id=0,
        event_timestamp_ms=0,
        segment_size_in_bytes=size,
        segment_leader_epochs={0: start},
        state=state,
    )


def test_remote_size_counts_finished_segments_and_the_count_every_listed_one() -> None:
    listed = [
        metadata(0, 99, 10, RemoteLogSegmentState.COPY_SEGMENT_FINISHED),
        metadata(100, 199, 20, RemoteLogSegmentState.COPY_SEGMENT_STARTED),  # a killed copy
        metadata(100, 199, 20, RemoteLogSegmentState.COPY_SEGMENT_FINISHED),
        metadata(200, 299, 30, RemoteLogSegmentState.DELETE_SEGMENT_STARTED),
    ]
    size = remote_log_size(listed)
    assert (size.finished_size_bytes, size.metadata_count) == (30, 4)
