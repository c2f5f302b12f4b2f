"""TimeIndex: early fullness, append rules, lookups, trimming, on-disk bytes, corruption."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from storage_core.errors import (
    CorruptIndexError,
    IndexFullError,
    InvalidOffsetError,
    InvalidTimestampError,
)
from storage_core.log.time_index import NO_TIMESTAMP, TimeIndex, TimestampOffset

BASE = 500
T0 = 1_700_000_000_000


def index_path(tmp_path: Path) -> Path:
    return tmp_path / f"{BASE:020d}.timeindex"


def open_index(tmp_path: Path, max_index_size: int = 12 * 32, writable: bool = True) -> TimeIndex:
    return TimeIndex(index_path(tmp_path), BASE, max_index_size, writable=writable)


def test_new_file_is_preallocated_to_max_size_rounded_down(tmp_path: Path) -> None:
    index = open_index(tmp_path, 12 * 7 + 11)
    assert index_path(tmp_path).stat().st_size == 84
    assert index.max_entries == 7
    assert index.entries == 0
    assert index.last_entry == TimestampOffset(NO_TIMESTAMP, BASE)
    index.close()


@pytest.mark.parametrize("n", [2, 3, 10])
def test_time_index_is_full_one_entry_early(tmp_path: Path, n: int) -> None:
    index = open_index(tmp_path, 12 * n)
    for k in range(n - 1):
        assert not index.is_full()
        index.maybe_append(T0 + k, BASE + k)
    assert index.entries == n - 1
    assert index.is_full()
    with pytest.raises(IndexFullError, match="full time index"):
        index.maybe_append(T0 + n, BASE + n)
    # The slot kept back takes the final entry appended when the segment rolls.
    index.maybe_append(T0 + n, BASE + n, skip_full_check=True)
    assert index.entries == n
    with pytest.raises(IndexFullError):
        index.maybe_append(T0 + n + 1, BASE + n + 1, skip_full_check=True)
    # An entry that would not be added needs no room.
    index.maybe_append(T0 + n, BASE + n + 1, skip_full_check=True)
    index.close()


def test_single_entry_index_is_full_from_the_start(tmp_path: Path) -> None:
    index = open_index(tmp_path, 12)
    assert index.is_full()
    index.maybe_append(T0, BASE, skip_full_check=True)
    assert index.entries == 1
    index.close()


def test_equal_timestamps_add_no_entry(tmp_path: Path) -> None:
    index = open_index(tmp_path)
    index.maybe_append(T0, BASE + 1)
    index.maybe_append(T0, BASE + 5)
    index.maybe_append(T0 + 1, BASE + 5)  # same offset, larger timestamp: added
    assert index.entries_list() == [
        TimestampOffset(T0, BASE + 1),
        TimestampOffset(T0 + 1, BASE + 5),
    ]
    index.close()


def test_no_timestamp_adds_no_entry(tmp_path: Path) -> None:
    index = open_index(tmp_path)
    index.maybe_append(NO_TIMESTAMP, BASE + 3)
    assert index.entries == 0
    index.close()


def test_out_of_order_appends_are_refused(tmp_path: Path) -> None:
    index = open_index(tmp_path)
    index.maybe_append(T0 + 10, BASE + 10)
    with pytest.raises(InvalidOffsetError, match=r"\(509\).*\(510\)"):
        index.maybe_append(T0 + 20, BASE + 9)
    with pytest.raises(InvalidTimestampError, match="timestamp"):
        index.maybe_append(T0 + 9, BASE + 11)
    with pytest.raises(InvalidOffsetError, match="overflow"):
        index.maybe_append(T0 + 30, BASE + 2**31)
    assert index.entries == 1
    index.close()


def test_lookup_returns_largest_timestamp_at_or_below_target(tmp_path: Path) -> None:
    index = open_index(tmp_path)
    for ts, offset in [(T0 + 100, BASE + 2), (T0 + 200, BASE + 8), (T0 + 300, BASE + 8)]:
        index.maybe_append(ts, offset)
    assert index.lookup(T0) == TimestampOffset(NO_TIMESTAMP, BASE)
    assert index.lookup(T0 + 100) == TimestampOffset(T0 + 100, BASE + 2)
    assert index.lookup(T0 + 250) == TimestampOffset(T0 + 200, BASE + 8)
    assert index.lookup(T0 + 10**9) == TimestampOffset(T0 + 300, BASE + 8)
    assert index.entry(0) == TimestampOffset(T0 + 100, BASE + 2)
    with pytest.raises(IndexError):
        index.entry(-1)
    index.close()


def test_close_trims_and_writes_kafka_bytes(tmp_path: Path) -> None:
    entries = [(T0, BASE), (T0 + 5, BASE + 300)]
    index = open_index(tmp_path)
    for ts, offset in entries:
        index.maybe_append(ts, offset)
    index.close()
    raw = index_path(tmp_path).read_bytes()
    assert len(raw) == 24
    assert raw == b"".join(struct.pack(">qi", ts, offset - BASE) for ts, offset in entries)
    assert raw[12:] == bytes.fromhex("0000018bcfe5680500 00012c".replace(" ", ""))


def test_reopen_keeps_entries_and_last_entry(tmp_path: Path) -> None:
    index = open_index(tmp_path)
    index.maybe_append(T0 + 1, BASE + 1)
    index.maybe_append(T0 + 2, BASE + 2)
    index.close()
    reopened = open_index(tmp_path)
    assert reopened.entries == 2
    assert reopened.last_entry == TimestampOffset(T0 + 2, BASE + 2)
    reopened.resize(12 * 32)
    reopened.maybe_append(T0 + 3, BASE + 3)
    reopened.sanity_check()
    assert reopened.lookup(T0 + 3) == TimestampOffset(T0 + 3, BASE + 3)
    reopened.close()
    assert index_path(tmp_path).stat().st_size == 36


def test_truncate_to_keeps_entries_with_smaller_offsets(tmp_path: Path) -> None:
    index = open_index(tmp_path)
    for k, offset in enumerate([BASE + 1, BASE + 4, BASE + 4, BASE + 9]):
        index.maybe_append(T0 + k, offset)
    index.truncate_to(BASE + 4)
    assert index.entries_list() == [TimestampOffset(T0, BASE + 1)]
    assert index.last_entry == TimestampOffset(T0, BASE + 1)
    # After truncation appends continue from the new last entry.
    index.maybe_append(T0 + 1, BASE + 2)
    assert index.entries == 2
    index.truncate_to(BASE)
    assert index.last_entry == TimestampOffset(NO_TIMESTAMP, BASE)
    index.close()


def test_sanity_check_rejects_length_not_a_multiple(tmp_path: Path) -> None:
    index_path(tmp_path).write_bytes(struct.pack(">qi", T0, 0) + b"\x00" * 5)
    index = open_index(tmp_path)
    with pytest.raises(CorruptIndexError, match="multiple") as excinfo:
        index.sanity_check()
    assert str(index_path(tmp_path)) in str(excinfo.value)
    index.close()


def test_sanity_check_rejects_decreasing_timestamps(tmp_path: Path) -> None:
    index_path(tmp_path).write_bytes(struct.pack(">qiqi", T0 + 5, 1, T0, 2))
    index = open_index(tmp_path)
    with pytest.raises(CorruptIndexError, match="timestamp"):
        index.sanity_check()
    index.close()


def test_sanity_check_rejects_decreasing_offsets(tmp_path: Path) -> None:
    index_path(tmp_path).write_bytes(struct.pack(">qiqi", T0, 7, T0 + 1, 3))
    index = open_index(tmp_path)
    with pytest.raises(CorruptIndexError, match="offset"):
        index.sanity_check()
    index.close()


def test_sanity_check_rejects_offset_below_base(tmp_path: Path) -> None:
    index_path(tmp_path).write_bytes(struct.pack(">qi", T0, -1))
    index = open_index(tmp_path)
    with pytest.raises(CorruptIndexError, match="base offset"):
        index.sanity_check()
    index.close()


def test_read_only_missing_file_is_empty_and_not_created(tmp_path: Path) -> None:
    index = open_index(tmp_path, writable=False)
    assert index.entries == 0
    assert index.lookup(T0) == TimestampOffset(NO_TIMESTAMP, BASE)
    index.sanity_check()
    index.close()
    assert not index_path(tmp_path).exists()
