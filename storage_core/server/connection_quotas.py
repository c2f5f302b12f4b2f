"""The connections of every listener of one broker, as ``max.connections`` and
``max.connections.per.ip`` count them (Kafka's ``ConnectionQuotas``)."""

from __future__ import annotations

from collections import Counter


class ConnectionQuotas:
    """The connections of every listener of one broker (Kafka's ``ConnectionQuotas``):
    ``max.connections`` and ``max.connections.per.ip`` count them all, whichever listener
    they came through. Thread-safety: one event loop."""

    def __init__(self) -> None:
        self.open = 0
        """Connections accepted and not yet closed (in a TLS handshake included)."""
        self.per_host: Counter[str] = Counter()
        """Connections being served, by client address."""

    def on_closed(self, _task: object) -> None:
        self.open -= 1
