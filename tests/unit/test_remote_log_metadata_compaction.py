"""Planning the cut of ``__remote_log_metadata`` (storage_core.tiered.metadata.compaction)."""

from __future__ import annotations

from collections.abc import Sequence

from storage_core.tiered.metadata import (
    RemoteLogMetadataCache,
    RemoteLogSegmentState,
    RemotePartitionDeleteState,
    serde,
)
from storage_core.tiered.metadata.compaction import (
    MetadataEntry,
    RestatedSegment,
    plan_metadata_compaction,
    replay_states,
    restatement_refused,
    untouched_since_plan,
    verify_cut,
)
from storage_core.tiered.metadata.metadata import RemoteLogMetadata
from tests.remote_log_metadata_events import (
    copy_started,
    partition_delete,
    state_update,
    user_partition,
)

FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED
DELETE_STARTED = RemoteLogSegmentState.DELETE_SEGMENT_STARTED
DELETE_FINISHED = RemoteLogSegmentState.DELETE_SEGMENT_FINISHED


def entries_of(events: Sequence[RemoteLogMetadata], first_offset: int = 0) -> list[MetadataEntry]:
    return [
        MetadataEntry.decode(first_offset + i, serde.serialize(event))
        for i, event in enumerate(events)
    ]


def append_values(entries: list[MetadataEntry], values: Sequence[bytes]) -> None:
    next_offset = entries[-1].offset + 1 if entries else 0
    for i, value in enumerate(values):
        entries.append(MetadataEntry.decode(next_offset + i, value))


def values_of(segments: Sequence[RestatedSegment]) -> list[bytes]:
    return [value for segment in segments for value in (segment.add, segment.finished)]


def expired_segments(tip, count, start=100):  # type: ignore[no-untyped-def]
    events: list[RemoteLogMetadata] = []
    for i in range(count):
        segment = copy_started(tip, start + 10 * i, start + 10 * i + 9)
        events += [
            segment,
            state_update(segment, FINISHED),
            state_update(segment, DELETE_STARTED),
            state_update(segment, DELETE_FINISHED),
        ]
    return events


def test_events_of_deleted_segments_below_the_first_live_segment_go() -> None:
    tip = user_partition("orders", 0)
    old = copy_started(tip, 0, 9)
    live = copy_started(tip, 10, 19)
    entries = entries_of(
        [
            old,
            state_update(old, FINISHED),
            state_update(old, DELETE_STARTED),
            state_update(old, DELETE_FINISHED),
            live,
            state_update(live, FINISHED),
        ]
    )
    plan = plan_metadata_compaction(entries, log_start_offset=0, cut_limit_offset=6)
    assert plan.cut_offset == 4
    assert plan.records_freed == 4
    assert plan.restate == ()
    assert verify_cut(entries, 4) is None
    # the segment a reader from the cut finds is the live one, readable
    [state] = replay_states(entries, from_offset=4).values()
    assert [s.segment_id for s in state.segments] == [live.remote_log_segment_id.id]


def test_no_cut_inside_a_deleted_segments_history_nor_past_a_live_segment() -> None:
    tip = user_partition("orders", 0)
    dead = copy_started(tip, 0, 9)
    live = copy_started(tip, 10, 19)
    entries = entries_of(
        [
            dead,  # 0
            live,  # 1
            state_update(live, FINISHED),  # 2
            state_update(dead, FINISHED),  # 3
            state_update(dead, DELETE_STARTED),  # 4
            state_update(dead, DELETE_FINISHED),  # 5
        ]
    )
    # offset 1 would leave the dead segment's updates without its add (the quality job
    # flags that); above 1 would lose the live segment's add
    plan = plan_metadata_compaction(entries, log_start_offset=0, cut_limit_offset=6)
    assert plan.cut_offset is None
    assert plan.records_freed == 0


def test_records_younger_than_the_limit_stay() -> None:
    tip = user_partition("orders", 0)
    entries = entries_of(expired_segments(tip, 3))
    plan = plan_metadata_compaction(entries, log_start_offset=0, cut_limit_offset=5)
    assert plan.cut_offset == 4  # the first segment's four records; the second's start at 4
    plan = plan_metadata_compaction(entries, log_start_offset=4, cut_limit_offset=4)
    assert plan.cut_offset is None


