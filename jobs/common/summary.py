"""``RunSummary``: what one run of a job did, written as JSON for the DAGs and the checks.

Format (``--summary-path``; written atomically: temp file, fsync, rename, fsync dir)::

    {
      "job": "copy_segments",
      "status": "ok" | "error" | "failed" | "skipped",
      "dry_run": false,
      "started": "2025-01-01T02:00:00.000000Z",          # ISO 8601, UTC
      "finished": "2025-01-01T02:00:21.500000Z",
      "duration_s": 21.5,
      "counts": {"partitions": 2, "segments": 3, ...},     # job-defined names
      "bytes": {"copied": 49152, ...},                     # job-defined names
      "errors": [{"partition": "orders-0" | null, "error": "..."}],
      "partitions": [{"partition": "orders-0", "status": "ok", ...}],
      "details": {...}                                     # job-defined, JSON values
    }

``status``: ``failed`` when the run stopped on an error, ``error`` when some partitions
failed, ``skipped`` when it did nothing on purpose (a concurrent run held the lock), else
``ok``. Thread-safety: none; the driver owns its summary.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from storage_core.atomic_file import write_file_atomically

ERRORS_MAX = 1000  # errors kept in a summary; the count says how many there were


def utc_now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(slots=True)
class RunSummary:
    job: str
    dry_run: bool = False
    started: str = field(default_factory=utc_now_iso)
    finished: str | None = None
    duration_s: float | None = None
    status: str | None = None
    counts: dict[str, int] = field(default_factory=dict)
    bytes: dict[str, int] = field(default_factory=dict)
    errors: list[dict[str, str | None]] = field(default_factory=list)
    partitions: list[dict[str, Any]] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
    _started_monotonic: float = field(default_factory=time.monotonic)

    def count(self, name: str, n: int = 1) -> None:
        self.counts[name] = self.counts.get(name, 0) + n

    def add_bytes(self, name: str, n: int) -> None:
        self.bytes[name] = self.bytes.get(name, 0) + n

    def error(self, message: str, partition: object | None = None) -> None:
        self.count("errors")
        if len(self.errors) < ERRORS_MAX:
            self.errors.append(
                {"partition": None if partition is None else str(partition), "error": message}
            )

    def partition(self, partition: object, status: str, **fields: Any) -> None:
        """One entry per partition (and action): its status and the job's fields."""
        self.partitions.append({"partition": str(partition), "status": status, **fields})

    def finish(self, status: str | None = None) -> None:
        """Stamp the end; ``status`` defaults to ``error`` if any error was noted, else ok."""
        self.finished = utc_now_iso()
        self.duration_s = round(time.monotonic() - self._started_monotonic, 3)
        if status is not None:
            self.status = status
        elif self.status is None:
            self.status = "error" if self.errors else "ok"

    @property
    def exit_code(self) -> int:
        return 0 if self.status in ("ok", "skipped", None) and not self.errors else 1

    def to_dict(self) -> dict[str, Any]:
        return {
            "job": self.job,
            "status": self.status,
            "dry_run": self.dry_run,
            "started": self.started,
            "finished": self.finished,
            "duration_s": self.duration_s,
            "counts": dict(self.counts),
            "bytes": dict(self.bytes),
            "errors": list(self.errors),
            "partitions": list(self.partitions),
            "details": dict(self.details),
        }

    def write(self, path: Path) -> None:
        """Write atomically (readers see the old file or the whole new one)."""
        write_json_atomically(path, self.to_dict())


def write_json_atomically(path: Path, value: object) -> None:
    """Write ``value`` as JSON with ``storage_core.atomic_file`` (its own temp file per write)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = json.dumps(value, indent=2, sort_keys=False, default=str).encode() + b"\n"
    write_file_atomically(path, data, unique_temp=True)
