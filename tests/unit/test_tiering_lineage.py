"""Leader-epoch lineage rules (Kafka's RLM helpers) and the in-memory RLMM."""

from __future__ import annotations

import pytest

from storage_core.common import Uuid
from storage_core.log.leader_epoch_cache import EpochEntry
from storage_core.tiered.in_memory_rlmm import InMemoryRemoteLogMetadataManager
from storage_core.tiered.metadata.errors import IllegalRemoteLogStateTransitionError
from storage_core.tiered.metadata.metadata import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
)
from storage_core.tiered.metadata.states import RemoteLogSegmentState
from storage_core.tiered.operations.lineage import (
    NO_REMOTE_OFFSET,
    LineageCheck,
    OffsetAndEpoch,
    check_remote_segment_lineage,
    epoch_entries_in_range,
    filtered_leader_epoch_map,
    find_highest_remote_offset,
)
from tests.tiering_support import TOPIC_ID_PARTITION

ENTRIES = [EpochEntry(0, 0), EpochEntry(2, 10), EpochEntry(5, 20)]


def test_epoch_entries_in_range() -> None:
    assert epoch_entries_in_range(ENTRIES, 12, 25) == [EpochEntry(2, 12), EpochEntry(5, 20)]
    assert epoch_entries_in_range(ENTRIES, 10, 20) == [EpochEntry(2, 10)]
    assert epoch_entries_in_range(ENTRIES, 0, 10) == [EpochEntry(0, 0)]
    assert epoch_entries_in_range(ENTRIES, 25, 30) == [EpochEntry(5, 25)]


def test_find_highest_remote_offset_walks_epochs_newest_first() -> None:
    copied = {2: 14, 0: 9}
    assert find_highest_remote_offset(ENTRIES, 30, copied.get) == OffsetAndEpoch(14, 2)
    assert find_highest_remote_offset(ENTRIES, 30, {0: 9}.get) == OffsetAndEpoch(9, 0)
    assert find_highest_remote_offset(ENTRIES, 30, {}.get) == NO_REMOTE_OFFSET
    # A previous leader copied epoch 2 up to 25, but this lineage ends epoch 2 at 19.
    assert find_highest_remote_offset(ENTRIES, 30, {2: 25}.get) == OffsetAndEpoch(19, 2)


def test_filtered_leader_epoch_map_drops_epochs_without_records() -> None:
    assert filtered_leader_epoch_map({0: 0, 1: 5, 2: 5, 3: 9}) == {0: 0, 2: 5, 3: 9}


@pytest.mark.parametrize(
    ("segment_epochs", "end_offset", "expected"),
    [
        ({0: 0}, 9, LineageCheck.ON_LINEAGE),
        ({0: 5, 2: 10}, 14, LineageCheck.ON_LINEAGE),
        ({0: 5}, 12, LineageCheck.OFF_LINEAGE),  # epoch 0 ends at 9 in this lineage
        ({0: 5, 1: 8}, 12, LineageCheck.OFF_LINEAGE),  # epoch 1 is not in the lineage
        ({0: 5, 2: 11}, 14, LineageCheck.OFF_LINEAGE),  # epoch 2 starts at 10, not 11
        ({5: 20}, 29, LineageCheck.ON_LINEAGE),
        ({5: 20}, 30, LineageCheck.BEYOND_VIEW),  # at or past the log end offset
        ({6: 30}, 35, LineageCheck.BEYOND_VIEW),  # an epoch newer than the view
    ],
)
def test_check_remote_segment_lineage(
    segment_epochs: dict[int, int], end_offset: int, expected: LineageCheck
) -> None:
    lineage = {e.epoch: e.start_offset for e in ENTRIES}
    assert (
        check_remote_segment_lineage(
            segment_epochs, end_offset, leader_epochs=lineage, log_end_offset=30
        )
        is expected
    )


def test_lineage_truncated_by_the_log_start_offset() -> None:
    lineage = {2: 15, 5: 20}  # the cache after the log start offset moved to 15
    check = check_remote_segment_lineage(
        {0: 5, 2: 10}, 16, leader_epochs=lineage, log_end_offset=30
    )
    assert check is LineageCheck.ON_LINEAGE
    assert (
        check_remote_segment_lineage({0: 0}, 9, leader_epochs=lineage, log_end_offset=30)
        is LineageCheck.BEFORE_LINEAGE
    )


def test_in_memory_rlmm_is_read_your_writes_and_refuses_illegal_transitions() -> None:
    rlmm = InMemoryRemoteLogMetadataManager()
    segment_id = RemoteLogSegmentId(topic_id_partition=TOPIC_ID_PARTITION, id=Uuid(1, 2))
    rlmm.add_remote_log_segment_metadata(
        RemoteLogSegmentMetadata(
            remote_log_segment_id=segment_id,
            start_offset=0,
            end_offset=9,
            max_timestamp_ms=0,
            broker_id=0,
            event_timestamp_ms=0,
            segment_size_in_bytes=10,
            segment_leader_epochs={0: 0},
        )
    )
    assert rlmm.is_ready(TOPIC_ID_PARTITION)
    assert rlmm.remote_log_segment_metadata(TOPIC_ID_PARTITION, 0, 5) is None  # not finished
    rlmm.update_remote_log_segment_metadata(
        RemoteLogSegmentMetadataUpdate(
            remote_log_segment_id=segment_id,
            event_timestamp_ms=1,
            state=RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
            broker_id=0,
        )
    )
    found = rlmm.remote_log_segment_metadata(TOPIC_ID_PARTITION, 0, 5)
    assert found is not None and found.state is RemoteLogSegmentState.COPY_SEGMENT_FINISHED
    assert rlmm.highest_offset_for_epoch(TOPIC_ID_PARTITION, 0) == 9
    with pytest.raises(IllegalRemoteLogStateTransitionError):
        rlmm.update_remote_log_segment_metadata(
            RemoteLogSegmentMetadataUpdate(
                remote_log_segment_id=segment_id,
                event_timestamp_ms=2,
                state=RemoteLogSegmentState.DELETE_SEGMENT_FINISHED,
                broker_id=0,
            )
        )
    assert [m.state for m in rlmm.list_remote_log_segments(TOPIC_ID_PARTITION)] == [
        RemoteLogSegmentState.COPY_SEGMENT_FINISHED
    ]