def test_a_long_lived_segment_is_restated_then_the_history_behind_it_goes() -> None:
    # a partition kept forever shares the metadata partition with one whose segments expire
    keeper = copy_started(user_partition("audit", 0), 0, 9)
    churn = user_partition("orders", 0)
    entries = entries_of([keeper, state_update(keeper, FINISHED), *expired_segments(churn, 20)])
    plan = plan_metadata_compaction(entries, log_start_offset=0, cut_limit_offset=len(entries))
    assert plan.cut_offset is None  # pinned by the keeper's add at 0
    assert plan.restated_segments == 1
    assert [serde.deserialize(v) for v in values_of(plan.restate)] == [
        keeper,
        state_update(keeper, FINISHED),
    ]
    before = replay_states(entries)
    append_values(entries, values_of(plan.restate))
    # the re-appended events are repeats for a reader that applied the history
    assert replay_states(entries) == before
    plan = plan_metadata_compaction(entries, log_start_offset=0, cut_limit_offset=len(entries))
    assert plan.cut_offset == 82
    assert plan.restate == ()
    assert verify_cut(entries, 82) is None
    assert replay_states(entries, from_offset=82) == before


def test_a_segment_deleted_while_being_restated_is_never_cut_alive() -> None:
    keeper = copy_started(user_partition("audit", 0), 0, 9)
    churn = user_partition("orders", 0)
    entries = entries_of([keeper, state_update(keeper, FINISHED), *expired_segments(churn, 20)])
    plan = plan_metadata_compaction(entries, log_start_offset=0, cut_limit_offset=len(entries))
    # its deletion starts between the plan and the re-append (re-appended anyway here)
    append_values(entries, [serde.serialize(state_update(keeper, DELETE_STARTED))])
    append_values(entries, values_of(plan.restate))
    plan = plan_metadata_compaction(entries, log_start_offset=0, cut_limit_offset=len(entries))
    assert plan.cut_offset is None
    # cutting at the re-appended add anyway would make it readable again: verify refuses
    problem = verify_cut(entries, 83)
    assert problem is not None and "different state" in problem
    state = replay_states(entries)[keeper.topic_id_partition]
    assert [s.state for s in state.segments] == [DELETE_STARTED]


def test_a_segment_deleted_after_the_plan_is_not_re_appended() -> None:
    keeper = copy_started(user_partition("audit", 0), 0, 9)
    churn = user_partition("orders", 0)
    entries = entries_of([keeper, state_update(keeper, FINISHED), *expired_segments(churn, 20)])
    plan = plan_metadata_compaction(entries, log_start_offset=0, cut_limit_offset=len(entries))
    read_end = len(entries)
    # retention deletes it entirely before the re-append
    append_values(
        entries,
        [serde.serialize(state_update(keeper, s)) for s in (DELETE_STARTED, DELETE_FINISHED)],
    )
    appended = [e for e in entries if e.offset >= read_end]
    assert untouched_since_plan(plan.restate, appended) == []
    # re-appended anyway, readers would take it for a new live segment
    append_values(entries, values_of(plan.restate))
    [state] = replay_states(entries).values()
    assert [s.state for s in state.segments] == [FINISHED]


def test_only_the_segments_touched_since_the_plan_are_left_out() -> None:
    audit = user_partition("audit", 0)
    kept, expired = copy_started(audit, 0, 9), copy_started(audit, 10, 19)
    dropped = copy_started(user_partition("dropped", 0), 0, 9)
    restate = [
        RestatedSegment(
            segment_id=s.remote_log_segment_id,
            add=serde.serialize(s),
            finished=serde.serialize(state_update(s, FINISHED)),
        )
        for s in (kept, expired, dropped)
    ]
    appended = entries_of(
        [
            copy_started(audit, 20, 29),  # a new copy of the same partition touches nothing
            state_update(expired, DELETE_STARTED),
            partition_delete(
                dropped.topic_id_partition, RemotePartitionDeleteState.DELETE_PARTITION_MARKED
            ),
        ]
    )
    assert untouched_since_plan(restate, appended) == [restate[0]]


