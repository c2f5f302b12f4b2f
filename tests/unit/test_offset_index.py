"""OffsetIndex: preallocation, appends, lookups, trimming, on-disk bytes and corruption checks."""

from __future__ import annotations

import struct
import threading
from pathlib import Path

import pytest

from storage_core.errors import CorruptIndexError, IndexFullError, InvalidOffsetError
from storage_core.log.offset_index import OffsetIndex, OffsetPosition

BASE = 1_000


def index_path(tmp_path: Path, base_offset: int = BASE) -> Path:
    return tmp_path / f"{base_offset:020d}.index"


def open_index(tmp_path: Path, max_index_size: int = 8 * 32, writable: bool = True) -> OffsetIndex:
    return OffsetIndex(index_path(tmp_path), BASE, max_index_size, writable=writable)


def test_new_file_is_preallocated_to_max_size_rounded_down(tmp_path: Path) -> None:
    index = OffsetIndex(index_path(tmp_path), BASE, max_index_size=8 * 10 + 5)
    assert index_path(tmp_path).stat().st_size == 80
    assert index.length == 80
    assert index.entries == 0
    assert index.max_entries == 10
    assert not index.is_full()
    index.close()


def test_max_size_below_one_entry_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="max index size"):
        OffsetIndex(index_path(tmp_path), BASE, max_index_size=7)


def test_empty_existing_file_is_treated_as_new(tmp_path: Path) -> None:
    index_path(tmp_path).touch()
    index = open_index(tmp_path, 80)
    assert index.length == 80
    assert index.entries == 0
    index.append(BASE, 0)
    index.close()


def test_lookup_returns_largest_entry_at_or_below_target(tmp_path: Path) -> None:
    index = open_index(tmp_path)
    for offset, position in [(BASE + 3, 100), (BASE + 10, 400), (BASE + 25, 900)]:
        index.append(offset, position)
    assert index.lookup(BASE) == OffsetPosition(BASE, 0)
    assert index.lookup(BASE - 5) == OffsetPosition(BASE, 0)
    assert index.lookup(BASE + 3) == OffsetPosition(BASE + 3, 100)
    assert index.lookup(BASE + 9) == OffsetPosition(BASE + 3, 100)
    assert index.lookup(BASE + 10) == OffsetPosition(BASE + 10, 400)
    assert index.lookup(BASE + 10_000) == OffsetPosition(BASE + 25, 900)
    assert index.last_offset == BASE + 25
    assert index.entry(1) == OffsetPosition(BASE + 10, 400)
    with pytest.raises(IndexError):
        index.entry(3)
    index.close()


def test_empty_index_lookup_and_last_offset(tmp_path: Path) -> None:
    index = open_index(tmp_path)
    assert index.lookup(BASE + 7) == OffsetPosition(BASE, 0)
    assert index.last_offset == BASE
    assert index.entries_list() == []
    index.close()


def test_fetch_upper_bound_offset_is_first_entry_at_or_past_the_fetch_end(tmp_path: Path) -> None:
    index = open_index(tmp_path)
    for k in range(5):
        index.append(BASE + 2 * k, 10 * k)
    start = index.lookup(BASE + 2)  # position 10
    assert index.fetch_upper_bound_offset(start, 15) == OffsetPosition(BASE + 6, 30)
    assert index.fetch_upper_bound_offset(start, 20) == OffsetPosition(BASE + 6, 30)
    assert index.fetch_upper_bound_offset(start, 31) is None
    index.close()


def test_append_requires_increasing_offsets(tmp_path: Path) -> None:
    index = open_index(tmp_path)
    index.append(BASE + 5, 0)
    with pytest.raises(InvalidOffsetError, match=r"offset 1005 .*\(1005\)"):
        index.append(BASE + 5, 10)
    with pytest.raises(InvalidOffsetError, match="1004"):
        index.append(BASE + 4, 10)
    assert index.entries == 1
    index.close()


