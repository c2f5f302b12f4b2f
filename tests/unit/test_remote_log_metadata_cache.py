"""RemoteLogMetadataCache with Kafka's semantics (RemoteLogSegmentLifecycleTest and friends)."""

from __future__ import annotations

import dataclasses

import pytest

from storage_core.common import TopicIdPartition, TopicPartition, Uuid
from storage_core.tiered.metadata import (
    IllegalRemoteLogStateTransitionError,
    RemoteLogMetadataCache,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    RemoteResourceNotFoundError,
)

S = RemoteLogSegmentState
TIP = TopicIdPartition(Uuid.from_string("k8YHc0mdT2a4dG1nbbcX2w"), TopicPartition("orders", 0))


def new_segment(
    start: int, end: int, epochs: dict[int, int], broker_id: int = 0
) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(
        remote_log_segment_id=RemoteLogSegmentId.generate_new(TIP),
        start_offset=start,
        end_offset=end,
        max_timestamp_ms=-1,
        broker_id=broker_id,
        event_timestamp_ms=0,
        segment_size_in_bytes=1024,
        segment_leader_epochs=epochs,
    )


def update(
    segment: RemoteLogSegmentMetadata, state: RemoteLogSegmentState
) -> RemoteLogSegmentMetadataUpdate:
    return RemoteLogSegmentMetadataUpdate(
        remote_log_segment_id=segment.remote_log_segment_id,
        event_timestamp_ms=1,
        state=state,
        broker_id=segment.broker_id,
    )


def copy(
    cache: RemoteLogMetadataCache, start: int, end: int, epochs: dict[int, int]
) -> RemoteLogSegmentMetadata:
    segment = new_segment(start, end, epochs)
    cache.add_copy_in_progress_segment(segment)
    cache.update_remote_log_segment_metadata(update(segment, S.COPY_SEGMENT_FINISHED))
    return segment


def ids(segments: list[RemoteLogSegmentMetadata]) -> list[RemoteLogSegmentId]:
    return [s.remote_log_segment_id for s in segments]


def test_kafka_lifecycle_vector() -> None:
    # The segments and expectations of Kafka's RemoteLogSegmentLifecycleTest, as transcribed
    # for this project (not re-read from Kafka's test source here).
    cache = RemoteLogMetadataCache(TIP)
    s0 = copy(cache, 0, 100, {0: 0, 1: 20, 2: 80})
    s1 = copy(cache, 101, 200, {2: 101})
    s2 = copy(cache, 201, 300, {2: 201, 3: 240})
    s3 = copy(cache, 250, 400, {3: 250, 4: 370})

    def lookup(epoch: int, offset: int) -> RemoteLogSegmentId | None:
        found = cache.remote_log_segment_metadata(epoch, offset)
        return None if found is None else found.remote_log_segment_id

    assert lookup(1, 40) == s0.remote_log_segment_id
    assert lookup(2, 110) == s1.remote_log_segment_id
    assert lookup(3, 240) == s2.remote_log_segment_id
    assert lookup(3, 250) == s3.remote_log_segment_id
    assert lookup(4, 375) == s3.remote_log_segment_id
    assert lookup(1, 110) is None  # epoch 1 ends at 79
    assert lookup(4, 401) is None
    assert lookup(5, 301) is None
    highest = {epoch: cache.highest_offset_for_epoch(epoch) for epoch in range(6)}
    assert highest == {0: 19, 1: 79, 2: 239, 3: 369, 4: 400, 5: None}
    assert ids(cache.list_remote_log_segments(2)) == ids([s0, s1, s2])
    assert ids(cache.list_remote_log_segments()) == ids([s0, s1, s2, s3])

    # Deleting s0 hides it from lookups at once; its offsets stay counted in the highest.
    cache.update_remote_log_segment_metadata(update(s0, S.DELETE_SEGMENT_STARTED))
    assert cache.remote_log_segment_metadata(1, 40) is None
    assert [m.state for m in cache.list_remote_log_segments(1)] == [S.DELETE_SEGMENT_STARTED]
    cache.update_remote_log_segment_metadata(update(s0, S.DELETE_SEGMENT_FINISHED))
    assert cache.list_remote_log_segments(1) == []
    assert ids(cache.list_all_remote_log_segments()) == ids([s1, s2, s3])
    assert cache.highest_offset_for_epoch(1) == 79


