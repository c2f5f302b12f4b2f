"""Request and response framing of the Kafka protocol (headers and size prefix).

Every message on the wire is ``int32 size`` followed by ``size`` bytes: a header, then the
body (encoded by ``kio`` from the API's schema). Big-endian throughout::

    request header v1   int16   request_api_key
                        int16   request_api_version
                        int32   correlation_id
                        int16   client_id length (-1: null), then UTF-8 bytes
    request header v2   the v1 fields (client_id stays a non-compact string), then
                        tagged fields: uvarint count, (uvarint tag, uvarint size, bytes)*
    response header v0  int32   correlation_id
    response header v1  int32   correlation_id, then tagged fields as above

Flexible API versions use request header v2 and response header v1; others v1 and v0.
ApiVersions is the exception: its response header is always v0, so that a client that
asked with a version the broker does not know can still read the answer (KIP-511).

Pure functions, no I/O; thread-safe.
"""

from __future__ import annotations

import datetime
import struct
from collections.abc import Sequence
from dataclasses import dataclass

from kio.static.primitive import i32Timedelta

from storage_core.client.errors import ProtocolMismatchError, ResponseTooLargeError
from storage_core.errors import CorruptRecordError
from storage_core.protocol.messages import API_VERSIONS_KEY
from storage_core.records.varint import decode_unsigned_varint, encode_unsigned_varint

MAX_CLIENT_ID_BYTES = 0x7FFF
# Tagged fields of a header are few and small; refuse anything that looks like garbage.
MAX_HEADER_TAGGED_FIELDS = 64

SIZE_PREFIX = struct.Struct(">i")
_REQUEST_HEADER_FIXED = struct.Struct(">hhih")
_INT32 = struct.Struct(">i")


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestHeader:
    """The fields of request header v1 and v2 (v2 adds tagged fields, none are defined)."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


def request_header_version(api_key: int, *, flexible: bool) -> int:
    """Header version of a request: 2 for flexible API versions, else 1."""
    del api_key  # every API follows the rule for requests
    return 2 if flexible else 1


def response_header_version(api_key: int, *, flexible: bool) -> int:
    """Header version of a response: 1 for flexible API versions except ApiVersions, else 0."""
    if api_key == API_VERSIONS_KEY:
        return 0
    return 1 if flexible else 0


def decode_uvarint(buffer: bytes | memoryview, position: int) -> tuple[int, int]:
    """``(value, position after it)``; ``ProtocolMismatchError`` if truncated or too long."""
    try:
        return decode_unsigned_varint(buffer, position)
    except CorruptRecordError as error:
        raise ProtocolMismatchError(f"bad unsigned varint in a response header: {error}") from None


def encode_tagged_fields(fields: Sequence[tuple[int, bytes]] = ()) -> bytes:
    parts = [encode_unsigned_varint(len(fields))]
    for tag, data in sorted(fields):
        parts += [encode_unsigned_varint(tag), encode_unsigned_varint(len(data)), data]
    return b"".join(parts)


def skip_tagged_fields(buffer: bytes | memoryview, position: int) -> int:
    """Position after a tagged-field section (unknown tags are skipped, as Kafka does)."""
    count, position = decode_uvarint(buffer, position)
    if count > MAX_HEADER_TAGGED_FIELDS:
        raise ProtocolMismatchError(f"{count} tagged fields in a header (at most 64 expected)")
    for _ in range(count):
        _tag, position = decode_uvarint(buffer, position)
        size, position = decode_uvarint(buffer, position)
        position += size
        if position > len(buffer):
            raise ProtocolMismatchError("tagged field runs past the end of the response")
    return position


def encode_request_header(header: RequestHeader, *, version: int) -> bytes:
    """Request header v1 or v2."""
    if version not in (1, 2):
        raise ValueError(f"request header version {version} is not 1 or 2")
    if header.client_id is None:
        client_id = b""
        length = -1
    else:
        client_id = header.client_id.encode("utf-8")
        length = len(client_id)
        if length > MAX_CLIENT_ID_BYTES:
            raise ValueError(f"client id of {length} bytes exceeds {MAX_CLIENT_ID_BYTES}")
    fixed = _REQUEST_HEADER_FIXED.pack(
        header.api_key, header.api_version, header.correlation_id, length
    )
    tagged = encode_tagged_fields() if version == 2 else b""
    return fixed + client_id + tagged


def decode_request_header(buffer: bytes | memoryview, *, version: int) -> tuple[RequestHeader, int]:
    """Inverse of ``encode_request_header``: ``(header, header size in bytes)``."""
    if version not in (1, 2):
        raise ValueError(f"request header version {version} is not 1 or 2")
    if len(buffer) < _REQUEST_HEADER_FIXED.size:
        raise ProtocolMismatchError(f"request header truncated at {len(buffer)} bytes")
    api_key, api_version, correlation_id, length = _REQUEST_HEADER_FIXED.unpack_from(buffer)
    position = _REQUEST_HEADER_FIXED.size
    client_id: str | None = None
    if length >= 0:
        if position + length > len(buffer):
            raise ProtocolMismatchError("client id runs past the end of the request")
        client_id = bytes(buffer[position : position + length]).decode("utf-8")
        position += length
    elif length != -1:
        raise ProtocolMismatchError(f"invalid client id length {length}")
    if version == 2:
        position = skip_tagged_fields(buffer, position)
    header = RequestHeader(
        api_key=api_key,
        api_version=api_version,
        correlation_id=correlation_id,
        client_id=client_id,
    )
    return header, position


def encode_response_header(correlation_id: int, *, version: int) -> bytes:
    """Response header v0 or v1 (v1 with an empty tagged-field section)."""
    if version not in (0, 1):
        raise ValueError(f"response header version {version} is not 0 or 1")
    return _INT32.pack(correlation_id) + (encode_tagged_fields() if version == 1 else b"")


def decode_response_header(buffer: bytes | memoryview, *, version: int) -> tuple[int, int]:
    """``(correlation id, header size in bytes)`` of a response header v0 or v1."""
    if version not in (0, 1):
        raise ValueError(f"response header version {version} is not 0 or 1")
    if len(buffer) < _INT32.size:
        raise ProtocolMismatchError(f"response of {len(buffer)} bytes has no correlation id")
    (correlation_id,) = _INT32.unpack_from(buffer)
    position = _INT32.size
    if version == 1:
        position = skip_tagged_fields(buffer, position)
    return correlation_id, position


def frame(*parts: bytes) -> bytes:
    """Prefix the concatenated parts with their int32 size."""
    size = sum(map(len, parts))
    return SIZE_PREFIX.pack(size) + b"".join(parts)


def check_frame_size(size: int, *, max_bytes: int) -> None:
    """Validate a size prefix just read: positive and at most ``max_bytes``."""
    if size < 0:
        raise ProtocolMismatchError(f"negative frame size {size}: the peer is not a Kafka broker")
    if size > max_bytes:
        raise ResponseTooLargeError(
            f"response of {size} bytes exceeds the limit of {max_bytes} bytes; raise"
            " max_response_bytes or request less (max_bytes of a fetch); if the size looks"
            " absurd, the peer is not a Kafka broker (e.g. TLS or HTTP on that port)"
        )


def i32_timedelta(milliseconds: int) -> i32Timedelta:
    """A duration field of a request (kio models ``int32`` milliseconds as timedeltas)."""
    return i32Timedelta.parse(datetime.timedelta(milliseconds=milliseconds))
