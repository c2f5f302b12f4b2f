"""Deleting a partition's remote data, resumed after a crash at every step."""

from __future__ import annotations

from pathlib import Path

import pytest

from storage_core.clock import ManualClock
from storage_core.tiered.in_memory_rlmm import InMemoryRemoteLogMetadataManager
from storage_core.tiered.local_tiered_storage import LocalTieredStorage
from storage_core.tiered.metadata.metadata import RemotePartitionDeleteMetadata
from storage_core.tiered.metadata.states import RemotePartitionDeleteState
from storage_core.tiered.operations import (
    PartitionNotMarkedForDeletionError,
    candidate_segments,
    copy_segment,
    delete_partition,
)
from storage_core.tiered.remote_storage_manager import RemoteStorageError
from tests.tiering_support import (
    TOPIC_ID_PARTITION,
    CrashingRlmm,
    FailingDeleteStorage,
    SimulatedCrashError,
    append,
    fence_at,
    open_partition_log,
    stored_files,
    tiered_config,
    view_of,
)

SEGMENTS = 3
# DELETE_PARTITION_STARTED, two events per segment, DELETE_PARTITION_FINISHED.
PUBLISHES = 1 + 2 * SEGMENTS + 1


def tiered_partition(tmp_path: Path, rsm: LocalTieredStorage) -> InMemoryRemoteLogMetadataManager:
    clock = ManualClock()
    rlmm = InMemoryRemoteLogMetadataManager()
    log = open_partition_log(tmp_path / "logs", clock)
    append(log, 4 * SEGMENTS + 1, epoch=0)
    view = view_of(log, high_watermark=log.log_end_offset)
    for segment in candidate_segments(view, rlmm, config=tiered_config()):
        copy_segment(view, segment, rsm=rsm, rlmm=rlmm, fence=fence_at(0), broker_id=1)
    log.close()
    assert len(list(rlmm.list_remote_log_segments(TOPIC_ID_PARTITION))) == SEGMENTS
    return rlmm


def mark(rlmm: InMemoryRemoteLogMetadataManager) -> None:
    rlmm.put_remote_partition_delete_metadata(
        RemotePartitionDeleteMetadata(
            topic_id_partition=TOPIC_ID_PARTITION,
            state=RemotePartitionDeleteState.DELETE_PARTITION_MARKED,
            event_timestamp_ms=0,
            broker_id=-1,
        )
    )


def delete_state(rlmm: InMemoryRemoteLogMetadataManager) -> RemotePartitionDeleteState | None:
    metadata = rlmm.remote_partition_delete_metadata(TOPIC_ID_PARTITION)
    return None if metadata is None else metadata.state


def test_a_partition_not_marked_is_refused(tmp_path: Path) -> None:
    rsm = LocalTieredStorage(tmp_path / "remote", fsync=False)
    rlmm = tiered_partition(tmp_path, rsm)
    with pytest.raises(PartitionNotMarkedForDeletionError):
        delete_partition(TOPIC_ID_PARTITION, rsm=rsm, rlmm=rlmm, broker_id=1)
    # .log, .index, .timeindex, .snapshot (written at every roll) and leader-epoch-checkpoint
    assert len(stored_files(tmp_path / "remote")) == SEGMENTS * 5


def test_deletion_removes_every_segment_and_object(tmp_path: Path) -> None:
    rsm = LocalTieredStorage(tmp_path / "remote", fsync=False)
    rlmm = tiered_partition(tmp_path, rsm)
    mark(rlmm)
    result = delete_partition(TOPIC_ID_PARTITION, rsm=rsm, rlmm=rlmm, broker_id=1)
    assert result.finished and result.deleted_segments == SEGMENTS
    assert delete_state(rlmm) is RemotePartitionDeleteState.DELETE_PARTITION_FINISHED
    assert list(rlmm.list_remote_log_segments(TOPIC_ID_PARTITION)) == []
    assert stored_files(tmp_path / "remote") == []
    # Running it again changes nothing.
    again = delete_partition(TOPIC_ID_PARTITION, rsm=rsm, rlmm=rlmm, broker_id=1)
    assert again.finished and again.deleted_segments == 0


@pytest.mark.parametrize("publishes_before_crash", range(PUBLISHES))
def test_deletion_resumes_after_a_crash_between_any_two_steps(
    tmp_path: Path, publishes_before_crash: int
) -> None:
    rsm = LocalTieredStorage(tmp_path / "remote", fsync=False)
    rlmm = tiered_partition(tmp_path, rsm)
    mark(rlmm)
    crashing = CrashingRlmm(rlmm, publishes_before_crash)
    with pytest.raises(SimulatedCrashError):
        delete_partition(TOPIC_ID_PARTITION, rsm=rsm, rlmm=crashing, broker_id=1)
    expected_state = (
        RemotePartitionDeleteState.DELETE_PARTITION_MARKED
        if publishes_before_crash == 0
        else RemotePartitionDeleteState.DELETE_PARTITION_STARTED
    )
    assert delete_state(rlmm) is expected_state
    result = delete_partition(TOPIC_ID_PARTITION, rsm=rsm, rlmm=rlmm, broker_id=2)
    assert result.finished
    assert delete_state(rlmm) is RemotePartitionDeleteState.DELETE_PARTITION_FINISHED
    assert list(rlmm.list_remote_log_segments(TOPIC_ID_PARTITION)) == []
    assert stored_files(tmp_path / "remote") == []


def test_a_store_refusing_deletes_leaves_the_partition_started(tmp_path: Path) -> None:
    rsm = FailingDeleteStorage(tmp_path / "remote")
    rsm.failing = False
    rlmm = tiered_partition(tmp_path, rsm)
    rsm.failing = True
    mark(rlmm)
    with pytest.raises(RemoteStorageError):
        delete_partition(TOPIC_ID_PARTITION, rsm=rsm, rlmm=rlmm, broker_id=1)
    assert delete_state(rlmm) is RemotePartitionDeleteState.DELETE_PARTITION_STARTED
    assert len(list(rlmm.list_remote_log_segments(TOPIC_ID_PARTITION))) == SEGMENTS
    rsm.failing = False
    assert delete_partition(TOPIC_ID_PARTITION, rsm=rsm, rlmm=rlmm, broker_id=1).finished
    assert stored_files(tmp_path / "remote") == []
