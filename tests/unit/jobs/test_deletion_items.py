"""What an executor does with each deletion item (``delete_items``), over an in-memory RLMM
and a directory store: the state is re-read first, so a copy that finished late is never
rolled back and a segment another run finished only loses its leftover objects."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobs.common.remote_deletion import NO_RUN_BROKER_ID, DeletionItem, delete_items
from storage_core.common import TopicIdPartition, TopicPartition, Uuid
from storage_core.tiered.in_memory_rlmm import InMemoryRemoteLogMetadataManager
from storage_core.tiered.local_tiered_storage import LocalTieredStorage
from storage_core.tiered.metadata.metadata import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
)
from storage_core.tiered.metadata.states import RemoteLogSegmentState
from storage_core.tiered.remote_object_keys import RemoteObjectSuffix, segment_key
from storage_core.tiered.remote_storage_manager import (
    RemoteLogSegmentMetadataLike,
    RemoteSegmentRef,
    RemoteStorageError,
)

TIP = TopicIdPartition(Uuid(7, 8), TopicPartition("t", 0))
ROLL_BACK = (RemoteLogSegmentState.COPY_SEGMENT_STARTED,)


@pytest.fixture
def rsm(tmp_path: Path) -> LocalTieredStorage:
    return LocalTieredStorage(tmp_path / "store", fsync=False)


@pytest.fixture
def rlmm() -> InMemoryRemoteLogMetadataManager:
    return InMemoryRemoteLogMetadataManager()


def started(rlmm: InMemoryRemoteLogMetadataManager, start: int = 0) -> RemoteLogSegmentMetadata:
    metadata = RemoteLogSegmentMetadata(
        remote_log_segment_id=RemoteLogSegmentId.generate_new(TIP),
        start_offset=start,
        end_offset=start + 9,
        max_timestamp_ms=0,
        broker_id=0,
        event_timestamp_ms=0,
        segment_size_in_bytes=10,
        segment_leader_epochs={0: start},
    )
    rlmm.add_remote_log_segment_metadata(metadata)
    return metadata


def move(
    rlmm: InMemoryRemoteLogMetadataManager,
    metadata: RemoteLogSegmentMetadata,
    state: RemoteLogSegmentState,
) -> None:
    rlmm.update_remote_log_segment_metadata(
        RemoteLogSegmentMetadataUpdate(
            remote_log_segment_id=metadata.remote_log_segment_id,
            event_timestamp_ms=1,
            state=state,
            broker_id=0,
        )
    )


def store_objects(rsm: LocalTieredStorage, ref: RemoteSegmentRef) -> list[Path]:
    paths = []
    for suffix in (RemoteObjectSuffix.LOG, RemoteObjectSuffix.OFFSET_INDEX):
        path = rsm.storage_dir / segment_key("", ref, suffix)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"data")
        paths.append(path)
    return paths


def states(rlmm: InMemoryRemoteLogMetadataManager) -> dict[Uuid, RemoteLogSegmentState]:
    return {m.remote_log_segment_id.id: m.state for m in rlmm.list_remote_log_segments(TIP)}


def test_a_stale_copy_is_rolled_back(rsm, rlmm) -> None:  # type: ignore[no-untyped-def]
    stale = started(rlmm)
    paths = store_objects(rsm, RemoteSegmentRef.of(stale))
    item = DeletionItem.for_segment(stale, reason="stale", allowed_states=ROLL_BACK)
    (outcome,) = delete_items([item], rsm=rsm, rlmm=rlmm, broker_id=0)
    assert (outcome.status, outcome.size_bytes) == ("deleted", 10)
    assert not any(p.exists() for p in paths)
    assert states(rlmm) == {}


def test_a_copy_that_finished_late_is_never_rolled_back(rsm, rlmm) -> None:  # type: ignore[no-untyped-def]
    late = started(rlmm)
    paths = store_objects(rsm, RemoteSegmentRef.of(late))
    item = DeletionItem.for_segment(late, reason="stale", allowed_states=ROLL_BACK)
    move(rlmm, late, RemoteLogSegmentState.COPY_SEGMENT_FINISHED)
    (outcome,) = delete_items([item], rsm=rsm, rlmm=rlmm, broker_id=0)
    assert (outcome.status, outcome.detail) == ("skipped", "state is now COPY_SEGMENT_FINISHED")
    assert all(p.exists() for p in paths)
    assert states(rlmm) == {
        late.remote_log_segment_id.id: RemoteLogSegmentState.COPY_SEGMENT_FINISHED
    }


def test_a_segment_another_run_finished_only_loses_its_leftovers(rsm, rlmm) -> None:  # type: ignore[no-untyped-def]
    done = started(rlmm)
    item = DeletionItem.for_segment(done, reason="partition deleted")
    move(rlmm, done, RemoteLogSegmentState.DELETE_SEGMENT_STARTED)
    move(rlmm, done, RemoteLogSegmentState.DELETE_SEGMENT_FINISHED)
    paths = store_objects(rsm, RemoteSegmentRef.of(done))
    (outcome,) = delete_items([item], rsm=rsm, rlmm=rlmm, broker_id=0)
    assert outcome.status == "already_deleted"
    assert not any(p.exists() for p in paths)


def test_orphans_are_deleted_unless_their_segment_is_live_now(rsm, rlmm) -> None:  # type: ignore[no-untyped-def]
    dead = RemoteSegmentRef(
        topic="t", topic_id=TIP.topic_id, partition=0, segment_id=Uuid.random(), start_offset=0
    )
    dead_paths = store_objects(rsm, dead)
    live = started(rlmm, 10)
    live_paths = store_objects(rsm, RemoteSegmentRef.of(live))
    items = [
        DeletionItem.for_orphans(
            [
                segment_key("", dead, RemoteObjectSuffix.LOG),
                segment_key("", dead, RemoteObjectSuffix.OFFSET_INDEX),
            ],
            key_prefix="",
            reason="orphan",
        ),
        DeletionItem.for_orphans(
            [segment_key("", RemoteSegmentRef.of(live), RemoteObjectSuffix.LOG)],
            key_prefix="",
            reason="orphan",
        ),
    ]
    gone, kept = delete_items(items, rsm=rsm, rlmm=rlmm, broker_id=0)
    assert (gone.status, gone.objects, gone.segment_id) == ("deleted", 2, str(dead.segment_id))
    assert (kept.status, kept.detail) == ("skipped", "the segment has live metadata now")
    assert not any(p.exists() for p in dead_paths)
    assert all(p.exists() for p in live_paths)


class FailingDeletes(LocalTieredStorage):
    def delete_log_segment_data(
        self, remote_log_segment_metadata: RemoteLogSegmentMetadataLike
    ) -> None:
        raise RemoteStorageError("the store is down")


def test_a_failed_deletion_is_reported_and_left_for_the_next_run(tmp_path: Path, rlmm) -> None:  # type: ignore[no-untyped-def]
    segment = started(rlmm)
    move(rlmm, segment, RemoteLogSegmentState.COPY_SEGMENT_FINISHED)
    failing = FailingDeletes(tmp_path / "store", fsync=False)
    ok_after = started(rlmm, 10)
    items = [
        DeletionItem.for_segment(segment, reason="partition deleted"),
        DeletionItem.for_segment(ok_after, reason="partition deleted"),
    ]
    first, second = delete_items(items, rsm=failing, rlmm=rlmm, broker_id=0)
    assert first.status == "error" and "the store is down" in first.detail
    assert second.status == "error"
    assert set(states(rlmm).values()) == {RemoteLogSegmentState.DELETE_SEGMENT_STARTED}


def test_a_segment_item_publishes_as_the_broker_it_names(tmp_path: Path, rlmm) -> None:  # type: ignore[no-untyped-def]
    """Partition deletion on a cluster: the events name the broker that marked the partition,
    not the run's broker."""
    segment = started(rlmm)
    move(rlmm, segment, RemoteLogSegmentState.COPY_SEGMENT_FINISHED)
    failing = FailingDeletes(tmp_path / "store", fsync=False)
    item = DeletionItem.for_segment(segment, reason="partition deleted", broker_id=3)
    (outcome,) = delete_items([item], rsm=failing, rlmm=rlmm, broker_id=NO_RUN_BROKER_ID)
    assert outcome.status == "error"
    (left,) = rlmm.list_remote_log_segments(TIP)
    assert (left.state, left.broker_id) == (RemoteLogSegmentState.DELETE_SEGMENT_STARTED, 3)


def test_a_segment_item_without_a_broker_in_a_run_without_one_changes_nothing(rsm, rlmm) -> None:  # type: ignore[no-untyped-def]
    segment = started(rlmm)
    move(rlmm, segment, RemoteLogSegmentState.COPY_SEGMENT_FINISHED)
    paths = store_objects(rsm, RemoteSegmentRef.of(segment))
    item = DeletionItem.for_segment(segment, reason="partition deleted")
    (outcome,) = delete_items([item], rsm=rsm, rlmm=rlmm, broker_id=NO_RUN_BROKER_ID)
    assert (outcome.status, outcome.detail) == (
        "error",
        "no broker id to publish the segment's events as (neither the item's nor the run's)",
    )
    assert all(p.exists() for p in paths)
    assert states(rlmm) == {
        segment.remote_log_segment_id.id: RemoteLogSegmentState.COPY_SEGMENT_FINISHED
    }
