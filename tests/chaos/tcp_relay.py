"""A TCP relay in front of one broker that cuts links by the client id of the first request.

Each broker listens on its own port and advertises the relay's (``advertised.listeners``), so
every client and every follower's fetcher reaches it through the relay. A follower's fetcher
sends ``client.id = broker-<follower id>-fetcher-<n>`` (Kafka's ReplicaFetcherManager), so
"cut follower F's link to leader L" is, on L's relay, ``cut("broker-F-fetcher-*")``.

    relay = KafkaRelay(target_port=broker_port)     # 127.0.0.1:<relay.port> -> broker
    relay.start()
    relay.cut("broker-2-fetcher-*")   # matching connections closed, new ones refused
    relay.heal("broker-2-fetcher-*")
    relay.stop()

Wire format read here (Kafka's request header, v1 and v2 alike start so; the client id stays
a classic nullable string even in flexible versions):

    int32  size              bytes after this field
    int16  request_api_key
    int16  request_api_version
    int32  correlation_id
    int16  client_id length  -1: null
    bytes  client_id         UTF-8

A connection is matched on its first request only (Kafka clients keep one client id per
connection). Bounds: ``MAX_CONNECTIONS`` relayed connections, a client id of at most
``MAX_CLIENT_ID_BYTES``, ``HEADER_TIMEOUT_S`` to send the first header.
Thread-safety: every public method may be called from any thread.
"""

from __future__ import annotations

import contextlib
import fnmatch
import socket
import struct
import threading
from dataclasses import dataclass
from types import TracebackType

from embedded.ports import free_port

MAX_CONNECTIONS = 512
MAX_CLIENT_ID_BYTES = 32 * 1024
MAX_REQUEST_BYTES = 100 * 1024 * 1024
HEADER_TIMEOUT_S = 10.0
CHUNK_BYTES = 64 * 1024
_FIXED = struct.Struct(">ihhih")  # size, api key, api version, correlation id, client id length


class RequestHeaderError(ValueError):
    """The first bytes of a connection are not a Kafka request header."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestHeader:
    size: int
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    header_bytes: int  # bytes the header spans from the start of the frame (inclusive of size)


def parse_request_header(prefix: bytes) -> RequestHeader | None:
    """The header at the start of ``prefix``, or None while more bytes are needed."""
    if len(prefix) < _FIXED.size:
        return None
    size, api_key, api_version, correlation_id, length = _FIXED.unpack_from(prefix)
    if not _FIXED.size - 4 <= size <= MAX_REQUEST_BYTES:
        raise RequestHeaderError(f"request size {size} is not a Kafka request")
    if length < -1 or length > MAX_CLIENT_ID_BYTES or _FIXED.size - 4 + max(length, 0) > size:
        raise RequestHeaderError(f"client id length {length} does not fit request size {size}")
    end = _FIXED.size + max(length, 0)
    if len(prefix) < end:
        return None
    client_id = None if length == -1 else prefix[_FIXED.size : end].decode("utf-8", "replace")
    return RequestHeader(
        size=size,
        api_key=api_key,
        api_version=api_version,
        correlation_id=correlation_id,
        client_id=client_id,
        header_bytes=end,
    )


class KafkaRelay:
    """127.0.0.1:``port`` -> 127.0.0.1:``target_port``, cutting connections by client id."""

    def __init__(self, *, target_port: int, port: int | None = None) -> None:
        self.target_port = target_port
        self.port = port or free_port()
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None
        self._cut: set[str] = set()
        self._links: dict[socket.socket, _Link] = {}  # client socket -> its link
        self.refused: dict[str, int] = {}  # pattern -> connections refused or dropped by it

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> KafkaRelay:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(128)
        with self._lock:
            self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()
        return self

    def stop(self) -> None:
        """No listener, every relayed connection closed."""
        with self._lock:
            listener, self._listener = self._listener, None
            links, self._links = list(self._links.values()), {}
        if listener is not None:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()
        for link in links:
            link.close()

    def cut(self, pattern: str) -> int:
        """Drop the connections whose client id matches ``pattern`` (``fnmatch``) and refuse new
        ones until ``heal``. Returns how many open connections were dropped."""
        with self._lock:
            self._cut.add(pattern)
            matched = [link for link in self._links.values() if _matches(link.client_id, pattern)]
            for link in matched:
                self._links.pop(link.client, None)
            self.refused[pattern] = self.refused.get(pattern, 0) + len(matched)
        for link in matched:
            link.close()
        return len(matched)

    def heal(self, pattern: str | None = None) -> None:
        """Relay ``pattern``'s connections again (every pattern when None)."""
        with self._lock:
            if pattern is None:
                self._cut.clear()
            else:
                self._cut.discard(pattern)

    def client_ids(self) -> list[str | None]:
        """The client ids of the connections relayed now."""
        with self._lock:
            return [link.client_id for link in self._links.values()]

    def _blocking(self, client_id: str | None) -> str | None:
        with self._lock:
            for pattern in self._cut:
                if _matches(client_id, pattern):
                    self.refused[pattern] = self.refused.get(pattern, 0) + 1
                    return pattern
        return None

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # closed by stop()
            threading.Thread(target=self._open, args=(client,), daemon=True).start()

    def _open(self, client: socket.socket) -> None:
        """Read the first header, then refuse the connection or relay it."""
        try:
            client.settimeout(HEADER_TIMEOUT_S)
            prefix = b""
            header = None
            while header is None:
                data = client.recv(CHUNK_BYTES)
                if not data:
                    raise OSError("closed before its first request header")
                prefix += data
                header = parse_request_header(prefix)
            client.settimeout(None)
        except (OSError, RequestHeaderError):
            client.close()
            return
        if self._blocking(header.client_id) is not None:
            _reset(client)
            return
        try:
            upstream = socket.create_connection(("127.0.0.1", self.target_port), timeout=5)
            upstream.settimeout(None)
            upstream.sendall(prefix)
        except OSError:
            _reset(client)  # the broker is down: the client sees its connection fail
            return
        link = _Link(client, upstream, header.client_id)
        with self._lock:
            admitted = self._listener is not None and len(self._links) < MAX_CONNECTIONS
            if admitted:
                self._links[client] = link
        if not admitted:
            link.close()
            return
        threading.Thread(target=self._pump, args=(link, client, upstream), daemon=True).start()
        threading.Thread(target=self._pump, args=(link, upstream, client), daemon=True).start()

    def _pump(self, link: _Link, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(CHUNK_BYTES):
                sink.sendall(data)
        except OSError:
            pass
        # Either side ending ends the connection: a Kafka connection is not half-closed.
        with self._lock:
            self._links.pop(link.client, None)
        link.close()

    def __enter__(self) -> KafkaRelay:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()


def _matches(client_id: str | None, pattern: str) -> bool:
    return client_id is not None and fnmatch.fnmatchcase(client_id, pattern)


def _reset(sock: socket.socket) -> None:
    """Close with RST, as a refused or broken link looks to the client."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


class _Link:
    """One relayed connection: the client's socket, the broker's, and the client id."""

    def __init__(self, client: socket.socket, upstream: socket.socket, client_id: str | None):
        self.client = client
        self.upstream = upstream
        self.client_id = client_id
        self._closed = False
        self._lock = threading.Lock()

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        for sock in (self.client, self.upstream):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            _reset(sock)
