"""Behaviour of one partition's Log: appends, reads, rolls, epochs, truncation, retention."""

from __future__ import annotations

import struct
from collections.abc import Callable

import pytest

from storage_core.clock import ManualClock
from storage_core.errors import (
    CorruptRecordError,
    InvalidRecordError,
    OffsetOutOfRangeError,
    RecordBatchTooLargeError,
    UnexpectedAppendOffsetError,
)
from storage_core.log import log_file_utils as files
from storage_core.log.leader_epoch_cache import EpochEntry
from storage_core.log.local_log import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP
from storage_core.log.log import Log
from storage_core.log.log_config import LogConfig
from storage_core.records import RecordBatch, iter_batches
from tests.conftest import BASE_TIMESTAMP_MS, make_batch

OpenLog = Callable[..., Log]


def values_in(log: Log, start: int = 0) -> list[bytes]:
    return [
        r.value or b""
        for batch in log.read_batches(start)
        for r in batch.records()
        if r.offset >= start
    ]


def test_leader_append_assigns_contiguous_offsets_and_epoch(open_log: OpenLog) -> None:
    log = open_log()
    first = log.append_as_leader(make_batch(3, tag="a"), leader_epoch=5)
    second = log.append_as_leader(make_batch(2, tag="b"), leader_epoch=5)
    assert (first.first_offset, first.last_offset) == (0, 2)
    assert (second.first_offset, second.last_offset) == (3, 4)
    assert log.log_end_offset == 5
    stored = list(log.read_batches(0))
    assert [b.base_offset for b in stored] == [0, 3]
    assert all(b.partition_leader_epoch == 5 for b in stored)
    for batch in stored:
        batch.ensure_valid()  # patched header fields are outside the CRC
    assert [r.offset for b in stored for r in b.records()] == [0, 1, 2, 3, 4]


def test_rejected_append_writes_nothing(open_log: OpenLog) -> None:
    log = open_log(LogConfig(max_message_bytes=2000))
    log.append_as_leader(make_batch(1), leader_epoch=0)
    size = log.size_in_bytes
    corrupt = bytearray(make_batch(2))
    corrupt[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError, match=r"CRC|crc"):
        log.append_as_leader(corrupt, leader_epoch=0)
    with pytest.raises(RecordBatchTooLargeError, match=r"max\.message\.bytes"):
        log.append_as_leader(make_batch(1, value_size=5000), leader_epoch=0)
    with pytest.raises(InvalidRecordError):
        log.append_as_leader(b"", leader_epoch=0)
    with pytest.raises(CorruptRecordError):
        log.append_as_leader(make_batch(1) + b"\x00\x01", leader_epoch=0)
    assert log.size_in_bytes == size
    assert log.log_end_offset == 1


def test_inconsistent_record_count_is_refused(open_log: OpenLog) -> None:
    log = open_log()
    batch = bytearray(make_batch(3))
    struct.pack_into(">i", batch, 57, 2)  # records count field, covered by the CRC
    patched = RecordBatch.from_buffer(batch)
    struct.pack_into(">I", batch, 17, patched.compute_checksum())
    with pytest.raises(InvalidRecordError, match="record count"):
        log.append_as_leader(batch, leader_epoch=0)


def test_read_starts_at_batch_holding_offset_and_respects_max_offset(open_log: OpenLog) -> None:
    log = open_log()
    for _ in range(4):
        log.append_as_leader(make_batch(5), leader_epoch=0)
    info = log.read(7, 1 << 20)
    batches = [b for _p, b in iter_batches(info.read_bytes())]
    assert batches[0].base_offset == 5  # Kafka returns the whole batch holding offset 7
    assert batches[-1].last_offset == 19
    hw_limited = log.read(7, 1 << 20, max_offset=10)
    assert [b.base_offset for _p, b in iter_batches(hw_limited.read_bytes())] == [5]
    assert log.read(20, 1 << 20).size_in_bytes == 0
    with pytest.raises(OffsetOutOfRangeError):
        log.read(21, 1 << 20)


