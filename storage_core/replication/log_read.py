"""One partition's local read for a Fetch, bounded by its isolation (Kafka's
``UnifiedLog.read`` with ``FetchIsolation``), and what the response reports with it.

The offsets are sampled before the read, so that a response never reports a HW or LSO below
the data it carries. A read_committed read stops at the LSO and carries the aborted
transactions that overlap the records it returns (Kafka's ``LocalLog.addAbortedTransactions``)::

    [fetch offset, min(upper bound of the bytes read, LSO))   (exclusive)

the upper bound being the first offset-index entry past the bytes read, or the next
segment's base offset (``Log.fetch_upper_bound_offset``). So a consumer far behind on a log
with many aborts reads the transaction indexes of the segments its fetch covers (and the
later ones only until a search is complete), not every index up to the LSO; the consumer
drops those transactions' records.
"""

from __future__ import annotations

from dataclasses import dataclass

from storage_core.log.log import Log
from storage_core.log.log_segment import FetchDataInfo
from storage_core.log.transaction_index import AbortedTxn
from storage_core.replication.fetch_isolation import FetchIsolation


@dataclass(frozen=True, slots=True, kw_only=True)
class LogReadResult:
    """What a fetch of one partition returns, with the offsets the response reports;
    ``aborted_transactions`` only for read_committed (``None`` otherwise)."""

    info: FetchDataInfo
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    log_end_offset: int
    aborted_transactions: list[AbortedTxn] | None = None


def read_log(
    log: Log,
    fetch_offset: int,
    max_bytes: int,
    *,
    isolation: FetchIsolation,
    min_one_message: bool,
) -> LogReadResult:
    high_watermark = log.high_watermark
    last_stable_offset = log.last_stable_offset
    if isolation is FetchIsolation.LOG_END:
        max_offset = None
    elif isolation is FetchIsolation.HIGH_WATERMARK:
        max_offset = high_watermark
    else:
        max_offset = last_stable_offset
    info = log.read(fetch_offset, max_bytes, max_offset=max_offset, min_one_message=min_one_message)
    aborted = None
    if isolation is FetchIsolation.TXN_COMMITTED:
        aborted = []
        if info.records is not None:
            upper_bound_offset = min(log.fetch_upper_bound_offset(info), last_stable_offset)
            if fetch_offset < upper_bound_offset:
                aborted = log.collect_aborted_transactions(fetch_offset, upper_bound_offset)
    return LogReadResult(
        info=info,
        high_watermark=high_watermark,
        last_stable_offset=last_stable_offset,
        log_start_offset=log.log_start_offset,
        log_end_offset=log.log_end_offset,
        aborted_transactions=aborted,
    )
