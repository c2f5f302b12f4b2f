"""Transactions and the remote tier: copies stop below the LSO, the ``.txnindex`` travels with
each segment (``txn_idx_empty`` in its metadata), and a read_committed remote read returns
the aborted transactions of the remote segments read and following, then of the local ones
(Kafka's ``RemoteLogManager.collectAbortedTransactions`` with KIP-1058's skipping).

The log, one batch per segment (as Kafka's TransactionsWithTieredStoreTest)::

    offset  0  A data (transactional)
            1  B data (transactional)
            2  ABORT A   -> .txnindex (A, first 0, last 2, LSO 1: B is still open)
            3  plain
            4  ABORT B   -> .txnindex (B, first 1, last 4, LSO 5)
            5  C data (transactional)
            6  COMMIT C
            7  D data (transactional, open)   <- the LSO
            8  plain (active segment)
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import BinaryIO

import pytest

from storage_core.clock import ManualClock
from storage_core.log.log import Log
from storage_core.log.producer_append_info import AppendOrigin
from storage_core.log.transaction_index import AbortedTxn
from storage_core.records.end_transaction_marker import (
    ControlRecordType,
    build_end_txn_marker_batch,
)
from storage_core.tiered.in_memory_rlmm import InMemoryRemoteLogMetadataManager
from storage_core.tiered.local_tiered_storage import LocalTieredStorage
from storage_core.tiered.metadata.metadata import RemoteLogSegmentMetadata
from storage_core.tiered.operations import LogView, candidate_segments, copy_segment
from storage_core.tiered.operations.copy import build_log_segment_data
from storage_core.tiered.remote_index_cache import RemoteIndexCache
from storage_core.tiered.remote_log_reader import RemoteLogReader, RemoteStorageFetchInfo
from storage_core.tiered.remote_storage_manager import (
    IndexType,
    RemoteLogSegmentMetadataLike,
    RemoteSegmentRef,
)
from tests.conftest import make_batch
from tests.tiering_support import (
    BROKER_ID,
    TOPIC_ID_PARTITION,
    fence_at,
    open_partition_log,
    tiered_config,
)

A, B, C, D = 1000, 2000, 3000, 4000
ABORTED_A = AbortedTxn(producer_id=A, first_offset=0, last_offset=2, last_stable_offset=1)
ABORTED_B = AbortedTxn(producer_id=B, first_offset=1, last_offset=4, last_stable_offset=5)


class CountingStorage(LocalTieredStorage):
    """The directory RSM, counting ``fetch_index`` calls per (segment start, index type)."""

    def __init__(self, storage_dir: Path) -> None:
        super().__init__(storage_dir, fsync=False)
        self.index_fetches: Counter[tuple[int, IndexType]] = Counter()

    def fetch_index(
        self, remote_log_segment_metadata: RemoteLogSegmentMetadataLike, index_type: IndexType
    ) -> BinaryIO:
        start = RemoteSegmentRef.of(remote_log_segment_metadata).start_offset
        self.index_fetches[(start, index_type)] += 1
        return super().fetch_index(remote_log_segment_metadata, index_type)


def _append(log: Log, batch: bytes, origin: AppendOrigin = AppendOrigin.CLIENT) -> None:
    log.append_as_leader(batch, leader_epoch=0, origin=origin)
    log.roll()
    log.update_high_watermark(log.log_end_offset)


def _data(log: Log, pid: int | None) -> None:
    if pid is None:
        _append(log, make_batch(1))
    else:
        _append(
            log,
            make_batch(
                1, producer_id=pid, producer_epoch=0, base_sequence=0, is_transactional=True
            ),
        )


def _end(log: Log, pid: int, *, commit: bool) -> None:
    marker = build_end_txn_marker_batch(
        producer_id=pid,
        producer_epoch=0,
        coordinator_epoch=0,
        control_type=ControlRecordType.COMMIT if commit else ControlRecordType.ABORT,
        timestamp=0,
    )
    _append(log, marker, AppendOrigin.COORDINATOR)


@pytest.fixture
def log(tmp_path: Path) -> Log:
    log = open_partition_log(tmp_path / "logs", ManualClock())
    _data(log, A)
    _data(log, B)
    _end(log, A, commit=False)
    _data(log, None)
    _end(log, B, commit=False)
    _data(log, C)
    _end(log, C, commit=True)
    _data(log, D)
    log.append_as_leader(make_batch(1), leader_epoch=0)  # 8, in the active segment
    log.update_high_watermark(log.log_end_offset)
    yield log
    log.close()


def _view(log: Log) -> LogView:
    return LogView.read(
        log.dir,
        high_watermark=log.high_watermark,
        log_start_offset=log.log_start_offset,
        last_stable_offset=log.last_stable_offset,
    )


def _copy(
    log: Log, rsm: LocalTieredStorage, rlmm: InMemoryRemoteLogMetadataManager, *, below: int
) -> list[RemoteLogSegmentMetadata]:
    view = _view(log)
    copied = []
    for segment in candidate_segments(view, rlmm, config=tiered_config()):
        if segment.base_offset >= below:
            break
        result = copy_segment(
            view, segment, rsm=rsm, rlmm=rlmm, fence=fence_at(0), broker_id=BROKER_ID
        )
        copied.append(result.metadata)
    if isinstance(rsm, CountingStorage):
        rsm.index_fetches.clear()  # the copy's own verification reads them back
    return copied


def _read_committed(
    log: Log, rsm: LocalTieredStorage, rlmm: InMemoryRemoteLogMetadataManager, offset: int
) -> tuple[list[AbortedTxn], bytes]:
    cache = RemoteIndexCache(rsm, log.dir.parent, max_size_bytes=1 << 20)
    reader = RemoteLogReader(rsm=rsm, rlmm=rlmm, index_cache=cache, threads=1)
    try:
        info = RemoteStorageFetchInfo(
            topic_id_partition=TOPIC_ID_PARTITION,
            fetch_offset=offset,
            max_bytes=1 << 20,
            min_one_message=True,
            include_aborted_txns=True,
        )
        data = reader.read(info, log.leader_epoch_cache, log)
    finally:
        reader.close()
        cache.close()
    assert data.aborted_transactions is not None
    return list(data.aborted_transactions), data.records


def test_copies_stop_below_the_lso_and_carry_the_txn_index(log: Log, tmp_path: Path) -> None:
    assert (log.last_stable_offset, log.high_watermark) == (7, 9)
    rsm = CountingStorage(tmp_path / "remote")
    rlmm = InMemoryRemoteLogMetadataManager()
    copied = _copy(log, rsm, rlmm, below=1 << 62)
    # Segment 7 (D's open transaction) and the active segment 8 stay local.
    assert [m.start_offset for m in copied] == [0, 1, 2, 3, 4, 5, 6]
    empty = {m.start_offset: m.txn_idx_empty for m in copied}
    assert empty == {0: True, 1: True, 2: False, 3: True, 4: False, 5: True, 6: True}
    stored = {m.start_offset: m for m in copied}
    with rsm.fetch_index(stored[2], IndexType.TRANSACTION) as stream:
        assert stream.read() == ABORTED_A.to_bytes()
    # D commits: its segment becomes eligible.
    _end(log, D, commit=True)
    assert [m.start_offset for m in _copy(log, rsm, rlmm, below=1 << 62)] == [7, 8]


def test_each_segment_knows_the_aborts_running_past_its_end(log: Log) -> None:
    """What a copy records for a restore ending with the segment: the aborted transactions
    with records in it whose markers lie in later segments (their ``.txnindex`` files)."""
    view = _view(log)
    past = {s.base_offset: view.aborted_txns_past(s) for s in view.segments[:-1]}
    assert past == {
        0: (ABORTED_A,),  # B's records begin at 1
        1: (ABORTED_A, ABORTED_B),
        2: (ABORTED_B,),  # A's marker is at 2, in this segment
        3: (ABORTED_B,),
        4: (),
        5: (),
        6: (),
        7: (),  # D is still open
    }
    assert build_log_segment_data(view, view.segments[1]).aborted_txns_past_end == (
        ABORTED_A,
        ABORTED_B,
    )


def test_a_complete_search_stops_in_the_remote_tier_skipping_empty_indexes_unfetched(
    log: Log, tmp_path: Path
) -> None:
    rsm = CountingStorage(tmp_path / "remote")
    rlmm = InMemoryRemoteLogMetadataManager()
    _copy(log, rsm, rlmm, below=7)
    aborted, records = _read_committed(log, rsm, rlmm, 0)
    assert records  # A's batch
    # Upper bound 1 (segment 0's end + 1): A's entry (LSO 1) completes the search.
    assert aborted == [ABORTED_A]
    txn_fetches = {s for (s, t), n in rsm.index_fetches.items() if t is IndexType.TRANSACTION}
    assert txn_fetches == {2}  # segment 1 (txn_idx_empty) was passed over by its metadata
    assert (1, IndexType.OFFSET) not in rsm.index_fetches


def test_an_incomplete_remote_search_goes_on_in_later_remote_segments(
    log: Log, tmp_path: Path
) -> None:
    rsm = CountingStorage(tmp_path / "remote")
    rlmm = InMemoryRemoteLogMetadataManager()
    _copy(log, rsm, rlmm, below=7)
    aborted, _records = _read_committed(log, rsm, rlmm, 1)
    # Upper bound 2: A's entry (LSO 1) does not complete it; B's (LSO 5) in segment 4 does.
    assert aborted == [ABORTED_A, ABORTED_B]
    txn_fetches = {s for (s, t), n in rsm.index_fetches.items() if t is IndexType.TRANSACTION}
    assert txn_fetches == {2, 4}
    assert not {(3, IndexType.OFFSET), (3, IndexType.TRANSACTION)} & set(rsm.index_fetches)


def test_a_search_the_remote_tier_leaves_incomplete_ends_in_the_local_segments(
    log: Log, tmp_path: Path
) -> None:
    rsm = CountingStorage(tmp_path / "remote")
    rlmm = InMemoryRemoteLogMetadataManager()
    _copy(log, rsm, rlmm, below=4)  # B's ABORT (segment 4) is only local
    aborted, _records = _read_committed(log, rsm, rlmm, 1)
    # A from segment 2 (remote, and again locally: returned once), B from the local segment 4.
    assert aborted == [ABORTED_A, ABORTED_B]


def test_a_read_uncommitted_remote_read_carries_no_aborted_transactions(
    log: Log, tmp_path: Path
) -> None:
    rsm = CountingStorage(tmp_path / "remote")
    rlmm = InMemoryRemoteLogMetadataManager()
    _copy(log, rsm, rlmm, below=7)
    cache = RemoteIndexCache(rsm, log.dir.parent, max_size_bytes=1 << 20)
    reader = RemoteLogReader(rsm=rsm, rlmm=rlmm, index_cache=cache, threads=1)
    try:
        info = RemoteStorageFetchInfo(
            topic_id_partition=TOPIC_ID_PARTITION,
            fetch_offset=0,
            max_bytes=1 << 20,
            min_one_message=True,
        )
        data = reader.read(info, log.leader_epoch_cache, log)
    finally:
        reader.close()
        cache.close()
    assert data.records and data.aborted_transactions is None
    assert not any(t is IndexType.TRANSACTION for _s, t in rsm.index_fetches)


def test_the_index_cache_keeps_an_empty_txn_index_and_drops_an_entry_without_one(
    log: Log, tmp_path: Path
) -> None:
    rsm = CountingStorage(tmp_path / "remote")
    rlmm = InMemoryRemoteLogMetadataManager()
    copied = {m.start_offset: m for m in _copy(log, rsm, rlmm, below=7)}
    cache = RemoteIndexCache(rsm, log.dir.parent, max_size_bytes=1 << 20)
    with cache.acquire(copied[0]) as entry:
        assert entry.txn_index_path is not None and entry.txn_index_path.stat().st_size == 0
    with cache.acquire(copied[2]) as entry:
        assert entry.aborted_txns == (ABORTED_A,)
    cache.close()
    # An entry cut short before its .txnindex (a crash mid-download) is fetched again.
    (txn_file,) = cache.cache_dir.glob(f"{2:020d}_*.txnindex")
    txn_file.unlink()
    before = rsm.index_fetches[(2, IndexType.TRANSACTION)]
    cache = RemoteIndexCache(rsm, log.dir.parent, max_size_bytes=1 << 20)
    with cache.acquire(copied[2]) as entry:
        assert entry.aborted_txns == (ABORTED_A,)
    cache.close()
    assert rsm.index_fetches[(2, IndexType.TRANSACTION)] == before + 1
