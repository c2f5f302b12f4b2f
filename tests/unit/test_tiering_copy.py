"""Planning and copying segments to the remote tier from a read-only view of a real log."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from storage_core.clock import ManualClock
from storage_core.common import TopicPartition
from storage_core.log.abstract_index import AbstractIndex
from storage_core.log.checkpoints import REPLICATION_OFFSET_CHECKPOINT, OffsetCheckpointFile
from storage_core.log.leader_epoch_cache import EpochEntry, LeaderEpochCheckpointFile
from storage_core.tiered.in_memory_rlmm import InMemoryRemoteLogMetadataManager
from storage_core.tiered.local_tiered_storage import LocalTieredStorage
from storage_core.tiered.metadata.metadata import RemotePartitionDeleteMetadata
from storage_core.tiered.metadata.states import RemoteLogSegmentState, RemotePartitionDeleteState
from storage_core.tiered.operations import (
    LogView,
    PartitionDeletedError,
    PartitionDirChangedError,
    SegmentNotEligibleError,
    StaleLeaderEpochError,
    build_log_segment_data,
    candidate_segments,
    copy_segment,
    highest_remote_offset,
    log_view,
)
from storage_core.tiered.remote_storage_manager import IndexType, RemoteStorageError
from tests.tiering_support import (
    BROKER_ID,
    TOPIC_ID_PARTITION,
    FailingAfterBytesStorage,
    RecordingRlmm,
    append,
    fence_at,
    open_partition_log,
    stored_files,
    tiered_config,
    view_of,
)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def rsm(tmp_path: Path) -> LocalTieredStorage:
    return LocalTieredStorage(tmp_path / "remote", fsync=False)


def bases(segments: list) -> list[int]:  # type: ignore[type-arg]
    return [s.base_offset for s in segments]


def copy_all(view: LogView, rsm, rlmm, epoch: int, clock: ManualClock) -> list[int]:  # type: ignore[no-untyped-def]
    copied = []
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
        copied.append(segment.base_offset)
    return copied


# ------------------------------------------------------------------ candidates
def test_candidates_stop_at_the_high_watermark_and_never_include_the_active_segment(
    tmp_path: Path, clock: ManualClock
) -> None:
    log = open_partition_log(tmp_path / "logs", clock)
    append(log, 14, epoch=0)  # segments 0-3, 4-7, 8-11, active 12-13
    rlmm = InMemoryRemoteLogMetadataManager()
    config = tiered_config()
    # HW 8: segment 4-7 ends below it (next base 8 <= 8); 8-11 does not.
    assert bases(candidate_segments(view_of(log, high_watermark=8), rlmm, config=config)) == [0, 4]
    assert bases(candidate_segments(view_of(log, high_watermark=7), rlmm, config=config)) == [0]
    # HW at the LEO: every closed segment, never the active one.
    assert bases(candidate_segments(view_of(log, high_watermark=14), rlmm, config=config)) == [
        0,
        4,
        8,
    ]
    log.close()


def test_candidates_read_the_high_watermark_from_the_log_dir_checkpoint(
    tmp_path: Path, clock: ManualClock
) -> None:
    log = open_partition_log(tmp_path / "logs", clock)
    append(log, 14, epoch=0)
    OffsetCheckpointFile(tmp_path / "logs" / REPLICATION_OFFSET_CHECKPOINT).write(
        {TopicPartition("orders", 0): 9, TopicPartition("other", 0): 100}
    )
    view = LogView.read(log.dir)
    assert view.high_watermark == 9
    assert view.log_end_offset == 14
    assert bases(
        candidate_segments(view, InMemoryRemoteLogMetadataManager(), config=tiered_config())
    ) == [0, 4]
    # No checkpoint entry: nothing is known to be committed, nothing is copied.
    OffsetCheckpointFile(tmp_path / "logs" / REPLICATION_OFFSET_CHECKPOINT).write({})
    assert (
        candidate_segments(
            LogView.read(log.dir), InMemoryRemoteLogMetadataManager(), config=tiered_config()
        )
        == []
    )
    log.close()


def test_candidates_are_skipped_when_copy_is_disabled(tmp_path: Path, clock: ManualClock) -> None:
    log = open_partition_log(tmp_path / "logs", clock)
    append(log, 10, epoch=0)
    view = view_of(log, high_watermark=10)
    rlmm = InMemoryRemoteLogMetadataManager()
    assert candidate_segments(view, rlmm, config=tiered_config(remote_log_copy_disable=True)) == []
    assert candidate_segments(view, rlmm, config=tiered_config(remote_storage_enable=False)) == []
    assert bases(candidate_segments(view, rlmm, config=tiered_config())) == [0, 4]
    log.close()


def test_candidates_resume_after_the_highest_remote_offset_across_epochs(
    tmp_path: Path, clock: ManualClock, rsm: LocalTieredStorage
) -> None:
    log = open_partition_log(tmp_path / "logs", clock)
    append(log, 6, epoch=0)  # 0-5 in epoch 0
    append(log, 10, epoch=3)  # 6-15 in epoch 3; segments 0-3, 4-7, 8-11, 12-15, active 16
    rlmm = InMemoryRemoteLogMetadataManager()
    view = view_of(log, high_watermark=8)
    assert copy_all(view, rsm, rlmm, 3, clock) == [0, 4]
    # Nothing copied in epoch 3 beyond offset 7; epochs 5 and 4 unknown: the walk finds 7.
    append(log, 4, epoch=5)  # new epoch with no copied offsets
    view = view_of(log, high_watermark=20)
    assert highest_remote_offset(view, rlmm).offset == 7
    assert highest_remote_offset(view, rlmm).leader_epoch == 3
    assert bases(candidate_segments(view, rlmm, config=tiered_config())) == [8, 12]
    # Only the epoch-0 segment copied: the walk goes past epochs 5 and 3 down to 0.
    rlmm_epoch0 = InMemoryRemoteLogMetadataManager()
    first = view.segments[0]
    copy_segment(
        view, first, rsm=rsm, rlmm=rlmm_epoch0, fence=fence_at(5), broker_id=1, clock=clock
    )
    assert highest_remote_offset(view, rlmm_epoch0).offset == 3
    assert bases(candidate_segments(view, rlmm_epoch0, config=tiered_config())) == [4, 8, 12]
    log.close()


def test_highest_remote_offset_is_capped_at_the_end_of_the_epoch_in_this_lineage(
    tmp_path: Path, clock: ManualClock, rsm: LocalTieredStorage
) -> None:
    log = open_partition_log(tmp_path / "logs", clock)
    append(log, 12, epoch=0)
    rlmm = InMemoryRemoteLogMetadataManager()
    assert copy_all(view_of(log, high_watermark=12), rsm, rlmm, 0, clock) == [0, 4]
    # An unclean election: this replica kept epoch 0 only up to offset 5, epoch 2 starts at 6.
    log.truncate_to(6)
    append(log, 6, epoch=2)
    view = view_of(log, high_watermark=12)
    assert highest_remote_offset(view, rlmm).offset == 5  # epoch 0 ends at 5 here, not 7
    assert bases(candidate_segments(view, rlmm, config=tiered_config()))[0] == 4
    log.close()


# ------------------------------------------------------------------ copying
def test_copy_uploads_the_segment_files_and_the_epoch_entries(
    tmp_path: Path, clock: ManualClock, rsm: LocalTieredStorage
) -> None:
    log = open_partition_log(tmp_path / "logs", clock)
    append(log, 2, epoch=0)
    append(log, 3, epoch=1)  # 2-4
    append(log, 5, epoch=4)  # 5-9; segments 0-3, 4-7, active 8
    view = view_of(log, high_watermark=10)
    segment = view.segments[1]
    assert (segment.base_offset, segment.end_offset) == (4, 7)
    rlmm = RecordingRlmm()
    result = copy_segment(
        view, segment, rsm=rsm, rlmm=rlmm, fence=fence_at(4), broker_id=BROKER_ID, clock=clock
    )
    metadata = result.metadata
    assert metadata.state is RemoteLogSegmentState.COPY_SEGMENT_FINISHED
    assert (metadata.start_offset, metadata.end_offset) == (4, 7)
    assert dict(metadata.segment_leader_epochs) == {1: 4, 4: 5}
    assert metadata.segment_size_in_bytes == segment.log_path.stat().st_size
    assert metadata.max_timestamp_ms == segment.max_timestamp_ms
    assert metadata.broker_id == BROKER_ID
    assert [state for _, state in rlmm.segment_events] == [
        RemoteLogSegmentState.COPY_SEGMENT_STARTED,
        RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
    ]
    # What a reader of the remote tier sees equals the local files, byte for byte.
    with rsm.fetch_log_segment(metadata, 0) as remote:
        assert remote.read() == segment.log_path.read_bytes()
    with rsm.fetch_index(metadata, IndexType.OFFSET) as remote:
        assert remote.read() == segment.offset_index_path.read_bytes()
    with rsm.fetch_index(metadata, IndexType.TIMESTAMP) as remote:
        assert remote.read() == segment.time_index_path.read_bytes()
    with rsm.fetch_index(metadata, IndexType.PRODUCER_SNAPSHOT) as remote:
        assert remote.read() == (log.dir / "00000000000000000008.snapshot").read_bytes()
    # The leader-epoch checkpoint holds the entries up to the segment's end, and parses.
    with rsm.fetch_index(metadata, IndexType.LEADER_EPOCH) as remote:
        checkpoint = tmp_path / "leader-epoch-checkpoint"
        checkpoint.write_bytes(remote.read())
    assert LeaderEpochCheckpointFile(checkpoint).read() == [
        EpochEntry(0, 0),
        EpochEntry(1, 2),
        EpochEntry(4, 5),
    ]
    # Readers find it by epoch and offset.
    assert rlmm.remote_log_segment_metadata(TOPIC_ID_PARTITION, 4, 6) == metadata
    assert rlmm.highest_offset_for_epoch(TOPIC_ID_PARTITION, 1) == 4
    assert rlmm.highest_offset_for_epoch(TOPIC_ID_PARTITION, 4) == 7
    log.close()


def test_copy_entries_of_the_first_segment_exclude_later_epochs(
    tmp_path: Path, clock: ManualClock, rsm: LocalTieredStorage
) -> None:
    log = open_partition_log(tmp_path / "logs", clock)
    append(log, 4, epoch=2)
    append(log, 4, epoch=3)
    view = view_of(log, high_watermark=8)
    data = build_log_segment_data(view, view.segments[0])
    assert data.leader_epoch_index == b"0\n1\n2 0\n"
    result = copy_segment(
        view,
        view.segments[0],
        rsm=rsm,
        rlmm=InMemoryRemoteLogMetadataManager(),
        fence=fence_at(3),
        broker_id=1,
        clock=clock,
    )
    assert dict(result.metadata.segment_leader_epochs) == {2: 0}
    log.close()


def test_the_active_segment_is_refused(
    tmp_path: Path, clock: ManualClock, rsm: LocalTieredStorage
) -> None:
    log = open_partition_log(tmp_path / "logs", clock)
    append(log, 6, epoch=0)
    view = view_of(log, high_watermark=6)
    rlmm = RecordingRlmm()
    with pytest.raises(SegmentNotEligibleError):
        copy_segment(view, view.segments[-1], rsm=rsm, rlmm=rlmm, fence=fence_at(0), broker_id=1)
    assert rlmm.segment_events == []
    log.close()


@pytest.mark.parametrize("fail_after_bytes", [0, 100, 344, 400])
def test_a_copy_failing_mid_upload_is_rolled_back(
    tmp_path: Path, clock: ManualClock, fail_after_bytes: int
) -> None:
    log = open_partition_log(tmp_path / "logs", clock)
    append(log, 6, epoch=0)
    view = view_of(log, high_watermark=6)
    storage = FailingAfterBytesStorage(tmp_path / "remote", fail_after_bytes=fail_after_bytes)
    rlmm = RecordingRlmm()
    with pytest.raises(RemoteStorageError, match="simulated network failure"):
        copy_segment(
            view,
            view.segments[0],
            rsm=storage,
            rlmm=rlmm,
            fence=fence_at(0),
            broker_id=1,
            clock=clock,
        )
    assert [state for _, state in rlmm.segment_events] == [
        RemoteLogSegmentState.COPY_SEGMENT_STARTED,
        RemoteLogSegmentState.DELETE_SEGMENT_STARTED,
        RemoteLogSegmentState.DELETE_SEGMENT_FINISHED,
    ]
    assert len({segment_id for segment_id, _ in rlmm.segment_events}) == 1
    assert list(rlmm.list_remote_log_segments(TOPIC_ID_PARTITION)) == []
    assert stored_files(tmp_path / "remote") == []  # no object, no half-written temp file
    # The next attempt copies the same segment under a new id.
    assert bases(candidate_segments(view, rlmm, config=tiered_config())) == [0]
    log.close()


def test_a_leader_change_before_the_copy_publishes_nothing(
    tmp_path: Path, clock: ManualClock, rsm: LocalTieredStorage
) -> None:
    log = open_partition_log(tmp_path / "logs", clock)
    append(log, 6, epoch=0)
    view = view_of(log, high_watermark=6)
    rlmm = RecordingRlmm()
    with pytest.raises(StaleLeaderEpochError, match="current leader epoch is 1"):
        copy_segment(
            view,
            view.segments[0],
            rsm=rsm,
            rlmm=rlmm,
            fence=fence_at(0, lambda: 1),
            broker_id=1,
            clock=clock,
        )
    assert rlmm.segment_events == []
    assert stored_files(tmp_path / "remote") == []
    log.close()


def test_a_leader_change_during_the_upload_rolls_back_instead_of_finishing(
    tmp_path: Path, clock: ManualClock, rsm: LocalTieredStorage
) -> None:
    log = open_partition_log(tmp_path / "logs", clock)
    append(log, 6, epoch=0)
    view = view_of(log, high_watermark=6)
    rlmm = RecordingRlmm()
    epochs = iter([0, 1])  # current at COPY_SEGMENT_STARTED, then at COPY_SEGMENT_FINISHED
    with pytest.raises(StaleLeaderEpochError):
        copy_segment(
            view,
            view.segments[0],
            rsm=rsm,
            rlmm=rlmm,
            fence=fence_at(0, lambda: next(epochs)),
            broker_id=1,
            clock=clock,
        )
    assert [state for _, state in rlmm.segment_events] == [
        RemoteLogSegmentState.COPY_SEGMENT_STARTED,
        RemoteLogSegmentState.DELETE_SEGMENT_STARTED,
        RemoteLogSegmentState.DELETE_SEGMENT_FINISHED,
    ]
    assert stored_files(tmp_path / "remote") == []
    assert rlmm.highest_offset_for_epoch(TOPIC_ID_PARTITION, 0) is None
    log.close()


def test_a_partition_marked_for_deletion_is_not_copied(
    tmp_path: Path, clock: ManualClock, rsm: LocalTieredStorage
) -> None:
    log = open_partition_log(tmp_path / "logs", clock)
    append(log, 6, epoch=0)
    view = view_of(log, high_watermark=6)
    rlmm = RecordingRlmm()
    rlmm.put_remote_partition_delete_metadata(
        RemotePartitionDeleteMetadata(
            topic_id_partition=TOPIC_ID_PARTITION,
            state=RemotePartitionDeleteState.DELETE_PARTITION_MARKED,
            event_timestamp_ms=0,
            broker_id=-1,
        )
    )
    with pytest.raises(PartitionDeletedError):
        copy_segment(view, view.segments[0], rsm=rsm, rlmm=rlmm, fence=fence_at(0), broker_id=1)
    assert rlmm.segment_events == []
    log.close()


def test_the_view_never_writes_to_the_partition_dir(
    tmp_path: Path, clock: ManualClock, rsm: LocalTieredStorage
) -> None:
    log = open_partition_log(tmp_path / "logs", clock)
    append(log, 10, epoch=0)
    log.close()
    before = {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in log.dir.iterdir()}
    for path in log.dir.iterdir():
        path.chmod(0o444)
    log.dir.chmod(0o555)
    try:
        view = LogView.read(log.dir, high_watermark=10)
        copy_all(view, rsm, InMemoryRemoteLogMetadataManager(), 0, clock)
    finally:
        log.dir.chmod(0o755)
    after = {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in log.dir.iterdir()}
    assert after == before


def test_a_time_index_trimmed_while_the_view_reads_it_is_read_again(
    tmp_path: Path, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The broker trims a segment's indexes when it rolls it. The view never maps the broker's
    time index (a mapping of bytes cut off faults with SIGBUS): it reads the last entry, and a
    file that shrank between its size and the read makes it read the dir again."""
    log = open_partition_log(tmp_path / "logs", clock)
    append(log, 14, epoch=0)
    log.roll()
    partition_dir = log.dir
    original_map = AbstractIndex._map
    mapped: list[Path] = []

    def record_map(index: AbstractIndex, length: int) -> None:
        mapped.append(index.path)
        original_map(index, length)

    real_pread = os.pread
    trimmed: list[int] = []

    def trim_then_pread(fd: int, size: int, offset: int) -> bytes:
        if not trimmed and os.readlink(f"/proc/self/fd/{fd}").endswith(".timeindex"):
            trimmed.append(fd)
            os.truncate(os.readlink(f"/proc/self/fd/{fd}"), offset)  # as the broker's roll
        return real_pread(fd, size, offset)

    monkeypatch.setattr(AbstractIndex, "_map", record_map)
    monkeypatch.setattr(os, "pread", trim_then_pread)
    view = LogView.read(partition_dir, high_watermark=14)
    assert trimmed
    assert [p for p in mapped if p.suffix == ".timeindex"] == []
    assert [segment.base_offset for segment in view.segments][:1] == [0]
    log.close()


