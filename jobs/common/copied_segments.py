"""The copy job's record of what it copied, for the quality step that follows it.

``copy_segments`` writes ``copied-segments.json`` beside its run summary (``--summary-path``;
atomically, as the summary), one entry per segment its run copied, with the high watermark
and the last stable offset the copy was planned with (the leader's, read by the driver
before planning)::

    {
      "job": "copy_segments",
      "started": "2025-01-01T02:00:00.000000Z",      # the run's start, ISO 8601 UTC
      "segments": [
        {"partition": "orders-0", "segment_id": "<Uuid text>",
         "base_offset": 0,                   # first offset (inclusive)
         "end_offset": 9,                    # last offset (inclusive)
         "high_watermark_at_copy": 50,       # HW (exclusive) the copy was planned with
         "last_stable_offset_at_copy": 45},  # Ly, the LSO (exclusive) it was planned with
        ...
      ]
    }

``jobs.quality --copied-segments PATH`` reads it back (``read_copy_offsets``) into the
``remote_segments`` table's ``*_at_copy`` columns, whose rule is Kafka's: a copy stops
below the LSO of its time (``end_offset < last_stable_offset_at_copy``). The summary itself
stays small (it is the Airflow task's XCom); this file grows with the segments of one run.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from jobs.common.summary import write_json_atomically
from jobs.tables.inputs import CopyOffsets

COPIED_SEGMENTS_FILE = "copied-segments.json"
COPIED_SEGMENTS_BYTES_MAX = 256 * 1024 * 1024  # a record larger than this is refused
ENTRY_FIELDS = (
    "partition",
    "segment_id",
    "base_offset",
    "end_offset",
    "high_watermark_at_copy",
    "last_stable_offset_at_copy",
)


class CopiedSegmentsRecordError(ValueError):
    """A copied-segments record that cannot be read: the copy run's file is damaged."""


def copied_segments_path(summary_path: Path) -> Path:
    """Where a run whose summary is ``summary_path`` keeps its record."""
    return summary_path.with_name(COPIED_SEGMENTS_FILE)


def write_copied_segments(
    path: Path, *, job: str, started: str, outcomes: Iterable[Mapping[str, Any]]
) -> None:
    """The record of the ``copied`` outcomes among ``outcomes`` (``CopyOutcome`` dicts)."""
    segments = [
        {name: outcome[name] for name in ENTRY_FIELDS}
        for outcome in outcomes
        if outcome["status"] == "copied"
    ]
    write_json_atomically(path, {"job": job, "started": started, "segments": segments})


def read_copy_offsets(path: Path) -> dict[str, CopyOffsets]:
    """Segment id -> the offsets its copy was planned with, from a record written by
    ``write_copied_segments``; ``CopiedSegmentsRecordError`` naming what is wrong."""
    size_bytes = path.stat().st_size
    if size_bytes > COPIED_SEGMENTS_BYTES_MAX:
        raise CopiedSegmentsRecordError(
            f"{path} is {size_bytes} bytes, above {COPIED_SEGMENTS_BYTES_MAX}: not a record"
            " of one copy run; pass the copy run's own copied-segments.json"
        )
    try:
        entries = json.loads(path.read_text())["segments"]
        return {
            str(entry["segment_id"]): CopyOffsets(
                high_watermark_at_copy=int(entry["high_watermark_at_copy"]),
                last_stable_offset_at_copy=int(entry["last_stable_offset_at_copy"]),
            )
            for entry in entries
        }
    except (ValueError, KeyError, TypeError) as exc:
        raise CopiedSegmentsRecordError(
            f"{path} is not a copied-segments record ({type(exc).__name__}: {exc}); pass the"
            " copied-segments.json a copy_segments run wrote beside its summary"
        ) from exc
