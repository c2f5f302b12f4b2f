"""What a consumer's read of tiered offsets answers when the object store misbehaves.

Two faults, two answers (the partition's error in the Fetch response):

- the store does not answer (hung, unreachable): the fetch waits ``remote.fetch.max.wait.ms``
  for its read, then answers ``RemoteReadTimeoutError`` (KAFKA_STORAGE_ERROR, which clients
  retry). The read itself carries on (a thread cannot be interrupted); the next fetch of the
  same offset waits on it again instead of starting another (``PendingRemoteReads``).
- an object of a COPY_SEGMENT_FINISHED segment is gone (the bucket was emptied): the records
  are lost from the remote tier, retrying cannot help. ``RemoteSegmentMissingError`` answers
  UNKNOWN_SERVER_ERROR, as Kafka answers a ``RemoteResourceNotFoundException``, which
  kafka-python raises from ``poll`` and librdkafka delivers as a consumer error.

Both are logged at WARN at most once per ``WARN_INTERVAL_MS`` per key (the partition, or the
segment): a consumer retrying every few milliseconds must not flood the broker log.

Thread-safety: ``WarningLimiter`` may be used from any thread.
"""

from __future__ import annotations

import threading
from typing import ClassVar

from storage_core.clock import SYSTEM_CLOCK, Clock
from storage_core.tiered.remote_storage_manager import RemoteStorageError

WARN_INTERVAL_MS = 60_000
MAX_WARNING_KEYS = 10_000


class RemoteReadTimeoutError(RemoteStorageError):
    """A remote read did not complete within ``remote.fetch.max.wait.ms``; the store is slow or
    not answering. Retriable: the read carries on and a later fetch gets its records."""

    error_code: ClassVar[str] = "kafka_storage_error"


class RemoteSegmentMissingError(RemoteStorageError):
    """An object of a COPY_SEGMENT_FINISHED remote segment is missing from the store: its
    records are lost from the remote tier. Not retriable; the reconcile job reports it.
    ``segment_id`` names the segment (the key of its rate-limited WARN)."""

    error_code: ClassVar[str] = "unknown_server_error"

    def __init__(self, message: str, *, segment_id: object) -> None:
        super().__init__(message)
        self.segment_id = segment_id


class WarningLimiter:
    """``should_log(key)`` is True at most once per ``interval_ms`` for each key.

    At most ``max_keys`` keys are remembered; beyond, the oldest are forgotten (so they may
    log again early, which is the safe side).
    """

    def __init__(
        self,
        *,
        interval_ms: int = WARN_INTERVAL_MS,
        max_keys: int = MAX_WARNING_KEYS,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        if interval_ms < 0:
            raise ValueError(f"interval_ms must be >= 0, got {interval_ms}")
        if max_keys < 1:
            raise ValueError(f"max_keys must be >= 1, got {max_keys}")
        self._interval_ns = interval_ms * 1_000_000
        self._max_keys = max_keys
        self._clock = clock
        self._lock = threading.Lock()
        self._last_ns: dict[object, int] = {}
        self._suppressed: dict[object, int] = {}

    def should_log(self, key: object) -> tuple[bool, int]:
        """Whether to log now for ``key``, and how many were suppressed since the last one."""
        now = self._clock.nanoseconds()
        with self._lock:
            last = self._last_ns.get(key)
            if last is not None and now - last < self._interval_ns:
                self._suppressed[key] = self._suppressed.get(key, 0) + 1
                return False, 0
            self._last_ns.pop(key, None)
            self._last_ns[key] = now
            while len(self._last_ns) > self._max_keys:
                oldest = next(iter(self._last_ns))
                del self._last_ns[oldest]
                self._suppressed.pop(oldest, None)
            return True, self._suppressed.pop(key, 0)