def test_a_segment_whose_roll_is_not_over_is_not_read_as_closed_with_timestamp_zero(
    tmp_path: Path, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The broker's roll creates the next segment, then writes the closed segment's last time
    index entry and trims the index. A view between the two saw a closed segment whose time
    index was still preallocated, read its zeros as the last entry, and copied the segment
    with a largest timestamp of 0 (remote retention by time would have expired it at once).
    It now waits for the roll to end; a roll that never ends makes it give up, naming the
    index."""
    log = open_partition_log(tmp_path / "logs", clock)
    append(log, 14, epoch=0)
    largest = log.segments[-1].max_timestamp_so_far
    assert largest > 0
    (log.dir / f"{14:020d}.log").touch()  # the roll's first step: the next segment exists
    pauses: list[int] = []
    monkeypatch.setattr(log_view, "_pause_before_reading_again", pauses.append)
    with pytest.raises(PartitionDirChangedError, match="timeindex is still preallocated"):
        LogView.read(log.dir, high_watermark=14)
    assert pauses == [1, 2]

    def roll_ends(attempt: int) -> None:
        pauses.append(attempt)
        log.roll()

    pauses.clear()
    monkeypatch.setattr(log_view, "_pause_before_reading_again", roll_ends)
    view = LogView.read(log.dir, high_watermark=14)
    assert pauses == [1]
    closed = [(s.base_offset, s.max_timestamp_so_far) for s in log.segments[:-1]]
    assert closed[-1] == (log.segments[-2].base_offset, largest)
    assert [(s.base_offset, s.max_timestamp_ms) for s in view.segments] == [*closed, (14, None)]
    log.close()
