"""Counts and lengths a request declares, checked against its frame before kio decodes it.

kio's native decoder reserves memory for an array from the element count the request
declares: a compact array that claims 2**32 - 2 elements asks for 32 GiB at once, and a
failed allocation aborts the whole process, which no ``except`` can catch. Every element takes
at least one byte on the wire, so a count larger than the bytes left in the frame can only be
malformed. ``check_collection_lengths`` walks the body with Kafka's message encoding and
raises ``RequestBoundsError`` at the first count or length that cannot fit, and at a null
where the schema allows none (kio decodes a null array as ``None`` even for a non-nullable
field, which handlers then fail to iterate). Decoding proper (values, UTF-8, enums) stays
with kio.

Encoding walked (Kafka's generated message format):

    fixed fields     bool/int8 1, int16/uint16/error_code 2, int32/timedelta_i32 4,
                     int64/float64/timedelta_i64/datetime_i64 8, uuid 16 bytes
    string           int16 length (-1 null)              | flexible: uvarint length + 1 (0 null)
    bytes, records   int32 length (-1 null)              | flexible: uvarint length + 1 (0 null)
    array            int32 count (-1 null), then items   | flexible: uvarint count + 1 (0 null)
    nullable struct  int8 marker (-1 null, 1 present), then the struct (KIP-893)
    flexible struct  fields, then uvarint tag count and per tag: uvarint tag, uvarint size,
                     size bytes (a known tag is walked within its size, an unknown one skipped)

Thread-safety: pure functions over immutable plans, cached per schema class.
"""

from __future__ import annotations

import dataclasses
import struct
from dataclasses import dataclass
from functools import cache
from typing import Any

from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
    is_optional,
)

_FIXED_SIZES: dict[str, int] = {
    "bool": 1,
    "int8": 1,
    "uint8": 1,
    "int16": 2,
    "uint16": 2,
    "error_code": 2,
    "int32": 4,
    "uint32": 4,
    "timedelta_i32": 4,
    "int64": 8,
    "uint64": 8,
    "float64": 8,
    "timedelta_i64": 8,
    "datetime_i64": 8,
    "uuid": 16,
}
_VARINT_BYTES_MAX = 5  # an unsigned varint of Kafka's int32 range
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")


class RequestBoundsError(Exception):
    """A request declares a count or length that its frame cannot hold; it is malformed."""


@dataclass(frozen=True, slots=True)
class _Fixed:
    size_bytes: int


@dataclass(frozen=True, slots=True)
class _Sized:
    """A string (int16 length prefix) or bytes (int32); compact when flexible."""

    flexible: bool
    wide: bool


@dataclass(frozen=True, slots=True)
class _Struct:
    plan: _Plan
    nullable: bool


@dataclass(frozen=True, slots=True)
class _Array:
    flexible: bool
    item: _Step
    nullable: bool
    name: str


_Step = _Fixed | _Sized | _Struct | _Array


@dataclass(frozen=True, slots=True)
class _Plan:
    flexible: bool
    fields: tuple[_Step, ...]
    tagged: dict[int, _Step]


def check_collection_lengths(schema: type, frame: bytes | memoryview, offset: int) -> None:
    """Raise ``RequestBoundsError`` if a body of ``schema`` at ``offset`` declares an array
    count or a string/bytes length beyond the end of ``frame``."""
    view = memoryview(frame)
    _walk_struct(_plan(schema), view, offset, len(view))


@cache
def _plan(schema: type) -> _Plan:
    flexible = bool(getattr(schema, "__flexible__", False))
    steps: list[_Step] = []
    tagged: dict[int, _Step] = {}
    for field in dataclasses.fields(schema):
        tag = get_field_tag(field)
        step = _field_step(field, flexible, is_tag=tag is not None)
        if tag is None:
            previous = steps[-1] if steps else None
            if isinstance(step, _Fixed) and isinstance(previous, _Fixed):
                steps[-1] = _Fixed(previous.size_bytes + step.size_bytes)  # one bounds check
            else:
                steps.append(step)
        else:
            tagged[int(tag)] = step
    return _Plan(flexible=flexible, fields=tuple(steps), tagged=tagged)


