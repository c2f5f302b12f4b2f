"""The short variant of benchmarks/segment_manifest.py: both versions of one manifest read
back what they wrote, and the packed one is the smaller."""

from __future__ import annotations

from benchmarks.segment_manifest import FRAME_BYTES, manifest, run


def test_the_benchmark_parses_both_versions_of_the_same_frames() -> None:
    (row,) = run(number=1, repeat=1, segment_mib=(8,))
    assert row["frames"] == (8 << 20) // FRAME_BYTES == 32
    assert row["v3_bytes"] < row["v2_bytes"]
    assert row["v2_parse_us"] > 0 and row["v3_parse_us"] > 0
    old, new = manifest(8 << 20, packed=False), manifest(8 << 20, packed=True)
    assert (old.version, new.version) == (2, 3)
    assert old.chunk_index == new.chunk_index
