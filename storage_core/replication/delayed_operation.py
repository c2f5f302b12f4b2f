"""Kafka's ``DelayedOperation`` and ``DelayedOperationPurgatory``, small and on the event loop.

A delayed operation is a request part that cannot be answered yet: it is watched under the
keys that may let it complete (partitions), tried again when one of them changes
(``check_and_complete``), and expires on a timer after ``delay_ms``. It completes exactly
once: ``force_complete`` cancels its timer, takes it out of every watch list it was put in,
then runs ``on_complete``. On expiry it is tried a last time before ``on_expiration`` and
the completion.

Unlike Kafka's, the first try before watching (``tryCompleteElseWatch``) stays with the
caller, which may answer without building an operation at all.

Thread-safety: loop thread only (watch lists, timers and the operations' futures).
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Hashable, Iterable
from typing import Any, Generic, TypeVar

K = TypeVar("K", bound=Hashable)
Op = TypeVar("Op", bound="DelayedOperation")


class DelayedOperation(ABC):
    """One operation in a purgatory; subclasses say when it is done and how it answers."""

    __slots__ = ("_purgatory", "_timer", "delay_ms")

    def __init__(self, delay_ms: int) -> None:
        self.delay_ms = delay_ms
        self._timer: asyncio.TimerHandle | None = None
        self._purgatory: DelayedOperationPurgatory[Any, Any] | None = None

    @abstractmethod
    def try_complete(self) -> bool:
        """Complete (``force_complete``) if the wait is over; True once completed."""

    @abstractmethod
    def on_complete(self) -> None:
        """Answer; runs once, after the operation left its purgatory."""

    @abstractmethod
    def on_expiration(self) -> None:
        """``delay_ms`` passed and the last try did not complete: fill in the time-out."""

    def force_complete(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if self._purgatory is not None:
            self._purgatory.unwatch(self)
        self.on_complete()

    def expire(self) -> None:
        if self.try_complete():
            return
        self.on_expiration()
        self.force_complete()


class DelayedOperationPurgatory(Generic[K, Op]):
    """Watch lists of delayed operations per key, in the order they were watched."""

    __slots__ = ("_keys", "_watchers", "name")

    def __init__(self, name: str) -> None:
        self.name = name
        self._watchers: dict[K, list[Op]] = {}
        # the keys each watched operation was put under
        self._keys: dict[Op, tuple[K, ...]] = {}

    def watch(self, operation: Op, keys: Iterable[K]) -> None:
        """``operation`` enters the watch list of each of ``keys`` and its timer starts."""
        watched = tuple(keys)
        for key in watched:
            self._watchers.setdefault(key, []).append(operation)
        self._keys[operation] = watched
        operation._purgatory = self
        operation._timer = asyncio.get_running_loop().call_later(
            max(operation.delay_ms, 0) / 1000, operation.expire
        )

    def unwatch(self, operation: Op) -> None:
        """``operation`` leaves the watch list of every key it was watched under."""
        for key in self._keys.pop(operation, ()):
            watchers = self._watchers.get(key)
            if watchers is not None and operation in watchers:
                watchers.remove(operation)
                if not watchers:
                    del self._watchers[key]

    def check_and_complete(self, key: K) -> None:
        """Try every operation watched under ``key``."""
        for operation in self.watched(key):
            operation.try_complete()

    def watched(self, key: K) -> list[Op]:
        """The operations watched under ``key``, oldest first (a copy)."""
        return list(self._watchers.get(key, ()))

    def __len__(self) -> int:
        """The number of operations waiting (Kafka's ``numDelayed``)."""
        return len(self._keys)
