"""``TransactionIndex.collect_aborted_txns`` (a binary search past the entries below the fetch
offset) answers as Kafka's linear scan of every entry does, for any index a log can write:
last offsets increasing, each entry's first offset at or below its last and its LSO at most
its last offset + 1."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage_core.log.transaction_index import AbortedTxn, TransactionIndex, TxnIndexSearchResult

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def aborted_txns(draw: st.DrawFn) -> list[AbortedTxn]:
    entries: list[AbortedTxn] = []
    last = draw(st.integers(min_value=0, max_value=20))
    for producer_id in range(draw(st.integers(min_value=0, max_value=40))):
        last += draw(st.integers(min_value=1, max_value=10))
        first = draw(st.integers(min_value=max(0, last - 30), max_value=last))
        lso = draw(st.integers(min_value=max(0, first - 30), max_value=last + 1))
        entries.append(
            AbortedTxn(
                producer_id=producer_id,
                first_offset=first,
                last_offset=last,
                last_stable_offset=lso,
            )
        )
    return entries


def linear_scan(
    entries: list[AbortedTxn], fetch_offset: int, upper_bound_offset: int
) -> TxnIndexSearchResult:
    """Kafka's ``TransactionIndex.collectAbortedTxns``: every entry, from the first."""
    found = []
    for txn in entries:
        if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound_offset:
            found.append(txn)
        if txn.last_stable_offset >= upper_bound_offset:
            return TxnIndexSearchResult(tuple(found), True)
    return TxnIndexSearchResult(tuple(found), False)


@SETTINGS
@given(
    entries=aborted_txns(),
    fetch_offset=st.integers(min_value=0, max_value=450),
    span=st.integers(min_value=0, max_value=200),
)
def test_the_search_answers_as_a_linear_scan(
    entries: list[AbortedTxn], fetch_offset: int, span: int
) -> None:
    with tempfile.TemporaryDirectory() as directory:
        index = TransactionIndex(0, Path(directory) / "00000000000000000000.txnindex")
        try:
            for txn in entries:
                index.append(txn)
            upper_bound_offset = fetch_offset + span
            assert index.collect_aborted_txns(fetch_offset, upper_bound_offset) == linear_scan(
                entries, fetch_offset, upper_bound_offset
            )
        finally:
            index.close()