def _field_step(field: dataclasses.Field[Any], flexible: bool, *, is_tag: bool) -> _Step:
    kind = classify_field(field)
    item: _Step
    if isinstance(kind, EntityField):
        return _Struct(_plan(kind.type_), nullable=not is_tag and is_optional(field))
    # A tagged array is present only when set, so its nullability is not checked here.
    nullable = is_tag or is_optional(field)
    if isinstance(kind, EntityTupleField):
        return _Array(flexible, _Struct(_plan(kind.type_), nullable=False), nullable, field.name)
    item = _primitive_step(get_schema_field_type(field), flexible)
    if isinstance(kind, PrimitiveTupleField):
        return _Array(flexible, item, nullable, field.name)
    return item


def _primitive_step(kafka_type: str, flexible: bool) -> _Step:
    if kafka_type == "string":
        return _Sized(flexible, wide=False)
    if kafka_type in ("bytes", "records"):
        return _Sized(flexible, wide=True)
    try:
        return _Fixed(_FIXED_SIZES[kafka_type])
    except KeyError:
        raise RequestBoundsError(f"no wire size known for field type {kafka_type!r}") from None


def _walk(step: _Step, view: memoryview, position: int, end: int) -> int:
    if isinstance(step, _Fixed):
        return _advance(position, step.size_bytes, end, "field")
    if isinstance(step, _Sized):
        if step.flexible:
            length, position = _read_uvarint(view, position, end)
            length -= 1
        elif step.wide:
            length, position = _read(_INT32, view, position, end)
        else:
            length, position = _read(_INT16, view, position, end)
        return position if length < 0 else _advance(position, length, end, "string or bytes")
    if isinstance(step, _Struct):
        if step.nullable:
            position = _advance(position, 1, end, "struct marker")
            if view[position - 1] == 0xFF:  # int8 -1: a null struct
                return position
        return _walk_struct(step.plan, view, position, end)
    if step.flexible:
        count, position = _read_uvarint(view, position, end)
        count -= 1
    else:
        count, position = _read(_INT32, view, position, end)
    if count == -1 and not step.nullable:  # kio would hand the handler a None
        raise RequestBoundsError(f"the non-nullable array {step.name} is null")
    if count > end - position:
        raise RequestBoundsError(
            f"array of {count} elements at byte {position} of a frame with"
            f" {end - position} bytes left"
        )
    for _ in range(count):
        position = _walk(step.item, view, position, end)
    return position


def _walk_struct(plan: _Plan, view: memoryview, position: int, end: int) -> int:
    for step in plan.fields:
        position = _walk(step, view, position, end)
    if not plan.flexible:
        return position
    tags, position = _read_uvarint(view, position, end)
    if tags > end - position:
        raise RequestBoundsError(f"{tags} tagged fields in {end - position} bytes")
    for _ in range(tags):
        tag, position = _read_uvarint(view, position, end)
        size, position = _read_uvarint(view, position, end)
        field_end = _advance(position, size, end, "tagged field")
        known = plan.tagged.get(tag)
        if known is not None:
            _walk(known, view, position, field_end)
        position = field_end
    return position


def _advance(position: int, size: int, end: int, what: str) -> int:
    if size > end - position:
        raise RequestBoundsError(
            f"{what} of {size} bytes at byte {position} of a frame with {end - position} bytes left"
        )
    return position + size


def _read(codec: struct.Struct, view: memoryview, position: int, end: int) -> tuple[int, int]:
    after = _advance(position, codec.size, end, "length")
    (value,) = codec.unpack_from(view, position)
    return int(value), after


def _read_uvarint(view: memoryview, position: int, end: int) -> tuple[int, int]:
    if position < end and view[position] < 0x80:  # one byte: most counts and tags
        return view[position], position + 1
    value = 0
    for index in range(_VARINT_BYTES_MAX):
        if position >= end:
            raise RequestBoundsError("unsigned varint runs past the end of the frame")
        byte = view[position]
        position += 1
        value |= (byte & 0x7F) << (7 * index)
        if not byte & 0x80:
            return value, position
    raise RequestBoundsError(f"unsigned varint longer than {_VARINT_BYTES_MAX} bytes")
