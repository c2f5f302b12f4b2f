r"""Record batch v2 (magic 2), byte for byte as Apache Kafka writes it (``DefaultRecordBatch``).

Wire format (big-endian; byte offsets from the start of the batch)::

    offset size  field                 type    notes
     0     8    baseOffset            int64   first offset of the batch  \  LOG_OVERHEAD
     8     4    batchLength           int32   bytes after this field     /  (12 bytes)
    12     4    partitionLeaderEpoch  int32   set by the leader
    16     1    magic                 int8    2
    17     4    crc                   uint32  CRC-32C (Castagnoli) of bytes 21 .. end
    21     2    attributes            int16   bits 0-2  compression codec (records.compression)
                                              bit  3    timestamp type: 0 CreateTime,
                                                        1 LogAppendTime
                                              bit  4    transactional
                                              bit  5    control batch
                                              bit  6    baseTimestamp is a delete horizon
                                                        (KIP-534)
                                              bits 7-15 unused, 0
    23     4    lastOffsetDelta       int32   last offset - baseOffset
    27     8    baseTimestamp         int64   first record's timestamp (or delete horizon)
    35     8    maxTimestamp          int64   largest record timestamp, or the append time
    43     8    producerId            int64   -1 when not idempotent
    51     2    producerEpoch         int16   -1 when not idempotent
    53     4    baseSequence          int32   -1 when not idempotent
    57     4    recordsCount          int32
    61     ..   records                       back to back (see records.record); with a
                                              codec, one compressed stream of them

A batch is therefore ``batchLength + 12`` bytes, at least 61. Because the CRC starts at
``attributes``, a leader can stamp ``baseOffset`` and ``partitionLeaderEpoch`` in place
without recomputing it (``patch_offset_and_epoch``); the batch length and magic are not
covered either and are checked by framing instead.

``RecordBatch`` is a read-only view over the bytes of one batch; it parses the header once
when built and reads records lazily. It holds no lock and never mutates its buffer, so it is
safe to share between threads as long as the buffer is not modified meanwhile.

The rest of Kafka's record layer sits beside this module: ``record`` (``DefaultRecord``, the
records inside a batch), ``record_batch_header`` (the header-only view a file scan reads, as
``FileLogInputStream.FileChannelRecordBatch``) and ``memory_records_builder``
(``MemoryRecordsBuilder``, which encodes a batch).
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Iterator
from typing import NoReturn, TypeAlias

from crc32c import crc32c

from storage_core.errors import CorruptRecordError
from storage_core.records.compression import (
    COMPRESSION_CODEC_MASK,
    DEFAULT_MAX_DECOMPRESSED_BYTES,
    CompressionType,
    decompress,
)
from storage_core.records.record import NO_TIMESTAMP as NO_TIMESTAMP  # noqa: PLC0414 (export)
from storage_core.records.record import Record, decode_record

ByteBuffer: TypeAlias = bytes | bytearray | memoryview

MAGIC_V2 = 2
LOG_OVERHEAD = 12
BATCH_HEADER_SIZE = 61
# batchLength of a batch without records: the header minus LOG_OVERHEAD.
MIN_BATCH_LENGTH = BATCH_HEADER_SIZE - LOG_OVERHEAD

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1

BASE_OFFSET_OFFSET = 0
LENGTH_OFFSET = 8
PARTITION_LEADER_EPOCH_OFFSET = 12
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
MAX_TIMESTAMP_OFFSET = 35

TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
DELETE_HORIZON_MASK = 0x40

_HEADER = struct.Struct(">qiibIhiqqqhii")
_LOG_OVERHEAD = struct.Struct(">qi")
_INT32 = struct.Struct(">i")
_INT16 = struct.Struct(">h")
_UINT32 = struct.Struct(">I")
_INT64 = struct.Struct(">q")

if _HEADER.size != BATCH_HEADER_SIZE:  # pragma: no cover - guards the format string
    raise ImportError(f"batch header struct is {_HEADER.size} bytes, expected 61")


class TimestampType(enum.IntEnum):
    """Bit 3 of the attributes: who set ``maxTimestamp``."""

    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


# Field indexes in the tuple unpacked by _HEADER.
_I_BASE_OFFSET = 0
_I_LENGTH = 1
_I_EPOCH = 2
_I_MAGIC = 3
_I_CRC = 4
_I_ATTRIBUTES = 5
_I_LAST_OFFSET_DELTA = 6
_I_BASE_TIMESTAMP = 7
_I_MAX_TIMESTAMP = 8
_I_PRODUCER_ID = 9
_I_PRODUCER_EPOCH = 10
_I_BASE_SEQUENCE = 11
_I_RECORDS_COUNT = 12

_HeaderTuple: TypeAlias = tuple[int, int, int, int, int, int, int, int, int, int, int, int, int]


def _parse_header(
    buffer: ByteBuffer,
    start: int,
    available: int,
    *,
    file: str | None,
    position: int,
) -> _HeaderTuple:
    """Unpack and frame-check the header at ``buffer[start:]``.

    ``available`` is how many bytes of the batch exist from ``start`` on (in a file, more
    than ``buffer`` holds); ``position`` is where the batch sits, for error reports.
    """
    if available < LOG_OVERHEAD:
        offset = _INT64.unpack_from(buffer, start)[0] if available >= 8 else None
        raise CorruptRecordError(
            f"truncated batch header: {available} of {LOG_OVERHEAD} bytes present",
            file=file,
            position=position,
            offset=offset,
        )
    base_offset, batch_length = _LOG_OVERHEAD.unpack_from(buffer, start)
    if batch_length < MIN_BATCH_LENGTH:
        raise CorruptRecordError(
            f"batch length {batch_length} is smaller than the minimum {MIN_BATCH_LENGTH}"
            " (garbage or a zeroed region where a batch header should be)",
            file=file,
            position=position,
            offset=base_offset,
        )
    size = batch_length + LOG_OVERHEAD
    if available < size:
        raise CorruptRecordError(
            f"truncated batch: {available} of {size} bytes present",
            file=file,
            position=position,
            offset=base_offset,
        )
    header: _HeaderTuple = _HEADER.unpack_from(buffer, start)
    if header[_I_MAGIC] != MAGIC_V2:
        raise CorruptRecordError(
            f"unsupported magic {header[_I_MAGIC]}: only record batch v2 (magic 2) is stored",
            file=file,
            position=position,
            offset=base_offset,
        )
    return header


def _as_bytes_view(buffer: ByteBuffer) -> ByteBuffer:
    if isinstance(buffer, memoryview) and (buffer.itemsize != 1 or buffer.ndim != 1):
        return buffer.cast("B")
    return buffer


class RecordBatch:
    """An immutable view over the bytes of one v2 batch (Kafka's ``DefaultRecordBatch``).

    Built by ``from_buffer`` (or ``RecordBatchHeader.load``), which checks framing only: the
    header fits, ``batchLength`` is plausible, the whole batch is present and magic is 2.
    ``ensure_valid`` checks the CRC; ``records`` decodes. ``position`` is where the batch
    sits in the buffer or file it came from; errors name it together with ``file``.
    """

    __slots__ = ("_file", "_header", "_position", "_source", "_start")

    def __init__(
        self,
        source: ByteBuffer,
        start: int,
        header: _HeaderTuple,
        *,
        file: str | None,
        position: int,
    ) -> None:
        self._source = source
        self._start = start
        self._header = header
        self._file = file
        self._position = position

    @staticmethod
    def from_buffer(
        buffer: ByteBuffer, position: int = 0, *, file: str | None = None
    ) -> RecordBatch:
        """The batch starting at ``buffer[position]``; ``CorruptRecordError`` if misframed."""
        buffer = _as_bytes_view(buffer)
        if not 0 <= position <= len(buffer):
            raise ValueError(f"position {position} is outside the buffer of {len(buffer)} bytes")
        header = _parse_header(
            buffer, position, len(buffer) - position, file=file, position=position
        )
        return RecordBatch(buffer, position, header, file=file, position=position)

    # ------------------------------------------------------------------ header fields
    @property
    def file(self) -> str | None:
        return self._file

    @property
    def position(self) -> int:
        return self._position

    @property
    def base_offset(self) -> int:
        return self._header[_I_BASE_OFFSET]

    @property
    def batch_length(self) -> int:
        return self._header[_I_LENGTH]

    @property
    def size_in_bytes(self) -> int:
        return self._header[_I_LENGTH] + LOG_OVERHEAD

    @property
    def partition_leader_epoch(self) -> int:
        return self._header[_I_EPOCH]

    @property
    def magic(self) -> int:
        return self._header[_I_MAGIC]

    @property
    def crc(self) -> int:
        """The stored CRC-32C (unsigned)."""
        return self._header[_I_CRC]

    @property
    def attributes(self) -> int:
        return self._header[_I_ATTRIBUTES]

    @property
    def compression(self) -> CompressionType:
        """The codec; ``UnsupportedCompressionError`` for ids 5..7."""
        return CompressionType.from_id(self._header[_I_ATTRIBUTES] & COMPRESSION_CODEC_MASK)

    @property
    def timestamp_type(self) -> TimestampType:
        if self._header[_I_ATTRIBUTES] & TIMESTAMP_TYPE_MASK:
            return TimestampType.LOG_APPEND_TIME
        return TimestampType.CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self._header[_I_ATTRIBUTES] & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self._header[_I_ATTRIBUTES] & CONTROL_MASK)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self._header[_I_ATTRIBUTES] & DELETE_HORIZON_MASK)

    @property
    def last_offset_delta(self) -> int:
        return self._header[_I_LAST_OFFSET_DELTA]

    @property
    def last_offset(self) -> int:
        """Offset of the last record (inclusive)."""
        return self._header[_I_BASE_OFFSET] + self._header[_I_LAST_OFFSET_DELTA]

    @property
    def next_offset(self) -> int:
        """Offset after the batch (exclusive end)."""
        return self.last_offset + 1

    @property
    def base_timestamp(self) -> int:
        return self._header[_I_BASE_TIMESTAMP]

    @property
    def max_timestamp(self) -> int:
        return self._header[_I_MAX_TIMESTAMP]

    @property
    def producer_id(self) -> int:
        return self._header[_I_PRODUCER_ID]

    @property
    def producer_epoch(self) -> int:
        return self._header[_I_PRODUCER_EPOCH]

    @property
    def base_sequence(self) -> int:
        return self._header[_I_BASE_SEQUENCE]

    @property
    def records_count(self) -> int:
        return self._header[_I_RECORDS_COUNT]

    @property
    def buffer(self) -> memoryview:
        """The bytes of exactly this batch (a view, not a copy)."""
        return memoryview(self._source)[self._start : self._start + self.size_in_bytes]

    # ------------------------------------------------------------------ validation
    def compute_checksum(self) -> int:
        """CRC-32C of the bytes from ``attributes`` to the end of the batch."""
        start = self._start
        view = memoryview(self._source)[start + ATTRIBUTES_OFFSET : start + self.size_in_bytes]
        return crc32c(view)

    def is_valid(self) -> bool:
        """Whether the stored CRC matches the bytes (Kafka's ``isValid``)."""
        return self.compute_checksum() == self._header[_I_CRC]

    def ensure_valid(self) -> None:
        """Raise ``CorruptRecordError`` unless the CRC and the header counts are sound."""
        computed = self.compute_checksum()
        if computed != self._header[_I_CRC]:
            self._corrupt(
                f"record batch is corrupt (stored crc = {self._header[_I_CRC]},"
                f" computed crc = {computed})"
            )
        if self._header[_I_RECORDS_COUNT] < 0:
            self._corrupt(f"invalid record count {self._header[_I_RECORDS_COUNT]}")
        if self._header[_I_LAST_OFFSET_DELTA] < 0:
            self._corrupt(f"invalid last offset delta {self._header[_I_LAST_OFFSET_DELTA]}")

    def _corrupt(
        self, message: str, error: type[CorruptRecordError] = CorruptRecordError
    ) -> NoReturn:
        raise error(message, file=self._file, position=self._position, offset=self.base_offset)

    # ------------------------------------------------------------------ records
    def records(
        self, *, max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES
    ) -> Iterator[Record]:
        """Decode the records, decompressing first if needed (the CRC is not checked here).

        Decompression happens in this call: ``UnsupportedCompressionError`` for an unknown
        codec, ``CorruptRecordError`` for an undecodable stream, ``DecompressedSizeLimitError``
        beyond ``max_decompressed_bytes``. While iterating, ``CorruptRecordError`` when a
        record's length disagrees with its fields, the count differs from ``records_count``
        or bytes are left over after the last record.
        """
        count = self.records_count
        if count < 0:
            self._corrupt(f"invalid record count {count}")
        compression = self.compression
        start = self._start + BATCH_HEADER_SIZE
        end = self._start + self.size_in_bytes
        data: ByteBuffer
        if compression == CompressionType.NONE:
            data = memoryview(self._source)[start:end]
        else:
            try:
                data = decompress(
                    compression,
                    memoryview(self._source)[start:end],
                    max_decompressed_bytes=max_decompressed_bytes,
                )
            except CorruptRecordError as exc:
                self._corrupt(exc.reason, type(exc))
        return self._iter_records(data, count)

    def _iter_records(self, data: ByteBuffer, count: int) -> Iterator[Record]:
        base_offset = self.base_offset
        base_timestamp = self.base_timestamp
        append_time = (
            self.max_timestamp if self.timestamp_type == TimestampType.LOG_APPEND_TIME else None
        )
        end = len(data)
        pos = 0
        for index in range(count):
            if pos >= end:
                self._corrupt(f"batch declares {count} records but its data ends after {index}")
            try:
                record, pos = decode_record(
                    data,
                    pos,
                    end,
                    base_offset=base_offset,
                    base_timestamp=base_timestamp,
                    append_time=append_time,
                )
            except CorruptRecordError as exc:
                self._corrupt(f"record {index} of {count}: {exc.reason}")
            yield record
        if pos != end:
            self._corrupt(f"{end - pos} bytes left after the last of {count} records")

    def __repr__(self) -> str:
        codec = self._header[_I_ATTRIBUTES] & COMPRESSION_CODEC_MASK
        codec_name = CompressionType(codec).display_name if codec <= 4 else f"unknown({codec})"
        return (
            f"RecordBatch(base_offset={self.base_offset}, last_offset={self.last_offset},"
            f" count={self.records_count}, size={self.size_in_bytes},"
            f" compression={codec_name}, epoch={self.partition_leader_epoch},"
            f" max_timestamp={self.max_timestamp}, position={self._position})"
        )


# ---------------------------------------------------------------------------- patching
def patch_offset_and_epoch(
    buffer: bytearray | memoryview,
    position: int,
    *,
    base_offset: int,
    partition_leader_epoch: int,
) -> None:
    """Write ``baseOffset`` (bytes 0-8) and ``partitionLeaderEpoch`` (12-16) in place.

    Neither field is covered by the CRC, so the batch stays valid without re-checksumming.
    """
    if position < 0 or position + MAGIC_OFFSET > len(buffer):
        raise ValueError(f"no batch header at position {position} of a {len(buffer)}-byte buffer")
    try:
        _INT64.pack_into(buffer, position + BASE_OFFSET_OFFSET, base_offset)
        _INT32.pack_into(buffer, position + PARTITION_LEADER_EPOCH_OFFSET, partition_leader_epoch)
    except struct.error as exc:
        raise ValueError(f"base offset or leader epoch out of range: {exc}") from None


def patch_log_append_time(
    buffer: bytearray | memoryview, position: int, log_append_time: int
) -> None:
    """Turn the batch at ``position`` into a LogAppendTime batch stamped ``log_append_time``.

    Sets attribute bit 3 and ``maxTimestamp``, then recomputes the CRC (both are covered),
    as Kafka's ``DefaultRecordBatch.setMaxTimestamp``. The CRC is verified first so that a
    damaged batch is never given a fresh, valid checksum. No-op when already stamped so.
    """
    if log_append_time < 0:
        raise ValueError(f"log_append_time must be >= 0, got {log_append_time}")
    batch = RecordBatch.from_buffer(buffer, position)
    batch.ensure_valid()
    if (
        batch.timestamp_type == TimestampType.LOG_APPEND_TIME
        and batch.max_timestamp == log_append_time
    ):
        return
    _INT16.pack_into(buffer, position + ATTRIBUTES_OFFSET, batch.attributes | TIMESTAMP_TYPE_MASK)
    _INT64.pack_into(buffer, position + MAX_TIMESTAMP_OFFSET, log_append_time)
    end = position + batch.size_in_bytes
    crc = crc32c(memoryview(buffer)[position + ATTRIBUTES_OFFSET : end])
    _UINT32.pack_into(buffer, position + CRC_OFFSET, crc)


def patch_max_timestamp(buffer: bytearray | memoryview, position: int, max_timestamp: int) -> None:
    """Make the batch at ``position`` a CreateTime batch with ``maxTimestamp`` = ``max_timestamp``.

    Clears attribute bit 3, writes ``maxTimestamp`` and recomputes the CRC (both are covered),
    as Kafka's ``DefaultRecordBatch.setMaxTimestamp(CREATE_TIME, ...)``. The CRC is verified
    first so that a damaged batch is never given a fresh, valid checksum. No-op when nothing
    changes.
    """
    batch = RecordBatch.from_buffer(buffer, position)
    batch.ensure_valid()
    if batch.timestamp_type == TimestampType.CREATE_TIME and batch.max_timestamp == max_timestamp:
        return
    _INT16.pack_into(buffer, position + ATTRIBUTES_OFFSET, batch.attributes & ~TIMESTAMP_TYPE_MASK)
    _INT64.pack_into(buffer, position + MAX_TIMESTAMP_OFFSET, max_timestamp)
    end = position + batch.size_in_bytes
    crc = crc32c(memoryview(buffer)[position + ATTRIBUTES_OFFSET : end])
    _UINT32.pack_into(buffer, position + CRC_OFFSET, crc)
