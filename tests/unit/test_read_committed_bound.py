"""A read_committed read carries the aborted transactions of the records it returns, not
of everything up to the LSO (Kafka's ``LocalLog.addAbortedTransactions``): the search of
``.txnindex`` files is bounded by the offset just past the bytes read (the first offset-index
entry past them, or the next segment's base offset), and capped by the LSO.

The log used (one aborted transaction per segment, ``SEGMENTS`` segments, then a plain
batch; no transaction open, so the LSO is the HW, the LEO)::

    offset   0     1         | 2     3         | ... | 2i    2i+1      | ... | 2N
    batch    P0    P0 ABORT  | P1    P1 ABORT  |     | Pi    Pi ABORT  |     | plain

    .txnindex of 2i: Pi 2i..2i+1, LSO 2i+2
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from storage_core.errors import CorruptRecordError
from storage_core.log.log import Log
from storage_core.log.log_config import LogConfig
from storage_core.log.transaction_index import AbortedTxn, TransactionIndex, TxnIndexSearchResult
from storage_core.records.memory_records import iter_batches
from storage_core.replication.fetch_isolation import FetchIsolation
from storage_core.replication.log_read import read_log
from tests.unit.test_txn_index_log import data, marker, plain

OpenLog = Callable[..., Log]
SEGMENTS = 20
FIRST_PRODUCER = 1000


def aborted(i: int) -> AbortedTxn:
    return AbortedTxn(
        producer_id=FIRST_PRODUCER + i,
        first_offset=2 * i,
        last_offset=2 * i + 1,
        last_stable_offset=2 * i + 2,
    )


@pytest.fixture
def many_aborts(open_log: OpenLog) -> Log:
    log = open_log()
    for i in range(SEGMENTS):
        log.append_as_follower(data(FIRST_PRODUCER + i, 2 * i))
        log.append_as_follower(marker(FIRST_PRODUCER + i, 2 * i + 1, abort=True))
        log.roll()
    log.append_as_follower(plain(2 * SEGMENTS))
    log.update_high_watermark(log.log_end_offset)
    assert log.last_stable_offset == 2 * SEGMENTS + 1
    return log


@pytest.fixture
def searches(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """The base offset of every ``.txnindex`` searched (the real search, counted)."""
    searched: list[int] = []
    search = TransactionIndex.collect_aborted_txns

    def counted(
        self: TransactionIndex, fetch_offset: int, upper_bound_offset: int
    ) -> TxnIndexSearchResult:
        searched.append(self.start_offset)
        return search(self, fetch_offset, upper_bound_offset)

    monkeypatch.setattr(TransactionIndex, "collect_aborted_txns", counted)
    yield searched


def offsets_returned(log: Log, fetch_offset: int, max_bytes: int) -> tuple[list[int], object]:
    read = read_log(
        log, fetch_offset, max_bytes, isolation=FetchIsolation.TXN_COMMITTED, min_one_message=True
    )
    offsets: list[int] = []
    try:
        for _position, batch in iter_batches(read.info.read_bytes()):
            offsets.extend(range(batch.base_offset, batch.last_offset + 1))
    except CorruptRecordError as exc:  # a partial last batch, which a client drops too
        assert "truncated" in str(exc)
    return offsets, read.aborted_transactions


def test_a_consumer_far_behind_gets_the_aborts_of_the_first_segment_only(
    many_aborts: Log, searches: list[int]
) -> None:
    """max bytes stops in the first segment: one index read, one transaction returned
    (before the bound, every one of the 20 indexes was read and 20 returned)."""
    offsets, found = offsets_returned(many_aborts, 0, 1)
    assert offsets == [0]
    assert found == [aborted(0)]
    assert searches == [0]


def test_a_fetch_in_the_middle_reads_the_indexes_of_what_it_returns(
    many_aborts: Log, searches: list[int]
) -> None:
    offsets, found = offsets_returned(many_aborts, 10, 1 << 20)
    assert offsets == [10, 11]  # a read ends at its segment's end
    assert found == [aborted(5)]
    assert searches == [10]
    searches.clear()
    offsets, found = offsets_returned(many_aborts, 2 * SEGMENTS, 1 << 20)
    assert offsets == [2 * SEGMENTS]
    assert (found, searches) == ([], [40])  # an empty index: a stat, no read


def test_an_abort_whose_marker_is_in_a_later_segment_is_still_found(
    open_log: OpenLog, searches: list[int]
) -> None:
    """P begins at the end of segment 0 and aborts in segment 2 (2 holds another abort
    first): the read of segment 0 searches on until an index is complete."""
    p, q, r = 7000, 8000, 9000
    log = open_log()
    log.append_as_follower(plain(0))
    log.append_as_follower(data(p, 1))
    log.roll()
    log.append_as_follower(plain(2))
    log.roll()
    log.append_as_follower(data(q, 3))
    log.append_as_follower(marker(q, 4, abort=True))
    log.append_as_follower(marker(p, 5, abort=True))
    log.roll()
    log.append_as_follower(data(r, 6))
    log.append_as_follower(marker(r, 7, abort=True))
    log.update_high_watermark(log.log_end_offset)

    offsets, found = offsets_returned(log, 0, 1 << 20)
    assert offsets == [0, 1]
    assert found == [AbortedTxn(producer_id=p, first_offset=1, last_offset=5, last_stable_offset=6)]
    assert searches == [0, 2, 3]  # segment 1 (base 2) has no .txnindex entries


def test_the_offset_index_bounds_a_read_that_stops_inside_a_segment(
    open_log: OpenLog, searches: list[int]
) -> None:
    """One segment of 20 aborted transactions, an index entry per batch: a read of the
    first batch gets the first transaction only."""
    log = open_log(LogConfig(index_interval_bytes=0))
    for i in range(SEGMENTS):
        log.append_as_follower(data(FIRST_PRODUCER + i, 2 * i))
        log.append_as_follower(marker(FIRST_PRODUCER + i, 2 * i + 1, abort=True))
    log.update_high_watermark(log.log_end_offset)
    batch_bytes = len(data(FIRST_PRODUCER, 0))

    offsets, found = offsets_returned(log, 0, batch_bytes)
    assert offsets == [0]
    assert found == [aborted(0)]
    # data 4, marker 5 and the start of data 6 (cut; a client drops it): the first index
    # entry past the bytes is marker 7's, so P3's abort is listed too, as in Kafka
    offsets, found = offsets_returned(log, 4, 3 * batch_bytes)
    assert offsets == [4, 5]
    assert found == [aborted(2), aborted(3)]


def test_a_read_in_the_middle_of_a_segment_parses_only_the_entries_from_its_offset_on(
    open_log: OpenLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The entries below the fetch offset are passed over unparsed (a binary search of
    the last offsets): a read of one batch in the middle of 20 aborts parses one entry."""
    log = open_log(LogConfig(index_interval_bytes=0))
    for i in range(SEGMENTS):
        log.append_as_follower(data(FIRST_PRODUCER + i, 2 * i))
        log.append_as_follower(marker(FIRST_PRODUCER + i, 2 * i + 1, abort=True))
    log.update_high_watermark(log.log_end_offset)
    parsed: list[int] = []
    parse = AbortedTxn.from_bytes

    def counted(data: bytes | bytearray | memoryview, position: int = 0) -> AbortedTxn:
        parsed.append(position)
        return parse(data, position)

    monkeypatch.setattr(AbortedTxn, "from_bytes", staticmethod(counted))
    offsets, found = offsets_returned(log, 30, len(data(FIRST_PRODUCER, 0)))
    assert offsets == [30]
    assert found == [aborted(15)]  # its LSO 32 reaches the bound 31: the search is complete
    assert len(parsed) == 1


def test_an_abort_above_the_lso_is_not_listed(open_log: OpenLog) -> None:
    """The bytes read end below the LSO, where P is open; Q aborted above it is not listed
    (Kafka's bound alone would be the LEO here: the segment has no index entry)."""
    p, q = 7000, 8000
    log = open_log()
    log.append_as_follower(plain(0, 2))
    log.append_as_follower(data(p, 2))
    log.append_as_follower(data(q, 3))
    log.append_as_follower(marker(q, 4, abort=True))
    log.update_high_watermark(log.log_end_offset)
    assert log.last_stable_offset == 2
    assert offsets_returned(log, 0, 1 << 20) == ([0, 1], [])
