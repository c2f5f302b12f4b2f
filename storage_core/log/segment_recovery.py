"""What ``LogSegment.recover`` reads from each batch: the producer facts that rebuild the
producer state and the ``.txnindex`` (Kafka's ``updateProducerState`` input), and whether the
bytes it cuts are only a torn last batch.
"""

from __future__ import annotations

from pathlib import Path

from storage_core.errors import CorruptRecordError, InvalidRecordError
from storage_core.log.producer_state_entry import ProducerBatch
from storage_core.records import (
    BATCH_HEADER_SIZE,
    LOG_OVERHEAD,
    NO_PRODUCER_ID,
    FileRecords,
    RecordBatch,
)
from storage_core.records.end_transaction_marker import end_txn_marker_of


def is_torn_tail(log: FileRecords, position: int, file_size: int) -> bool:
    """Whether the bytes from ``position`` to the end are one batch that was not fully written."""
    remaining = file_size - position
    if remaining < LOG_OVERHEAD:
        return True
    head = log.read(position, LOG_OVERHEAD)
    batch_length = int.from_bytes(head[8:12], "big", signed=True)
    return (
        batch_length >= BATCH_HEADER_SIZE - LOG_OVERHEAD and remaining < LOG_OVERHEAD + batch_length
    )


def producer_batch_of(batch: RecordBatch, path: Path, position: int) -> ProducerBatch | None:
    """What producer state needs of a recovered batch; None without a producer id. A control
    batch whose marker does not parse is corrupt (``CorruptRecordError``)."""
    if batch.producer_id <= NO_PRODUCER_ID:
        return None
    marker = None
    if batch.is_control:
        try:
            marker = end_txn_marker_of(batch)
        except InvalidRecordError as exc:
            raise CorruptRecordError(
                str(exc), file=str(path), position=position, offset=batch.base_offset
            ) from exc
    return ProducerBatch.of(batch, marker)