def test_a_partition_whose_deletion_finished_goes_entirely() -> None:
    gone = user_partition("gone", 0)
    kept = user_partition("kept", 0)
    segment = copy_started(gone, 0, 9)
    live = copy_started(kept, 0, 9)
    entries = entries_of(
        [
            segment,
            state_update(segment, FINISHED),
            partition_delete(gone, RemotePartitionDeleteState.DELETE_PARTITION_MARKED),
            partition_delete(gone, RemotePartitionDeleteState.DELETE_PARTITION_STARTED),
            state_update(segment, DELETE_STARTED),
            state_update(segment, DELETE_FINISHED),
            partition_delete(gone, RemotePartitionDeleteState.DELETE_PARTITION_FINISHED),
            live,
            state_update(live, FINISHED),
        ]
    )
    plan = plan_metadata_compaction(entries, log_start_offset=0, cut_limit_offset=len(entries))
    assert plan.cut_offset == 7
    assert verify_cut(entries, 7) is None
    assert set(replay_states(entries, from_offset=7)) == {kept}


def test_a_partition_being_deleted_keeps_its_events() -> None:
    tip = user_partition("gone", 0)
    entries = entries_of(
        [
            *expired_segments(tip, 2),
            partition_delete(tip, RemotePartitionDeleteState.DELETE_PARTITION_MARKED),
            partition_delete(tip, RemotePartitionDeleteState.DELETE_PARTITION_STARTED),
        ]
    )
    plan = plan_metadata_compaction(entries, log_start_offset=0, cut_limit_offset=len(entries))
    assert plan.cut_offset == 8
    [state] = replay_states(entries, from_offset=8).values()
    deletion = state.partition_delete_metadata
    assert deletion is not None
    assert deletion.state is RemotePartitionDeleteState.DELETE_PARTITION_STARTED


def test_a_deleted_segment_holding_an_epochs_highest_offset_stays() -> None:
    tip = user_partition("orders", 0)
    kept = copy_started(tip, 0, 9)
    removed = copy_started(tip, 10, 19)  # same epoch, removed first (off the lineage)
    entries = entries_of(
        [
            removed,
            state_update(removed, FINISHED),
            state_update(removed, DELETE_STARTED),
            state_update(removed, DELETE_FINISHED),
            kept,
            state_update(kept, FINISHED),
        ]
    )
    # a reader from offset 4 would answer 9 as epoch 0's highest copied offset, not 19
    problem = verify_cut(entries, 4)
    assert problem is not None and "orders-0" in problem
    plan = plan_metadata_compaction(entries, log_start_offset=0, cut_limit_offset=6)
    assert plan.cut_offset is None


def test_the_cache_takes_a_segment_announced_again_as_a_repeat() -> None:
    tip = user_partition("orders", 0)
    segment = copy_started(tip, 0, 9)
    cache = RemoteLogMetadataCache(tip)
    cache.handle(segment)
    cache.handle(state_update(segment, FINISHED))
    before = cache.snapshot_state()
    cache.handle(segment)  # re-appended by the compaction: no error, no change
    cache.handle(state_update(segment, FINISHED))
    assert cache.snapshot_state() == before
    assert cache.remote_log_segment_metadata(0, 5) is not None


def test_a_segment_superseded_by_an_overlapping_upload_is_not_re_appended_in_vain() -> None:
    """Ten one-offset segments, then one upload of the same epoch covering them all (a new
    leader's), then the next one: re-announcing them would map the small ones again for
    readers of the history (the epoch's highest offset has moved past the covering upload)
    but not for readers from the re-append, so the cut below it would be refused round after
    round."""
    tip = user_partition("audit", 0)
    small = [copy_started(tip, i, i, {0: i}) for i in range(10)]
    covering = copy_started(tip, 0, 19, {0: 0})
    following = copy_started(tip, 20, 29, {0: 20})
    churn = user_partition("orders", 0)
    entries = entries_of(
        [
            *[e for s in small for e in (s, state_update(s, FINISHED))],
            *[e for s in (covering, following) for e in (s, state_update(s, FINISHED))],
            *expired_segments(churn, 30),
        ]
    )
    plan = plan_metadata_compaction(entries, log_start_offset=0, cut_limit_offset=len(entries))
    assert plan.restated_segments == 12
    problem = restatement_refused(entries, plan.restate, log_start_offset=0)
    assert problem is not None and "audit-0" in problem
    # without the superseded ones the same history restates fine
    alone = entries_of(
        [
            *[e for s in (covering, following) for e in (s, state_update(s, FINISHED))],
            *expired_segments(churn, 30),
        ]
    )
    plan = plan_metadata_compaction(alone, log_start_offset=0, cut_limit_offset=len(alone))
    assert plan.restated_segments == 2
    assert restatement_refused(alone, plan.restate, log_start_offset=0) is None
