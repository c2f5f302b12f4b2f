"""Idempotent-producer state: sequence and epoch checks, duplicates, ``.snapshot`` files."""

from __future__ import annotations

import shutil
import struct
from collections.abc import Callable
from pathlib import Path

import crc32c
import pytest

from storage_core.clock import ManualClock
from storage_core.errors import (
    CorruptSnapshotError,
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
)
from storage_core.log import log_file_utils as files
from storage_core.log.log import Log
from storage_core.log.log_config import LogConfig
from storage_core.log.log_validator import LogAppendInfo
from storage_core.log.producer_snapshot import decode_snapshot, encode_snapshot, read_snapshot
from storage_core.log.producer_state_entry import (
    BatchMetadata,
    ProducerStateEntry,
    decrement_sequence,
    increment_sequence,
)
from storage_core.records import SimpleRecord, build_batch
from tests.conftest import BASE_TIMESTAMP_MS, make_batch

INT32_MAX = (1 << 31) - 1
PID = 1000


def produce(
    log: Log,
    seq: int,
    count: int = 1,
    *,
    pid: int = PID,
    epoch: int = 0,
    timestamp: int = BASE_TIMESTAMP_MS,
    is_transactional: bool = False,
) -> LogAppendInfo:
    batch = make_batch(
        count,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        timestamp=timestamp,
        is_transactional=is_transactional,
    )
    return log.append_as_leader(batch, leader_epoch=0)


def last_batch_view(log: Log) -> dict[int, tuple[int, int, int, int, int, int, int, int]]:
    """What a snapshot keeps of each producer (only its last batch)."""
    return {
        pid: (
            entry.producer_epoch,
            entry.last_seq,
            entry.last_data_offset,
            entry.last_offset_delta,
            entry.last_timestamp,
            entry.coordinator_epoch,
            -1 if entry.current_txn_first_offset is None else entry.current_txn_first_offset,
            len(entry.batch_metadata) > 0,
        )
        for pid, entry in log.active_producers.items()
    }


def expected_snapshot_bytes(entries: list[tuple[int, int, int, int, int, int, int, int]]) -> bytes:
    """Kafka's ProducerSnapshot v1, built field by field from ProducerSnapshot.json."""
    body = struct.pack(">i", len(entries))
    for pid, epoch, last_seq, last_offset, delta, ts, coord, txn in entries:
        body += struct.pack(">q", pid)
        body += struct.pack(">h", epoch)
        body += struct.pack(">i", last_seq)
        body += struct.pack(">q", last_offset)
        body += struct.pack(">i", delta)
        body += struct.pack(">q", ts)
        body += struct.pack(">i", coord)
        body += struct.pack(">q", txn)
    return struct.pack(">h", 1) + struct.pack(">I", crc32c.crc32c(body)) + body


# ------------------------------------------------------------------------ sequence arithmetic
def test_sequences_wrap_at_int32_max() -> None:
    assert increment_sequence(5, 3) == 8
    assert increment_sequence(INT32_MAX, 1) == 0
    assert increment_sequence(INT32_MAX - 1, 4) == 2
    assert decrement_sequence(2, 4) == INT32_MAX - 1
    assert decrement_sequence(10, 3) == 7


# ------------------------------------------------------------------------ leader appends
def test_in_sequence_appends_are_accepted(open_log: Callable[..., Log]) -> None:
    log = open_log()
    produce(log, 0, 3)
    produce(log, 3, 2)
    entry = log.active_producers[PID]
    assert (entry.producer_epoch, entry.last_seq, entry.last_data_offset) == (0, 4, 4)
    assert [(b.first_seq, b.last_seq) for b in entry.batch_metadata] == [(0, 2), (3, 4)]


def test_sequence_gap_is_out_of_order_and_writes_nothing(open_log: Callable[..., Log]) -> None:
    log = open_log()
    produce(log, 0, 2)
    with pytest.raises(OutOfOrderSequenceError) as caught:
        produce(log, 5)
    assert caught.value.error_code == "out_of_order_sequence_number"
    assert log.log_end_offset == 2
    assert log.active_producers[PID].last_seq == 1


def test_sequence_wraps_around(open_log: Callable[..., Log]) -> None:
    log = open_log()
    produce(log, INT32_MAX - 1, 2)  # unknown producer: any sequence is accepted
    produce(log, 0, 1)  # MAX -> 0
    assert log.active_producers[PID].last_seq == 0
    produce(log, 1, 1)
    # One batch spanning the wrap: MAX-1, MAX, 0, 1.
    log2_pid = PID + 1
    produce(log, INT32_MAX - 1, 4, pid=log2_pid)
    assert log.active_producers[log2_pid].last_seq == 1
    produce(log, 2, 1, pid=log2_pid)
    with pytest.raises(OutOfOrderSequenceError):
        produce(log, 0, 1, pid=log2_pid)


