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

One sender task per connection sends the pending responses, oldest first, while there are
any: a response costs a wake-up of that task when its future completes, not a task of its own.
The responses that are complete together (the produces one high watermark move completes)
go out in one write: one send and one wake-up of the client, not one each.

Thread-safety: one connection's task and its sender task, on one event loop.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections import deque
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
    watermark): ``encode`` builds the response once ``ready`` is done. Neither may hold any
    part of the request: the request's bytes are released as soon as the handler returns."""

    ready: asyncio.Future[None]
    encode: Callable[[], Response]


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
        # In the order added; the oldest leaves once sent (or when the connection ends).
        self._pending: deque[DeferredResponse | Response] = deque()
        self._sender: asyncio.Task[None] | None = None
        self._progress: asyncio.Future[None] | None = None  # woken as one leaves
        self._sending = False
        self._closing = False

    @property
    def busy(self) -> bool:
        """Whether a response is still pending (a later one must queue behind it)."""
        return bool(self._pending)

    def add(self, response: DeferredResponse | Response) -> None:
        """Send ``response`` after every earlier one; a deferred one once it is complete."""
        if self._closing:
            _close_parts(response)
            return
        self._pending.append(response)
        self._on_pending(len(self._pending))
        if self._sender is None:
            self._sender = asyncio.create_task(self._send_in_order())

    async def wait_for_room(self) -> None:
        """Until fewer than ``pending_max`` responses are pending."""
        while len(self._pending) >= self._pending_max and not self._closing:
            await self._next_progress()

    async def drain(self) -> bool:
        """Until every pending response is sent; False when the connection is closing."""
        while self._pending and not self._closing:
            await self._next_progress()
        return not self._closing

    def cancel(self) -> None:
        """The connection ends: nothing pending will be sent."""
        self._closing = True
        if self._sender is not None:
            self._sender.cancel()
        if not self._sending:  # else the sender drops them once the send has let go of files
            self._forget_all()

    async def _next_progress(self) -> None:
        """Until a response leaves or the sender stops (the connection's task only)."""
        if self._progress is None or self._progress.done():
            self._progress = asyncio.get_running_loop().create_future()
        await self._progress

    def _made_progress(self) -> None:
        progress, self._progress = self._progress, None
        if progress is not None and not progress.done():
            progress.set_result(None)

    async def _send_in_order(self) -> None:
        try:
            while self._pending and not self._closing:
                response = await self._complete(self._pending[0])
                if self._closing:
                    _close_parts(response)
                    return
                sent = 1
                if isinstance(response, bytes):
                    response, sent = self._join_ready(response)
                self._sending = True
                try:
                    await self._send(response)
                except (ConnectionError, OSError):
                    self._give_up()  # the client went away: the read loop sees it and ends
                    return
                except Exception:
                    logger.exception(
                        "closing connection client=%s reason=sending a response failed",
                        self._client,
                    )
                    self._give_up()
                    return
                finally:
                    self._sending = False
                for _ in range(sent):
                    self._pending.popleft()
                self._on_pending(len(self._pending))
                self._made_progress()
        finally:
            self._sender = None
            if self._pending and not self._closing:  # ended by a cancellation not ours
                self._give_up()
            if self._closing:
                self._forget_all()
            self._made_progress()

    def _join_ready(self, head: bytes) -> tuple[bytes, int]:
        """``head`` (the oldest response's bytes) followed by every response right behind
        it that is complete already, as one write: responses that one HW move completes go
        out in one send, not one each. Also the number of responses it holds."""
        parts = [head]
        for index, entry in enumerate(itertools.islice(self._pending, 1, None), start=1):
            if isinstance(entry, DeferredResponse):
                if not entry.ready.done() or entry.ready.cancelled():
                    break
                if entry.ready.exception() is not None:
                    break  # _complete gives up on it, once those before it are sent
                try:
                    entry_bytes = entry.encode()
                except Exception:
                    break  # _complete encodes it again, and gives up
            else:
                entry_bytes = entry
            if entry_bytes is not None and not isinstance(entry_bytes, bytes):
                self._pending[index] = entry_bytes  # encoded: the next send, on its own
                break
            parts.append(entry_bytes or b"")
        if len(parts) == 1:
            return head, 1
        return b"".join(parts), len(parts)

    async def _complete(self, entry: DeferredResponse | Response) -> Response:
        """The response ``entry`` stands for, once complete; None after giving up on it."""
        if not isinstance(entry, DeferredResponse):
            return entry
        if not entry.ready.done():
            await entry.ready
        try:
            entry.ready.result()
            return entry.encode()
        except Exception:
            logger.exception(
                "closing connection client=%s reason=completing a deferred response failed",
                self._client,
            )
            self._give_up()
            return None

    def _give_up(self) -> None:
        self._closing = True
        self._close()

    def _forget_all(self) -> None:
        """Drop what is pending, releasing the segment files of any fetch among it."""
        while self._pending:
            _close_parts(self._pending.popleft())
        self._on_pending(0)
        self._made_progress()


def _close_parts(response: DeferredResponse | Response) -> None:
    if isinstance(response, ResponseParts):
        response.close()
