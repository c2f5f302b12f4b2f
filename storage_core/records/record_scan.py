"""A check of the records of one batch, walked over their bytes without building records.

Rules (Kafka's ``DefaultRecord.readFrom`` and ``DefaultRecordBatch``'s iterator, plus what a
consumer needs to read every record; see ``records.record`` for the layout)::

    length           varint   6 .. bytes left in the records section (the smallest record has
                              six one-byte fields)
    attributes       int8     0 (unused; Kafka does not look, but kafka-python reads the
                              byte as a varint and stops at any value >= 0x80)
    timestampDelta   varlong  any; the largest is returned (max timestamp = base + it)
    offsetDelta      varint   equal to the record's index: 0, 1, 2 ...
    keyLength        varint   -1 (null) or 0 .. bytes left in the record
    valueLength      varint   -1 (null) or 0 .. bytes left in the record
    headerCount      varint   0 .. bytes left in the record
      headerKeyLength varint  0 .. bytes left; the key is UTF-8
      headerValueLength       -1 (null) or 0 .. bytes left
    the fields end exactly at ``length``; the records end exactly at the end of the section,
    after exactly ``recordsCount`` records.

Two rules are stricter than Kafka, which would store such records and leave consumers stuck
at them: a key or value length below -1 (Kafka reads it as null; librdkafka and kafka-python
stop on it) and non-zero record attributes (no client writes them). A failure raises
``InvalidRecordError`` naming the record and carrying ``record_errors``
``((record index, message),)`` for the Produce response.

This is the hot path of every produce: one pass, one-byte varints decoded inline, no object
per record. Stateless and thread-safe.
"""

from __future__ import annotations

from storage_core.errors import InvalidRecordError

# length, attributes, timestampDelta, offsetDelta, keyLength, valueLength, headerCount.
MIN_RECORD_BODY_BYTES = 6
_MAX_VARINT_SHIFT = 28  # 5 bytes
_MAX_VARLONG_SHIFT = 63  # 10 bytes


class _MalformedRecordError(Exception):
    """A field of the current record is wrong; the caller adds which record it is."""


def _varint_unsigned(data: bytes, pos: int, max_shift: int) -> tuple[int, int]:
    """The raw (still zigzag-encoded) value of a varint or varlong at ``pos``."""
    value = 0
    shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
        if shift > max_shift:
            raise _MalformedRecordError("a varint runs longer than its type allows")