def test_which_states_each_method_sees() -> None:
    cache = RemoteLogMetadataCache(TIP)
    started = new_segment(0, 9, {0: 0})
    cache.add_copy_in_progress_segment(started)
    assert cache.remote_log_segment_metadata(0, 5) is None
    assert ids(cache.list_remote_log_segments(0)) == ids([started])
    assert ids(cache.list_all_remote_log_segments()) == ids([started])
    assert cache.highest_offset_for_epoch(0) is None

    cache.update_remote_log_segment_metadata(update(started, S.COPY_SEGMENT_FINISHED))
    found = cache.remote_log_segment_metadata(0, 5)
    assert found is not None and found.state is S.COPY_SEGMENT_FINISHED
    assert cache.highest_offset_for_epoch(0) == 9

    cache.update_remote_log_segment_metadata(update(started, S.DELETE_SEGMENT_STARTED))
    assert cache.remote_log_segment_metadata(0, 5) is None
    assert [m.state for m in cache.list_remote_log_segments(0)] == [S.DELETE_SEGMENT_STARTED]
    assert [m.state for m in cache.list_all_remote_log_segments()] == [S.DELETE_SEGMENT_STARTED]

    cache.update_remote_log_segment_metadata(update(started, S.DELETE_SEGMENT_FINISHED))
    assert cache.list_remote_log_segments(0) == []
    assert cache.list_all_remote_log_segments() == []
    assert cache.highest_offset_for_epoch(0) == 9


def test_failed_copy_goes_to_delete_without_ever_being_readable() -> None:
    cache = RemoteLogMetadataCache(TIP)
    failed = new_segment(0, 9, {0: 0})
    cache.add_copy_in_progress_segment(failed)
    cache.update_remote_log_segment_metadata(update(failed, S.DELETE_SEGMENT_STARTED))
    assert cache.remote_log_segment_metadata(0, 0) is None
    assert cache.highest_offset_for_epoch(0) is None
    assert ids(cache.list_remote_log_segments(0)) == ids([failed])


def test_later_leaders_superset_upload_displaces_the_earlier_one() -> None:
    # Case 1 of RemoteLogLeaderEpochState: L0 uploaded 0-100, L1 uploads 0-200 for epoch 0.
    cache = RemoteLogMetadataCache(TIP)
    first = copy(cache, 0, 100, {0: 0})
    second = copy(cache, 0, 200, {0: 0})
    found = cache.remote_log_segment_metadata(0, 50)
    assert found is not None and found.remote_log_segment_id == second.remote_log_segment_id
    assert ids(cache.list_remote_log_segments(0)) == ids([first, second])
    assert cache.highest_offset_for_epoch(0) == 200


def test_overlapping_upload_takes_over_later_offsets() -> None:
    # Case 2: L0 uploaded 10-90; L1 uploads 5-100 then 101-200. Offset 95 is in L1's 5-100.
    cache = RemoteLogMetadataCache(TIP)
    old = copy(cache, 10, 90, {0: 10})
    new = copy(cache, 5, 100, {0: 5})
    copy(cache, 101, 200, {0: 101})
    found = cache.remote_log_segment_metadata(0, 95)
    assert found is not None and found.remote_log_segment_id == new.remote_log_segment_id
    found = cache.remote_log_segment_metadata(0, 50)
    assert found is not None and found.remote_log_segment_id == new.remote_log_segment_id
    assert old.remote_log_segment_id in ids(cache.list_remote_log_segments(0))


def test_a_lagging_smaller_upload_at_the_same_offset_stays_listed() -> None:
    # Kafka overwrites the mapping and drops the bigger segment from the epoch's listing;
    # here it stays listed (for cleanup). Lookups are Kafka's: the last upload wins.
    cache = RemoteLogMetadataCache(TIP)
    big = copy(cache, 0, 100, {0: 0})
    small = copy(cache, 0, 50, {0: 0})
    assert ids(cache.list_remote_log_segments(0)) == ids([small, big])
    assert cache.remote_log_segment_metadata(0, 70) is None
    assert cache.highest_offset_for_epoch(0) == 100


def test_repeating_the_current_state_is_idempotent() -> None:
    cache = RemoteLogMetadataCache(TIP)
    segment = new_segment(0, 9, {0: 0})
    cache.add_copy_in_progress_segment(segment)
    cache.add_copy_in_progress_segment(segment)
    cache.update_remote_log_segment_metadata(update(segment, S.COPY_SEGMENT_FINISHED))
    before = cache.snapshot_state()
    cache.update_remote_log_segment_metadata(update(segment, S.COPY_SEGMENT_FINISHED))
    assert cache.snapshot_state() == before
    cache.update_remote_log_segment_metadata(update(segment, S.DELETE_SEGMENT_STARTED))
    cache.update_remote_log_segment_metadata(update(segment, S.DELETE_SEGMENT_STARTED))
    assert [m.state for m in cache.list_all_remote_log_segments()] == [S.DELETE_SEGMENT_STARTED]