def test_read_max_bytes_cuts_but_min_one_message_returns_a_whole_batch(open_log: OpenLog) -> None:
    log = open_log()
    log.append_as_leader(make_batch(10, value_size=200), leader_epoch=0)
    whole = log.read(0, 10, min_one_message=True)
    assert whole.size_in_bytes == log.size_in_bytes
    cut = log.read(0, 10, min_one_message=False)
    assert cut.size_in_bytes == 10


def test_rolls_on_segment_bytes(open_log: OpenLog) -> None:
    batch = make_batch(1, value_size=100)
    log = open_log(LogConfig(segment_bytes=len(batch) * 3))
    for _ in range(7):
        log.append_as_leader(batch, leader_epoch=0)
    assert [s.base_offset for s in log.segments] == [0, 3, 6]
    names = sorted(p.name for p in log.dir.iterdir() if p.suffix == ".log")
    assert names == [f"{o:020d}.log" for o in (0, 3, 6)]


@pytest.mark.parametrize("per_segment", [1, 2, 5])
def test_index_sizes_give_exactly_n_batches_per_segment(
    open_log: OpenLog, per_segment: int
) -> None:
    """index.interval.bytes=1 and segment.index.bytes=12*N: N single-record batches each."""
    log = open_log(LogConfig(index_interval_bytes=1, segment_index_bytes=12 * per_segment))
    for i in range(per_segment * 4 + 1):
        log.append_as_leader(make_batch(1, timestamp=BASE_TIMESTAMP_MS + i), leader_epoch=0)
    bases = [s.base_offset for s in log.segments]
    assert bases == [per_segment * k for k in range(5)]


def test_rolls_on_segment_ms_measured_from_first_record(open_log: OpenLog) -> None:
    log = open_log(LogConfig(segment_ms=1000))
    log.append_as_leader(make_batch(1, timestamp=BASE_TIMESTAMP_MS), leader_epoch=0)
    log.append_as_leader(make_batch(1, timestamp=BASE_TIMESTAMP_MS + 999), leader_epoch=0)
    assert len(log.segments) == 1
    log.append_as_leader(make_batch(1, timestamp=BASE_TIMESTAMP_MS + 1001), leader_epoch=0)
    assert [s.base_offset for s in log.segments] == [0, 2]


def test_closed_segment_indexes_are_trimmed(open_log: OpenLog) -> None:
    log = open_log(LogConfig(index_interval_bytes=1, segment_index_bytes=12 * 3))
    for i in range(4):
        log.append_as_leader(make_batch(1, timestamp=BASE_TIMESTAMP_MS + i), leader_epoch=0)
    index = files.offset_index_file(log.dir, 0)
    time_index = files.time_index_file(log.dir, 0)
    # three batches: the first is never indexed, the second and third are (interval 1 byte);
    # the roll's final time-index entry repeats the last timestamp, so it is not added
    assert index.stat().st_size == 2 * 8
    assert time_index.stat().st_size == 2 * 12
    # the active segment's indexes stay preallocated
    assert files.offset_index_file(log.dir, 3).stat().st_size == 12 * 3 // 8 * 8


def test_leader_epochs_are_recorded_in_the_checkpoint_file(open_log: OpenLog) -> None:
    log = open_log()
    log.append_as_leader(make_batch(2), leader_epoch=0)
    log.append_as_leader(make_batch(2), leader_epoch=0)
    log.append_as_leader(make_batch(3), leader_epoch=3)
    text = (log.dir / "leader-epoch-checkpoint").read_text()
    assert text == "0\n2\n0 0\n3 4\n"
    assert log.leader_epoch_cache.end_offset_for(0, log.log_end_offset) == (0, 4)
    assert log.leader_epoch_cache.end_offset_for(3, log.log_end_offset) == (3, 7)


def test_follower_append_requires_contiguous_offsets(open_log: OpenLog, tmp_path) -> None:
    leader = Log(tmp_path / "leader-0", LogConfig())
    for epoch in (0, 0, 1):
        leader.append_as_leader(make_batch(2), leader_epoch=epoch)
    follower = open_log()
    data = leader.read(0, 1 << 20).read_bytes()
    follower.append_as_follower(data)
    assert follower.log_end_offset == 6
    assert [(e.epoch, e.start_offset) for e in follower.leader_epoch_cache.epoch_entries()] == [
        (0, 0),
        (1, 4),
    ]
    with pytest.raises(UnexpectedAppendOffsetError, match="log end offset is 6"):
        follower.append_as_follower(data)
    leader.close()


