"""A process's descendants, from ``/proc`` (children started in new sessions included)."""

from __future__ import annotations

from pathlib import Path


def _parents() -> dict[int, int]:
    parents = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != "Z":
            parents[int(entry.name)] = int(fields[1])
    return parents


def descendants(pid: int) -> list[int]:
    parents = _parents()
    found: list[int] = []
    frontier = [pid]
    while frontier:
        parent = frontier.pop()
        children = [p for p, pp in parents.items() if pp == parent]
        found += children
        frontier += children
    return found


def alive(pids: list[int]) -> list[int]:
    """Those of ``pids`` that still run (zombies do not count)."""
    live = _parents()
    return [p for p in pids if p in live]
