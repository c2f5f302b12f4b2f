"""The header of a batch in a ``.log`` file, read without its records.

Kafka's counterpart is ``FileLogInputStream.FileChannelRecordBatch``: a scan of a segment
reads only the 61-byte headers (``parse_batch_header``) and loads a whole batch
(``RecordBatchHeader.load``) when it needs the records. The header layout is the one written
out in ``records.batch``; the helpers that frame-check it are that module's and shared with
this one inside ``storage_core.records``. ``load`` reads from a ``BatchSource`` (a
``FileRecords``), so this module does not import the file it scans.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from storage_core.errors import CorruptRecordError
from storage_core.records.batch import (
    _I_ATTRIBUTES,
    _I_BASE_OFFSET,
    _I_BASE_SEQUENCE,
    _I_BASE_TIMESTAMP,
    _I_CRC,
    _I_EPOCH,
    _I_LAST_OFFSET_DELTA,
    _I_LENGTH,
    _I_MAGIC,
    _I_MAX_TIMESTAMP,
    _I_PRODUCER_EPOCH,
    _I_PRODUCER_ID,
    _I_RECORDS_COUNT,
    CONTROL_MASK,
    DELETE_HORIZON_MASK,
    LOG_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    ByteBuffer,
    RecordBatch,
    TimestampType,
    _HeaderTuple,
    _parse_header,
)
from storage_core.records.compression import COMPRESSION_CODEC_MASK, CompressionType


class BatchSource(Protocol):
    """Where ``RecordBatchHeader.load`` reads a batch from: a segment's ``FileRecords``."""

    @property
    def path(self) -> Path: ...

    def read(self, position: int, size: int) -> bytes: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class RecordBatchHeader:
    """The 61-byte header of a batch in a file, with where it sits (``position``).

    Read without the records, for scanning a ``.log`` quickly; ``load`` reads the whole batch.
    """

    position: int
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @staticmethod
    def _from_tuple(position: int, header: _HeaderTuple) -> RecordBatchHeader:
        return RecordBatchHeader(
            position=position,
            base_offset=header[_I_BASE_OFFSET],
            batch_length=header[_I_LENGTH],
            partition_leader_epoch=header[_I_EPOCH],
            magic=header[_I_MAGIC],
            crc=header[_I_CRC],
            attributes=header[_I_ATTRIBUTES],
            last_offset_delta=header[_I_LAST_OFFSET_DELTA],
            base_timestamp=header[_I_BASE_TIMESTAMP],
            max_timestamp=header[_I_MAX_TIMESTAMP],
            producer_id=header[_I_PRODUCER_ID],
            producer_epoch=header[_I_PRODUCER_EPOCH],
            base_sequence=header[_I_BASE_SEQUENCE],
            records_count=header[_I_RECORDS_COUNT],
        )

    @property
    def size_in_bytes(self) -> int:
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        """Offset of the last record (inclusive)."""
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        """Offset after the batch (exclusive end)."""
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> CompressionType:
        return CompressionType.from_id(self.attributes & COMPRESSION_CODEC_MASK)

    @property
    def timestamp_type(self) -> TimestampType:
        if self.attributes & TIMESTAMP_TYPE_MASK:
            return TimestampType.LOG_APPEND_TIME
        return TimestampType.CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self.attributes & DELETE_HORIZON_MASK)

    def load(self, file_records: BatchSource) -> RecordBatch:
        """Read the whole batch from ``file_records``; its header must still be this one."""
        file = str(file_records.path)
        data = file_records.read(self.position, self.size_in_bytes)
        header = _parse_header(data, 0, len(data), file=file, position=self.position)
        if header[_I_BASE_OFFSET] != self.base_offset or header[_I_LENGTH] != self.batch_length:
            raise CorruptRecordError(
                f"batch header changed since it was scanned (base offset {self.base_offset}"
                f" -> {header[_I_BASE_OFFSET]}, length {self.batch_length} ->"
                f" {header[_I_LENGTH]}); the file was modified while being read",
                file=file,
                position=self.position,
                offset=self.base_offset,
            )
        return RecordBatch(data, 0, header, file=file, position=self.position)


def parse_batch_header(
    buffer: ByteBuffer, start: int = 0, *, available: int, file: str | None, position: int
) -> RecordBatchHeader:
    """Frame-check and unpack the header at ``buffer[start:]`` (at least 61 bytes present).

    ``available`` is how many bytes of the batch exist from there on (in a file, more than
    ``buffer`` holds); ``position`` is where the batch sits, for the header and for errors.
    """
    header = _parse_header(buffer, start, available, file=file, position=position)
    return RecordBatchHeader._from_tuple(position, header)
