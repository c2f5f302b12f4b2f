"""One client connection's activity, as the idle check sees it (Kafka's ``KafkaChannel`` and
the activity part of its ``Selector.IdleExpiryManager``).

A connection is active when bytes move either way: a read that returns bytes, a write that
the client drains. While the broker serves its request (a handler runs: a fetch waiting for
data) or owes a response it deferred (an acks=-1 produce waiting for replicas) it is never
idle: the broker, not the client, is the slow one. Waiting for room in the memory pool does
count as idle, as a muted Kafka channel does, so that abandoned half-read frames cannot keep
their reservations.

    expiry_reason(now)
      serving, or a response pending                     -> None
      a frame started more than max_idle ago            -> "request deadline"
      no byte read or written for more than max_idle    -> "idle"

Thread-safety: written by its connection's task, read by the idle check, one event loop.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from enum import Enum

from storage_core.security.kafka_principal import ANONYMOUS, KafkaPrincipal


class ExpiryReason(Enum):
    IDLE = "idle"
    REQUEST_DEADLINE = "request deadline"


@dataclass(slots=True, kw_only=True)
class KafkaChannel:
    client: str
    """``host:port`` of the peer, as log lines name it."""
    host: str
    principal: KafkaPrincipal = ANONYMOUS
    """Who the connection authenticated as (a TLS client certificate's mapped DN, later SASL's
    authorization id); ANONYMOUS until then."""
    last_active_ns: int = field(default_factory=time.monotonic_ns)
    frame_started_ns: int = 0
    """When the first byte of the frame being read arrived; 0 between frames."""
    frame_size_bytes: int = -1
    """The size the frame being read declares; -1 before its size prefix is complete."""
    frame_received_bytes: int = 0
    """Bytes of the frame being read so far, size prefix included."""
    serving: bool = False
    pending_responses: int = 0
    """Responses deferred and not yet sent (``ResponsePipeline``)."""

    def touch(self) -> None:
        self.last_active_ns = time.monotonic_ns()

    def set_pending_responses(self, count: int) -> None:
        self.pending_responses = count

    def on_frame_bytes(self, count: int) -> None:
        now_ns = time.monotonic_ns()
        if self.frame_received_bytes == 0:
            self.frame_started_ns = now_ns
        self.frame_received_bytes += count
        self.last_active_ns = now_ns

    def on_frame_read(self) -> None:
        self.frame_started_ns = 0
        self.frame_size_bytes = -1
        self.frame_received_bytes = 0

    def expiry_reason(self, *, now_ns: int, max_idle_ns: int) -> ExpiryReason | None:
        if self.serving or self.pending_responses or max_idle_ns < 0:
            return None
        if self.frame_started_ns and now_ns - self.frame_started_ns > max_idle_ns:
            return ExpiryReason.REQUEST_DEADLINE
        if now_ns - self.last_active_ns > max_idle_ns:
            return ExpiryReason.IDLE
        return None
