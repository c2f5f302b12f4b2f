"""``EventManager``: one thread that runs queued events in order (Kafka's
``ControllerEventManager``). ZooKeeper watches fire on the client's own thread, which must not
block; they enqueue here and the work happens on this thread, one event at a time, so the
state an event handler touches needs no lock.

A handler that raises is logged with the event's name and the loop goes on; ``on_error`` lets
the owner react (the controller resigns), and the loop goes on even if that reaction raises.
The queue is bounded: a full queue drops the event with an error line rather than growing
without limit.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

logger = logging.getLogger(__name__)

EVENT_QUEUE_MAX = 100_000
T = TypeVar("T")


class EventManager:
    def __init__(
        self,
        name: str,
        *,
        on_error: Callable[[str, Exception], None] | None = None,
        idle: Callable[[], float] | None = None,
    ) -> None:
        """``idle()`` runs when no event came for the time it last returned (seconds; first
        call after 1 s): periodic work on the same thread."""
        self.name = name
        self._on_error = on_error
        self._idle = idle
        self._events: queue.Queue[tuple[str, Callable[[], None]] | None] = queue.Queue(
            EVENT_QUEUE_MAX
        )
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 30.0) -> None:
        if self._thread is None:
            return
        self._events.put(None)
        self._thread.join(timeout=timeout_s)
        self._thread = None

    @property
    def on_event_thread(self) -> bool:
        return threading.current_thread() is self._thread

    def put(self, name: str, handler: Callable[[], None]) -> None:
        try:
            self._events.put_nowait((name, handler))
        except queue.Full:
            logger.error("event queue full, queue=%s event=%s dropped", self.name, name)

    def call(self, name: str, handler: Callable[[], T]) -> Future[T]:
        """Run ``handler`` on the event thread; its result (or error) in the future."""
        future: Future[T] = Future()

        def run() -> None:
            if not future.set_running_or_notify_cancel():
                return
            try:
                future.set_result(handler())
            except Exception as exc:
                future.set_exception(exc)
                raise

        self.put(name, run)
        return future

    def _run(self) -> None:
        wait_s = 1.0
        next_idle = time.monotonic() + wait_s
        while True:
            try:
                event = self._events.get(timeout=max(0.0, next_idle - time.monotonic()))
            except queue.Empty:
                if self._idle is not None:
                    wait_s = self._safely("idle", self._idle) or 1.0
                next_idle = time.monotonic() + wait_s
                continue
            if event is None:
                return
            self._safely(*event)

    def _safely(self, name: str, handler: Callable[[], Any]) -> Any:
        try:
            return handler()
        except Exception as exc:
            if self._on_error is None:
                logger.exception("event failed, queue=%s event=%s", self.name, name)
                return None
            try:
                self._on_error(name, exc)
            except Exception:
                # the thread must outlive its owner's reaction (a resignation may meet the
                # same lost ZooKeeper session as the event): a dead thread runs nothing again
                logger.exception("event error handler failed, queue=%s event=%s", self.name, name)
            return None
