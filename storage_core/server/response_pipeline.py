"""Responses of one connection that are still being completed, sent in request order.

Kafka mutes a channel from the moment a request is read until its response is sent, so a
connection's requests are handled one at a time and answered in order. An ``acks=-1`` produce
then holds its connection for a whole replication round trip after its records are appended,
and a client's next produce (sent already: ``max.in.flight.requests.per.connection``) waits
unread behind it. Here a produce whose records are in the leaders' logs and that only waits for
the high watermark hands its response over as a ``DeferredResponse``, and the connection reads
its next request. The appends of one connection stay in request order (each is done before the
next request is read) and every response still goes out in request order, so a client sees
Kafka's answers, sooner:

    request read  ->  served at once ............................  response sent
    produce read  ->  appended  ->  DeferredResponse  ->  (next request read)
                                    ... HW passes it  ->  response sent after every earlier one

Only produces go past a response still pending: any other request first waits until every
earlier response is sent, as in Kafka (a ListOffsets or a Fetch sent after a produce sees that
produce completed). At most ``PENDING_RESPONSES_MAX`` responses wait at once; beyond that the
connection is not read, as a muted Kafka channel is not.

Thread-safety: one connection's task and the tasks it adds, on one event loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from storage_core.server.response_parts import ResponseParts

logger = logging.getLogger(__name__)

PENDING_RESPONSES_MAX = 5
"""Responses one connection may have pending: Kafka's default
``max.in.flight.requests.per.connection``, and the most an idempotent producer sends."""

Response = bytes | ResponseParts | None
"""An encoded response; None for a request that gets none (an ``acks=0`` produce)."""


@dataclass(frozen=True, slots=True)
class DeferredResponse:
    """What a handler returns when the rest of its work only waits (a produce for its high
    watermark): ``complete`` waits and encodes the response. It must hold no part of the
    request: the request's bytes are released as soon as the handler returns."""

    complete: Callable[[], Awaitable[Response]]


class ResponsePipeline:
    """The pending responses of one connection, each sent once it is complete and every
    earlier one has been sent. A failure to complete one (a handler bug) or to send one (the
    client went away) calls ``close`` and sends nothing after it."""

    def __init__(
        self,
        *,
        send: Callable[[Response], Awaitable[None]],
        close: Callable[[], None],
        client: str,
        on_pending: Callable[[int], None] = lambda count: None,
        pending_max: int = PENDING_RESPONSES_MAX,
    ) -> None:
        """``on_pending`` learns each change of the number of pending responses (while one
        is pending the broker serves the connection: it is not idle)."""
        if pending_max < 1:
            raise ValueError(f"pending_max must be >= 1, got {pending_max}")
        self._send = send
        self._close = close
        self._client = client
        self._pending_max = pending_max
        self._on_pending = on_pending
        # In the order added; each leaves as it ends (sent, given up or cancelled).
        self._pending: list[asyncio.Task[bool]] = []
        self._closing = False

    @property
    def busy(self) -> bool:
        """Whether a response is still pending (a later one must queue behind it)."""
        return bool(self._pending)

    def add(self, response: DeferredResponse | Response) -> None:
        """Send ``response`` after every earlier one; a deferred one once it is complete."""
        previous = self._pending[-1] if self._pending else None
        task = asyncio.create_task(self._complete_then_send(response, previous))
        self._pending.append(task)
        task.add_done_callback(self._forget)
        self._on_pending(len(self._pending))

    async def wait_for_room(self) -> None:
        """Until fewer than ``pending_max`` responses are pending."""
        while len(self._pending) >= self._pending_max:
            await asyncio.wait([self._pending[0]])

    async def drain(self) -> bool:
        """Until every pending response is sent; False when the connection is closing."""
        while self._pending and not self._closing:
            await asyncio.wait([self._pending[-1]])
        return not self._closing

    def cancel(self) -> None:
        """The connection ends: nothing pending will be sent."""
        for task in self._pending:
            task.cancel()

    def _forget(self, task: asyncio.Task[bool]) -> None:
        # Runs before anything awaiting ``task`` resumes: it was registered first.
        self._pending.remove(task)
        self._on_pending(len(self._pending))

    def _give_up(self) -> bool:
        self._closing = True
        self._close()
        return False

    async def _complete_then_send(
        self, response: DeferredResponse | Response, previous: asyncio.Task[bool] | None
    ) -> bool:
        """True once sent; False when this connection is closing instead."""
        if isinstance(response, DeferredResponse):
            try:
                response = await response.complete()
            except Exception:
                logger.exception(
                    "closing connection client=%s reason=completing a deferred response failed",
                    self._client,
                )
                return self._give_up()
        if previous is not None and not await previous:
            if isinstance(response, ResponseParts):
                response.close()
            return False
        try:
            await self._send(response)
        except (ConnectionError, OSError):
            return self._give_up()  # the client went away: the read loop sees it and ends
        except Exception:
            logger.exception(
                "closing connection client=%s reason=sending a response failed", self._client
            )
            return self._give_up()
        return True
