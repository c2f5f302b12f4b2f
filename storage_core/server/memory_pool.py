"""A bound on the bytes of requests being read and served (Kafka's ``SimpleMemoryPool``).

A connection reserves the size its frame declares as soon as the 4-byte size prefix is in,
before reading the body, and releases it when the request has been served; as in Kafka, a
connection that cannot reserve is not read from (its bytes wait in the kernel's buffers,
and TCP slows the client down). Unlike Kafka, nothing is allocated at reservation: the body
is read incrementally, so memory follows the bytes actually received, and the reservation
only guarantees that a frame once started can be completed: no two half-read frames can
wait on each other for memory.

    reserve(n)   n <= available          -> granted at once
                 otherwise               -> waits; on each release the waiters are granted
                                            first-fit in arrival order, so a small request
                                            passes a large one that does not fit yet
    release(n)   gives n back and wakes the waiters that now fit

First-fit can keep a large request waiting while small ones keep the pool busy; it waits at
most until the small ones pause, or ``connections.max.idle.ms`` closes it.

Thread-safety: used from one event loop only.
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass


class MemoryPoolError(Exception):
    """A reservation that the pool can never grant, or a release of more than was reserved."""


@dataclass(slots=True)
class _Waiter:
    size_bytes: int
    granted: asyncio.Future[None]


class MemoryPool:
    """``size_bytes`` (inclusive) of reservations at most; no one reservation above
    ``max_single_allocation_bytes`` (inclusive), which must not exceed ``size_bytes``."""

    def __init__(self, *, size_bytes: int, max_single_allocation_bytes: int) -> None:
        if not 0 < max_single_allocation_bytes <= size_bytes:
            raise MemoryPoolError(
                f"a pool of {size_bytes} bytes cannot grant single reservations of"
                f" {max_single_allocation_bytes} bytes; both must be positive and the"
                " reservation no larger than the pool"
            )
        self.size_bytes = size_bytes
        self.max_single_allocation_bytes = max_single_allocation_bytes
        self._available_bytes = size_bytes
        self._waiters: deque[_Waiter] = deque()

    @property
    def available_bytes(self) -> int:
        return self._available_bytes

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    async def reserve(self, size_bytes: int) -> None:
        """Wait until ``size_bytes`` are reserved. Cancelling the wait reserves nothing."""
        if not 0 <= size_bytes <= self.max_single_allocation_bytes:
            raise MemoryPoolError(
                f"cannot reserve {size_bytes} bytes: outside [0,"
                f" {self.max_single_allocation_bytes}]"
            )
        if size_bytes <= self._available_bytes:
            self._available_bytes -= size_bytes
            return
        waiter = _Waiter(size_bytes, asyncio.get_running_loop().create_future())
        self._waiters.append(waiter)
        try:
            await waiter.granted
        except asyncio.CancelledError:
            if waiter.granted.done() and not waiter.granted.cancelled():
                self.release(size_bytes)  # granted just before the cancel arrived
            else:
                self._waiters.remove(waiter)
            raise

    def release(self, size_bytes: int) -> None:
        if not 0 <= size_bytes <= self.size_bytes - self._available_bytes:
            raise MemoryPoolError(
                f"cannot release {size_bytes} bytes: only"
                f" {self.size_bytes - self._available_bytes} are reserved"
            )
        self._available_bytes += size_bytes
        for waiter in list(self._waiters):
            if waiter.size_bytes <= self._available_bytes:
                self._waiters.remove(waiter)
                self._available_bytes -= waiter.size_bytes
                waiter.granted.set_result(None)
