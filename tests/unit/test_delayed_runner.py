"""The read-ahead planner's runner: each task runs its delay after submission, in order, on
one thread; a failing task does not stop the next; nothing runs after close."""

from __future__ import annotations

import threading
import time

from storage_core.tiered.chunked.delayed_runner import DelayedRunner


def test_tasks_run_in_order_each_its_delay_after_submission() -> None:
    runner = DelayedRunner(0.05, name="test-runner")
    ran: list[tuple[str, float]] = []
    done = threading.Event()
    submitted = time.monotonic()
    runner.submit(lambda: ran.append(("first", time.monotonic())))
    runner.submit(lambda: 1 / 0)  # logged, and the next task still runs
    runner.submit(lambda: (ran.append(("second", time.monotonic())), done.set()))
    assert done.wait(5)
    assert [name for name, _ in ran] == ["first", "second"]
    assert ran[0][1] - submitted >= 0.05
    assert {t.name for t in threading.enumerate()} >= {"test-runner"}
    runner.close()


def test_nothing_runs_after_close() -> None:
    runner = DelayedRunner(0.2, name="test-runner-closed")
    ran: list[int] = []
    runner.submit(ran.append, 1)
    runner.close()
    runner.submit(ran.append, 2)
    time.sleep(0.4)
    assert ran == []
