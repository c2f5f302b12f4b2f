"""Variable-length integers of the record format (Kafka's ``ByteUtils``).

Wire format (protobuf base-128, least significant group first)::

    unsigned varint   7 bits per byte, bit 7 (0x80) set on every byte but the last.
                      A 32-bit value takes 1..5 bytes.
    varint            a signed int32 zigzag-mapped to unsigned first:
                      (v << 1) ^ (v >> 31), so 0 -> 0, -1 -> 1, 1 -> 2, -2 -> 3 ... (1..5 bytes)
    varlong           a signed int64 zigzag-mapped: (v << 1) ^ (v >> 63) (1..10 bytes)

Decoders read from any byte buffer (``bytes``, ``bytearray``, ``memoryview``) at a position
and return ``(value, position after the value)``. They raise ``CorruptRecordError`` for a
truncated value, one longer than 5 (varint) or 10 (varlong) bytes, or one whose last byte
carries bits beyond 32 (varint) or 64 (varlong) bits. Kafka silently drops such excess bits;
here they are refused, since no Kafka writer produces them.
"""

from __future__ import annotations

from typing import TypeAlias

from storage_core.errors import CorruptRecordError

ByteBuffer: TypeAlias = bytes | bytearray | memoryview

INT32_MIN = -(1 << 31)
INT32_MAX = (1 << 31) - 1
INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1
UINT32_MAX = (1 << 32) - 1

MAX_VARINT_BYTES = 5
MAX_VARLONG_BYTES = 10

# One-byte encodings of 0..127, shared to avoid allocating a new bytes object per call.
_ONE_BYTE = tuple(bytes((i,)) for i in range(0x80))


def _encode_unsigned(value: int) -> bytes:
    if value < 0x80:
        return _ONE_BYTE[value]
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _unsigned_size(value: int) -> int:
    return 1 if value == 0 else (value.bit_length() + 6) // 7


def encode_unsigned_varint(value: int) -> bytes:
    """Encode ``0 <= value <= 2**32 - 1`` as an unsigned varint (1..5 bytes)."""
    if not 0 <= value <= UINT32_MAX:
        raise ValueError(f"{value} does not fit an unsigned varint (0..{UINT32_MAX})")
    return _encode_unsigned(value)


def encode_varint(value: int) -> bytes:
    """Encode a signed int32 as a zigzag varint (Kafka's ``ByteUtils.writeVarint``)."""
    if not INT32_MIN <= value <= INT32_MAX:
        raise ValueError(f"{value} does not fit a varint (int32)")
    return _encode_unsigned((value << 1) ^ (value >> 31))


def encode_varlong(value: int) -> bytes:
    """Encode a signed int64 as a zigzag varlong (Kafka's ``ByteUtils.writeVarlong``)."""
    if not INT64_MIN <= value <= INT64_MAX:
        raise ValueError(f"{value} does not fit a varlong (int64)")
    return _encode_unsigned((value << 1) ^ (value >> 63))


def size_of_unsigned_varint(value: int) -> int:
    """Bytes taken by ``encode_unsigned_varint(value)``."""
    if not 0 <= value <= UINT32_MAX:
        raise ValueError(f"{value} does not fit an unsigned varint (0..{UINT32_MAX})")
    return _unsigned_size(value)


def size_of_varint(value: int) -> int:
    """Bytes taken by ``encode_varint(value)``."""
    if not INT32_MIN <= value <= INT32_MAX:
        raise ValueError(f"{value} does not fit a varint (int32)")
    return _unsigned_size((value << 1) ^ (value >> 31))


def size_of_varlong(value: int) -> int:
    """Bytes taken by ``encode_varlong(value)``."""
    if not INT64_MIN <= value <= INT64_MAX:
        raise ValueError(f"{value} does not fit a varlong (int64)")
    return _unsigned_size((value << 1) ^ (value >> 63))


def _decode_unsigned(
    buf: ByteBuffer, pos: int, max_bytes: int, value_bits: int, what: str
) -> tuple[int, int]:
    start = pos
    result = 0
    shift = 0
    try:
        while True:
            byte = buf[pos]
            pos += 1
            result |= (byte & 0x7F) << shift
            if byte < 0x80:
                break
            shift += 7
            if shift >= max_bytes * 7:
                raise CorruptRecordError(f"{what} at byte {start} is longer than {max_bytes} bytes")
    except IndexError:
        raise CorruptRecordError(f"truncated {what} at byte {start}") from None
    if result >> value_bits:
        raise CorruptRecordError(f"{what} at byte {start} does not fit {value_bits} bits")
    return result, pos


def decode_unsigned_varint(buf: ByteBuffer, pos: int) -> tuple[int, int]:
    """Read an unsigned varint (at most 5 bytes, 32 bits) at ``pos``."""
    return _decode_unsigned(buf, pos, MAX_VARINT_BYTES, 32, "unsigned varint")


def decode_varint(buf: ByteBuffer, pos: int) -> tuple[int, int]:
    """Read a zigzag varint (int32, at most 5 bytes) at ``pos``: ``(value, new_pos)``."""
    try:
        byte = buf[pos]
    except IndexError:
        raise CorruptRecordError(f"truncated varint at byte {pos}") from None
    if byte < 0x80:
        return (byte >> 1) ^ -(byte & 1), pos + 1
    raw, pos = _decode_unsigned(buf, pos, MAX_VARINT_BYTES, 32, "varint")
    return (raw >> 1) ^ -(raw & 1), pos


def decode_varlong(buf: ByteBuffer, pos: int) -> tuple[int, int]:
    """Read a zigzag varlong (int64, at most 10 bytes) at ``pos``: ``(value, new_pos)``."""
    try:
        byte = buf[pos]
    except IndexError:
        raise CorruptRecordError(f"truncated varlong at byte {pos}") from None
    if byte < 0x80:
        return (byte >> 1) ^ -(byte & 1), pos + 1
    raw, pos = _decode_unsigned(buf, pos, MAX_VARLONG_BYTES, 64, "varlong")
    return (raw >> 1) ^ -(raw & 1), pos
