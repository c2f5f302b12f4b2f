"""Remote reads whose answer has not reached a consumer yet, at most one per partition.

A fetch waits ``remote.fetch.max.wait.ms`` for its remote read. Kafka cancels a read its fetch
stopped waiting for and starts a new one on the next fetch, so against a store slower than the
wait no read ever completes, and against a hung store every fetch ties up another reader
thread. Here the read is kept instead::

    fetch (offset O) -> pending read of this partition for O?
        none, or for another request   -> submit a new read (it replaces the old entry)
        in flight                      -> wait on it again
        done, not older than result_ttl -> its records, or its failure, answer this fetch
    the answer went out                -> forget_if(): the entry is forgotten

So a hung store holds one reader thread per partition being read, a slow store still makes
progress, and a failure that arrives after its fetch gave up reaches the next fetch rather
than being lost.

Bounds: one entry per partition, at most ``max_entries`` (the oldest are dropped); a finished
read is reused for ``result_ttl_ms`` at most.

Thread-safety: every method may be called from any thread (``_lock``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Generic, TypeVar

from storage_core.clock import SYSTEM_CLOCK, Clock

T = TypeVar("T")

RESULT_TTL_MS = 30_000
MAX_ENTRIES = 10_000


@dataclass(frozen=True, slots=True, kw_only=True)
class PendingRead(Generic[T]):
    """One partition's read: what was asked, its future and when it was submitted."""

    request: Hashable
    future: Future[T]
    submitted_ns: int

    def age_ms(self, now_ns: int) -> int:
        return (now_ns - self.submitted_ns) // 1_000_000


class PendingRemoteReads(Generic[T]):
    """See the module docstring."""

    def __init__(
        self,
        *,
        result_ttl_ms: int = RESULT_TTL_MS,
        max_entries: int = MAX_ENTRIES,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        if result_ttl_ms < 0:
            raise ValueError(f"result_ttl_ms must be >= 0, got {result_ttl_ms}")
        if max_entries < 1:
            raise ValueError(f"max_entries must be >= 1, got {max_entries}")
        self._result_ttl_ns = result_ttl_ms * 1_000_000
        self._max_entries = max_entries
        self._clock = clock
        self._lock = threading.Lock()
        self._reads: dict[Hashable, PendingRead[T]] = {}

    def read(
        self, partition: Hashable, request: Hashable, submit: Callable[[], Future[T]]
    ) -> PendingRead[T]:
        """The partition's pending read of ``request``, or a new one from ``submit()``
        (which may raise, e.g. when the reader queue is full; nothing is recorded then)."""
        with self._lock:
            now = self._clock.nanoseconds()
            pending = self._reads.get(partition)
            if pending is not None and pending.request == request:
                fresh = now - pending.submitted_ns <= self._result_ttl_ns
                if not pending.future.done() or fresh:
                    return pending
            pending = PendingRead(request=request, future=submit(), submitted_ns=now)
            self._reads.pop(partition, None)
            self._reads[partition] = pending
            while len(self._reads) > self._max_entries:
                del self._reads[next(iter(self._reads))]
            return pending

    def forget_if(self, partition: Hashable, pending: PendingRead[T]) -> None:
        """The outcome of ``pending`` was sent to a consumer: forget it."""
        with self._lock:
            if self._reads.get(partition) is pending:
                del self._reads[partition]

    def forget(self, partition: Hashable) -> None:
        """The partition left this broker (or its reader was replaced)."""
        with self._lock:
            self._reads.pop(partition, None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._reads)
