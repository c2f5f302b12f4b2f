"""The ``.txnindex`` of a log's segments: written for aborted transactions only, rebuilt by
recovery from the batches and the producer state (Kafka's ``LogSegment.recover``), kept in
step by roll, truncation and deletion, searched by ``Log.collect_aborted_transactions`` and
printed by ``storage-core dump-log``.

The log used by most tests (markers at 3, 5, 6 and 8; segments at 0, 4 and 8)::

    offset  0   1   2   3        | 4   5         6        7   | 8        9
    batch   A   A   B   A ABORT  | C   B COMMIT  C ABORT  D   | D ABORT  plain

    .txnindex of 0: A 0..3, LSO 2 (B open since 2)
    .txnindex of 4: C 4..6, LSO 7 (nothing else open)
    .txnindex of 8: D 7..8, LSO 9 (D began in the previous segment)
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Callable
from pathlib import Path

import pytest

from storage_core.cli import main
from storage_core.log import log_file_utils as files
from storage_core.log.log import Log
from storage_core.log.producer_state_entry import CompletedTxn
from storage_core.log.transaction_index import AbortedTxn
from storage_core.records import SimpleRecord, build_batch
from storage_core.records.open_file_cache import OpenFileCache
from tests.conftest import BASE_TIMESTAMP_MS

OpenLog = Callable[..., Log]
A, B, C, D = 1000, 2000, 3000, 4000
EXPECTED = {
    0: [AbortedTxn(producer_id=A, first_offset=0, last_offset=3, last_stable_offset=2)],
    4: [AbortedTxn(producer_id=C, first_offset=4, last_offset=6, last_stable_offset=7)],
    8: [AbortedTxn(producer_id=D, first_offset=7, last_offset=8, last_stable_offset=9)],
}


def _records(count: int) -> list[SimpleRecord]:
    return [
        SimpleRecord(key=b"k%d" % i, value=b"v%d" % i, timestamp=BASE_TIMESTAMP_MS)
        for i in range(count)
    ]


def data(producer_id: int, base_offset: int, count: int = 1, sequence: int = 0) -> bytes:
    return build_batch(
        _records(count),
        base_offset=base_offset,
        partition_leader_epoch=0,
        producer_id=producer_id,
        producer_epoch=0,
        base_sequence=sequence,
        is_transactional=True,
    )


def marker(producer_id: int, base_offset: int, *, abort: bool, coordinator_epoch: int = 3) -> bytes:
    """A control batch: key int16 version 0 + int16 type (ABORT 0, COMMIT 1), value int16
    version 0 + int32 coordinator epoch."""
    record = SimpleRecord(
        key=struct.pack(">hh", 0, 0 if abort else 1),
        value=struct.pack(">hi", 0, coordinator_epoch),
        timestamp=BASE_TIMESTAMP_MS,
    )
    return build_batch(
        [record],
        base_offset=base_offset,
        partition_leader_epoch=0,
        producer_id=producer_id,
        producer_epoch=0,
        is_transactional=True,
        is_control=True,
    )


def plain(base_offset: int, count: int = 1) -> bytes:
    return build_batch(_records(count), base_offset=base_offset, partition_leader_epoch=0)


def write_transactions(log: Log) -> None:
    """The log of the module docstring, as a follower copies it."""
    for batch in (data(A, 0, 2), data(B, 2), marker(A, 3, abort=True)):
        log.append_as_follower(batch)
    log.roll()
    for batch in (data(C, 4), marker(B, 5, abort=False), marker(C, 6, abort=True), data(D, 7)):
        log.append_as_follower(batch)
    log.roll()
    for batch in (marker(D, 8, abort=True), plain(9)):
        log.append_as_follower(batch)
    log.flush()


def txn_indexes(directory: Path) -> dict[int, bytes]:
    return {
        files.offset_from_file_name(p.name): p.read_bytes()
        for p in sorted(directory.glob("*" + files.TXN_INDEX_FILE_SUFFIX))
    }


def expected_files(*base_offsets: int) -> dict[int, bytes]:
    return {b: b"".join(t.to_bytes() for t in EXPECTED[b]) for b in base_offsets}


def reopen_after_crash(open_log: OpenLog, log: Log, **kwargs: object) -> Log:
    log.close()
    return open_log(had_clean_shutdown=False, recovery_point=0, **kwargs)


@pytest.fixture
def recovered(open_log: OpenLog) -> Log:
    """The log of the module docstring after an unclean restart rebuilt its indexes, with
    whatever the append path wrote into ``.txnindex`` files removed first."""
    log = open_log()
    write_transactions(log)
    log.close()
    for path in log.dir.glob("*" + files.TXN_INDEX_FILE_SUFFIX):
        path.unlink()
    return open_log(had_clean_shutdown=False, recovery_point=0)


def test_recovery_indexes_each_aborted_transaction_in_the_segment_of_its_marker(
    recovered: Log,
) -> None:
    assert recovered.log_end_offset == 10
    assert txn_indexes(recovered.dir) == expected_files(0, 4, 8)
    assert [s.txn_index.all_entries() for s in recovered.segments] == [
        EXPECTED[0],
        EXPECTED[4],
        EXPECTED[8],
    ]


def test_a_deleted_txn_index_is_rebuilt_identically(open_log: OpenLog, recovered: Log) -> None:
    before = txn_indexes(recovered.dir)
    recovered.close()
    for path in recovered.dir.glob("*" + files.TXN_INDEX_FILE_SUFFIX):
        path.unlink()
    again = open_log(had_clean_shutdown=False, recovery_point=0)
    assert txn_indexes(again.dir) == before


def test_a_transaction_begun_below_the_recovery_point_is_found_by_replaying_producer_state(
    open_log: OpenLog, recovered: Log
) -> None:
    """Only the last segment is recovered; D began in the segment before it."""
    recovered.close()
    files.txn_index_file(recovered.dir, 8).unlink()
    for snapshot in recovered.dir.glob("*.snapshot"):
        snapshot.unlink()  # nothing to start from: the segments before are replayed
    again = open_log(had_clean_shutdown=False, recovery_point=8)
    assert again.recovered_segments == 1
    assert txn_indexes(again.dir) == expected_files(0, 4, 8)


def test_a_log_without_aborted_transactions_has_no_txn_index(open_log: OpenLog) -> None:
    log = open_log()
    log.append_as_follower(data(A, 0, 2))
    log.append_as_follower(marker(A, 2, abort=False))
    log.roll()
    log.append_as_follower(plain(3, 2))
    log.flush()
    again = reopen_after_crash(open_log, log)
    assert again.recovered_segments == 2
    assert txn_indexes(again.dir) == {}
    assert again.collect_aborted_transactions(0, 5) == []
    assert not any(s.txn_index.holds_descriptor for s in again.segments)


def test_update_txn_index_writes_aborted_transactions_only(open_log: OpenLog) -> None:
    segment = open_log().active_segment
    committed = CompletedTxn(producer_id=A, first_offset=0, last_offset=3, is_aborted=False)
    segment.update_txn_index(committed, 4)
    assert not files.txn_index_file(segment.path.parent, 0).exists()
    aborted = CompletedTxn(producer_id=B, first_offset=1, last_offset=5, is_aborted=True)
    segment.update_txn_index(aborted, 2)
    assert segment.txn_index.all_entries() == [
        AbortedTxn(producer_id=B, first_offset=1, last_offset=5, last_stable_offset=2)
    ]


def test_collect_aborted_transactions_stops_at_a_complete_segment(recovered: Log) -> None:
    everything = [EXPECTED[0][0], EXPECTED[4][0], EXPECTED[8][0]]
    assert recovered.collect_aborted_transactions(0, 10) == everything
    assert recovered.collect_aborted_transactions(0, 2) == EXPECTED[0]  # A's LSO 2 reaches 2
    assert recovered.collect_aborted_transactions(0, 4) == EXPECTED[0]  # C begins at 4
    assert recovered.collect_aborted_transactions(0, 5) == EXPECTED[0] + EXPECTED[4]
    assert recovered.collect_aborted_transactions(5, 8) == EXPECTED[4] + EXPECTED[8]
    assert recovered.collect_aborted_transactions(5, 7) == EXPECTED[4]
    assert recovered.collect_aborted_transactions(8, 10) == EXPECTED[8]
    assert recovered.collect_aborted_transactions(9, 10) == []


def test_a_corrupt_txn_index_found_at_load_gets_its_segment_recovered(
    open_log: OpenLog, recovered: Log
) -> None:
    recovered.close()
    first = files.txn_index_file(recovered.dir, 0)
    first.write_bytes(first.read_bytes() + b"\x00" * 20)  # not a whole entry
    last = files.txn_index_file(recovered.dir, 8)
    last.write_bytes(b"\x00\x07" + last.read_bytes()[2:])  # version 7
    orphan = files.txn_index_file(recovered.dir, 99)
    orphan.write_bytes(EXPECTED[0][0].to_bytes())
    again = open_log()  # a clean shutdown: only corrupt segments are recovered
    assert again.recovered_segments == 0
    assert txn_indexes(again.dir) == expected_files(0, 4, 8)
    assert not orphan.exists()


def test_roll_truncation_and_deletion_keep_the_txn_index_in_step(
    open_log: OpenLog, recovered: Log
) -> None:
    stale = files.txn_index_file(recovered.dir, 10)
    stale.write_bytes(EXPECTED[8][0].to_bytes())  # left by an earlier life of offset 10
    recovered.roll()
    assert not stale.exists()
    assert recovered.collect_aborted_transactions(10, 11) == []

    recovered.truncate_to(7)  # the segment at 8 goes, the one at 4 keeps C (its marker is 6)
    assert txn_indexes(recovered.dir) == expected_files(0, 4)
    recovered.truncate_to(6)  # C's marker goes: no entry left, no file
    assert txn_indexes(recovered.dir) == expected_files(0)

    recovered.update_high_watermark(6)
    assert recovered.maybe_increment_log_start_offset(4, "test")
    assert recovered.delete_old_segments() == 1
    assert txn_indexes(recovered.dir) == {}
    assert not list(recovered.dir.glob("*.deleted"))


def test_async_delete_renames_the_txn_index_with_the_segment(recovered: Log) -> None:
    segment = recovered.segments[0]
    segment.close()
    segment.change_file_suffixes("", files.DELETED_FILE_SUFFIX)
    renamed = recovered.dir / (files.txn_index_file(recovered.dir, 0).name + ".deleted")
    assert renamed.read_bytes() == expected_files(0)[0]
    assert not files.txn_index_file(recovered.dir, 0).exists()
    segment.delete_if_exists()
    assert not renamed.exists()
    assert not list(recovered.dir.glob("00000000000000000000.*"))


def test_txn_indexes_hold_no_descriptor_beyond_the_open_file_cache(
    open_log: OpenLog, recovered: Log
) -> None:
    recovered.close()
    cache = OpenFileCache(max_idle_files=1)
    log = open_log(file_cache=cache)
    assert open_txn_index_descriptors(log.dir) == 0  # loading opened none
    assert log.collect_aborted_transactions(0, 10) == [e for b in (0, 4, 8) for e in EXPECTED[b]]
    # three files read; the active segment's .log, .index and .timeindex, plus one idle file
    assert open_txn_index_descriptors(log.dir) == 1
    assert cache.open_files <= 4
    log.close()
    assert open_txn_index_descriptors(log.dir) == 0
    assert cache.open_files == 0


def open_txn_index_descriptors(directory: Path) -> int:
    """The process's descriptors of .txnindex files in ``directory``, as the kernel lists
    them."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        count += target.startswith(str(directory)) and target.endswith(files.TXN_INDEX_FILE_SUFFIX)
    return count


