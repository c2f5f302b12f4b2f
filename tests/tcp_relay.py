"""A TCP relay for fault tests: the network between a client and a server, which can fail.

    relay = TcpRelay(target_port=s3.port)    # 127.0.0.1:<relay.port> -> 127.0.0.1:<target>
    relay.start()
    relay.stop()          # refused: no listener, every relayed connection closed (reset)
    relay.blackhole()     # connections are accepted and then hang: nothing is forwarded,
                          #   nothing answered (a partition that drops packets)
    relay.start()         # relaying again on the same port

The server behind keeps running, so its state (moto keeps objects in memory only) survives
the outage, which is what a client sees of a real store that becomes unreachable and then
comes back.

Bounds: at most ``MAX_CONNECTIONS`` relayed connections; beyond, new ones are closed at once.
Thread-safety: ``start``/``stop``/``blackhole`` may be called from any thread.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from types import TracebackType

from embedded.ports import free_port

MAX_CONNECTIONS = 256
CHUNK_BYTES = 64 * 1024


class TcpRelay:
    def __init__(self, *, target_port: int, port: int | None = None) -> None:
        self.target_port = target_port
        self.port = port or free_port()
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None
        self._sockets: set[socket.socket] = set()
        self._forwarding = True

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        """Relay again (after ``stop`` or ``blackhole``)."""
        self._close_all()
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        with self._lock:
            self._listener = listener
            self._forwarding = True
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def stop(self) -> None:
        """No listener (connections are refused) and every relayed connection closed."""
        self._close_all()

    def blackhole(self) -> None:
        """Accept connections but forward nothing and answer nothing."""
        self.start()
        with self._lock:
            self._forwarding = False

    def _close_all(self) -> None:
        with self._lock:
            listener, self._listener = self._listener, None
            sockets, self._sockets = self._sockets, set()
        if listener is not None:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # closed by stop()
            with self._lock:
                current = self._listener is listener
                forwarding = self._forwarding
                full = len(self._sockets) >= MAX_CONNECTIONS
                if current and not full:
                    self._sockets.add(client)
            if not current or full:
                client.close()
                continue
            if not forwarding:
                continue  # held open, never read nor answered
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port), timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                self._sockets.add(upstream)
            pair = _Pair(client, upstream)
            threading.Thread(target=self._pump, args=(pair, client, upstream), daemon=True).start()
            threading.Thread(target=self._pump, args=(pair, upstream, client), daemon=True).start()

    def _pump(self, pair: _Pair, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(CHUNK_BYTES):
                sink.sendall(data)
        except OSError:
            pass
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)
        if pair.one_direction_done():
            with self._lock:
                self._sockets.discard(pair.client)
                self._sockets.discard(pair.upstream)
            pair.client.close()
            pair.upstream.close()

    def __enter__(self) -> TcpRelay:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()


class _Pair:
    """The two sockets of one relayed connection; closed when both directions ended."""

    def __init__(self, client: socket.socket, upstream: socket.socket) -> None:
        self.client = client
        self.upstream = upstream
        self._lock = threading.Lock()
        self._open_directions = 2

    def one_direction_done(self) -> bool:
        """True for the second (last) direction to end."""
        with self._lock:
            self._open_directions -= 1
            return self._open_directions == 0