def scan_records(data: bytes, pos: int, end: int, count: int) -> int:
    """Check the ``count`` records in ``data[pos:end]``; return the largest timestamp delta.

    ``count`` must be positive (the batch header check guarantees it). Varints of one and two
    bytes (every length below 8 KiB) are decoded inline: a call per field would double the
    cost of a produce.
    """
    max_delta = -(1 << 63)
    index = 0
    try:
        for index in range(count):
            if pos >= end:
                raise _MalformedRecordError(
                    f"the batch declares {count} records but its data ends here"
                )
            # length
            b = data[pos]
            if b < 0x80:
                pos += 1
            else:
                c = data[pos + 1]
                if c < 0x80:
                    b = (b & 0x7F) | (c << 7)
                    pos += 2
                else:
                    b, pos = _varint_unsigned(data, pos, _MAX_VARINT_SHIFT)
            length = (b >> 1) ^ -(b & 1)
            record_end = pos + length
            if length < MIN_RECORD_BODY_BYTES or record_end > end:
                raise _MalformedRecordError(
                    f"length {length}, but {end - pos} bytes remain and a record takes at least"
                    f" {MIN_RECORD_BODY_BYTES}"
                )
            # attributes, timestampDelta
            if data[pos]:
                raise _MalformedRecordError(
                    f"attributes {data[pos]:#04x}; record attributes are unused and must be 0"
                )
            pos += 1
            b = data[pos]
            if b < 0x80:
                pos += 1
            else:
                c = data[pos + 1]
                if c < 0x80:
                    b = (b & 0x7F) | (c << 7)
                    pos += 2
                else:
                    b, pos = _varint_unsigned(data, pos, _MAX_VARLONG_SHIFT)
            b = (b >> 1) ^ -(b & 1)
            if b > max_delta:  # noqa: PLR1730 (a call to max() per record costs ~10%)
                max_delta = b
            # offsetDelta
            b = data[pos]
            if b < 0x80:
                pos += 1
            else:
                c = data[pos + 1]
                if c < 0x80:
                    b = (b & 0x7F) | (c << 7)
                    pos += 2
                else:
                    b, pos = _varint_unsigned(data, pos, _MAX_VARINT_SHIFT)
            if b != index << 1:
                raise _MalformedRecordError(
                    f"offset delta {(b >> 1) ^ -(b & 1)}; deltas must run 0, 1, 2 ..."
                )
            # keyLength, key
            b = data[pos]
            if b == 1:  # zigzag -1: null
                pos += 1
            else:
                if b < 0x80:
                    pos += 1
                else:
                    c = data[pos + 1]
                    if c < 0x80:
                        b = (b & 0x7F) | (c << 7)
                        pos += 2
                    else:
                        b, pos = _varint_unsigned(data, pos, _MAX_VARINT_SHIFT)
                if b & 1:
                    raise _MalformedRecordError(
                        f"key length {(b >> 1) ^ -1}; it must be -1 (null) or >= 0"
                    )
                pos += b >> 1
            # valueLength, value
            b = data[pos]
            if b == 1:
                pos += 1
            else:
                if b < 0x80:
                    pos += 1
                else:
                    c = data[pos + 1]
                    if c < 0x80:
                        b = (b & 0x7F) | (c << 7)
                        pos += 2
                    else:
                        b, pos = _varint_unsigned(data, pos, _MAX_VARINT_SHIFT)
                if b & 1:
                    raise _MalformedRecordError(
                        f"value length {(b >> 1) ^ -1}; it must be -1 (null) or >= 0"
                    )
                pos += b >> 1
            if pos >= record_end:
                raise _MalformedRecordError(f"its fields run past its length {length}")
            # headerCount, headers
            b = data[pos]
            pos += 1
            if b:
                if b >= 0x80:
                    b, pos = _varint_unsigned(data, pos - 1, _MAX_VARINT_SHIFT)
                pos = _scan_headers(data, pos, record_end, (b >> 1) ^ -(b & 1))
            if pos != record_end:
                raise _MalformedRecordError(
                    f"length {length}, but its fields take {pos - record_end + length} bytes"
                )
        if pos != end:
            raise _MalformedRecordError(f"{end - pos} bytes follow the last of the {count} records")
    except _MalformedRecordError as exc:
        raise _record_error(index, count, str(exc)) from None
    except IndexError:
        raise _record_error(index, count, "its fields run past the end of the batch") from None
    return max_delta


def _scan_headers(data: bytes, pos: int, record_end: int, count: int) -> int:
    if count < 0 or count > record_end - pos:
        raise _MalformedRecordError(
            f"header count {count}; {record_end - pos} bytes remain in the record"
        )
    for _ in range(count):
        key_length, pos = _varint_any(data, pos)
        if key_length < 0 or key_length > record_end - pos:
            raise _MalformedRecordError(f"header key length {key_length}")
        try:
            data[pos : pos + key_length].decode("utf-8")
        except UnicodeDecodeError:
            raise _MalformedRecordError("a header key is not UTF-8") from None
        pos += key_length
        value_length, pos = _varint_any(data, pos)
        if value_length < -1 or value_length > record_end - pos:
            raise _MalformedRecordError(f"header value length {value_length}")
        if value_length > 0:
            pos += value_length
    return pos


def _varint_any(data: bytes, pos: int) -> tuple[int, int]:
    b, pos = _varint_unsigned(data, pos, _MAX_VARINT_SHIFT)
    return (b >> 1) ^ -(b & 1), pos


def _record_error(index: int, count: int, problem: str) -> InvalidRecordError:
    message = f"record {index} of {count} is malformed: {problem}"
    return InvalidRecordError(
        f"{message}. The producer wrote a batch that consumers cannot read; nothing of it was"
        " stored. Fix or upgrade the client.",
        record_errors=((index, message),),
    )
