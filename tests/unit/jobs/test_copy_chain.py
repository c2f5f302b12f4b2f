"""copy_segments' executor side on a real log dir, a directory RSM and in-memory metadata:
the deadline (a late copy never commits and is rolled back), chains stop at a failure,
and a segment already remote is skipped."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from jobs.copy_segments import copy_chain, planned_segment
from storage_core.clock import ManualClock
from storage_core.tiered.local_tiered_storage import LocalTieredStorage
from storage_core.tiered.metadata.states import RemoteLogSegmentState
from storage_core.tiered.operations import LogView, candidate_segments
from storage_core.tiered.remote_storage_manager import LogSegmentData, RemoteLogSegmentMetadataLike
from tests.tiering_support import (
    BROKER_ID,
    TOPIC_ID_PARTITION,
    RecordingRlmm,
    append,
    open_partition_log,
    stored_files,
    tiered_config,
)

STATES = RemoteLogSegmentState


class SlowStorage(LocalTieredStorage):
    """Each upload takes ``upload_ms`` of the manual clock."""

    def __init__(self, storage_dir: Path, clock: ManualClock, upload_ms: int) -> None:
        super().__init__(storage_dir, fsync=False)
        self.clock = clock
        self.upload_ms = upload_ms

    def copy_log_segment_data(
        self,
        remote_log_segment_metadata: RemoteLogSegmentMetadataLike,
        log_segment_data: LogSegmentData,
    ) -> bytes | None:
        self.clock.sleep(self.upload_ms)
        return super().copy_log_segment_data(remote_log_segment_metadata, log_segment_data)


def planned_chain(tmp_path: Path, clock: ManualClock):  # type: ignore[no-untyped-def]
    log = open_partition_log(tmp_path / "logs", clock)
    append(log, 14, epoch=0)  # segments 0-3, 4-7, 8-11, active 12-13
    view = LogView.read(log.dir, high_watermark=14, log_start_offset=0)
    segments = candidate_segments(view, RecordingRlmm(), config=tiered_config())
    log.close()
    return [planned_segment(view, s, leader_epoch=0, leader_id=1) for s in segments]


def run_chain(chain, rsm, rlmm, clock, timeout_s=10.0):  # type: ignore[no-untyped-def]
    return list(
        copy_chain(
            chain,
            rsm=rsm,
            rlmm=rlmm,
            leader_epoch_reader=lambda tp: lambda: 0,
            broker_id=BROKER_ID,
            copy_timeout_s=timeout_s,
            clock=clock,
        )
    )


def test_copies_the_chain_then_a_second_run_finds_it_already_remote(tmp_path: Path) -> None:
    clock = ManualClock()
    chain = planned_chain(tmp_path, clock)
    assert [s.base_offset for s in chain] == [0, 4, 8]
    rsm = LocalTieredStorage(tmp_path / "remote", fsync=False)
    rlmm = RecordingRlmm()
    first = run_chain(chain, rsm, rlmm, clock)
    assert [(o.base_offset, o.status) for o in first] == [
        (0, "copied"),
        (4, "copied"),
        (8, "copied"),
    ]
    second = run_chain(chain, rsm, rlmm, clock)
    assert [(o.status, o.reason) for o in second] == [("skipped", "already remote")] * 3
    finished = [m for m in rlmm.list_remote_log_segments(TOPIC_ID_PARTITION)]
    assert sorted(m.start_offset for m in finished) == [0, 4, 8]
    assert all(m.state == STATES.COPY_SEGMENT_FINISHED for m in finished)


def test_a_copy_past_its_deadline_is_rolled_back_and_stops_the_chain(tmp_path: Path) -> None:
    clock = ManualClock()
    chain = planned_chain(tmp_path, clock)
    rsm = SlowStorage(tmp_path / "remote", clock, upload_ms=5_000)
    rlmm = RecordingRlmm()
    outcomes = run_chain(chain, rsm, rlmm, clock, timeout_s=2.0)
    assert [o.status for o in outcomes] == ["failed", "skipped", "skipped"]
    assert outcomes[0].reason is not None
    assert "CopyDeadlineExceededError" in outcomes[0].reason
    assert "passed its deadline by 3000 ms" in outcomes[0].reason
    assert outcomes[1].reason == "segment 0 of the partition failed"
    # STARTED, then rolled back; never FINISHED; nothing left in the store
    assert [state for _, state in rlmm.segment_events] == [
        STATES.COPY_SEGMENT_STARTED,
        STATES.DELETE_SEGMENT_STARTED,
        STATES.DELETE_SEGMENT_FINISHED,
    ]
    assert stored_files(tmp_path / "remote") == []
    # within the deadline the same copies commit
    rsm.upload_ms = 1_000
    assert [o.status for o in run_chain(chain, rsm, rlmm, clock, timeout_s=2.0)] == ["copied"] * 3


def test_a_stale_leader_epoch_fences_the_chain_before_anything_is_published(
    tmp_path: Path,
) -> None:
    clock = ManualClock()
    chain = planned_chain(tmp_path, clock)
    rsm = LocalTieredStorage(tmp_path / "remote", fsync=False)
    rlmm = RecordingRlmm()
    outcomes = list(
        copy_chain(
            chain,
            rsm=rsm,
            rlmm=rlmm,
            leader_epoch_reader=lambda tp: lambda: 1,
            broker_id=BROKER_ID,
            copy_timeout_s=10.0,
            clock=clock,
        )
    )
    # the leader moved: reported as fenced (the new leader's run copies on), not a failure
    assert [o.status for o in outcomes] == ["fenced", "skipped", "skipped"]
    assert "the current leader epoch is 1" in (outcomes[0].reason or "")
    assert outcomes[1].reason == "the partition's leader moved during the run"
    assert rlmm.segment_events == []


def test_a_segment_gone_since_planning_is_skipped(tmp_path: Path) -> None:
    clock = ManualClock()
    chain = planned_chain(tmp_path, clock)
    moved = dataclasses.replace(chain[0], next_base_offset=3)
    outcomes = run_chain(
        [moved, *chain[1:]], LocalTieredStorage(tmp_path / "r", fsync=False), RecordingRlmm(), clock
    )
    assert [o.status for o in outcomes] == ["skipped"] * 3
    assert outcomes[0].reason == "the segment changed or is gone since planning"
