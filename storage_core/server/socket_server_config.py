"""The listener's limits, read from the broker config with Kafka's names.

What protects the broker from slow, idle and greedy connections, and why each is needed:

- ``queued.max.request.bytes`` bounds the bytes of requests being read or served. Kafka's
  default (-1) is unbounded; here -1 means ``socket.request.max.bytes`` plus
  QUEUED_REQUEST_HEADROOM_BYTES (132 MiB with the defaults): one request of the largest size
  a client may send can always be read, and smaller requests keep flowing beside it. A value
  below ``socket.request.max.bytes`` is refused, as Kafka's memory pool refuses it.
- ``connections.max.idle.ms`` (Kafka's default, 10 minutes) closes a connection that neither
  sent nor received a byte for that long, unless the broker is still serving its request.
  Without it an abandoned half-sent frame would hold its share of the bound forever.
- The same time bounds one partly read request: a client that trickles a byte a second is
  never idle, and a Kafka broker would keep it; here a frame whose first byte came more than
  ``connections.max.idle.ms`` ago closes its connection (no Kafka client takes that long:
  its own ``request.timeout.ms`` gives up first). Slow senders therefore hold what they
  reserved for at most that long, and never more than the bound all together.
- ``max.connections`` and ``max.connections.per.ip`` (Kafka's, unbounded by default) cap
  the connections, each of which may buffer up to STREAM_BUFFER_BYTES * 2 plus one socket
  read outside the bound while it waits; the process's open-file limit caps them anyway.
"""

from __future__ import annotations

from dataclasses import dataclass

from storage_core.errors import InvalidConfigError
from storage_core.server.kafka_config import KafkaConfig

QUEUED_REQUEST_HEADROOM_BYTES = 32 * 1024 * 1024
STREAM_BUFFER_BYTES = 64 * 1024
"""asyncio's stream limit: reading pauses once twice this much waits unread."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SocketServerConfig:
    max_request_bytes: int
    max_connections: int
    max_connections_per_ip: int
    connections_max_idle_ms: int
    """-1 (any negative value) disables idle expiry and the deadline of a partly read frame."""
    queued_max_request_bytes: int

    def __post_init__(self) -> None:
        if self.max_request_bytes <= 0:
            raise InvalidConfigError(
                f"socket.request.max.bytes={self.max_request_bytes} must be positive"
            )
        if self.queued_max_request_bytes < self.max_request_bytes:
            raise InvalidConfigError(
                f"queued.max.request.bytes={self.queued_max_request_bytes} is below"
                f" socket.request.max.bytes={self.max_request_bytes}: a request of the"
                " largest allowed size could never be read; raise it, or set -1 for"
                " socket.request.max.bytes + 32 MiB"
            )
        if self.max_connections <= 0 or self.max_connections_per_ip <= 0:
            raise InvalidConfigError(
                f"max.connections={self.max_connections} and max.connections.per.ip="
                f"{self.max_connections_per_ip} must be positive"
            )
        if self.connections_max_idle_ms == 0:
            raise InvalidConfigError(
                "connections.max.idle.ms=0 would close every connection at once; give a"
                " positive time, or -1 to keep idle connections"
            )

    @staticmethod
    def from_kafka_config(config: KafkaConfig) -> SocketServerConfig:
        max_request_bytes = config.get_int("socket.request.max.bytes")
        queued = config.get_int("queued.max.request.bytes")
        return SocketServerConfig(
            max_request_bytes=max_request_bytes,
            max_connections=config.get_int("max.connections"),
            max_connections_per_ip=config.get_int("max.connections.per.ip"),
            connections_max_idle_ms=config.get_int("connections.max.idle.ms"),
            queued_max_request_bytes=(
                queued if queued > 0 else max_request_bytes + QUEUED_REQUEST_HEADROOM_BYTES
            ),
        )