def test_unknown_producer_may_start_at_any_sequence(open_log: Callable[..., Log]) -> None:
    """Kafka 3.x: no state (never seen, or removed by retention) accepts any sequence."""
    log = open_log()
    produce(log, 42)
    assert log.active_producers[PID].last_seq == 42


def test_lower_epoch_is_fenced(open_log: Callable[..., Log]) -> None:
    log = open_log()
    produce(log, 0, epoch=3)
    with pytest.raises(InvalidProducerEpochError) as caught:
        produce(log, 1, epoch=2)
    assert caught.value.error_code == "invalid_producer_epoch"
    assert log.log_end_offset == 1


def test_epoch_bump_must_restart_at_sequence_zero(open_log: Callable[..., Log]) -> None:
    log = open_log()
    produce(log, 0, 3, epoch=0)
    with pytest.raises(OutOfOrderSequenceError):
        produce(log, 3, epoch=1)
    produce(log, 0, 2, epoch=1)
    entry = log.active_producers[PID]
    assert entry.producer_epoch == 1
    assert [(b.first_seq, b.last_seq) for b in entry.batch_metadata] == [(0, 1)]


@pytest.mark.parametrize("retried", range(1, 6))
def test_retry_of_each_of_the_last_five_batches_returns_original_offsets(
    open_log: Callable[..., Log], retried: int
) -> None:
    log = open_log()
    originals = []
    seq = 0
    for n in range(6):  # batch 0 falls out of the five kept
        info = produce(log, seq, n + 1)
        originals.append((seq, n + 1, info.first_offset, info.last_offset))
        seq += n + 1
    end = log.log_end_offset
    first_seq, count, first_offset, last_offset = originals[retried]
    info = produce(log, first_seq, count)
    assert info.is_duplicate
    assert (info.first_offset, info.last_offset) == (first_offset, last_offset)
    assert log.log_end_offset == end
    # The evicted batch is no longer recognised.
    with pytest.raises(OutOfOrderSequenceError):
        produce(log, originals[0][0], originals[0][1])


def test_batches_without_producer_id_skip_checks(open_log: Callable[..., Log]) -> None:
    log = open_log()
    log.append_as_leader(make_batch(2), leader_epoch=0)
    log.append_as_leader(make_batch(2), leader_epoch=0)
    assert log.log_end_offset == 4
    assert log.active_producers == {}


def test_follower_appends_update_state_without_rejecting(
    tmp_path: Path, clock: ManualClock
) -> None:
    log = Log(tmp_path / "topic-0", LogConfig(), clock=clock)
    try:
        records = [SimpleRecord(key=None, value=b"x", timestamp=BASE_TIMESTAMP_MS)]
        for offset, (epoch, seq) in enumerate([(2, 0), (2, 7), (1, 0)]):
            batch = build_batch(
                records,
                base_offset=offset,
                partition_leader_epoch=0,
                producer_id=PID,
                producer_epoch=epoch,
                base_sequence=seq,
            )
            log.append_as_follower(batch)
        entry = log.active_producers[PID]
        assert (entry.producer_epoch, entry.last_seq, entry.last_data_offset) == (1, 0, 2)
    finally:
        log.close()


def test_transactional_write_opens_transaction_and_marker_ends_it(
    open_log: Callable[..., Log],
) -> None:
    log = open_log()
    produce(log, 0, 2, is_transactional=True)
    assert log.active_producers[PID].current_txn_first_offset == 0
    with pytest.raises(InvalidTxnStateError):
        produce(log, 2)
    marker = build_batch(
        [
            SimpleRecord(
                key=struct.pack(">hh", 0, 1),
                value=struct.pack(">hi", 0, 9),
                timestamp=BASE_TIMESTAMP_MS + 5,
            )
        ],
        producer_id=PID,
        producer_epoch=0,
        is_transactional=True,
        is_control=True,
    )
    log.append_as_leader(marker, leader_epoch=0)
    entry = log.active_producers[PID]
    assert entry.current_txn_first_offset is None
    assert entry.coordinator_epoch == 9
    produce(log, 2)


