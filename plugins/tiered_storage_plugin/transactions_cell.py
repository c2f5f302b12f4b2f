"""The status page's transactions cell (pure): a partition's last stable offset where it
differs from its high watermark, and its open transactions, as ``jobs.cluster_status``
recorded them (``storage_core.tools.open_transactions``).

An open transaction holds read_committed consumers and copies to the remote tier at its first
offset. One whose producer has not written for longer than Kafka's default
``transaction.max.timeout.ms`` (15 min) should have been aborted by its coordinator: the cell
calls it possibly hanging, as ``kafka-transactions.sh find-hanging`` would list it.
"""

from __future__ import annotations

import html
from typing import Protocol

from tiered_storage_plugin.durations import human_duration

HANGING_AGE_MS = 15 * 60 * 1000  # Kafka's transaction.max.timeout.ms default


class PartitionTransactions(Protocol):
    """What the cell reads of a ``status.PartitionStatus``."""

    @property
    def high_watermark(self) -> int | None: ...
    @property
    def last_stable_offset(self) -> int | None: ...
    @property
    def open_transactions(self) -> int | None: ...
    @property
    def oldest_txn_start_offset(self) -> int | None: ...
    @property
    def oldest_txn_age_ms(self) -> int | None: ...


def transactions_cell(s: PartitionTransactions) -> str:
    """The ``<td>``, highlighted while a transaction is open."""
    text = transactions_text(
        high_watermark=s.high_watermark,
        last_stable_offset=s.last_stable_offset,
        open_transactions=s.open_transactions,
        oldest_start_offset=s.oldest_txn_start_offset,
        oldest_age_ms=s.oldest_txn_age_ms,
    )
    return f'<td class="{"txn-open" if s.open_transactions else "txn"}">{html.escape(text)}</td>'


def transactions_text(
    *,
    high_watermark: int | None,
    last_stable_offset: int | None,
    open_transactions: int | None,
    oldest_start_offset: int | None,
    oldest_age_ms: int | None,
) -> str:
    """``-`` when the snapshot has no LSO (an older job), ``none open`` when the LSO is the
    HW, else the LSO and the oldest open transaction in words (``open_transactions`` None:
    the job could not describe the producers)."""
    if last_stable_offset is None:
        return "-"
    if last_stable_offset == high_watermark:
        return "none open"  # an open transaction holds the LSO below the HW
    parts = [f"LSO {last_stable_offset} (HW {'-' if high_watermark is None else high_watermark})"]
    if open_transactions is None:
        parts.append("open transactions unknown: the status job could not describe the producers")
        return "; ".join(parts)
    count = open_transactions
    if count == 0:
        parts.append("no transaction open: a marker not yet replicated")
        return "; ".join(parts)
    since = "" if oldest_start_offset is None else f" since offset {oldest_start_offset}"
    parts.append(f"1 open{since}" if count == 1 else f"{count} open, the oldest{since}")
    if oldest_age_ms is not None:
        parts.append(
            f"its producer last wrote {human_duration(oldest_age_ms / 1000)} before the snapshot"
        )
        if oldest_age_ms > HANGING_AGE_MS:
            parts.append(
                "possibly hanging: idle longer than transaction.max.timeout.ms (15 min);"
                " storage-core topics describe names its producer"
            )
    return "; ".join(parts)
