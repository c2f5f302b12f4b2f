"""A process's descendants (children started in new sessions included)."""

from __future__ import annotations

from pathlib import Path

from embedded.processes import process_table


def descendants(pid: int) -> list[int]:
    table = process_table()
    found: list[int] = []
    frontier = [pid]
    while frontier:
        parent = frontier.pop()
        children = [p for p, entry in table.items() if entry.parent == parent]
        found += children
        frontier += children
    return found


def alive(pids: list[int]) -> list[int]:
    """Those of ``pids`` that still run (zombies do not count)."""
    live = process_table()
    return [p for p in pids if p in live]


def mentioning(text: str) -> list[int]:
    """Live processes whose command line contains ``text`` (e.g. a working directory)."""
    found = []
    for pid in process_table():
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue  # gone meanwhile
        if text.encode() in command:
            found.append(pid)
    return found
