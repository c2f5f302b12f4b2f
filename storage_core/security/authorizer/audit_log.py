"""The authorizer's audit log, in Kafka's logger and line shape (``kafka.authorizer.logger``)::

    Principal = User:bob is Denied Operation = Write from host = 127.0.0.1 on resource =
    Topic:LITERAL:orders for request = Produce with resourceRefCount = 1

A denial is logged at INFO once per (principal, operation, resource) per interval (a client
retrying a denied request would otherwise fill the log), with how many like it were held back
since the last line; allowed requests at DEBUG. Thread-safety: one lock around the limiter.
"""

from __future__ import annotations

import logging
import threading
import time

from storage_core.security.authorizer.action import Action
from storage_core.security.kafka_principal import KafkaPrincipal

authorizer_logger = logging.getLogger("kafka.authorizer.logger")

AUDIT_INTERVAL_S = 60.0
MAX_AUDIT_KEYS = 10_000


class _AuditLimiter:
    """At most one INFO line per key per interval; the lines held back are counted."""

    def __init__(self, interval_s: float) -> None:
        self._interval_s = interval_s
        self._last: dict[tuple[str, str, str], tuple[float, int]] = {}
        self._lock = threading.Lock()

    def admit(self, key: tuple[str, str, str]) -> int | None:
        """The number of lines suppressed since the last one, or None to suppress this one."""
        now = time.monotonic()
        with self._lock:
            last = self._last.get(key)
            if last is not None and now - last[0] < self._interval_s:
                self._last[key] = (last[0], last[1] + 1)
                return None
            if len(self._last) >= MAX_AUDIT_KEYS:
                self._last.clear()
            self._last[key] = (now, 0)
            return last[1] if last is not None else 0


class AuditLog:
    """Writes the audit lines of the authorizer's decisions (see the module docstring)."""

    def __init__(self, interval_s: float = AUDIT_INTERVAL_S) -> None:
        self._limiter = _AuditLimiter(interval_s)

    def record(
        self,
        principal: KafkaPrincipal,
        host: str,
        request_name: str,
        action: Action,
        authorized: bool,
    ) -> None:
        if authorized:
            if action.log_if_allowed and authorizer_logger.isEnabledFor(logging.DEBUG):
                authorizer_logger.debug(_audit_line(principal, host, request_name, action, True))
            return
        if not action.log_if_denied or not authorizer_logger.isEnabledFor(logging.INFO):
            return
        suppressed = self._limiter.admit(
            (str(principal), action.operation.name, str(action.pattern))
        )
        if suppressed is None:
            return
        line = _audit_line(principal, host, request_name, action, False)
        if suppressed:
            line += f" ({suppressed} more denials like it since the last line)"
        authorizer_logger.info(line)


def _audit_line(
    principal: KafkaPrincipal, host: str, request_name: str, action: Action, authorized: bool
) -> str:
    result = "Allowed" if authorized else "Denied"
    return (
        f"Principal = {principal} is {result} Operation = {action.operation.pascal_name} "
        f"from host = {host} on resource = {action.pattern} for request = {request_name} "
        f"with resourceRefCount = {action.resource_reference_count}"
    )
