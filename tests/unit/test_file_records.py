"""FileRecords: the ``.log`` file of a segment, on a real file in a temp dir."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest

from storage_core.errors import CorruptRecordError, RecordBatchTooLargeError
from storage_core.records import (
    LOG_OVERHEAD,
    MAX_FILE_BYTES,
    CompressionType,
    FileRecords,
    RecordBatch,
    SimpleRecord,
    build_batch,
)


def batch_at(base_offset: int, timestamps: list[int], **kwargs: object) -> bytes:
    records = [
        SimpleRecord(
            key=b"k%d" % (base_offset + i), value=b"value-%d" % (base_offset + i), timestamp=t
        )
        for i, t in enumerate(timestamps)
    ]
    return build_batch(records, base_offset=base_offset, **kwargs)  # type: ignore[arg-type]


@pytest.fixture
def log_path(tmp_path: Path) -> Path:
    return tmp_path / "00000000000000000000.log"


@pytest.fixture
def three_batches() -> list[bytes]:
    # offsets 0-2, 3-4, 5-8; timestamps not monotonic across batches
    return [
        batch_at(0, [100, 110, 105]),
        batch_at(3, [90, 95], compression=CompressionType.GZIP),
        batch_at(5, [200, 120, 300, 250], compression=CompressionType.ZSTD),
    ]


@pytest.fixture
def filled(log_path: Path, three_batches: list[bytes]) -> FileRecords:
    records = FileRecords.open(log_path)
    for batch in three_batches:
        records.append(batch)
    return records


def positions_of(batches: list[bytes]) -> list[int]:
    out, position = [], 0
    for batch in batches:
        out.append(position)
        position += len(batch)
    return out


def test_append_and_read(log_path: Path, three_batches: list[bytes]) -> None:
    records = FileRecords.open(log_path)
    assert log_path.exists()
    assert records.size_in_bytes == 0
    written = [records.append(b) for b in three_batches]
    assert written == [len(b) for b in three_batches]
    everything = b"".join(three_batches)
    assert records.size_in_bytes == len(everything) == log_path.stat().st_size
    assert records.read(0, len(everything)) == everything
    assert records.read(len(three_batches[0]), len(three_batches[1])) == three_batches[1]
    assert records.read(10, 10**9) == everything[10:]  # clamped to the file size
    assert records.read(len(everything), 10) == b""
    assert records.append(b"") == 0
    assert records.append(memoryview(three_batches[0])) == len(three_batches[0])
    assert records.read(len(everything), 10**6) == three_batches[0]
    with pytest.raises(ValueError):
        records.read(-1, 5)
    records.close()


def test_reopen_sees_the_appended_bytes(filled: FileRecords, log_path: Path) -> None:
    size = filled.size_in_bytes
    filled.flush()
    filled.close()
    filled.close()  # idempotent
    with FileRecords.open(log_path, mutable=False) as reopened:
        assert reopened.size_in_bytes == size
        assert [h.base_offset for _, h in reopened.batches()] == [0, 3, 5]
        with pytest.raises(io.UnsupportedOperation):
            reopened.append(b"x")
        with pytest.raises(io.UnsupportedOperation):
            reopened.truncate_to(0)


def test_read_only_open_of_missing_file_fails(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        FileRecords.open(tmp_path / "missing.log", mutable=False)


def test_batches_yield_headers_and_load_full_batches(
    filled: FileRecords, three_batches: list[bytes]
) -> None:
    scanned = list(filled.batches())
    assert [p for p, _ in scanned] == positions_of(three_batches)
    for (position, header), raw in zip(scanned, three_batches, strict=True):
        expected = RecordBatch.from_buffer(raw)
        assert header.position == position
        assert header.base_offset == expected.base_offset
        assert header.size_in_bytes == len(raw)
        assert header.last_offset == expected.last_offset
        assert header.next_offset == expected.next_offset
        assert header.max_timestamp == expected.max_timestamp
        assert header.crc == expected.crc
        assert header.compression is expected.compression
        assert header.records_count == expected.records_count
        loaded = header.load(filled)
        loaded.ensure_valid()
        assert loaded.position == position
        assert loaded.file == str(filled.path)
        assert bytes(loaded.buffer) == raw
        assert list(loaded.records()) == list(expected.records())
    second = positions_of(three_batches)[1]
    assert [h.base_offset for _, h in filled.batches(second)] == [3, 5]


def test_batches_max_position_is_exclusive(filled: FileRecords, three_batches: list[bytes]) -> None:
    third = positions_of(three_batches)[2]
    assert [h.base_offset for _, h in filled.batches(max_position=third)] == [0, 3]
    assert [h.base_offset for _, h in filled.batches(max_position=third + 1)] == [0, 3]
    assert [h.base_offset for _, h in filled.batches(max_position=third - 1)] == [0]
    assert list(filled.batches(max_position=0)) == []


def test_truncated_tail_raises_after_the_valid_batches(
    filled: FileRecords, three_batches: list[bytes]
) -> None:
    tail_position = filled.size_in_bytes
    filled.append(three_batches[0][:40])
    seen = []
    with pytest.raises(CorruptRecordError, match="truncated batch: 40 of") as info:
        for position, _header in filled.batches():
            seen.append(position)
    assert seen == positions_of(three_batches)
    assert info.value.file == str(filled.path)
    assert info.value.position == tail_position
    assert info.value.offset == 0


def test_garbage_header_raises(filled: FileRecords) -> None:
    position = filled.size_in_bytes
    filled.append(bytes(100))
    with pytest.raises(CorruptRecordError, match="batch length 0") as info:
        list(filled.batches())
    assert info.value.position == position
    filled.truncate_to(position)
    filled.append(b"\x00" * 5)
    with pytest.raises(CorruptRecordError, match="truncated batch header: 5 of 12"):
        list(filled.batches())


def test_load_detects_a_file_changed_after_the_scan(filled: FileRecords, log_path: Path) -> None:
    _, header = next(iter(filled.batches()))
    with open(log_path, "r+b") as raw:
        raw.write((999).to_bytes(8, "big"))
    with pytest.raises(CorruptRecordError, match="changed since it was scanned"):
        header.load(filled)


def test_search_for_offset_with_size(filled: FileRecords, three_batches: list[bytes]) -> None:
    positions = positions_of(three_batches)
    sizes = [len(b) for b in three_batches]
    assert filled.search_for_offset_with_size(0, 0) == (2, positions[0], sizes[0])
    assert filled.search_for_offset_with_size(2, 0) == (2, positions[0], sizes[0])
    assert filled.search_for_offset_with_size(3, 0) == (4, positions[1], sizes[1])
    assert filled.search_for_offset_with_size(7, 0) == (8, positions[2], sizes[2])
    # Starting further on returns the first batch from there, even if its offsets are larger.
    assert filled.search_for_offset_with_size(1, positions[2]) == (8, positions[2], sizes[2])
    assert filled.search_for_offset_with_size(9, 0) is None


def test_search_for_timestamp(filled: FileRecords, three_batches: list[bytes]) -> None:
    positions = positions_of(three_batches)
    # First batch with max timestamp >= target, then first record in it at or after target.
    assert filled.search_for_timestamp(0, 0, 0) == (100, 0)
    assert filled.search_for_timestamp(106, 0, 0) == (110, 1)
    assert filled.search_for_timestamp(105, 0, 0) == (110, 1)  # 105 is at offset 2, after 110
    assert filled.search_for_timestamp(111, 0, 0) == (200, 5)  # batch 2's max (95) is too small
    assert filled.search_for_timestamp(201, 0, 0) == (300, 7)
    assert filled.search_for_timestamp(301, 0, 0) is None
    # starting_offset filters records inside the batch.
    assert filled.search_for_timestamp(0, 0, 1) == (110, 1)
    assert filled.search_for_timestamp(0, 0, 3) == (90, 3)
    assert filled.search_for_timestamp(0, 0, 6) == (120, 6)
    assert filled.search_for_timestamp(100, positions[1], 0) == (200, 5)


def test_largest_timestamp_after(filled: FileRecords, three_batches: list[bytes]) -> None:
    positions = positions_of(three_batches)
    assert filled.largest_timestamp_after(0) == (300, 8)
    assert filled.largest_timestamp_after(positions[1]) == (300, 8)
    filled.truncate_to(positions[2])
    assert filled.largest_timestamp_after(0) == (110, 2)
    assert filled.largest_timestamp_after(positions[1]) == (95, 4)
    filled.truncate_to(0)
    assert filled.largest_timestamp_after(0) == (-1, -1)


def test_truncate_to(filled: FileRecords, three_batches: list[bytes], log_path: Path) -> None:
    positions = positions_of(three_batches)
    total = filled.size_in_bytes
    removed = filled.truncate_to(positions[1])
    assert removed == total - positions[1]
    assert filled.size_in_bytes == positions[1] == log_path.stat().st_size
    assert [h.base_offset for _, h in filled.batches()] == [0]
    assert filled.truncate_to(positions[1]) == 0
    with pytest.raises(ValueError, match="only shrinks"):
        filled.truncate_to(positions[1] + 1)
    filled.append(three_batches[2])
    assert [h.base_offset for _, h in filled.batches()] == [0, 5]


def test_preallocated_file_counts_only_appended_bytes(log_path: Path) -> None:
    records = FileRecords.open(log_path, preallocate_bytes=1 << 20)
    assert log_path.stat().st_size == 1 << 20
    assert records.size_in_bytes == 0
    batch = batch_at(0, [1, 2])
    records.append(batch)
    assert records.size_in_bytes == len(batch)
    assert [h.base_offset for _, h in records.batches()] == [0]
    assert log_path.stat().st_size == 1 << 20
    records.trim()
    assert log_path.stat().st_size == len(batch)
    records.close()


def test_close_trims_preallocation_and_reopen_without_it(log_path: Path) -> None:
    records = FileRecords.open(log_path, preallocate_bytes=4096)
    records.append(batch_at(0, [1]))
    records.close()
    assert log_path.stat().st_size == records.size_in_bytes
    with FileRecords.open(log_path, preallocate_bytes=4096) as again:
        assert again.size_in_bytes == log_path.stat().st_size  # existing: not preallocated


def test_an_unclean_preallocated_file_shows_its_zeros(log_path: Path) -> None:
    records = FileRecords.open(log_path, preallocate_bytes=4096)
    batch = batch_at(0, [1])
    records.append(batch)
    os.close(records.fd)  # crash: no trim
    reopened = FileRecords.open(log_path)
    assert reopened.size_in_bytes == 4096
    with pytest.raises(CorruptRecordError, match="batch length 0") as info:
        list(reopened.batches())
    assert info.value.position == len(batch)
    reopened.close()


def test_append_refuses_to_pass_the_int32_position_limit(log_path: Path) -> None:
    with open(log_path, "wb") as raw:
        raw.truncate(MAX_FILE_BYTES - 100)  # sparse
    records = FileRecords.open(log_path)
    records.append(bytes(100))
    assert records.size_in_bytes == MAX_FILE_BYTES
    with pytest.raises(RecordBatchTooLargeError, match="at most 2147483647 bytes"):
        records.append(b"x")
    records.delete()


def test_rename_and_delete(filled: FileRecords, tmp_path: Path) -> None:
    data = filled.read(0, filled.size_in_bytes)
    target = tmp_path / "00000000000000000000.log.deleted"
    old = filled.path
    filled.rename_to(target)
    assert filled.path == target
    assert not old.exists()
    assert target.read_bytes() == data
    filled.append(batch_at(9, [1]))  # the open descriptor follows the file
    assert target.stat().st_size == filled.size_in_bytes
    filled.delete()
    assert not target.exists()
    filled.delete()  # already gone
    with pytest.raises(ValueError, match="closed"):
        filled.read(0, 10)


def test_log_overhead_matches_the_format() -> None:
    batch = batch_at(0, [1])
    assert int.from_bytes(batch[8:12], "big") + LOG_OVERHEAD == len(batch)
