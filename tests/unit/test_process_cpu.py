"""benchmarks/process_cpu.py: the CPU time of a broker process and of the client over a run."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from benchmarks.process_cpu import CLIENT, CpuTimes, CpuUse, measure, parse_proc_stat


def test_user_and_system_time_are_read_after_a_name_with_spaces_and_parentheses() -> None:
    ticks = os.sysconf("SC_CLK_TCK")
    line = f"4242 (odd) name) S 1 4242 4242 0 -1 4194560 100 0 0 0 {3 * ticks} {ticks} 0 0 20 0"
    assert parse_proc_stat(line) == CpuTimes(user_s=3.0, system_s=1.0)


def test_a_busy_child_and_this_process_are_measured_apart() -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()\nwhile 1: pass"], stdin=subprocess.PIPE
    )
    try:
        with measure({"broker 1": child.pid}) as use:
            assert child.stdin is not None
            child.stdin.close()  # the child spins from here on
            deadline = time.monotonic() + 0.6
            while time.monotonic() < deadline:  # and so does this process
                pass
    finally:
        child.kill()
        child.wait()
    assert use.used["broker 1"].user_s >= 0.2
    assert use.used[CLIENT].user_s >= 0.2


def test_cpu_is_reported_in_ms_per_mib() -> None:
    use = CpuUse({"broker 1": CpuTimes(0.5, 0.25), CLIENT: CpuTimes(0.1, 0.0)})
    assert use.ms_per_mib(100) == {
        "broker 1": {"user": 5.0, "system": 2.5},
        CLIENT: {"user": 1.0, "system": 0.0},
    }