@pytest.mark.parametrize(
    ("path", "illegal"),
    [
        ([S.COPY_SEGMENT_FINISHED], S.COPY_SEGMENT_STARTED),
        ([], S.DELETE_SEGMENT_FINISHED),
        ([S.COPY_SEGMENT_FINISHED, S.DELETE_SEGMENT_STARTED], S.COPY_SEGMENT_FINISHED),
        ([S.DELETE_SEGMENT_STARTED], S.COPY_SEGMENT_FINISHED),
    ],
)
def test_illegal_transitions_raise_and_change_nothing(
    path: list[RemoteLogSegmentState], illegal: RemoteLogSegmentState
) -> None:
    cache = RemoteLogMetadataCache(TIP)
    segment = new_segment(0, 9, {0: 0})
    cache.add_copy_in_progress_segment(segment)
    for state in path:
        cache.update_remote_log_segment_metadata(update(segment, state))
    before = cache.snapshot_state()
    with pytest.raises(IllegalRemoteLogStateTransitionError, match="can not"):
        cache.update_remote_log_segment_metadata(update(segment, illegal))
    assert cache.snapshot_state() == before


def test_adding_a_segment_in_a_later_state_is_refused() -> None:
    cache = RemoteLogMetadataCache(TIP)
    segment = new_segment(0, 9, {0: 0})
    finished = segment.create_with_updates(update(segment, S.COPY_SEGMENT_FINISHED))
    with pytest.raises(IllegalRemoteLogStateTransitionError, match="COPY_SEGMENT_STARTED"):
        cache.add_copy_in_progress_segment(finished)
    cache.add_copy_in_progress_segment(segment)
    cache.update_remote_log_segment_metadata(update(segment, S.COPY_SEGMENT_FINISHED))
    # another segment under the same id is refused
    other = dataclasses.replace(segment, end_offset=8)
    with pytest.raises(IllegalRemoteLogStateTransitionError, match="COPY_SEGMENT_FINISHED to"):
        cache.add_copy_in_progress_segment(other)
    # the same one announced again (the metadata topic's compaction re-appends it) is a repeat
    cache.add_copy_in_progress_segment(segment)
    [listed] = cache.list_all_remote_log_segments()
    assert listed.state is S.COPY_SEGMENT_FINISHED
    assert cache.remote_log_segment_metadata(0, 5) == listed


def test_updates_of_unknown_segments() -> None:
    cache = RemoteLogMetadataCache(TIP)
    unknown = new_segment(0, 9, {0: 0})
    cache.update_remote_log_segment_metadata(update(unknown, S.COPY_SEGMENT_FINISHED))  # dropped
    assert cache.list_all_remote_log_segments() == []
    cache.mark_initialized()
    assert cache.is_initialized()
    with pytest.raises(RemoteResourceNotFoundError, match="COPY_SEGMENT_STARTED first"):
        cache.update_remote_log_segment_metadata(update(unknown, S.COPY_SEGMENT_FINISHED))


def test_events_of_another_partition_are_refused() -> None:
    cache = RemoteLogMetadataCache(TIP)
    other = TopicIdPartition(TIP.topic_id, TopicPartition("orders", 1))
    segment = RemoteLogSegmentMetadata(
        remote_log_segment_id=RemoteLogSegmentId.generate_new(other),
        start_offset=0,
        end_offset=0,
        max_timestamp_ms=0,
        broker_id=0,
        event_timestamp_ms=0,
        segment_size_in_bytes=0,
        segment_leader_epochs={0: 0},
    )
    with pytest.raises(ValueError, match="orders-1"):
        cache.handle(segment)


def test_partition_delete_states() -> None:
    cache = RemoteLogMetadataCache(TIP)
    assert cache.remote_partition_delete_metadata() is None

    def event(state: RemotePartitionDeleteState) -> RemotePartitionDeleteMetadata:
        return RemotePartitionDeleteMetadata(
            topic_id_partition=TIP, state=state, event_timestamp_ms=3, broker_id=1
        )

    with pytest.raises(IllegalRemoteLogStateTransitionError, match=r"\(none\) to"):
        cache.handle(event(RemotePartitionDeleteState.DELETE_PARTITION_STARTED))
    for state in RemotePartitionDeleteState:
        cache.handle(event(state))
        cache.handle(event(state))
        current = cache.remote_partition_delete_metadata()
        assert current is not None and current.state is state
    with pytest.raises(IllegalRemoteLogStateTransitionError, match="FINISHED to"):
        cache.handle(event(RemotePartitionDeleteState.DELETE_PARTITION_MARKED))


def test_handle_dispatches_the_topic_events() -> None:
    cache = RemoteLogMetadataCache(TIP)
    segment = new_segment(0, 9, {0: 0})
    cache.handle(segment)
    cache.handle(update(segment, S.COPY_SEGMENT_FINISHED))
    assert cache.remote_log_segment_metadata(0, 9) is not None
