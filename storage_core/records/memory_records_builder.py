"""Encoding records into one v2 batch (Kafka's ``MemoryRecordsBuilder``).

``build_batch`` writes the batch header laid out in ``records.batch`` and the records in the
``DefaultRecord`` format of ``records.record``, compressing the records section with the
batch's codec and computing the CRC-32C last.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from crc32c import crc32c

from storage_core.errors import RecordBatchTooLargeError
from storage_core.records.batch import (
    _HEADER,
    _UINT32,
    ATTRIBUTES_OFFSET,
    BATCH_HEADER_SIZE,
    CONTROL_MASK,
    CRC_OFFSET,
    LOG_OVERHEAD,
    MAGIC_V2,
    MIN_BATCH_LENGTH,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    TimestampType,
)
from storage_core.records.compression import CompressionType, compress
from storage_core.records.record import SimpleRecord
from storage_core.records.varint import INT32_MAX, encode_varint, encode_varlong

_NULL_LENGTH = encode_varint(-1)
_ZERO_ATTRIBUTES = b"\x00"


def build_batch(
    records: Sequence[SimpleRecord],
    *,
    base_offset: int = 0,
    compression: CompressionType = CompressionType.NONE,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    is_transactional: bool = False,
    is_control: bool = False,
    log_append_time: int | None = None,
) -> bytes:
    """Encode ``records`` as one v2 batch, as Kafka's ``MemoryRecordsBuilder`` does.

    Offset deltas are 0..n-1. ``baseTimestamp`` is the first record's timestamp (-1 when it
    has none; later deltas are then relative to -1, as in Kafka) and ``maxTimestamp`` the
    largest one (-1 if no record has one). With ``TimestampType.LOG_APPEND_TIME`` the
    ``log_append_time`` (required) becomes ``maxTimestamp``; it is ignored for CreateTime.
    The records section is always compressed with ``compression``.
    """
    count = len(records)
    if count == 0:
        raise ValueError("a record batch needs at least one record")
    if count > INT32_MAX:
        raise ValueError(f"{count} records do not fit one batch (at most {INT32_MAX})")
    _validate_producer_state(
        producer_id, producer_epoch, base_sequence, is_transactional, is_control
    )
    if timestamp_type == TimestampType.LOG_APPEND_TIME and (
        log_append_time is None or log_append_time < 0
    ):
        raise ValueError(f"a LogAppendTime batch needs log_append_time >= 0, got {log_append_time}")

    base_timestamp = records[0].timestamp
    max_timestamp = NO_TIMESTAMP
    parts: list[bytes] = []
    append = parts.append
    for offset_delta, record in enumerate(records):
        timestamp = record.timestamp
        if timestamp < NO_TIMESTAMP:
            raise ValueError(f"invalid negative timestamp {timestamp} in record {offset_delta}")
        max_timestamp = max(max_timestamp, timestamp)
        body = [
            _ZERO_ATTRIBUTES,
            encode_varlong(timestamp - base_timestamp),
            encode_varint(offset_delta),
        ]
        key = record.key
        if key is None:
            body.append(_NULL_LENGTH)
        else:
            body.append(encode_varint(len(key)))
            body.append(key)
        value = record.value
        if value is None:
            body.append(_NULL_LENGTH)
        else:
            body.append(encode_varint(len(value)))
            body.append(value)
        headers = record.headers
        body.append(encode_varint(len(headers)))
        for record_header in headers:
            header_key = record_header.key.encode("utf-8")
            body.append(encode_varint(len(header_key)))
            body.append(header_key)
            header_value = record_header.value
            if header_value is None:
                body.append(_NULL_LENGTH)
            else:
                body.append(encode_varint(len(header_value)))
                body.append(header_value)
        append(encode_varint(sum(map(len, body))))
        parts.extend(body)

    payload = b"".join(parts)
    if compression != CompressionType.NONE:
        payload = compress(compression, payload)
    batch_length = MIN_BATCH_LENGTH + len(payload)
    if batch_length > INT32_MAX:
        raise RecordBatchTooLargeError(
            f"the batch would be {batch_length + LOG_OVERHEAD} bytes; a batch is at most"
            f" {INT32_MAX} bytes long. Split the records into smaller batches"
        )
    attributes = (
        int(compression)
        | (TIMESTAMP_TYPE_MASK if timestamp_type == TimestampType.LOG_APPEND_TIME else 0)
        | (TRANSACTIONAL_MASK if is_transactional else 0)
        | (CONTROL_MASK if is_control else 0)
    )
    if timestamp_type == TimestampType.LOG_APPEND_TIME and log_append_time is not None:
        max_timestamp = log_append_time
    header = bytearray(BATCH_HEADER_SIZE)
    try:
        _HEADER.pack_into(
            header,
            0,
            base_offset,
            batch_length,
            partition_leader_epoch,
            MAGIC_V2,
            0,
            attributes,
            count - 1,
            base_timestamp,
            max_timestamp,
            producer_id,
            producer_epoch,
            base_sequence,
            count,
        )
    except struct.error as exc:
        raise ValueError(f"a batch header field is out of range: {exc}") from None
    crc = crc32c(payload, crc32c(memoryview(header)[ATTRIBUTES_OFFSET:]))
    _UINT32.pack_into(header, CRC_OFFSET, crc)
    return b"".join((header, payload))


def _validate_producer_state(
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    is_transactional: bool,
    is_control: bool,
) -> None:
    # Kafka's MemoryRecordsBuilder.validateProducerState.
    if is_transactional and producer_id == NO_PRODUCER_ID:
        raise ValueError("cannot write a transactional batch without a producer id")
    if producer_id != NO_PRODUCER_ID:
        if producer_epoch == NO_PRODUCER_EPOCH:
            raise ValueError(f"producer {producer_id} needs a producer epoch, got -1")
        if base_sequence < 0 and not is_control:
            raise ValueError(
                f"producer {producer_id} needs a base sequence >= 0, got {base_sequence}"
            )
