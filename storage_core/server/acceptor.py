"""The listening socket and its accept loop (Kafka's ``Acceptor``).

    accept() ok                 -> TCP_NODELAY on, hand the socket to ``on_accepted``;
                                   back-off resets
    accept() EMFILE/ENFILE/     -> sleep ``backoff_ms`` (doubling from ACCEPT_BACKOFF_MS_MIN
      ENOBUFS/ENOMEM               up to ACCEPT_BACKOFF_MS_MAX); the connection waits in the
                                   kernel's backlog meanwhile. One log line per
                                   ACCEPT_ERROR_LOG_INTERVAL_MS, counting the failures it
                                   stands for; a line when accepting works again
    any other accept() error    -> logged with the same throttle, short back-off

A recovery line is throttled with the failure lines, so a broker that flaps at its limit
(each closed connection frees the descriptor for one accept) logs once per interval.

asyncio's own accept loop is not used: at the descriptor limit it logs a traceback for
every connection in the backlog and re-arms itself once per failure, which at 1024 waiting
connections came to thousands of log lines a second and most of a CPU.

Thread-safety: one event loop; ``start`` and ``stop`` are called from it.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import socket
import time
from collections.abc import Callable

logger = logging.getLogger(__name__)

LISTEN_BACKLOG = 100
ACCEPT_BACKOFF_MS_MIN = 50
ACCEPT_BACKOFF_MS_MAX = 1_000
ACCEPT_ERROR_LOG_INTERVAL_MS = 60_000
_OUT_OF_RESOURCES = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})


class Acceptor:
    """Accepts connections on one listening socket and passes each to ``on_accepted``."""

    def __init__(self, on_accepted: Callable[[socket.socket], None]) -> None:
        self._on_accepted = on_accepted
        self._socket: socket.socket | None = None
        self._task: asyncio.Task[None] | None = None
        self._failures_unlogged = 0
        self._last_logged_ns = 0

    async def start(self, host: str, port: int) -> int:
        """Bind, listen and accept; returns the bound port (useful when ``port`` is 0)."""
        bound = await self.bind(host, port)
        self.start_accepting()
        return bound

    def start_accepting(self) -> None:
        """Accept the connections that queued since ``bind`` and every later one."""
        if self._socket is None:
            raise RuntimeError("the acceptor is not bound")
        self._task = asyncio.create_task(self._run(self._socket), name="acceptor")

    async def bind(self, host: str, port: int) -> int:
        """Bind and listen without accepting yet: clients can connect (they wait in the
        backlog) while the broker finishes starting, as Kafka's paused processors do."""
        loop = asyncio.get_running_loop()
        infos = await loop.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
        family, _type, _proto, _name, address = infos[0]
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(address)
            sock.listen(LISTEN_BACKLOG)
            sock.setblocking(False)
        except OSError:
            sock.close()
            raise
        self._socket = sock
        return int(sock.getsockname()[1])

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._socket is not None:
            self._socket.close()

    async def _run(self, sock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        backoff_ms = ACCEPT_BACKOFF_MS_MIN
        while True:
            try:
                conn, _address = await loop.sock_accept(sock)
            except ConnectionAbortedError:
                continue  # the client gave up while waiting in the backlog
            except OSError as error:
                self._log_failure(error)
                await asyncio.sleep(backoff_ms / 1000)
                if error.errno in _OUT_OF_RESOURCES:
                    backoff_ms = min(backoff_ms * 2, ACCEPT_BACKOFF_MS_MAX)
                continue
            if self._failures_unlogged and self._may_log():
                logger.info(
                    "accepting connections again after failed_accepts=%d",
                    self._failures_unlogged,
                )
                self._failures_unlogged = 0
            backoff_ms = ACCEPT_BACKOFF_MS_MIN
            _set_no_delay(conn)
            self._on_accepted(conn)

    def _may_log(self) -> bool:
        """At most one line per ACCEPT_ERROR_LOG_INTERVAL_MS about accept failures."""
        now_ns = time.monotonic_ns()
        if self._last_logged_ns and (
            now_ns - self._last_logged_ns < ACCEPT_ERROR_LOG_INTERVAL_MS * 1_000_000
        ):
            return False
        self._last_logged_ns = now_ns
        return True

    def _log_failure(self, error: OSError) -> None:
        self._failures_unlogged += 1
        if not self._may_log():
            return
        advice = (
            "raise the process's open-file limit (ulimit -n) or lower max.connections"
            if error.errno in _OUT_OF_RESOURCES
            else "new connections wait in the listen backlog"
        )
        logger.error(
            "cannot accept connections, backing off reason=%s failed_accepts=%d"
            " next_log_in_ms=%d advice=%s",
            error.strerror or error,
            self._failures_unlogged,
            ACCEPT_ERROR_LOG_INTERVAL_MS,
            advice,
        )
        self._failures_unlogged = 0


def _set_no_delay(conn: socket.socket) -> None:
    """TCP_NODELAY, as Kafka's Acceptor sets on every connection. asyncio sets it only on
    sockets whose ``proto`` says TCP, which an accepted socket's (0) does not. Without it, the
    small last write of a response (a sendfile fetch's trailing tagged fields) waits for the
    client's ACK of the records, which the client delays (up to 40 ms on Linux) because it is
    still waiting for the whole response."""
    with contextlib.suppress(OSError):  # the client may already be gone
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