# ------------------------------------------------------------------------ snapshot format
def test_snapshot_encoding_is_byte_exact() -> None:
    entries = [
        ProducerStateEntry(
            producer_id=7,
            producer_epoch=2,
            coordinator_epoch=-1,
            last_timestamp=BASE_TIMESTAMP_MS + 9,
            batch_metadata=(
                BatchMetadata(last_seq=4, last_offset=10, offset_delta=2, timestamp=123),
                BatchMetadata(
                    last_seq=9, last_offset=20, offset_delta=4, timestamp=BASE_TIMESTAMP_MS + 9
                ),
            ),
        ),
        ProducerStateEntry(
            producer_id=3,
            producer_epoch=0,
            coordinator_epoch=5,
            last_timestamp=77,
            current_txn_first_offset=15,
        ),
    ]
    expected = expected_snapshot_bytes(
        [
            (3, 0, -1, -1, 0, 77, 5, 15),
            (7, 2, 9, 20, 4, BASE_TIMESTAMP_MS + 9, -1, -1),
        ]
    )
    assert encode_snapshot(entries) == expected
    decoded = {entry.producer_id: entry for entry in decode_snapshot(expected)}
    assert decoded[3] == entries[1]
    assert decoded[7].batch_metadata == entries[0].batch_metadata[-1:]
    assert decoded[7].last_timestamp == BASE_TIMESTAMP_MS + 9


def test_empty_snapshot_is_ten_bytes() -> None:
    assert encode_snapshot([]) == expected_snapshot_bytes([])
    assert len(encode_snapshot([])) == 10


def test_snapshot_written_on_close_matches_kafka_layout(tmp_path: Path, clock: ManualClock) -> None:
    log = Log(tmp_path / "topic-0", LogConfig(), clock=clock)
    produce(log, 0, 3, timestamp=BASE_TIMESTAMP_MS)
    produce(log, 5, 2, pid=9, epoch=4, timestamp=BASE_TIMESTAMP_MS + 100)
    log.close()
    data = files.producer_snapshot_file(log.dir, 5).read_bytes()
    assert data == expected_snapshot_bytes(
        [
            (9, 4, 6, 4, 1, BASE_TIMESTAMP_MS + 101, -1, -1),
            (PID, 0, 2, 2, 2, BASE_TIMESTAMP_MS + 2, -1, -1),
        ]
    )


@pytest.mark.parametrize(
    ("offset", "value"),
    [(0, b"\x00\x02"), (3, b"\xff"), (12, b"\x01"), (None, b"\x00")],
    ids=["version", "crc", "entry", "trailing-byte"],
)
def test_corrupt_snapshot_bytes_are_refused(offset: int | None, value: bytes) -> None:
    data = bytearray(expected_snapshot_bytes([(1, 0, 0, 0, 0, 5, -1, -1)]))
    if offset is None:
        data += value
    else:
        data[offset : offset + len(value)] = value
    with pytest.raises(CorruptSnapshotError):
        decode_snapshot(bytes(data))


def test_corrupt_snapshot_is_set_aside_and_state_rebuilt(
    tmp_path: Path, clock: ManualClock
) -> None:
    log = Log(tmp_path / "topic-0", LogConfig(), clock=clock)
    produce(log, 0, 3)
    produce(log, 3, 1)
    before = last_batch_view(log)
    log.close()
    path = files.producer_snapshot_file(log.dir, 4)
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))

    reopened = Log(tmp_path / "topic-0", LogConfig(), clock=clock)
    try:
        assert last_batch_view(reopened) == before
        kept = path.with_name(path.name + files.QUARANTINED_FILE_SUFFIX)
        assert kept.read_bytes() == bytes(data)
        read_snapshot(path)  # a fresh, valid snapshot was written at the LEO
        produce(reopened, 4)
    finally:
        reopened.close()


# ------------------------------------------------------------------------ lifecycle
def test_roll_snapshots_at_new_segment_base(open_log: Callable[..., Log]) -> None:
    log = open_log()
    produce(log, 0, 2)
    log.roll()
    produce(log, 2, 3)
    log.roll()
    assert [s.offset for s in log.producer_snapshot_files()] == [2, 5]
    path = log.fetch_producer_snapshot(2)
    assert path is not None
    (entry,) = read_snapshot(path)
    assert (entry.producer_id, entry.last_seq, entry.last_data_offset) == (PID, 1, 1)
    assert log.fetch_producer_snapshot(3) is None


