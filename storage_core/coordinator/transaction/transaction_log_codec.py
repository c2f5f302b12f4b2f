"""The primitives of Kafka's generated message code that ``__transaction_state`` records use,
in their non-flexible and flexible (KIP-482) forms. All integers are big-endian::

                   non-flexible                      flexible
    string         int16 length + UTF-8              uvarint (length + 1) + UTF-8
    array          int32 count (-1 for null)         uvarint (count + 1) (0 for null)
    tagged fields  flexible only, at the end of each structure: uvarint count, then per
                   field uvarint tag, uvarint size, the value's bytes
    uvarint        7 bits a byte, least significant first, high bit set on all but the last

Every read is bounds-checked: a short, long or malformed record raises
``CorruptTransactionLogRecordError`` naming the field. Not thread-safe (one per record).
"""

from __future__ import annotations

import struct

from storage_core.coordinator.transaction.errors import CorruptTransactionLogRecordError

INT8 = struct.Struct(">b")
INT16 = struct.Struct(">h")
INT32 = struct.Struct(">i")
INT64 = struct.Struct(">q")
INT16_MAX = 2**15 - 1
_MAX_VARINT_BYTES = 5  # an unsigned varint of an int32 takes at most 5 bytes


class Writer:
    """Writes the fields of one record, strings and arrays in its version's form."""

    __slots__ = ("_flexible", "_parts")

    def __init__(self, *, flexible: bool) -> None:
        self._parts: list[bytes] = []
        self._flexible = flexible

    def raw(self, value: bytes) -> None:
        self._parts.append(value)

    def int8(self, value: int) -> None:
        self._parts.append(INT8.pack(value))

    def int16(self, value: int) -> None:
        self._parts.append(INT16.pack(value))

    def int32(self, value: int) -> None:
        self._parts.append(INT32.pack(value))

    def int64(self, value: int) -> None:
        self._parts.append(INT64.pack(value))

    def uvarint(self, value: int) -> None:
        self._parts.append(_uvarint(value))

    def string(self, value: str, what: str) -> None:
        encoded = value.encode("utf-8")
        if len(encoded) > INT16_MAX:
            raise ValueError(
                f"{what} is {len(encoded)} bytes in UTF-8, more than a string field holds"
                f" ({INT16_MAX})"
            )
        if self._flexible:
            self.uvarint(len(encoded) + 1)
        else:
            self.int16(len(encoded))
        self._parts.append(encoded)

    def array_length(self, count: int | None) -> None:
        if self._flexible:
            self.uvarint(0 if count is None else count + 1)
        else:
            self.int32(-1 if count is None else count)

    def getvalue(self) -> bytes:
        return b"".join(self._parts)


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


# ====================================================================== reader
class Reader:
    """Bounds-checked reads; every failure is a ``CorruptTransactionLogRecordError``."""

    __slots__ = ("_data", "_position", "_what", "flexible")

    def __init__(self, data: bytes | memoryview, what: str) -> None:
        self._data = bytes(data)
        self._position = 0
        self._what = what
        self.flexible = False

    def corrupt(self, message: str) -> CorruptTransactionLogRecordError:
        return CorruptTransactionLogRecordError(f"{self._what}: {message}")

    def take(self, size: int, field: str) -> bytes:
        end = self._position + size
        if size < 0 or end > len(self._data):
            raise self.corrupt(
                f"{field} needs {size} bytes at byte {self._position} but only"
                f" {len(self._data) - self._position} remain"
            )
        chunk = self._data[self._position : end]
        self._position = end
        return chunk

    def int8(self, field: str) -> int:
        return int(INT8.unpack(self.take(1, field))[0])

    def int16(self, field: str) -> int:
        return int(INT16.unpack(self.take(2, field))[0])

    def int32(self, field: str) -> int:
        return int(INT32.unpack(self.take(4, field))[0])

    def int64(self, field: str) -> int:
        return int(INT64.unpack(self.take(8, field))[0])

    def uvarint(self, field: str) -> int:
        value = 0
        for index in range(_MAX_VARINT_BYTES):
            byte = self.take(1, field)[0]
            value |= (byte & 0x7F) << (7 * index)
            if not byte & 0x80:
                return value
        raise self.corrupt(f"{field} is a varint longer than {_MAX_VARINT_BYTES} bytes")

    def string(self, field: str) -> str:
        length = self.uvarint(field) - 1 if self.flexible else self.int16(field)
        if length < 0:
            raise self.corrupt(f"{field} is null or has an invalid length {length}")
        try:
            return self.take(length, field).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise self.corrupt(f"{field} is not valid UTF-8 ({exc})") from None

    def array_length(self, field: str, element_bytes_min: int) -> int | None:
        """The element count, None for a null array."""
        count = self.uvarint(field) - 1 if self.flexible else self.int32(field)
        if count == -1:
            return None
        # Each element takes at least element_bytes_min bytes: a larger count cannot be honest.
        if count < 0 or count * element_bytes_min > len(self._data) - self._position:
            raise self.corrupt(f"{field} has an invalid element count {count}")
        return count

    def tagged_fields(self, field: str) -> dict[int, bytes]:
        fields: dict[int, bytes] = {}
        for _ in range(self.uvarint(f"{field} tagged field count")):
            tag = self.uvarint(f"{field} tag")
            if tag in fields:
                raise self.corrupt(f"{field} repeats tagged field {tag}")
            fields[tag] = self.take(self.uvarint(f"{field} tag {tag} size"), f"{field} tag {tag}")
        return fields

    def finish(self) -> None:
        left = len(self._data) - self._position
        if left:
            raise self.corrupt(f"{left} bytes left after the end")
