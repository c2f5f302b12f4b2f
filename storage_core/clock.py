"""Wall-clock and monotonic time behind one small interface, so time-based rules are testable."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    """Kafka's ``Time``: milliseconds since the epoch and a monotonic nanosecond counter."""

    def milliseconds(self) -> int: ...

    def nanoseconds(self) -> int: ...


class SystemClock:
    """The real clock."""

    def milliseconds(self) -> int:
        return time.time_ns() // 1_000_000

    def nanoseconds(self) -> int:
        return time.monotonic_ns()


class ManualClock:
    """A clock that moves only when told to (``sleep``): deterministic retention and roll tests."""

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self._now_ms = start_ms
        self._nanos = 0

    def milliseconds(self) -> int:
        return self._now_ms

    def nanoseconds(self) -> int:
        return self._nanos

    def sleep(self, duration_ms: int) -> None:
        self._now_ms += duration_ms
        self._nanos += duration_ms * 1_000_000


SYSTEM_CLOCK = SystemClock()