def test_rebuild_after_unclean_shutdown(tmp_path: Path, clock: ManualClock) -> None:
    config = LogConfig()
    log = Log(tmp_path / "topic-0", config, clock=clock)
    try:
        seq = 0
        for n in range(12):
            produce(log, seq, 2, pid=PID + n % 3)
            if n % 3 == 2:
                seq += 2
            if n == 5:
                log.roll()
        log.flush()
        before = last_batch_view(log)
        crashed = tmp_path / "crash" / "topic-0"
        shutil.copytree(log.dir, crashed)  # the state on disk at a crash: no close snapshot
    finally:
        log.close()
    assert [p.name for p in crashed.glob("*.snapshot")] == ["00000000000000000012.snapshot"]

    reopened = Log(crashed, config, clock=clock, had_clean_shutdown=False)
    try:
        assert last_batch_view(reopened) == before
        produce(reopened, 8, pid=PID)
    finally:
        reopened.close()

    # With no snapshot at all the whole log is replayed.
    for path in crashed.glob("*.snapshot"):
        path.unlink()
    replayed = Log(crashed, config, clock=clock, had_clean_shutdown=False)
    try:
        assert replayed.active_producers[PID].last_seq == 8
    finally:
        replayed.close()


def test_truncation_removes_later_snapshots_and_state(open_log: Callable[..., Log]) -> None:
    log = open_log()
    produce(log, 0, 2)  # offsets 0-1
    log.roll()
    produce(log, 2, 2)  # offsets 2-3
    log.roll()
    produce(log, 4, 2)  # offsets 4-5
    produce(log, 0, 1, pid=PID + 1)  # offset 6
    assert [s.offset for s in log.producer_snapshot_files()] == [2, 4]

    assert log.truncate_to(2)
    assert log.log_end_offset == 2
    assert [s.offset for s in log.producer_snapshot_files()] == [2]
    assert set(log.active_producers) == {PID}
    assert log.active_producers[PID].last_seq == 1
    produce(log, 2, 1)  # the sequence continues from the truncated state
    with pytest.raises(OutOfOrderSequenceError):
        produce(log, 7, 1)

    log.truncate_fully_and_start_at(50)
    assert log.active_producers == {}
    assert all(s.offset >= 50 for s in log.producer_snapshot_files())


def test_retention_drops_snapshots_below_log_start(open_log: Callable[..., Log]) -> None:
    log = open_log(LogConfig(retention_bytes=1))
    for seq in range(4):
        produce(log, seq)
        log.roll()
    assert [s.offset for s in log.producer_snapshot_files()] == [1, 2, 3, 4]
    log.update_high_watermark(log.log_end_offset)
    assert log.delete_old_segments() > 0
    start = log.log_start_offset
    offsets = [s.offset for s in log.producer_snapshot_files()]
    assert offsets[0] == start
    assert log.active_producers[PID].last_seq == 3


def test_idle_producers_expire(tmp_path: Path, clock: ManualClock) -> None:
    log = Log(tmp_path / "topic-0", LogConfig(), clock=clock, producer_id_expiration_ms=60_000)
    try:
        produce(log, 0, timestamp=clock.milliseconds())
        clock.sleep(59_000)
        assert log.remove_expired_producers() == 0
        clock.sleep(1_000)
        assert log.remove_expired_producers() == 1
        assert log.active_producers == {}
        produce(log, 17)  # unknown again: any sequence
    finally:
        log.close()


def test_log_start_advance_keeps_newest_snapshot_at_or_below(
    open_log: Callable[..., Log],
) -> None:
    log = open_log()
    for n in range(4):
        produce(log, 2 * n, 2)
        log.roll()
    assert [s.offset for s in log.producer_snapshot_files()] == [2, 4, 6, 8]
    log.update_high_watermark(log.log_end_offset)
    log.maybe_increment_log_start_offset(5, "test")
    assert [s.offset for s in log.producer_snapshot_files()] == [4, 6, 8]
    log.maybe_increment_log_start_offset(6, "test")
    assert [s.offset for s in log.producer_snapshot_files()] == [6, 8]


def test_snapshot_placed_in_directory_is_loaded(tmp_path: Path, clock: ManualClock) -> None:
    """A snapshot restored from elsewhere (e.g. remote storage) becomes the state."""
    log = Log(tmp_path / "topic-0", LogConfig(), clock=clock)
    try:
        log.truncate_fully_and_start_at(100)
        restored = ProducerStateEntry(
            producer_id=PID,
            producer_epoch=3,
            last_timestamp=BASE_TIMESTAMP_MS,
            batch_metadata=(
                BatchMetadata(
                    last_seq=41, last_offset=99, offset_delta=1, timestamp=BASE_TIMESTAMP_MS
                ),
            ),
        )
        files.producer_snapshot_file(log.dir, 100).write_bytes(encode_snapshot([restored]))
        log.load_producer_state()
        assert log.active_producers == {PID: restored}
        info = produce(log, 40, 2, epoch=3)
        assert info.is_duplicate and (info.first_offset, info.last_offset) == (98, 99)
        produce(log, 42, epoch=3)
    finally:
        log.close()
