"""One blocking TCP connection to one Kafka broker (framing in ``client.framing``).

A request is written as ``int32 size | request header | body`` and its response read back
as ``int32 size | response header | body``; requests go one at a time, so a response's
correlation id must equal the request's. Bodies are encoded and decoded by ``kio`` from the
API's schema class; the schema class's ``__flexible__`` flag picks the header versions.

Limits: the connect timeout, the request timeout (covers writing the request and reading
the whole response) and ``max_response_bytes`` (checked on the size prefix, before reading).
Any framing, timeout or decoding failure closes the connection: its byte stream can no
longer be trusted.

Not thread-safe: one thread uses a connection at a time (callers pool or lock).
"""

from __future__ import annotations

import contextlib
import io
import itertools
import logging
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from kio.serial import entity_reader, entity_writer
from kio.serial.errors import SerialError
from kio.static.protocol import Entity, Payload

from storage_core.client.errors import (
    BrokerUnreachableError,
    ConnectionClosedError,
    ProtocolMismatchError,
    RequestTimeoutError,
)
from storage_core.client.framing import (
    SIZE_PREFIX,
    RequestHeader,
    check_frame_size,
    decode_response_header,
    encode_request_header,
    frame,
    request_header_version,
    response_header_version,
)
from storage_core.security.client_transport import (
    PLAINTEXT_CLIENT,
    ClientSecurityConfig,
    TlsHandshakeError,
    open_socket,
)

logger = logging.getLogger(__name__)

DEFAULT_CLIENT_ID = "storage-core"
DEFAULT_CONNECT_TIMEOUT_MS = 10_000
DEFAULT_REQUEST_TIMEOUT_MS = 30_000
# Above Kafka's default fetch.max.bytes (55 MiB) plus headers.
DEFAULT_MAX_RESPONSE_BYTES = 64 * 1024 * 1024
_MAX_CORRELATION_ID = 2**31 - 1
_READ_CHUNK_BYTES = 1024 * 1024

ResponseT = TypeVar("ResponseT", bound=Entity)