def test_dump_log_prints_txn_index_entries_and_markers(
    recovered: Log, capsys: pytest.CaptureFixture[str]
) -> None:
    index = files.txn_index_file(recovered.dir, 0)
    assert main(["dump-log", str(index)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1:] == [
        f"version: 0 producerId: {A} firstOffset: 0 lastOffset: 3 lastStableOffset: 2"
    ]
    assert main(["dump-log", "--json", str(index)]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert rows[1] == {
        "type": "aborted_txn",
        "version": 0,
        "producer_id": A,
        "first_offset": 0,
        "last_offset": 3,
        "last_stable_offset": 2,
    }

    assert main(["dump-log", "--print-data", str(recovered.segments[1].path)]) == 0
    records = [line for line in capsys.readouterr().out.splitlines() if line.startswith("|")]
    assert records[1].endswith("endTxnMarker: COMMIT coordinatorEpoch: 3")
    assert records[2].endswith("endTxnMarker: ABORT coordinatorEpoch: 3")
    assert "payload" not in records[1] and "payload: v0" in records[0]

    index.write_bytes(index.read_bytes() + b"\x00" * 5)
    assert main(["dump-log", str(index)]) == 3
    assert "5 bytes at the end do not make a whole 34-byte entry" in capsys.readouterr().out
