"""Raw-socket access to a broker for tests that send hand-made (often broken) frames.

Requests are encoded by ``storage_core.server.protocol.encode_request``; responses are decoded
independently with kio's readers (response header v0, or v1 with tagged fields for flexible
versions except ApiVersions, as KIP-511 requires).
"""

from __future__ import annotations

import datetime
import socket
import struct
import sys
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader
from kio.serial.readers import read_unsigned_varint

from storage_core.protocol.messages import build
from storage_core.server.protocol import API_VERSIONS_KEY, encode_request

SOCKET_TIMEOUT_S = 10.0


def connect(port: int, *, timeout_s: float = SOCKET_TIMEOUT_S) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout_s)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def request_classes(api_key: int, api_version: int) -> Any:
    """The kio module of a request: its message class and nested entity classes."""
    return sys.modules[load_request_schema(api_key, api_version).__module__]


def request_bytes(api_key: int, api_version: int, correlation_id: int = 1, **fields: Any) -> bytes:
    """A whole request frame (size included) built from the superset of the fields."""
    body = build(load_request_schema(api_key, api_version), **fields)
    return encode_request(api_key, api_version, correlation_id, "raw-wire", body)


def recv_exactly(sock: socket.socket, size: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < size:
        chunk = sock.recv(size - len(chunks))
        if not chunk:
            raise ConnectionError(f"connection closed after {len(chunks)} of {size} bytes")
        chunks += chunk
    return bytes(chunks)


def read_response(sock: socket.socket, api_key: int, api_version: int) -> tuple[int, Any]:
    """``(correlation id, decoded body)`` of the next response frame."""
    (size,) = struct.unpack(">i", recv_exactly(sock, 4))
    frame = recv_exactly(sock, size)
    (correlation_id,) = struct.unpack_from(">i", frame, 0)
    offset = 4
    schema = load_response_schema(api_key, api_version)
    if api_key != API_VERSIONS_KEY and schema.__flexible__:
        _tags, used = read_unsigned_varint(frame, offset)
        offset += used
    body, used = entity_reader(schema)(frame, offset)
    if offset + used != len(frame):
        raise AssertionError(f"{len(frame) - offset - used} trailing bytes in the response")
    return correlation_id, body


def call(sock: socket.socket, api_key: int, api_version: int, **fields: Any) -> Any:
    """Send one request and return its decoded response body."""
    sock.sendall(request_bytes(api_key, api_version, 77, **fields))
    correlation_id, body = read_response(sock, api_key, api_version)
    if correlation_id != 77:
        raise AssertionError(f"correlation id {correlation_id} answers request 77")
    return body


def api_versions(sock: socket.socket) -> Any:
    return call(
        sock,
        API_VERSIONS_KEY,
        3,
        client_software_name="raw-wire",
        client_software_version="1.0",
    )


def is_closed_by_peer(sock: socket.socket, *, timeout_s: float = 5.0) -> bool:
    """True when the broker closes the connection (EOF or reset) without sending anything."""
    sock.settimeout(timeout_s)
    try:
        data = sock.recv(1)
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True
    if data:
        raise AssertionError(f"expected the connection to close, got data {data!r}")
    return True


def create_topic(
    port: int, name: str, partitions: int = 1, configs: dict[str, str] | None = None
) -> None:
    module = request_classes(19, 5)
    with connect(port) as sock:
        body = call(
            sock,
            19,
            5,
            topics=(
                module.CreatableTopic(
                    name=name,
                    num_partitions=partitions,
                    replication_factor=1,
                    assignments=(),
                    configs=tuple(
                        module.CreatableTopicConfig(name=k, value=v)
                        for k, v in (configs or {}).items()
                    ),
                ),
            ),
            timeout=datetime.timedelta(seconds=10),
            validate_only=False,
        )
    topic = body.topics[0]
    if topic.error_code.value != 0:
        raise AssertionError(f"CreateTopics {name}: {topic.error_code} {topic.error_message}")
