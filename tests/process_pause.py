"""Pause a process with SIGSTOP and return only once it is stopped.

``kill(pid, SIGSTOP)`` returns before the process stops. The kernel wakes one of its threads
to take the signal; the others keep running until that thread has been scheduled and has
told them to stop. On a loaded machine that takes milliseconds, in which a broker's replica
fetcher thread can still read a fetch answer, append it and send its next fetch: a test that
acts right after the kill would see a "paused" follower replicate. So ``pause`` waits until
every thread reports the stopped state in ``/proc``.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

PAUSE_TIMEOUT_S = 10.0


def pause(pid: int, *, timeout_s: float = PAUSE_TIMEOUT_S) -> None:
    """SIGSTOP ``pid`` and wait until each of its threads is stopped."""
    os.kill(pid, signal.SIGSTOP)
    deadline = time.monotonic() + timeout_s
    while not is_stopped(pid):
        if not Path(f"/proc/{pid}").exists():
            raise ProcessLookupError(f"process {pid} exited instead of stopping")
        if time.monotonic() > deadline:
            raise TimeoutError(f"process {pid} not stopped {timeout_s} s after SIGSTOP")
        time.sleep(0.001)


def is_stopped(pid: int) -> bool:
    """Whether every thread of ``pid`` is stopped (``T`` in its stat); False while one of
    them exits, and once the process is gone."""
    try:
        return all(_thread_state(task) == "T" for task in Path(f"/proc/{pid}/task").iterdir())
    except FileNotFoundError:
        return False


def _thread_state(task: Path) -> str:
    stat = (task / "stat").read_text()
    # "tid (comm) S ...": comm may hold spaces and parentheses; the state follows the last ")"
    return stat[stat.rindex(")") + 2]
