"""Counts and lengths a request declares, checked against its frame before kio decodes it,
and the tagged fields kio cannot read, dropped.

kio's native decoder reserves memory for an array from the element count the request
declares: a compact array that claims 2**32 - 2 elements asks for 32 GiB at once, and a
failed allocation aborts the whole process, which no ``except`` can catch. Every element takes
at least one byte on the wire, so a count larger than the bytes left in the frame can only be
malformed. ``check_collection_lengths`` walks the body with Kafka's message encoding and
raises ``RequestBoundsError`` at the first count or length that cannot fit, and at a null
where the schema allows none (kio decodes a null array as ``None`` even for a non-nullable
field, which handlers then fail to iterate). Decoding proper (values, UTF-8, enums) stays
with kio.

KIP-482: a receiver skips the tagged fields it does not know. kio raises on them instead
('Unknown tagged field tag: N'), and on a null in a nullable tagged field (Fetch's ClusterId,
tag 0). The walk already visits every tag of the request header and of every struct, so it
notes them as ``Edit``s: an unknown tag, and a known one holding a null that is also its
default (absent means the same), is cut out, and the tag count, and the size of any known tagged
field around a cut, are written again. ``without_tagged_fields`` applies the edits to a copy of
the frame, which kio then decodes; a request without such tags (every one a Kafka client sends
today) is not copied, and its walk only notes the position of each tag count.

Encoding walked (Kafka's generated message format):

    fixed fields     bool/int8 1, int16/uint16/error_code 2, int32/timedelta_i32 4,
                     int64/float64/timedelta_i64/datetime_i64 8, uuid 16 bytes
    string           int16 length (-1 null)              | flexible: uvarint length + 1 (0 null)
    bytes, records   int32 length (-1 null)              | flexible: uvarint length + 1 (0 null)
    array            int32 count (-1 null), then items   | flexible: uvarint count + 1 (0 null)
    nullable struct  int8 marker (-1 null, 1 present), then the struct (KIP-893)
    flexible struct  fields, then uvarint tag count and per tag: uvarint tag, uvarint size,
                     size bytes (a known tag is walked within its size, an unknown one skipped)
    request header   v1: int16 api_key, int16 api_version, int32 correlation_id,
                     client_id int16 length (-1 null); v2: v1 + tags (none known), KIP-482

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

from storage_core.records.varint import encode_unsigned_varint

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

Edit = tuple[int, int, bytes]
"""Replace ``frame[start:end]`` (end exclusive) with the bytes."""


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
    null_by_default: frozenset[int] = frozenset()
    """Tags of nullable fields whose default is null: a null sent is the same as no tag."""


# RequestHeader v1 and v2: api key, version and correlation id (8 bytes), then a client id whose
# length is an int16 in both (its flexibleVersions are "none"); v2 adds tags, none defined.
_HEADER_FIXED_BYTES = 8
_HEADER_TAGS = _Plan(flexible=True, fields=(), tagged={})


def check_request_header(frame: bytes | memoryview, *, flexible: bool, edits: list[Edit]) -> int:
    """The end (exclusive) of the request header v2 (``flexible``) or v1 at the start of
    ``frame``; its tagged fields, none of which Kafka defines, are noted in ``edits``."""
    view = memoryview(frame)
    end = len(view)
    length, position = _read(_INT16, view, _HEADER_FIXED_BYTES, end)
    if length > 0:
        position = _advance(position, length, end, "client id")
    if not flexible:
        return position
    if position < end and view[position] == 0:  # no tagged fields: every client today
        return position + 1
    return _walk_struct(_HEADER_TAGS, view, position, end, edits)


def check_collection_lengths(
    schema: type, frame: bytes | memoryview, offset: int, edits: list[Edit] | None = None
) -> int:
    """Raise ``RequestBoundsError`` if a body of ``schema`` at ``offset`` declares an array
    count or a string/bytes length beyond the end of ``frame``; else the end of the body
    (exclusive). The tagged fields to drop before kio decodes it are added to ``edits``."""
    view = memoryview(frame)
    return _walk_struct(_plan(schema), view, offset, len(view), [] if edits is None else edits)


def without_tagged_fields(frame: bytes | memoryview, edits: list[Edit]) -> bytes:
    """A copy of ``frame`` with ``edits`` (from the checks above, not overlapping) applied."""
    parts: list[bytes | memoryview] = []
    position = 0
    view = memoryview(frame)
    for start, end, replacement in sorted(edits):
        parts.append(view[position:start])
        parts.append(replacement)
        position = end
    parts.append(view[position:])
    return b"".join(parts)


@cache
def _plan(schema: type) -> _Plan:
    flexible = bool(getattr(schema, "__flexible__", False))
    steps: list[_Step] = []
    tagged: dict[int, _Step] = {}
    null_by_default: set[int] = set()
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
            if is_optional(field) and field.default is None and isinstance(step, _Sized | _Array):
                null_by_default.add(int(tag))
    return _Plan(
        flexible=flexible,
        fields=tuple(steps),
        tagged=tagged,
        null_by_default=frozenset(null_by_default),
    )


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


def _walk(step: _Step, view: memoryview, position: int, end: int, edits: list[Edit]) -> int:
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
        return _walk_struct(step.plan, view, position, end, edits)
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
        position = _walk(step.item, view, position, end, edits)
    return position


def _walk_struct(plan: _Plan, view: memoryview, position: int, end: int, edits: list[Edit]) -> int:
    for step in plan.fields:
        position = _walk(step, view, position, end, edits)
    if not plan.flexible:
        return position
    count_start = position
    tags, position = _read_uvarint(view, position, end)
    if tags == 0:
        return position
    if tags > end - position:
        raise RequestBoundsError(f"{tags} tagged fields in {end - position} bytes")
    count_end = position
    dropped = 0
    for _ in range(tags):
        field_start = position
        tag, position = _read_uvarint(view, position, end)
        size_start = position
        size, position = _read_uvarint(view, position, end)
        field_end = _advance(position, size, end, "tagged field")
        known = plan.tagged.get(tag)
        if known is None or (tag in plan.null_by_default and _is_null(view, position, field_end)):
            edits.append((field_start, field_end, b""))  # skipped, as KIP-482 says
            dropped += 1
        else:
            inner: list[Edit] = []
            _walk(known, view, position, field_end, inner)
            if inner:  # a struct within the tag lost tags of its own: its size changes
                shrunk_bytes = sum(e - s - len(r) for s, e, r in inner)
                edits.append((size_start, position, encode_unsigned_varint(size - shrunk_bytes)))
                edits.extend(inner)
        position = field_end
    if dropped:
        edits.append((count_start, count_end, encode_unsigned_varint(tags - dropped)))
    return position


def _is_null(view: memoryview, position: int, end: int) -> bool:
    """Whether the compact string, bytes or array at ``position`` is null (length + 1 = 0)."""
    length, _ = _read_uvarint(view, position, end)
    return length == 0


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
