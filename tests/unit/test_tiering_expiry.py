"""Expiring remote segments: each rule with its reason, and the deletions."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from storage_core.clock import ManualClock
from storage_core.common import Uuid
from storage_core.log.leader_epoch_cache import EpochEntry
from storage_core.tiered.in_memory_rlmm import InMemoryRemoteLogMetadataManager
from storage_core.tiered.local_tiered_storage import LocalTieredStorage
from storage_core.tiered.metadata.metadata import RemoteLogSegmentId, RemoteLogSegmentMetadata
from storage_core.tiered.metadata.states import RemoteLogSegmentState
from storage_core.tiered.operations import (
    ExpiryReason,
    StaleLeaderEpochError,
    candidate_segments,
    copy_segment,
    delete_expired_segments,
    expired_segments,
    plan_expiry,
)
from storage_core.tiered.operations.log_view import LogView
from tests.conftest import BASE_TIMESTAMP_MS
from tests.tiering_support import (
    BROKER_ID,
    TOPIC_ID_PARTITION,
    FailingDeleteStorage,
    append,
    fence_at,
    open_partition_log,
    stored_files,
    tiered_config,
    view_of,
)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(BASE_TIMESTAMP_MS)


def copy_all(view: LogView, rsm, rlmm, epoch: int, clock: ManualClock) -> None:  # type: ignore[no-untyped-def]
    for segment in candidate_segments(view, rlmm, config=tiered_config()):
        copy_segment(
            view,
            segment,
            rsm=rsm,
            rlmm=rlmm,
            fence=fence_at(epoch),
            broker_id=BROKER_ID,
            clock=clock,
        )


def reasons(plan) -> list[tuple[int, int, ExpiryReason]]:  # type: ignore[no-untyped-def]
    return [(e.metadata.start_offset, e.metadata.end_offset, e.reason) for e in plan.expired]


def tiered_log(tmp_path: Path, clock: ManualClock, rsm, rlmm):  # type: ignore[no-untyped-def]
    """Offsets 0-13 in epoch 0 at BASE + offset ms; 0-3, 4-7, 8-11 copied; active 12."""
    log = open_partition_log(tmp_path / "logs", clock)
    append(log, 14, epoch=0)
    copy_all(view_of(log, high_watermark=14), rsm, rlmm, 0, clock)
    return log


def test_retention_ms_expires_the_segments_whose_newest_record_is_too_old(
    tmp_path: Path, clock: ManualClock
) -> None:
    rsm = LocalTieredStorage(tmp_path / "remote", fsync=False)
    rlmm = InMemoryRemoteLogMetadataManager()
    log = tiered_log(tmp_path, clock, rsm, rlmm)
    view = view_of(log, high_watermark=14)
    # Segment 4-7's newest record is BASE + 7; retention 100 ms, now BASE + 107: breached.
    now_ms = BASE_TIMESTAMP_MS + 107
    plan = plan_expiry(view, rlmm, config=tiered_config(retention_ms=100), now_ms=now_ms)
    assert reasons(plan) == [
        (0, 3, ExpiryReason.RETENTION_MS),
        (4, 7, ExpiryReason.RETENTION_MS),
    ]
    assert plan.log_start_offset == 8
    assert plan.expired[0].reason_text.startswith("retention.ms breach: segment ")
    assert reasons(
        plan_expiry(view, rlmm, config=tiered_config(retention_ms=100), now_ms=now_ms - 1)
    ) == [(0, 3, ExpiryReason.RETENTION_MS)]
    assert (
        plan_expiry(view, rlmm, config=tiered_config(retention_ms=-1), now_ms=now_ms).expired == ()
    )
    outcome = delete_expired_segments(
        plan, rsm=rsm, rlmm=rlmm, fence=fence_at(0), broker_id=BROKER_ID, clock=clock
    )
    assert len(outcome.deleted) == 2 and outcome.failed == ()
    assert [m.start_offset for m in rlmm.list_remote_log_segments(TOPIC_ID_PARTITION)] == [8]
    assert {f.split("/")[-1].split("-")[0] for f in stored_files(tmp_path / "remote")} == {
        "00000000000000000008"
    }
    log.close()


def test_retention_bytes_counts_local_only_segments_and_remote_segments(
    tmp_path: Path, clock: ManualClock
) -> None:
    rsm = LocalTieredStorage(tmp_path / "remote", fsync=False)
    rlmm = InMemoryRemoteLogMetadataManager()
    log = tiered_log(tmp_path, clock, rsm, rlmm)
    view = view_of(log, high_watermark=14)
    sizes = {s.base_offset: s.size_bytes for s in view.segments}
    # Highest remote offset 11: local-only bytes are the segments at or above it (active 12).
    local_only = sizes[12]
    remote = sizes[0] + sizes[4] + sizes[8]
    plan = plan_expiry(
        view, rlmm, config=tiered_config(retention_bytes=local_only + remote), now_ms=0
    )
    assert (plan.local_only_size_bytes, plan.remote_size_bytes) == (local_only, remote)
    assert plan.expired == ()
    # As Kafka: a segment goes only if the partition stays at or above retention.bytes
    # without it, so one byte over deletes nothing...
    plan = plan_expiry(
        view, rlmm, config=tiered_config(retention_bytes=local_only + remote - 1), now_ms=0
    )
    assert plan.expired == ()
    # ... and the size of the first segment plus one byte over deletes exactly that one.
    plan = plan_expiry(
        view,
        rlmm,
        config=tiered_config(retention_bytes=local_only + remote - sizes[0] - 1),
        now_ms=0,
    )
    assert reasons(plan) == [(0, 3, ExpiryReason.RETENTION_BYTES)]
    assert plan.log_start_offset == 4
    # Room for the local bytes only: every remote segment goes.
    plan = plan_expiry(view, rlmm, config=tiered_config(retention_bytes=local_only), now_ms=0)
    assert [r for _, _, r in reasons(plan)] == [ExpiryReason.RETENTION_BYTES] * 3
    log.close()


def test_log_start_offset_breach(tmp_path: Path, clock: ManualClock) -> None:
    rsm = LocalTieredStorage(tmp_path / "remote", fsync=False)
    rlmm = InMemoryRemoteLogMetadataManager()
    log = tiered_log(tmp_path, clock, rsm, rlmm)
    view = LogView.read(log.dir, high_watermark=14, log_start_offset=8)  # DeleteRecords to 8
    plan = plan_expiry(view, rlmm, config=tiered_config(), now_ms=0)
    assert reasons(plan) == [
        (0, 3, ExpiryReason.LOG_START_OFFSET),
        (4, 7, ExpiryReason.LOG_START_OFFSET),
    ]
    assert plan.log_start_offset is None  # already there
    log.close()


def test_segments_off_the_lineage_after_an_unclean_election(
    tmp_path: Path, clock: ManualClock
) -> None:
    rsm = LocalTieredStorage(tmp_path / "remote", fsync=False)
    rlmm = InMemoryRemoteLogMetadataManager()
    log = open_partition_log(tmp_path / "logs", clock)
    append(log, 6, epoch=0)
    append(log, 8, epoch=1)  # 6-13
    copy_all(view_of(log, high_watermark=14), rsm, rlmm, 1, clock)  # 0-3, 4-7, 8-11
    # The new leader only had offsets up to 5; epoch 2 starts at 6.
    log.truncate_to(6)
    append(log, 6, epoch=2)  # 6-11; local segments 0-3, 4-8, active 9
    view = view_of(log, high_watermark=12)
    plan = plan_expiry(view, rlmm, config=tiered_config(), now_ms=0)
    assert reasons(plan) == [
        (4, 7, ExpiryReason.OFF_LINEAGE),
        (8, 11, ExpiryReason.OFF_LINEAGE),
    ]
    assert plan.expired[0].reason_text.startswith("off the leader-epoch lineage")
    delete_expired_segments(plan, rsm=rsm, rlmm=rlmm, fence=fence_at(2), broker_id=1, clock=clock)
    # 4-7 is copied again from this lineage: no hole between 0-3 and the local log.
    copy_all(view_of(log, high_watermark=12), rsm, rlmm, 2, clock)
    remote = [
        (m.start_offset, m.end_offset, dict(m.segment_leader_epochs))
        for m in rlmm.list_remote_log_segments(TOPIC_ID_PARTITION)
    ]
    assert remote[0] == (0, 3, {0: 0})
    assert remote[1:] == [(4, 8, {0: 4, 2: 6})]
    log.close()


def segment(
    start: int,
    end: int,
    epochs: dict[int, int],
    *,
    state=RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
):  # type: ignore[no-untyped-def]
    return RemoteLogSegmentMetadata(
        remote_log_segment_id=RemoteLogSegmentId(
            topic_id_partition=TOPIC_ID_PARTITION, id=Uuid(0, start + 10)
        ),
        start_offset=start,
        end_offset=end,
        max_timestamp_ms=BASE_TIMESTAMP_MS,
        broker_id=0,
        event_timestamp_ms=0,
        segment_size_in_bytes=100,
        segment_leader_epochs=epochs,
        state=state,
    )


def test_segments_before_the_earliest_epoch_and_unfinished_deletes() -> None:
    plan = expired_segments(
        [
            segment(0, 49, {2: 0}),  # epoch 2 is below the earliest known epoch 5
            segment(50, 99, {5: 50}, state=RemoteLogSegmentState.DELETE_SEGMENT_STARTED),
            segment(100, 149, {5: 100}),
            segment(150, 199, {5: 150}, state=RemoteLogSegmentState.COPY_SEGMENT_STARTED),
        ],
        leader_epochs=[EpochEntry(5, 100)],
        log_start_offset=100,
        log_end_offset=300,
        local_only_size_bytes=0,
        retention_ms=-1,
        retention_bytes=-1,
        now_ms=BASE_TIMESTAMP_MS,
    )
    assert reasons(plan) == [
        (50, 99, ExpiryReason.DELETE_RETRY),
        (0, 49, ExpiryReason.BEFORE_LINEAGE),
    ]


def test_segments_beyond_the_view_are_kept() -> None:
    """Copied after the view was read (newer epoch or past its LEO): never expired."""
    plan = expired_segments(
        [segment(0, 49, {0: 0}), segment(50, 99, {0: 50}), segment(100, 149, {1: 100})],
        leader_epochs=[EpochEntry(0, 0)],
        log_start_offset=0,
        log_end_offset=60,
        local_only_size_bytes=0,
        retention_ms=-1,
        retention_bytes=-1,
        now_ms=0,
    )
    assert plan.expired == ()


def test_two_finished_copies_of_the_same_offsets_count_once_for_retention_bytes() -> None:
    """A rewrite (tier --rewrite) keeps the old copy FINISHED until the new one is: the bytes
    they both hold are retained once, so the oldest segment is not expired a run early."""
    old = segment(0, 49, {0: 0})
    rewritten = replace(
        old,
        remote_log_segment_id=RemoteLogSegmentId(
            topic_id_partition=TOPIC_ID_PARTITION, id=Uuid(1, 10)
        ),
    )
    common = {
        "leader_epochs": [EpochEntry(0, 0)],
        "log_start_offset": 0,
        "log_end_offset": 100,
        "local_only_size_bytes": 0,
        "retention_ms": -1,
        "now_ms": 0,
    }
    plan = expired_segments(
        [old, rewritten, segment(50, 99, {0: 50})], retention_bytes=200, **common
    )
    assert plan.expired == ()
    assert plan.remote_size_bytes == 200
    plan = expired_segments(
        [old, rewritten, segment(50, 99, {0: 50})], retention_bytes=100, **common
    )
    assert {(e.metadata.start_offset, e.reason) for e in plan.expired} == {
        (0, ExpiryReason.RETENTION_BYTES)
    }


def test_a_failed_delete_stays_started_and_is_retried(tmp_path: Path, clock: ManualClock) -> None:
    rsm = FailingDeleteStorage(tmp_path / "remote")
    rlmm = InMemoryRemoteLogMetadataManager()
    log = tiered_log(tmp_path, clock, rsm, rlmm)
    view = view_of(log, high_watermark=14)
    plan = plan_expiry(
        view, rlmm, config=tiered_config(retention_ms=0), now_ms=BASE_TIMESTAMP_MS + 4
    )
    assert reasons(plan) == [(0, 3, ExpiryReason.RETENTION_MS)]
    outcome = delete_expired_segments(
        plan, rsm=rsm, rlmm=rlmm, fence=fence_at(0), broker_id=1, clock=clock
    )
    assert outcome.deleted == () and len(outcome.failed) == 1
    [first, *_] = rlmm.list_remote_log_segments(TOPIC_ID_PARTITION)
    assert first.state is RemoteLogSegmentState.DELETE_SEGMENT_STARTED
    assert rlmm.remote_log_segment_metadata(TOPIC_ID_PARTITION, 0, 1) is None  # invisible
    rsm.failing = False
    retry = plan_expiry(view, rlmm, config=tiered_config(), now_ms=0)
    assert reasons(retry) == [(0, 3, ExpiryReason.DELETE_RETRY)]
    # Finishing a started delete is not fenced: the segment is invisible already.
    delete_expired_segments(retry, rsm=rsm, rlmm=rlmm, fence=fence_at(0, lambda: 9), broker_id=1)
    assert [m.start_offset for m in rlmm.list_remote_log_segments(TOPIC_ID_PARTITION)] == [4, 8]
    log.close()


def test_expiry_is_fenced_by_the_leader_epoch(tmp_path: Path, clock: ManualClock) -> None:
    rsm = LocalTieredStorage(tmp_path / "remote", fsync=False)
    rlmm = InMemoryRemoteLogMetadataManager()
    log = tiered_log(tmp_path, clock, rsm, rlmm)
    plan = plan_expiry(
        view_of(log, high_watermark=14),
        rlmm,
        config=tiered_config(retention_ms=0),
        now_ms=BASE_TIMESTAMP_MS + 100,
    )
    assert len(plan.expired) == 3
    with pytest.raises(StaleLeaderEpochError):
        delete_expired_segments(
            plan, rsm=rsm, rlmm=rlmm, fence=fence_at(0, lambda: 1), broker_id=1, clock=clock
        )
    assert [m.state for m in rlmm.list_remote_log_segments(TOPIC_ID_PARTITION)] == [
        RemoteLogSegmentState.COPY_SEGMENT_FINISHED
    ] * 3
    log.close()