def test_truncate_to_removes_later_segments_and_epochs(open_log: OpenLog) -> None:
    batch = make_batch(2, value_size=50)
    log = open_log(LogConfig(segment_bytes=len(batch) * 2))
    for epoch in (0, 0, 1, 1, 2, 2):
        log.append_as_leader(batch, leader_epoch=epoch)
    log.update_high_watermark(12)
    assert len(log.segments) == 3
    assert log.truncate_to(5) is True
    # offset 5 lies inside batch [4,5]: the whole batch goes, so the log ends at 4
    assert log.log_end_offset == 4
    assert [s.base_offset for s in log.segments] == [0, 4]
    assert [(e.epoch, e.start_offset) for e in log.leader_epoch_cache.epoch_entries()] == [(0, 0)]
    assert log.high_watermark == 4
    assert not files.log_file(log.dir, 8).exists()
    info = log.append_as_leader(make_batch(1, tag="new"), leader_epoch=3)
    assert info.first_offset == 4
    assert values_in(log)[-1].startswith(b"new0")
    assert log.truncate_to(100) is False


def test_truncate_at_the_end_drops_an_epoch_without_records(open_log: OpenLog) -> None:
    # A leader of epoch 1 that wrote nothing in it, now a follower told to keep its whole log:
    # epoch 1 must not stay its last fetched epoch.
    log = open_log()
    log.append_as_leader(make_batch(2), leader_epoch=0)
    log.leader_epoch_cache.assign(1, log.log_end_offset)
    assert log.truncate_to(2) is False
    assert log.log_end_offset == 2
    assert log.leader_epoch_cache.epoch_entries() == [EpochEntry(0, 0)]
    assert log.latest_epoch == 0


def test_truncate_fully_and_start_at(open_log: OpenLog) -> None:
    log = open_log()
    log.append_as_leader(make_batch(3), leader_epoch=0)
    log.truncate_fully_and_start_at(42)
    assert (log.log_start_offset, log.log_end_offset) == (42, 42)
    assert log.leader_epoch_cache.epoch_entries() == []
    assert [p.name for p in sorted(log.dir.glob("*.log"))] == [f"{42:020d}.log"]
    assert log.append_as_leader(make_batch(1), leader_epoch=1).first_offset == 42


def test_offset_for_timestamp(open_log: OpenLog) -> None:
    log = open_log(LogConfig(segment_bytes=400))
    for i in range(10):
        log.append_as_leader(make_batch(2, timestamp=BASE_TIMESTAMP_MS + 100 * i), leader_epoch=0)
    found = log.offset_for_timestamp(BASE_TIMESTAMP_MS + 250)
    assert found is not None and (found.timestamp, found.offset) == (BASE_TIMESTAMP_MS + 300, 6)
    exact = log.offset_for_timestamp(BASE_TIMESTAMP_MS + 401)
    assert exact is not None and exact.offset == 9
    assert log.offset_for_timestamp(BASE_TIMESTAMP_MS + 10_000) is None
    earliest = log.offset_for_timestamp(EARLIEST_TIMESTAMP)
    latest = log.offset_for_timestamp(LATEST_TIMESTAMP)
    assert earliest is not None and latest is not None
    assert (earliest.offset, latest.offset) == (0, 20)
    maximum = log.offset_for_timestamp(MAX_TIMESTAMP)
    assert maximum is not None and (maximum.timestamp, maximum.offset) == (
        BASE_TIMESTAMP_MS + 901,
        19,
    )


def test_retention_bytes_deletes_oldest_closed_segments_below_hw(open_log: OpenLog) -> None:
    batch = make_batch(1, value_size=100)
    log = open_log(LogConfig(segment_bytes=len(batch) * 2, retention_bytes=len(batch) * 3))
    for _ in range(9):
        log.append_as_leader(batch, leader_epoch=0)
    assert [s.base_offset for s in log.segments] == [0, 2, 4, 6, 8]
    assert log.delete_old_segments() == 0  # nothing is below the high watermark yet
    log.update_high_watermark(log.log_end_offset)
    assert log.delete_old_segments() == 3
    assert [s.base_offset for s in log.segments] == [6, 8]
    assert log.log_start_offset == 6
    assert not files.log_file(log.dir, 0).exists()
    assert not list(log.dir.glob("*.deleted"))
    with pytest.raises(OffsetOutOfRangeError):
        log.read(5, 100)