@dataclass(frozen=True, slots=True, kw_only=True)
class ConnectionConfig:
    """Settings of a connection; all limits are positive.

    ``allowed_api_versions`` narrows, per api key, the versions the client may pick (e.g.
    ``{3: (4,)}`` pins Metadata v4); keys not listed use every version the client implements.
    """

    client_id: str = DEFAULT_CLIENT_ID
    connect_timeout_ms: int = DEFAULT_CONNECT_TIMEOUT_MS
    request_timeout_ms: int = DEFAULT_REQUEST_TIMEOUT_MS
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES
    allowed_api_versions: Mapping[int, tuple[int, ...]] = field(default_factory=dict)
    security: ClientSecurityConfig = PLAINTEXT_CLIENT
    """``security.protocol`` and its ``ssl.*`` settings (``security.client_transport``)."""

    def __post_init__(self) -> None:
        for name in ("connect_timeout_ms", "request_timeout_ms", "max_response_bytes"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")


def parse_host_port(address: str, *, default_port: int = 9092) -> tuple[str, int]:
    """``host:port`` (or ``[v6]:port``, or ``host`` alone) as ``(host, port)``."""
    text = address.strip()
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port_text = rest.removeprefix(":")
    else:
        host, sep, port_text = text.rpartition(":")
        if not sep:
            host, port_text = text, ""
    if not host:
        raise ValueError(f"{address!r} is not HOST:PORT")
    if not port_text:
        return host, default_port
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ValueError(f"{address!r} has an invalid port {port_text!r}")
    return host, int(port_text)


class KafkaConnection:
    """A blocking connection to ``host:port`` that sends requests and reads their responses."""

    def __init__(self, sock: socket.socket, *, host: str, port: int, config: ConnectionConfig):
        self._socket: socket.socket | None = sock
        self.host = host
        self.port = port
        self.config = config
        self._correlation_ids = itertools.count(1)

    @staticmethod
    def connect(host: str, port: int, config: ConnectionConfig | None = None) -> KafkaConnection:
        """Open the connection (TCP, then TLS when ``config.security`` asks for it);
        ``BrokerUnreachableError`` if that fails or times out."""
        config = config or ConnectionConfig()
        try:
            sock = open_socket(
                host, port, config.security, timeout_s=config.connect_timeout_ms / 1000
            )
        except TlsHandshakeError as exc:
            raise BrokerUnreachableError(str(exc)) from None
        except TimeoutError:
            raise BrokerUnreachableError(
                f"cannot connect to broker {host}:{port}: no answer within"
                f" {config.connect_timeout_ms} ms; check the address and that the broker runs"
            ) from None
        except OSError as exc:
            reason = exc.strerror or str(exc)
            raise BrokerUnreachableError(
                f"cannot connect to broker {host}:{port}: {reason}; check the address"
                " (--bootstrap-server) and that the broker runs"
            ) from None
        return KafkaConnection(sock, host=host, port=port, config=config)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def closed(self) -> bool:
        return self._socket is None

    def close(self) -> None:
        sock, self._socket = self._socket, None
        if sock is not None:
            with contextlib.suppress(OSError):  # closing never matters to the caller
                sock.close()

    def __enter__(self) -> KafkaConnection:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ------------------------------------------------------------------ requests
    def send(self, request: Payload, response_type: type[ResponseT]) -> ResponseT:
        """Send ``request`` and decode its response as ``response_type``."""
        if response_type.__version__ != request.__version__:
            raise ValueError(
                f"response schema v{response_type.__version__} does not match"
                f" request v{request.__version__}"
            )
        body = self.send_raw(
            api_key=int(request.__api_key__),
            api_version=int(request.__version__),
            flexible=request.__flexible__,
            body=encode_body(request),
        )
        return self.decode_body(body, response_type, api_key=int(request.__api_key__))

    def send_no_response(self, request: Payload) -> None:
        """Send a request that the broker does not answer (Produce with ``acks=0``)."""
        header = RequestHeader(
            api_key=int(request.__api_key__),
            api_version=int(request.__version__),
            correlation_id=self._next_correlation_id(),
            client_id=self.config.client_id,
        )
        version = request_header_version(header.api_key, flexible=request.__flexible__)
        self._write(frame(encode_request_header(header, version=version), encode_body(request)))

    def send_raw(self, *, api_key: int, api_version: int, flexible: bool, body: bytes) -> bytes:
        """Send an encoded body; return the response body (after the response header)."""
        return bytes(
            self.send_raw_view(
                api_key=api_key, api_version=api_version, flexible=flexible, body=body
            )
        )

    def send_raw_view(
        self, *, api_key: int, api_version: int, flexible: bool, body: bytes
    ) -> memoryview:
        """As ``send_raw``, the response body as a view of the bytes received, not copied (a
        follower's fetch answer carries the leader's batches, which it appends as they are)."""
        correlation_id = self._next_correlation_id()
        header = RequestHeader(
            api_key=api_key,
            api_version=api_version,
            correlation_id=correlation_id,
            client_id=self.config.client_id,
        )
        header_bytes = encode_request_header(
            header, version=request_header_version(api_key, flexible=flexible)
        )
        self._write(frame(header_bytes, body))
        response = memoryview(self._read_frame())
        try:
            received_id, header_size = decode_response_header(
                response, version=response_header_version(api_key, flexible=flexible)
            )
        except ProtocolMismatchError:
            self.close()
            raise
        if received_id != correlation_id:
            self.close()
            raise ProtocolMismatchError(
                f"broker {self.address} answered correlation id {received_id} to request"
                f" {correlation_id} (api key {api_key} v{api_version}); the connection is"
                " closed, retry on a new one"
            )
        return response[header_size:]

    def decode_body(
        self, body: bytes, response_type: type[ResponseT], *, api_key: int
    ) -> ResponseT:
        """Decode a response body; ``ProtocolMismatchError`` (and close) if it does not fit."""
        try:
            value, size = entity_reader(response_type)(body, 0)
        except (SerialError, ValueError, TypeError) as exc:
            self.close()
            raise ProtocolMismatchError(
                f"cannot decode the response of broker {self.address} to api key {api_key}"
                f" v{response_type.__version__}: {exc}"
            ) from None
        if size != len(body):
            self.close()
            raise ProtocolMismatchError(
                f"response of broker {self.address} to api key {api_key}"
                f" v{response_type.__version__} has {len(body) - size} trailing bytes"
            )
        return value

    # ------------------------------------------------------------------ socket I/O
    def _next_correlation_id(self) -> int:
        value = next(self._correlation_ids)
        if value >= _MAX_CORRELATION_ID:
            self._correlation_ids = itertools.count(1)
        return value

    def _require_socket(self) -> socket.socket:
        if self._socket is None:
            raise ConnectionClosedError(f"connection to broker {self.address} is closed")
        return self._socket

    def _write(self, data: bytes) -> None:
        sock = self._require_socket()
        self._set_request_timeout(sock)
        try:
            sock.sendall(data)
        except TimeoutError:
            self.close()
            raise RequestTimeoutError(
                f"sending to broker {self.address} took longer than"
                f" {self.config.request_timeout_ms} ms"
            ) from None
        except OSError as exc:
            self.close()
            raise ConnectionClosedError(
                f"connection to broker {self.address} failed while sending: {exc}"
            ) from None

    def _set_request_timeout(self, sock: socket.socket) -> None:
        # Each settimeout is a system call: a follower reads and writes several times per
        # replication round on the same socket, whose timeout is already this one.
        timeout_s = self.config.request_timeout_ms / 1000
        if sock.gettimeout() != timeout_s:
            sock.settimeout(timeout_s)

    def _read_frame(self) -> bytearray:
        prefix = self._read_exactly(SIZE_PREFIX.size)
        (size,) = SIZE_PREFIX.unpack(prefix)
        try:
            check_frame_size(size, max_bytes=self.config.max_response_bytes)
        except ProtocolMismatchError:
            self.close()
            raise
        return self._read_exactly(size)

    def _read_exactly(self, size: int) -> bytearray:
        sock = self._require_socket()
        self._set_request_timeout(sock)
        buffer = bytearray(size)
        view = memoryview(buffer)
        received = 0
        try:
            while received < size:
                count = sock.recv_into(view[received:], min(size - received, _READ_CHUNK_BYTES))
                if count == 0:
                    self.close()
                    raise ConnectionClosedError(
                        f"broker {self.address} closed the connection after {received} of"
                        f" {size} bytes; it may have rejected the request (see its log)"
                    )
                received += count
        except TimeoutError:
            self.close()
            raise RequestTimeoutError(
                f"broker {self.address} did not answer within {self.config.request_timeout_ms}"
                " ms; the connection is closed"
            ) from None
        except OSError as exc:
            self.close()
            raise ConnectionClosedError(
                f"connection to broker {self.address} failed while reading: {exc}"
            ) from None
        return buffer


def encode_body(request: Payload) -> bytes:
    """The request body as kio encodes it from its schema."""
    buffer = io.BytesIO()
    entity_writer(type(request))(buffer, request)
    return buffer.getvalue()
