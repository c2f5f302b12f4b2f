"""A small periodic-task scheduler on one daemon thread (Kafka's ``KafkaScheduler``).

Tasks run one at a time, in due order; a task that raises is logged and keeps its schedule, so
one failing partition never stops retention or checkpointing for the others.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

logger = logging.getLogger(__name__)


@dataclass(order=True)
class _Task:
    due_s: float
    sequence: int
    name: str = field(compare=False)
    action: Callable[[], object] = field(compare=False)
    period_s: float | None = field(compare=False)


class Scheduler:
    """Runs named actions after a delay and then every period, until ``shutdown``."""

    def __init__(self, thread_name: str = "storage-core-scheduler") -> None:
        self._thread_name = thread_name
        self._tasks: list[_Task] = []
        self._sequence = itertools.count()
        self._condition = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stopping = False

    def startup(self) -> None:
        with self._condition:
            if self._thread is not None:
                return
            self._stopping = False
            self._thread = threading.Thread(target=self._run, name=self._thread_name, daemon=True)
            self._thread.start()

    def schedule(
        self, name: str, action: Callable[[], object], *, delay_ms: int, period_ms: int | None
    ) -> None:
        if delay_ms < 0 or (period_ms is not None and period_ms <= 0):
            raise ValueError(f"task {name}: delay must be >= 0 and period > 0")
        task = _Task(
            time.monotonic() + delay_ms / 1000,
            next(self._sequence),
            name,
            action,
            None if period_ms is None else period_ms / 1000,
        )
        with self._condition:
            heapq.heappush(self._tasks, task)
            self._condition.notify()

    def shutdown(self, timeout_s: float = 30.0) -> None:
        """Stop after the running task (if any) finishes; pending tasks are dropped."""
        with self._condition:
            self._stopping = True
            self._tasks.clear()
            self._condition.notify()
            thread = self._thread
            self._thread = None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout_s)

    def _run(self) -> None:
        while True:
            with self._condition:
                while not self._stopping and (
                    not self._tasks or self._tasks[0].due_s > time.monotonic()
                ):
                    wait_s = self._tasks[0].due_s - time.monotonic() if self._tasks else None
                    self._condition.wait(wait_s)
                if self._stopping:
                    return
                task = heapq.heappop(self._tasks)
            try:
                task.action()
            except Exception:
                logger.exception("scheduled task failed task=%s", task.name)
            if task.period_s is not None:
                with self._condition:
                    if self._stopping:
                        return
                    task.due_s = time.monotonic() + task.period_s
                    task.sequence = next(self._sequence)
                    heapq.heappush(self._tasks, task)