def test_index_is_full_at_max_entries(tmp_path: Path) -> None:
    index = open_index(tmp_path, 8 * 3)
    for k in range(3):
        assert not index.is_full()
        index.append(BASE + k, k * 100)
    assert index.is_full()
    with pytest.raises(IndexFullError, match="full index"):
        index.append(BASE + 3, 300)
    index.close()


def test_relative_offset_overflow(tmp_path: Path) -> None:
    index = open_index(tmp_path)
    assert index.relative_offset(BASE + 2**31 - 1) == 2**31 - 1
    assert index.can_append_offset(BASE + 2**31 - 1)
    assert not index.can_append_offset(BASE + 2**31)
    assert not index.can_append_offset(BASE - 1)
    with pytest.raises(InvalidOffsetError, match="overflow"):
        index.relative_offset(BASE + 2**31)
    with pytest.raises(InvalidOffsetError):
        index.append(BASE - 1, 0)
    with pytest.raises(InvalidOffsetError):
        index.append(BASE + 2**31, 0)
    with pytest.raises(InvalidOffsetError, match="position"):
        index.append(BASE, 2**31)
    assert index.entries == 0
    index.close()


def test_close_trims_to_entries_and_writes_kafka_bytes(tmp_path: Path) -> None:
    entries = [(BASE, 0), (BASE + 17, 4_096), (BASE + 40, 9_000)]
    index = open_index(tmp_path)
    for offset, position in entries:
        index.append(offset, position)
    index.close()
    raw = index_path(tmp_path).read_bytes()
    assert len(raw) == 3 * 8
    expected = b"".join(struct.pack(">ii", offset - BASE, position) for offset, position in entries)
    assert raw == expected
    assert raw[8:16] == bytes.fromhex("00000011 00001000")


def test_reopen_keeps_entries_and_resize_makes_room(tmp_path: Path) -> None:
    index = open_index(tmp_path)
    index.append(BASE + 1, 10)
    index.append(BASE + 2, 20)
    index.close()

    reopened = open_index(tmp_path)
    assert reopened.entries == 2
    assert reopened.length == 16
    assert reopened.is_full()  # trimmed: the active segment must resize it
    assert reopened.resize(8 * 32 + 3)
    assert reopened.length == 8 * 32
    assert index_path(tmp_path).stat().st_size == 8 * 32
    assert not reopened.resize(8 * 32)
    assert reopened.entries_list() == [OffsetPosition(BASE + 1, 10), OffsetPosition(BASE + 2, 20)]
    reopened.append(BASE + 3, 30)
    reopened.sanity_check()
    reopened.close()
    assert index_path(tmp_path).stat().st_size == 24


def test_resize_below_used_bytes_is_refused(tmp_path: Path) -> None:
    index = open_index(tmp_path)
    index.append(BASE, 0)
    index.append(BASE + 1, 1)
    with pytest.raises(ValueError, match="entries"):
        index.resize(8)
    index.close()


def test_empty_index_trims_to_zero_bytes_and_reopens_preallocated(tmp_path: Path) -> None:
    index = open_index(tmp_path, 80)
    index.close()
    assert index_path(tmp_path).stat().st_size == 0
    again = open_index(tmp_path, 80)
    assert again.length == 80
    again.close()


def test_truncate_to_keeps_entries_below_the_offset(tmp_path: Path) -> None:
    index = open_index(tmp_path)
    for offset in (BASE + 10, BASE + 20, BASE + 30, BASE + 40):
        index.append(offset, offset - BASE)
    index.truncate_to(BASE + 30)  # exact entry: dropped with everything after it
    assert [e.offset for e in index.entries_list()] == [BASE + 10, BASE + 20]
    index.truncate_to(BASE + 25)  # between entries: nothing to drop
    assert index.entries == 2
    index.truncate_to(BASE + 15)
    assert index.last_offset == BASE + 10
    index.append(BASE + 11, 50)  # appends continue after truncation
    index.truncate_to(BASE)
    assert index.entries == 0
    assert index.lookup(BASE + 100) == OffsetPosition(BASE, 0)
    index.append(BASE, 0)
    index.truncate()
    assert index.entries == 0
    index.close()
    assert index_path(tmp_path).stat().st_size == 0


