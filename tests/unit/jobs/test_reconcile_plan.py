"""``plan_reconcile``: which stuck transitions and orphaned objects the reconcile job acts on."""

from __future__ import annotations

import pytest

from jobs.planning.reconcile_plan import (
    ORPHAN_KEYS_PER_ACTION_MAX,
    ReconcileActionKind,
    plan_reconcile,
)
from storage_core.common import TopicIdPartition, TopicPartition, Uuid
from storage_core.tiered.metadata.metadata import RemoteLogSegmentId, RemoteLogSegmentMetadata
from storage_core.tiered.metadata.states import RemoteLogSegmentState
from storage_core.tiered.remote_object_keys import RemoteObjectSuffix, segment_key
from storage_core.tiered.remote_storage_manager import RemoteObjectInfo, RemoteSegmentRef

NOW_MS = 1_700_000_000_000
DEADLINE_MS = 600_000
PREFIX = "tiered"
TIP = TopicIdPartition(Uuid(1, 2), TopicPartition("orders", 0))
OTHER_TIP = TopicIdPartition(Uuid(3, 4), TopicPartition("clicks", 1))
SUFFIXES = (RemoteObjectSuffix.LOG, RemoteObjectSuffix.OFFSET_INDEX, RemoteObjectSuffix.TIME_INDEX)


def segment(
    start: int,
    state: RemoteLogSegmentState,
    *,
    age_ms: int = 0,
    tip: TopicIdPartition = TIP,
    segment_uuid: Uuid | None = None,
) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(
        remote_log_segment_id=RemoteLogSegmentId(
            topic_id_partition=tip, id=segment_uuid or Uuid.random()
        ),
        start_offset=start,
        end_offset=start + 9,
        max_timestamp_ms=NOW_MS - 1,
        broker_id=0,
        event_timestamp_ms=NOW_MS - age_ms,
        segment_size_in_bytes=100,
        segment_leader_epochs={0: start},
        state=state,
    )


def objects_of(
    metadata: RemoteLogSegmentMetadata, *, age_ms: int = DEADLINE_MS * 2, size: int = 10
) -> list[RemoteObjectInfo]:
    ref = RemoteSegmentRef.of(metadata)
    return [
        RemoteObjectInfo(
            key=segment_key(PREFIX, ref, suffix),
            size_bytes=size,
            last_modified_ms=NOW_MS - age_ms,
        )
        for suffix in SUFFIXES
    ]


def plan(listing, objects, **kwargs):  # type: ignore[no-untyped-def]
    return plan_reconcile(
        listing,
        objects,
        now_ms=NOW_MS,
        copy_deadline_ms=DEADLINE_MS,
        key_prefix=PREFIX,
        delete_retry_grace_ms=kwargs.pop("delete_retry_grace_ms", 0),
        **kwargs,
    )


def test_a_healthy_store_needs_nothing() -> None:
    finished = [segment(0, RemoteLogSegmentState.COPY_SEGMENT_FINISHED, age_ms=10 * DEADLINE_MS)]
    copying = segment(10, RemoteLogSegmentState.COPY_SEGMENT_STARTED, age_ms=DEADLINE_MS)
    listing = {TIP: [*finished, copying]}
    result = plan(listing, [*objects_of(finished[0]), *objects_of(copying)])
    assert result.actions == ()
    assert (result.live_segments, result.copies_in_progress) == (1, 1)


def test_a_copy_started_past_the_deadline_is_rolled_back_with_its_objects() -> None:
    stale = segment(0, RemoteLogSegmentState.COPY_SEGMENT_STARTED, age_ms=DEADLINE_MS + 1)
    stored = objects_of(stale)[:1]  # killed after its first object
    result = plan({TIP: [stale]}, stored)
    (action,) = result.actions
    assert action.kind is ReconcileActionKind.ROLL_BACK_COPY
    assert action.segment == stale
    assert action.keys == (stored[0].key,)
    assert action.size_bytes == 10
    assert "past the copy deadline" in action.reason
    assert result.of_kind(ReconcileActionKind.DELETE_ORPHANS) == []


def test_a_copy_started_exactly_at_the_deadline_is_kept() -> None:
    copying = segment(0, RemoteLogSegmentState.COPY_SEGMENT_STARTED, age_ms=DEADLINE_MS)
    assert plan({TIP: [copying]}, objects_of(copying)).actions == ()


def test_a_stuck_deletion_is_retried_after_its_grace() -> None:
    stuck = segment(0, RemoteLogSegmentState.DELETE_SEGMENT_STARTED, age_ms=5_000)
    retried = plan({TIP: [stuck]}, objects_of(stuck), delete_retry_grace_ms=1_000)
    (action,) = retried.actions
    assert action.kind is ReconcileActionKind.RETRY_DELETE
    assert len(action.keys) == 3
    running = plan({TIP: [stuck]}, objects_of(stuck), delete_retry_grace_ms=10_000)
    assert running.actions == ()
    assert running.deletes_in_progress == 1


def test_objects_without_live_metadata_are_orphans_grouped_by_segment() -> None:
    finished = segment(0, RemoteLogSegmentState.COPY_SEGMENT_FINISHED)
    dead = segment(10, RemoteLogSegmentState.COPY_SEGMENT_FINISHED)  # not listed: deleted
    dead_too = segment(20, RemoteLogSegmentState.COPY_SEGMENT_FINISHED)
    result = plan(
        {TIP: [finished]}, [*objects_of(finished), *objects_of(dead), *objects_of(dead_too)]
    )
    orphans = result.of_kind(ReconcileActionKind.DELETE_ORPHANS)
    assert [(a.topic_id_partition, a.segment_id) for a in orphans] == sorted(
        [(TIP, dead.remote_log_segment_id.id), (TIP, dead_too.remote_log_segment_id.id)],
        key=lambda item: str(item[1]),
    )
    assert all(len(a.keys) == 3 and a.size_bytes == 30 for a in orphans)


