"""CPU time of processes over a measured run: user and system seconds of each broker process
(from ``/proc/<pid>/stat``, all its threads) and of this process (the client: its Python
threads and librdkafka's), so that a throughput figure says where the CPU went.
"""

from __future__ import annotations

import os
import resource
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

CLIENT = "client"
_TICKS_PER_S = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True, slots=True)
class CpuTimes:
    user_s: float
    system_s: float

    def __sub__(self, other: CpuTimes) -> CpuTimes:
        return CpuTimes(self.user_s - other.user_s, self.system_s - other.system_s)


def parse_proc_stat(text: str) -> CpuTimes:
    """``utime`` and ``stime`` (fields 14 and 15) of a ``/proc/<pid>/stat`` line. The command
    name (field 2, in parentheses) may hold spaces and parentheses: fields are counted from
    its last closing parenthesis."""
    fields = text[text.rindex(")") + 2 :].split()
    return CpuTimes(int(fields[11]) / _TICKS_PER_S, int(fields[12]) / _TICKS_PER_S)


def process_times(pid: int) -> CpuTimes:
    return parse_proc_stat(Path(f"/proc/{pid}/stat").read_text())


def own_times() -> CpuTimes:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return CpuTimes(usage.ru_utime, usage.ru_stime)


@dataclass
class CpuUse:
    """What each process used while a ``measure`` block ran, by name."""

    used: dict[str, CpuTimes] = field(default_factory=dict)

    def ms_per_mib(self, mib: float) -> dict[str, dict[str, float]]:
        return {
            name: {
                "user": round(t.user_s * 1000 / mib, 2),
                "system": round(t.system_s * 1000 / mib, 2),
            }
            for name, t in self.used.items()
        }


@contextmanager
def measure(pids: Mapping[str, int]) -> Iterator[CpuUse]:
    """CPU used by the processes ``pids`` (name -> pid) and by this one (``CLIENT``) while
    the block runs."""
    use = CpuUse()
    before = {name: process_times(pid) for name, pid in pids.items()}
    before_own = own_times()
    yield use
    after_own = own_times()
    for name, pid in pids.items():
        use.used[name] = process_times(pid) - before[name]
    use.used[CLIENT] = after_own - before_own