def test_sanity_check_rejects_length_not_a_multiple(tmp_path: Path) -> None:
    index_path(tmp_path).write_bytes(struct.pack(">ii", 0, 0) + b"\x00\x01\x02")
    index = open_index(tmp_path)
    assert index.entries == 1
    with pytest.raises(CorruptIndexError, match=str(index_path(tmp_path))):
        index.sanity_check()
    index.close()


def test_sanity_check_rejects_decreasing_offsets(tmp_path: Path) -> None:
    index_path(tmp_path).write_bytes(struct.pack(">iiii", 5, 0, 3, 100))
    index = open_index(tmp_path)
    with pytest.raises(CorruptIndexError, match="not larger") as excinfo:
        index.sanity_check()
    assert str(index_path(tmp_path)) in str(excinfo.value)
    index.close()


def test_sanity_check_rejects_offsets_below_base(tmp_path: Path) -> None:
    index_path(tmp_path).write_bytes(struct.pack(">ii", -2, 0))
    index = open_index(tmp_path)
    with pytest.raises(CorruptIndexError, match="less than the base offset"):
        index.sanity_check()
    index.close()


def test_sanity_check_rejects_zeroed_preallocated_tail(tmp_path: Path) -> None:
    # What an unclean shutdown leaves: valid entries followed by preallocated zeros.
    index_path(tmp_path).write_bytes(struct.pack(">ii", 4, 64) + bytes(8 * 4))
    index = open_index(tmp_path)
    with pytest.raises(CorruptIndexError):
        index.sanity_check()
    index.close()


def test_read_only_index_reads_and_does_not_change_the_file(tmp_path: Path) -> None:
    raw = struct.pack(">iiii", 0, 0, 9, 500) + b"\x07"
    index_path(tmp_path).write_bytes(raw)
    index = open_index(tmp_path, writable=False)
    assert index.entries_list() == [OffsetPosition(BASE, 0), OffsetPosition(BASE + 9, 500)]
    with pytest.raises(ValueError, match="read-only"):
        index.append(BASE + 10, 600)
    index.close()
    assert index_path(tmp_path).read_bytes() == raw


def test_rename_and_delete(tmp_path: Path) -> None:
    index = open_index(tmp_path)
    index.append(BASE + 1, 10)
    target = tmp_path / "renamed.index.deleted"
    index.rename_to(target)
    assert index.path == target
    assert not index_path(tmp_path).exists()
    assert index.lookup(BASE + 1) == OffsetPosition(BASE + 1, 10)
    assert index.delete_if_exists()
    assert not target.exists()
    assert not index.delete_if_exists()


def test_flush_makes_entries_visible_to_a_reader(tmp_path: Path) -> None:
    index = open_index(tmp_path)
    index.append(BASE + 2, 64)
    index.flush()
    raw = index_path(tmp_path).read_bytes()
    assert raw[:8] == struct.pack(">ii", 2, 64)
    index.close()


def test_concurrent_lookups_during_appends_and_resizes(tmp_path: Path) -> None:
    index = open_index(tmp_path, 8 * 4)
    errors: list[BaseException] = []
    stop = threading.Event()

    def reader() -> None:
        try:
            while not stop.is_set():
                found = index.lookup(BASE + 10_000)
                assert found.position == (found.offset - BASE) * 10
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=reader) for _ in range(3)]
    for thread in threads:
        thread.start()
    for k in range(500):
        if index.is_full():
            index.resize(index.length + 8 * 4)
        index.append(BASE + k, k * 10)
    stop.set()
    for thread in threads:
        thread.join()
    assert errors == []
    assert index.entries == 500
    index.close()
