"""What the scale benchmark's parts share: a broker process's CPU time and open descriptors
read from ``/proc``, waiting for a condition, a medians helper and the machine's description.
"""

from __future__ import annotations

import contextlib
import os
import platform
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks.process_cpu import own_times, process_times

POLL_S = 0.1


def cpu_seconds(pid: int) -> float:
    """utime + stime of every thread of ``pid`` so far (``/proc/<pid>/stat``)."""
    times = process_times(pid)
    return times.user_s + times.system_s


def cpu_of(pids: Sequence[int], *, own: bool = False) -> float:
    """CPU seconds of ``pids`` so far (a process that has exited counts 0), plus this
    process's (all its threads) when ``own``. Deltas of it are a cost that a loaded machine
    stretches far less than the wall time (counted by the kernel in 10 ms ticks)."""
    total = 0.0
    for pid in pids:
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):
            total += cpu_seconds(pid)
    if own:
        times = own_times()
        total += times.user_s + times.system_s
    return total


def idle_cpu_percent(pids: Mapping[int, int], window_s: float) -> dict[int, float]:
    """CPU used by each process (name -> pid) over ``window_s``, in percent of one core."""
    before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    time.sleep(window_s)
    return {
        name: round((cpu_seconds(pid) - before[name]) * 100 / window_s, 2)
        for name, pid in pids.items()
    }


def open_descriptors(pid: int) -> int:
    """How many descriptors ``pid`` holds open now (entries of ``/proc/<pid>/fd``)."""
    return len(os.listdir(f"/proc/{pid}/fd"))


def wait_for(
    condition: Callable[[], object], what: str, timeout_s: float, *, poll_s: float = POLL_S
) -> float:
    """Seconds until ``condition()`` is truthy (errors while asking count as "not yet": a
    broker may be starting); raises ``TimeoutError`` naming ``what`` after ``timeout_s``."""
    started = time.monotonic()
    last: object = None
    while True:
        try:
            if condition():
                return time.monotonic() - started
        except Exception as error:  # a broker restarting or busy: keep asking
            last = error
        if time.monotonic() - started > timeout_s:
            raise TimeoutError(f"{what}: not within {timeout_s:.0f} s (last error: {last!r})")
        time.sleep(poll_s)


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


def machine() -> dict[str, Any]:
    """What the figures were measured on: CPUs, memory, load when the run started."""
    memory_kib = 0
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            memory_kib = int(line.split()[1])
    return {
        "cpus": os.cpu_count(),
        "memory_gib": round(memory_kib / 1024 / 1024, 1),
        "python": platform.python_version(),
        "kernel": platform.release(),
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
        "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
    }
