"""Appending Kafka protocol primitives to a ``bytearray`` (for the hand-written encoders).

Non-flexible versions use int16-length strings and int32-length arrays; flexible versions
(KIP-482) use unsigned varints of length + 1, with 0 meaning null.
"""

from __future__ import annotations

import struct

from storage_core.records.varint import UINT32_MAX

I16 = struct.Struct(">h")
I32 = struct.Struct(">i")
I64 = struct.Struct(">q")
_NULL_STRING = I16.pack(-1)


def append_uvarint(out: bytearray, value: int) -> None:
    if not 0 <= value <= UINT32_MAX:
        raise ValueError(f"{value} does not fit an unsigned varint (0..{UINT32_MAX})")
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def append_array_length(out: bytearray, count: int, flexible: bool) -> None:
    if flexible:
        append_uvarint(out, count + 1)
    else:
        out += I32.pack(count)


def append_string(out: bytearray, value: str, flexible: bool) -> None:
    data = value.encode()
    if flexible:
        append_uvarint(out, len(data) + 1)
    else:
        out += I16.pack(len(data))
    out += data


def append_nullable_string(out: bytearray, value: str | None, flexible: bool) -> None:
    if value is None:
        if flexible:
            out.append(0)
        else:
            out += _NULL_STRING
    else:
        append_string(out, value, flexible)
