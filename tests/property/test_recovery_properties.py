"""Recovery keeps exactly the valid prefix of a damaged segment, whatever the damage."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage_core.log.log import Log
from storage_core.log.log_config import LogConfig
from storage_core.records import CompressionType, SimpleRecord, build_batch, iter_batches

# Bytes 0-7 (base offset) and 12-15 (partition leader epoch) are outside the CRC by design of
# the format (the leader rewrites them); every other byte of a batch is protected.
UNPROTECTED = set(range(0, 8)) | set(range(12, 16))


def _segment_bytes() -> tuple[bytes, list[tuple[int, int]]]:
    """A segment of varied batches (codecs, sizes) and each batch's [start, end) range."""
    data = bytearray()
    ranges = []
    offset = 0
    for i in range(12):
        records = [
            SimpleRecord(key=None if j % 2 else b"k", value=bytes([i]) * (10 + 37 * j), timestamp=j)
            for j in range(1 + i % 4)
        ]
        batch = build_batch(records, base_offset=offset, compression=list(CompressionType)[i % 5])
        ranges.append((len(data), len(data) + len(batch)))
        data += batch
        offset += len(records)
    return bytes(data), ranges


SEGMENT, RANGES = _segment_bytes()


def _recover(data: bytes) -> tuple[bytes, int]:
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp) / "t-0"
        directory.mkdir()
        (directory / "00000000000000000000.log").write_bytes(data)
        log = Log(directory, LogConfig(), had_clean_shutdown=False)
        end = log.log_end_offset
        log.close()
        return (directory / "00000000000000000000.log").read_bytes(), end


def _offsets_before(position: int) -> int:
    return sum(b.records_count for p, b in iter_batches(SEGMENT) if p + b.size_in_bytes <= position)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(min_value=0, max_value=len(SEGMENT)))
def test_truncation_anywhere_keeps_whole_batches_before_it(cut: int) -> None:
    kept, end = _recover(SEGMENT[:cut])
    prefix_end = max([e for _s, e in RANGES if e <= cut], default=0)
    assert kept == SEGMENT[:prefix_end]
    assert end == _offsets_before(prefix_end)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_bit_flip_in_protected_bytes_cuts_at_the_damaged_batch(data: st.DataObject) -> None:
    batch_index = data.draw(st.integers(0, len(RANGES) - 1))
    start, end = RANGES[batch_index]
    relative = data.draw(
        st.integers(0, end - start - 1).filter(lambda r: r not in UNPROTECTED), label="byte"
    )
    bit = data.draw(st.integers(0, 7), label="bit")
    damaged = bytearray(SEGMENT)
    damaged[start + relative] ^= 1 << bit
    kept, log_end = _recover(bytes(damaged))
    assert kept == SEGMENT[:start]
    assert log_end == _offsets_before(start)
