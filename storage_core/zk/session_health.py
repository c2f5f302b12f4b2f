"""``SessionHealth``: how close a ZooKeeper session runs to expiring, measured by its heartbeat.

ZooKeeper expires a session that sent nothing for ``zookeeper.session.timeout.ms``. kazoo's
connection thread sends a ping after a third of that without a request (two thirds is its
read timeout, pinged at half of it), and drops the connection when a ping is unanswered by
the next one. Every step runs on that one Python thread: a process whose other threads hold
the interpreter lock (long loops, big C calls that keep it) delays the ping's sending and the
reading of its answer alike. The ping's round trip, sent to answer read on that thread, is
what a starved heartbeat shows first, long before the session expires.

Measured by timing kazoo's ``ping_outstanding`` event of the connection (set when a ping is
sent, cleared when its answer is read, or when the connection is dropped for lack of one,
which then counts the time waited): nothing is added to the connection thread but two clock
reads and a bounded append. Exposed as Kafka-style gauges by the broker
(``kafka.server:type=ZooKeeperClientMetrics,name=ZooKeeperPingLatencyMs``, the last, and
``...PingLatencyMsMax``, the largest of the last ``WINDOW_S``), and a ping slower than
``SLOW_PING_FRACTION`` of the session timeout is logged with the margin left.

Thread-safety: samples are recorded on kazoo's connection thread and read from any thread
under one lock.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger(__name__)

WINDOW_S = 60.0  # the max is over the pings of the last minute (about 30 of them)
MAX_SAMPLES = 1024  # a limit on everything: pings are ~2 s apart, so ~30 a minute
SLOW_PING_FRACTION = 1 / 3  # of the session timeout: logged as a warning


@dataclass(frozen=True, slots=True, kw_only=True)
class PingStats:
    """Pings answered since the session started (``count``), the last one's round trip and the
    largest of the last ``WINDOW_S`` and since start (milliseconds; 0 before the first)."""

    count: int
    last_ms: float
    window_max_ms: float
    max_ms: float


class SessionHealth:
    def __init__(self, *, session_timeout_ms: int, name: str = "zookeeper") -> None:
        self.session_timeout_ms = session_timeout_ms
        self.name = name
        self._lock = threading.Lock()
        self._samples: collections.deque[tuple[float, float]] = collections.deque(
            maxlen=MAX_SAMPLES
        )
        self._count = 0
        self._last_ms = 0.0
        self._max_ms = 0.0

    def install(self, client: Any) -> bool:
        """Time ``client``'s pings (a kazoo ``KazooClient``); False when this kazoo keeps no
        ``ping_outstanding`` event on its connection (nothing is measured then)."""
        connection = getattr(client, "_connection", None)
        current = getattr(connection, "ping_outstanding", None)
        if connection is None or not isinstance(current, threading.Event):
            return False
        connection.ping_outstanding = _TimedPing(self.record)
        return True

    def record(self, latency_ms: float) -> None:
        now = time.monotonic()
        with self._lock:
            self._samples.append((now, latency_ms))
            self._count += 1
            self._last_ms = latency_ms
            self._max_ms = max(self._max_ms, latency_ms)
        if latency_ms > self.session_timeout_ms * SLOW_PING_FRACTION:
            logger.warning(
                "zookeeper ping slow session=%s ping_latency_ms=%.0f session_timeout_ms=%d"
                " margin_ms=%.0f: this process's threads kept kazoo's heartbeat waiting",
                self.name,
                latency_ms,
                self.session_timeout_ms,
                self.session_timeout_ms - latency_ms,
            )

    def stats(self) -> PingStats:
        horizon = time.monotonic() - WINDOW_S
        with self._lock:
            recent = [ms for at, ms in self._samples if at >= horizon]
            return PingStats(
                count=self._count,
                last_ms=self._last_ms,
                window_max_ms=max(recent, default=0.0),
                max_ms=self._max_ms,
            )


class _TimedPing(threading.Event):
    """kazoo's ``ping_outstanding``: set when a ping goes out, cleared when its answer is read
    (or the connection is given up for lack of one); the time between is reported."""

    def __init__(self, report: Any) -> None:
        super().__init__()
        self._report = report
        self._sent_at: float | None = None

    def set(self) -> None:
        self._sent_at = time.monotonic()
        super().set()

    def clear(self) -> None:
        sent_at, self._sent_at = self._sent_at, None
        if sent_at is not None and self.is_set():
            self._report((time.monotonic() - sent_at) * 1000)
        super().clear()
