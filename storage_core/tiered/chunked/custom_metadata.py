"""The custom metadata a chunked copy returns (KIP-405's ``CustomMetadata``, kept in the
segment's ``RemoteLogSegmentMetadata``), in Aiven's encoding: Kafka tagged fields, tag 0 the
stored size of the segment's objects (varlong), plus tag 16, the chunked format's version.

The version is what tells a reader that a segment without a manifest lost it (an error) rather
than was copied in the plain format (read as it is)."""

from __future__ import annotations

from collections.abc import Callable

from storage_core.errors import CorruptRecordError
from storage_core.records.varint import (
    decode_unsigned_varint,
    decode_varlong,
    encode_unsigned_varint,
    encode_varlong,
)

REMOTE_SIZE_TAG = 0
CHUNKED_FORMAT_TAG = 16


def encode_custom_metadata(*, remote_size: int, format_version: int) -> bytes:
    fields = {
        REMOTE_SIZE_TAG: encode_varlong(remote_size),
        CHUNKED_FORMAT_TAG: encode_unsigned_varint(format_version),
    }
    out = bytearray(encode_unsigned_varint(len(fields)))
    for tag, value in sorted(fields.items()):
        out += encode_unsigned_varint(tag) + encode_unsigned_varint(len(value)) + value
    return bytes(out)


def chunked_format_version(custom_metadata: bytes | None) -> int | None:
    """The chunked format version a segment's custom metadata names, or ``None`` (plain
    format, another manager's metadata, or bytes that are not tagged fields)."""
    value = _fields(custom_metadata).get(CHUNKED_FORMAT_TAG)
    return None if value is None else _decoded(decode_unsigned_varint, value)


def remote_size(custom_metadata: bytes | None) -> int | None:
    """Tag 0, the stored size of the segment's objects, when present."""
    value = _fields(custom_metadata).get(REMOTE_SIZE_TAG)
    return None if value is None else _decoded(decode_varlong, value)


def _fields(custom_metadata: bytes | None) -> dict[int, bytes]:
    """The tagged fields; empty for bytes that are not tagged fields."""
    if not custom_metadata:
        return {}
    fields = {}
    try:
        count, position = decode_unsigned_varint(custom_metadata, 0)
        for _ in range(count):
            tag, position = decode_unsigned_varint(custom_metadata, position)
            size, position = decode_unsigned_varint(custom_metadata, position)
            if position + size > len(custom_metadata):
                return {}
            fields[tag] = custom_metadata[position : position + size]
            position += size
    except CorruptRecordError:
        return {}
    return fields


def _decoded(decode: Callable[[bytes, int], tuple[int, int]], value: bytes) -> int | None:
    try:
        return decode(value, 0)[0]
    except CorruptRecordError:
        return None
