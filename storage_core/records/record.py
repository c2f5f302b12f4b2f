"""Records of a v2 batch: the values a producer hands in and the values a reader gets back.

Wire format of one record inside a batch (Kafka's ``DefaultRecord``; varint/varlong are
zigzag encoded, see ``records.varint``)::

    length          varint   bytes of the record after this field
    attributes      int8     unused, 0
    timestampDelta  varlong  timestamp - batch base timestamp
    offsetDelta     varint   offset - batch base offset
    keyLength       varint   -1 for a null key
    key             bytes
    valueLength     varint   -1 for a null value
    value           bytes
    headerCount     varint
    headers         [headerKeyLength varint, headerKey UTF-8,
                     headerValueLength varint (-1 for null), headerValue bytes] * headerCount

``decode_record`` reads one record of that format (``DefaultRecord.readFrom``); the encoder is
part of ``memory_records_builder.build_batch``.
"""

from __future__ import annotations

from dataclasses import dataclass

from storage_core.errors import CorruptRecordError
from storage_core.records.varint import INT64_MAX, ByteBuffer, decode_varint, decode_varlong

NO_TIMESTAMP = -1

# Smallest record: length, attributes, timestampDelta, offsetDelta, keyLength, valueLength
# and headerCount, one byte each. ``length`` counts all but itself.
_MIN_RECORD_BODY_BYTES = 6


@dataclass(frozen=True, slots=True, kw_only=True)
class Header:
    """A record header: a non-null UTF-8 key and a nullable value."""

    key: str
    value: bytes | None


@dataclass(frozen=True, slots=True, kw_only=True)
class SimpleRecord:
    """A record as a producer hands it in, before the log gives it an offset.

    ``timestamp`` is epoch milliseconds, or ``NO_TIMESTAMP`` (-1) when the producer set none.
    """

    value: bytes | None
    key: bytes | None = None
    headers: tuple[Header, ...] = ()
    timestamp: int = NO_TIMESTAMP

    def __post_init__(self) -> None:
        if not NO_TIMESTAMP <= self.timestamp <= INT64_MAX:
            raise ValueError(
                f"invalid record timestamp {self.timestamp}: use epoch milliseconds >= 0"
                f" or {NO_TIMESTAMP} for none"
            )


@dataclass(frozen=True, slots=True, kw_only=True)
class Record:
    """A record read back from a batch, with its absolute offset and timestamp.

    In a LogAppendTime batch ``timestamp`` is the batch's max timestamp (the append time), as
    Kafka reports it.
    """

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...]
    attributes: int = 0


def decode_record(
    data: ByteBuffer,
    pos: int,
    end: int,
    *,
    base_offset: int,
    base_timestamp: int,
    append_time: int | None,
) -> tuple[Record, int]:
    """The record at ``data[pos:]``, ending by ``end``, and the position after it (Kafka's
    ``DefaultRecord.readFrom``); ``append_time`` replaces every timestamp when set."""
    record_start = pos
    length, pos = decode_varint(data, pos)
    if length < _MIN_RECORD_BODY_BYTES or length > end - pos:
        raise CorruptRecordError(
            f"record at byte {record_start} has length {length}; {end - pos} bytes remain"
            f" and a record takes at least {_MIN_RECORD_BODY_BYTES}"
        )
    record_end = pos + length
    attributes = data[pos]
    if attributes >= 0x80:
        attributes -= 0x100
    timestamp_delta, pos = decode_varlong(data, pos + 1)
    offset_delta, pos = decode_varint(data, pos)
    key, pos = _read_nullable_bytes(data, pos, record_end, "key")
    value, pos = _read_nullable_bytes(data, pos, record_end, "value")
    header_count, pos = decode_varint(data, pos)
    if header_count < 0:
        raise CorruptRecordError(f"invalid header count {header_count}")
    headers: list[Header] = []
    for _ in range(header_count):
        if pos >= record_end:
            raise CorruptRecordError(f"record declares {header_count} headers beyond its length")
        key_length, pos = decode_varint(data, pos)
        if key_length < 0 or key_length > record_end - pos:
            raise CorruptRecordError(f"invalid header key length {key_length}")
        try:
            header_key = str(data[pos : pos + key_length], "utf-8")
        except UnicodeDecodeError as exc:
            raise CorruptRecordError(f"header key is not valid UTF-8: {exc}") from None
        header_value, pos = _read_nullable_bytes(data, pos + key_length, record_end, "header value")
        headers.append(Header(key=header_key, value=header_value))
    if pos != record_end:
        raise CorruptRecordError(
            f"record at byte {record_start} declares {length} bytes but its fields take"
            f" {pos - (record_end - length)}"
        )
    record = Record(
        offset=base_offset + offset_delta,
        timestamp=base_timestamp + timestamp_delta if append_time is None else append_time,
        key=key,
        value=value,
        headers=tuple(headers),
        attributes=attributes,
    )
    return record, pos


def _read_nullable_bytes(
    data: ByteBuffer, pos: int, record_end: int, what: str
) -> tuple[bytes | None, int]:
    length, pos = decode_varint(data, pos)
    if length == -1:
        return None, pos
    if length < 0 or length > record_end - pos:
        raise CorruptRecordError(f"invalid {what} length {length}; {record_end - pos} bytes remain")
    return bytes(data[pos : pos + length]), pos + length
