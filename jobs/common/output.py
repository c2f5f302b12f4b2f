"""Structured output of the jobs: one ``key=value`` line per partition on stdout, progress
lines on stderr.

    partition=orders-0 job=copy_segments event=copied status=ok segments=3 bytes=49152
    progress job=copy_segments done=3 total=10 bytes=49152 percent=30 elapsed_s=2.1

Values with spaces, quotes or ``=`` are double-quoted (``storage-core tier``'s format).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping
from typing import TextIO

from storage_core.tools.key_values import format_fields

__all__ = ["Progress", "format_fields", "log_line", "log_partition"]

# Progress lines are printed at most this often (the last one always).
PROGRESS_INTERVAL_S = 2.0


def log_line(kind: str, fields: Mapping[str, object], *, out: TextIO | None = None) -> None:
    """``<kind> k=v ...`` on ``out`` (default stdout)."""
    print(f"{kind} {format_fields(fields)}", file=out or sys.stdout, flush=True)


def log_partition(event: str, tp: object, *, out: TextIO | None = None, **fields: object) -> None:
    """One line about one partition: ``partition=<tp> event=<event> k=v ...``."""
    line = format_fields({"partition": tp, "event": event, **fields})
    print(line, file=out or sys.stdout, flush=True)


class Progress:
    """Progress of ``total`` items as plain lines on stderr (log files keep them readable),
    at most every ``interval_s`` seconds and once at ``finish``."""

    def __init__(
        self,
        job: str,
        total: int,
        *,
        out: TextIO | None = None,
        interval_s: float = PROGRESS_INTERVAL_S,
        enabled: bool = True,
    ) -> None:
        self.job = job
        self.total = total
        self.out = out
        self.interval_s = interval_s
        self.enabled = enabled
        self.done = 0
        self.size_bytes = 0
        self._started = time.monotonic()
        self._shown_at = float("-inf")
        self._shown: tuple[int, int] | None = None

    def advance(self, items: int = 1, size_bytes: int = 0) -> None:
        self.done += items
        self.size_bytes += size_bytes
        self._maybe_show(force=False)

    def finish(self) -> None:
        self._maybe_show(force=True)

    def line(self) -> str:
        percent = 100 if self.total == 0 else 100 * self.done // self.total
        return "progress " + format_fields(
            {
                "job": self.job,
                "done": self.done,
                "total": self.total,
                "bytes": self.size_bytes,
                "percent": percent,
                "elapsed_s": f"{time.monotonic() - self._started:.1f}",
            }
        )

    def _maybe_show(self, *, force: bool) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if not force and now - self._shown_at < self.interval_s:
            return
        if force and self._shown == (self.done, self.size_bytes):
            return  # the last line said it already
        self._shown_at = now
        self._shown = (self.done, self.size_bytes)
        print(self.line(), file=self.out or sys.stderr, flush=True)
