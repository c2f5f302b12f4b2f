"""The copy job's copied-segments record: what it writes is what the quality job reads."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobs.common.copied_segments import (
    CopiedSegmentsRecordError,
    copied_segments_path,
    read_copy_offsets,
    write_copied_segments,
)
from jobs.tables.inputs import CopyOffsets


def outcome(segment_id: str | None, status: str, end_offset: int) -> dict[str, object]:
    return {
        "partition": "orders-0",
        "base_offset": end_offset - 9,
        "end_offset": end_offset,
        "status": status,
        "size_bytes": 100,
        "seconds": 0.1,
        "unit": 0,
        "high_watermark_at_copy": 50,
        "last_stable_offset_at_copy": 40,
        "segment_id": segment_id,
        "reason": None if status == "copied" else "already remote",
    }


def test_only_the_copied_segments_are_recorded_with_their_offsets(tmp_path: Path) -> None:
    path = copied_segments_path(tmp_path / "summary.json")
    assert path == tmp_path / "copied-segments.json"
    outcomes = [outcome("a", "copied", 9), outcome(None, "skipped", 19), outcome("c", "copied", 29)]
    write_copied_segments(path, job="copy_segments", started="t", outcomes=outcomes)
    offsets = CopyOffsets(high_watermark_at_copy=50, last_stable_offset_at_copy=40)
    assert read_copy_offsets(path) == {"a": offsets, "c": offsets}


@pytest.mark.parametrize(
    "text", ["not json", "{}", '{"segments": [{"segment_id": "a"}]}', '{"segments": 3}']
)
def test_a_damaged_record_is_refused_naming_the_file(tmp_path: Path, text: str) -> None:
    path = tmp_path / "copied-segments.json"
    path.write_text(text)
    with pytest.raises(CopiedSegmentsRecordError, match="is not a copied-segments record"):
        read_copy_offsets(path)