def test_retention_ms_never_deletes_the_active_segment(
    open_log: OpenLog, clock: ManualClock
) -> None:
    batch = make_batch(1, value_size=100, timestamp=BASE_TIMESTAMP_MS)
    log = open_log(LogConfig(segment_bytes=len(batch) * 2, retention_ms=60_000))
    for _ in range(5):
        log.append_as_leader(batch, leader_epoch=0)
    log.update_high_watermark(log.log_end_offset)
    assert log.delete_old_segments() == 0
    clock.sleep(120_000)
    assert log.delete_old_segments() == 2
    assert [s.base_offset for s in log.segments] == [4]


def test_deletion_guard_stops_retention(open_log: OpenLog) -> None:
    batch = make_batch(1, value_size=100)
    log = open_log(LogConfig(segment_bytes=len(batch), retention_bytes=0))
    for _ in range(5):
        log.append_as_leader(batch, leader_epoch=0)
    log.update_high_watermark(log.log_end_offset)
    log.set_segment_deletion_guard(lambda segment: segment.base_offset < 2)
    assert log.delete_old_segments() == 2
    assert log.segments[0].base_offset == 2


def test_log_start_offset_advance_and_breach_deletion(open_log: OpenLog) -> None:
    batch = make_batch(2, value_size=100)
    log = open_log(LogConfig(segment_bytes=len(batch)))
    for epoch in (0, 1, 2):
        log.append_as_leader(batch, leader_epoch=epoch)
    with pytest.raises(OffsetOutOfRangeError, match="high watermark"):
        log.maybe_increment_log_start_offset(3, "delete records")
    log.update_high_watermark(6)
    assert log.maybe_increment_log_start_offset(3, "delete records")
    assert [(e.epoch, e.start_offset) for e in log.leader_epoch_cache.epoch_entries()] == [
        (1, 3),
        (2, 4),
    ]
    assert log.delete_old_segments() == 1
    assert log.segments[0].base_offset == 2
    assert values_in(log, 3)[0].startswith(b"v1")


def test_reopen_after_close_keeps_everything(open_log: OpenLog) -> None:
    config = LogConfig(segment_bytes=300)
    log = open_log(config)
    for _ in range(10):
        log.append_as_leader(make_batch(2, value_size=40), leader_epoch=1)
    before = values_in(log)
    log.close()
    reopened = open_log(config, recovery_point=20)
    assert reopened.log_end_offset == 20
    assert values_in(reopened) == before
    assert reopened.append_as_leader(make_batch(1), leader_epoch=1).first_offset == 20


def test_stored_batches_are_byte_identical_apart_from_offset_and_epoch(open_log: OpenLog) -> None:
    log = open_log()
    original = make_batch(4)
    log.append_as_leader(original, leader_epoch=7)
    stored = log.read(0, 1 << 20).read_bytes()
    assert stored[16:] == original[16:]
    assert RecordBatch.from_buffer(stored).partition_leader_epoch == 7


def test_an_empty_cleanup_policy_keeps_every_segment_past_retention(open_log: OpenLog) -> None:
    """Kafka accepts ``cleanup.policy=`` (the empty list): neither ``delete`` nor ``compact``,
    so retention by size or time removes nothing (only a log start offset moved by
    DeleteRecords would)."""
    batch = make_batch(1, value_size=100)
    config = LogConfig().with_overrides(
        {"cleanup.policy": "", "segment.bytes": len(batch) * 2, "retention.bytes": len(batch)}
    )
    assert (config.is_delete, config.is_compacted) == (False, False)
    log = open_log(config)
    for _ in range(9):
        log.append_as_leader(batch, leader_epoch=0)
    log.update_high_watermark(log.log_end_offset)
    assert log.delete_old_segments() == 0
    assert [s.base_offset for s in log.segments] == [0, 2, 4, 6, 8]