def test_objects_of_a_partition_the_metadata_never_mentions_are_never_deleted() -> None:
    """A cluster that lost its metadata, or a new one on the same bucket, must not take the
    bucket's history for orphans: it is what a restore reads."""
    finished = segment(0, RemoteLogSegmentState.COPY_SEGMENT_FINISHED)
    lost_cluster = segment(0, RemoteLogSegmentState.COPY_SEGMENT_FINISHED, tip=OTHER_TIP)
    result = plan({TIP: [finished]}, [*objects_of(finished), *objects_of(lost_cluster)])
    assert result.actions == ()
    assert result.unknown_partition_objects == 3
    assert plan({}, objects_of(lost_cluster)).actions == ()


def test_young_orphans_wait_for_a_later_run() -> None:
    dead = segment(10, RemoteLogSegmentState.COPY_SEGMENT_FINISHED)
    young = objects_of(dead, age_ms=DEADLINE_MS)
    result = plan({TIP: []}, young)
    assert result.actions == ()
    assert result.young_orphan_objects == 3
    assert plan({TIP: []}, young, orphan_grace_ms=0).of_kind(ReconcileActionKind.DELETE_ORPHANS)


def test_foreign_keys_are_kept_and_counted() -> None:
    foreign = [
        RemoteObjectInfo(key=f"{PREFIX}/README", size_bytes=1, last_modified_ms=0),
        RemoteObjectInfo(key=f"{PREFIX}/a/b/c.log", size_bytes=1, last_modified_ms=0),
    ]
    result = plan({}, foreign)
    assert result.actions == ()
    assert result.foreign_keys == (f"{PREFIX}/README", f"{PREFIX}/a/b/c.log")


def test_orphan_actions_are_bounded_in_keys() -> None:
    uuid = Uuid.random()
    infos = []
    for start in range(ORPHAN_KEYS_PER_ACTION_MAX + 5):
        seg = RemoteSegmentRef(
            topic="orders", topic_id=TIP.topic_id, partition=0, segment_id=uuid, start_offset=start
        )
        infos.append(
            RemoteObjectInfo(
                key=segment_key(PREFIX, seg, RemoteObjectSuffix.LOG),
                size_bytes=1,
                last_modified_ms=0,
            )
        )
    orphans = plan({TIP: []}, infos).of_kind(ReconcileActionKind.DELETE_ORPHANS)
    assert [len(a.keys) for a in orphans] == [ORPHAN_KEYS_PER_ACTION_MAX, 5]


def test_actions_come_roll_backs_first_then_retries_then_orphans() -> None:
    stale = segment(20, RemoteLogSegmentState.COPY_SEGMENT_STARTED, age_ms=2 * DEADLINE_MS)
    stuck = segment(0, RemoteLogSegmentState.DELETE_SEGMENT_STARTED, age_ms=1)
    dead = segment(10, RemoteLogSegmentState.COPY_SEGMENT_FINISHED)
    result = plan({TIP: [stuck, stale]}, objects_of(dead))
    assert [a.kind for a in result.actions] == [
        ReconcileActionKind.ROLL_BACK_COPY,
        ReconcileActionKind.RETRY_DELETE,
        ReconcileActionKind.DELETE_ORPHANS,
    ]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"copy_deadline_ms": 0}, "copy_deadline_ms"),
        ({"delete_retry_grace_ms": -1}, "delete_retry_grace_ms"),
        ({"orphan_grace_ms": -1}, "orphan_grace_ms"),
    ],
)
def test_bad_bounds_are_refused(kwargs: dict[str, int], message: str) -> None:
    arguments = {"now_ms": NOW_MS, "copy_deadline_ms": DEADLINE_MS, **kwargs}
    with pytest.raises(ValueError, match=message):
        plan_reconcile({}, [], **arguments)


def test_finished_segments_missing_objects_are_reported_never_acted_on() -> None:
    FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED
    whole, no_log, gone = (segment(s, FINISHED, age_ms=10 * DEADLINE_MS) for s in (0, 10, 20))
    partial = [o for o in objects_of(no_log) if not o.key.endswith(".log")]
    result = plan({TIP: [whole, no_log, gone]}, [*objects_of(whole), *partial])
    assert result.actions == ()  # nothing executed: the metadata is the only trace of the data
    assert [(a.kind, a.segment) for a in result.lost] == [
        (ReconcileActionKind.LOST_SEGMENT, no_log),
        (ReconcileActionKind.LOST_SEGMENT, gone),
    ]
    assert "its .log object(s) are missing" in result.lost[0].reason
    assert "its .log, .index, .timeindex object(s) are missing" in result.lost[1].reason
    assert result.live_segments == 3


def test_a_segment_finished_after_the_listing_began_is_not_reported_lost() -> None:
    # Copied between the object listing and the metadata read: its objects were not listed.
    late = segment(0, RemoteLogSegmentState.COPY_SEGMENT_FINISHED, age_ms=1_000)
    result = plan({TIP: [late]}, [], listed_at_ms=NOW_MS - 5_000, orphan_grace_ms=0)
    assert result.lost == ()
    early = segment(0, RemoteLogSegmentState.COPY_SEGMENT_FINISHED, age_ms=10_000)
    assert len(plan({TIP: [early]}, [], listed_at_ms=NOW_MS - 5_000, orphan_grace_ms=0).lost) == 1
