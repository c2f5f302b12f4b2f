"""Kafka request/response framing and headers.

Every message on the wire is ``int32 size`` followed by ``size`` bytes:

    request  = header body
    header   v1: api_key int16, api_version int16, correlation_id int32, client_id nullable string
             v2: v1 + tagged fields (unsigned varint count, then tags)   (flexible versions)
    response = header body
    header   v0: correlation_id int32
             v1: correlation_id int32 + tagged fields                   (flexible versions)

ApiVersions responses always use header v0 so that a client can parse the answer before it
knows which versions the broker speaks (KIP-511). Bodies are encoded and decoded by ``kio``'s
message classes, generated from Kafka's own JSON schemas.
"""

from __future__ import annotations

import io
import struct
from dataclasses import dataclass
from functools import cache
from typing import Any

from kio.index import load_request_schema
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.serial import entity_reader, entity_writer

from storage_core.protocol.messages import API_VERSIONS_KEY as API_VERSIONS_KEY  # noqa: PLC0414 (export)
from storage_core.protocol.messages import request_schema
from storage_core.server.request_bounds import (
    Edit,
    check_collection_lengths,
    check_request_header,
    without_tagged_fields,
)

_SIZE = struct.Struct(">i")
_KEY_VERSION_CORRELATION = struct.Struct(">hhi")


class MalformedRequestError(Exception):
    """A request frame could not be parsed; the connection that sent it is closed."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    size_in_bytes: int


def peek_key_version_correlation(frame: bytes | memoryview) -> tuple[int, int, int]:
    """The first three header fields, readable before the version is known to be supported."""
    if len(frame) < _KEY_VERSION_CORRELATION.size:
        raise MalformedRequestError(f"request of {len(frame)} bytes is shorter than a header")
    key, version, correlation_id = _KEY_VERSION_CORRELATION.unpack_from(frame, 0)
    return int(key), int(version), int(correlation_id)


@cache
def is_flexible(api_key: int, api_version: int) -> bool:
    return bool(load_request_schema(api_key, api_version).__flexible__)


@cache
def _reader(schema: Any) -> Any:
    return entity_reader(schema)


@cache
def _writer(schema: Any) -> Any:
    return entity_writer(schema)


def parse_request(frame: bytes | memoryview) -> tuple[RequestHeader, Any]:
    """Decode header and body of a supported (api key, version); the body must fill the frame
    (a flexible one may leave bytes after it). Tagged fields that the schema does not define,
    and nulls in nullable tagged fields, are skipped (KIP-482)."""
    key, version, _correlation = peek_key_version_correlation(frame)
    size_in_bytes = len(frame)
    flexible = is_flexible(key, version)
    header_schema = RequestHeaderV2 if flexible else RequestHeaderV1
    try:
        # Before kio sizes its arrays from the declared counts, and without the tagged fields
        # that kio refuses but KIP-482 says to skip (see request_bounds).
        edits: list[Edit] = []
        body_start = check_request_header(frame, flexible=flexible, edits=edits)
        check_collection_lengths(request_schema(key, version), frame, body_start, edits)
        if edits:
            frame = without_tagged_fields(frame, edits)
        header, header_size = _reader(header_schema)(frame, 0)
        body, body_size = _reader(request_schema(key, version))(frame, header_size)
    except Exception as error:  # the codec raises several types for malformed input
        raise MalformedRequestError(
            f"cannot decode {request_schema(key, version).__name__} v{version}: {error}"
        ) from None
    unread = len(frame) - header_size - body_size
    # Kafka ignores bytes after the body, and librdkafka relies on it: its all-topics Metadata
    # (v9+) keeps a 4-byte array placeholder of which only the first byte is read. Flexible
    # versions tolerate trailing bytes for that reason; older ones must fill the frame.
    if unread != 0 and not (unread > 0 and is_flexible(key, version)):
        raise MalformedRequestError(
            f"{request_schema(key, version).__name__} v{version} leaves"
            f" {len(frame) - header_size - body_size} unread bytes in a {len(frame)}-byte frame"
        )
    return (
        RequestHeader(
            api_key=key,
            api_version=version,
            correlation_id=int(header.correlation_id),
            client_id=header.client_id,
            size_in_bytes=size_in_bytes,
        ),
        body,
    )


def encode_response(api_key: int, api_version: int, correlation_id: int, body: Any) -> bytes:
    """A whole response frame: size, response header v0/v1, body."""
    buffer = io.BytesIO()
    buffer.write(b"\x00\x00\x00\x00")
    buffer.write(_SIZE.pack(correlation_id))
    if api_key != API_VERSIONS_KEY and is_flexible(api_key, api_version):
        buffer.write(b"\x00")  # no tagged fields in the response header
    _writer(body.__class__)(buffer, body)
    frame = buffer.getbuffer()
    _SIZE.pack_into(frame, 0, len(frame) - 4)
    return bytes(frame)


def encode_request(
    api_key: int, api_version: int, correlation_id: int, client_id: str | None, body: Any
) -> bytes:
    """A whole request frame (used by tests and tools that speak to a broker)."""
    buffer = io.BytesIO()
    buffer.write(b"\x00\x00\x00\x00")
    flexible = is_flexible(api_key, api_version)
    header_schema = RequestHeaderV2 if flexible else RequestHeaderV1
    header = header_schema(
        request_api_key=api_key,  # type: ignore[arg-type]
        request_api_version=api_version,  # type: ignore[arg-type]
        correlation_id=correlation_id,  # type: ignore[arg-type]
        client_id=client_id,
    )
    _writer(header_schema)(buffer, header)
    _writer(body.__class__)(buffer, body)
    frame = buffer.getbuffer()
    _SIZE.pack_into(frame, 0, len(frame) - 4)
    return bytes(frame)
