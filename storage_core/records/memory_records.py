"""Batches held in memory back to back (Kafka's ``MemoryRecords``), e.g. a produce request.

Layout: ``[batch][batch]...`` with nothing between batches; each batch is self-delimiting
through its ``batchLength`` (see ``records.batch``).
"""

from __future__ import annotations

from collections.abc import Iterator

from storage_core.records.batch import ByteBuffer, RecordBatch


def iter_batches(
    buffer: ByteBuffer, *, position: int = 0, file: str | None = None
) -> Iterator[tuple[int, RecordBatch]]:
    """Yield ``(position, batch)`` for consecutive batches from ``position`` to the end.

    Only framing is checked (see ``RecordBatch.from_buffer``), not CRCs. Raises
    ``CorruptRecordError`` at the first bad or truncated header; the batches before it have
    been yielded, so the caller can decide whether that means "cut here".
    """
    if isinstance(buffer, memoryview) and (buffer.itemsize != 1 or buffer.ndim != 1):
        buffer = buffer.cast("B")
    end = len(buffer)
    if not 0 <= position <= end:
        raise ValueError(f"position {position} is outside the buffer of {end} bytes")
    while position < end:
        batch = RecordBatch.from_buffer(buffer, position, file=file)
        yield position, batch
        position += batch.size_in_bytes
