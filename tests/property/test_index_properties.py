"""Index lookups and truncations agree with linear scans over the appended entries."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage_core.log.offset_index import OffsetIndex, OffsetPosition
from storage_core.log.time_index import NO_TIMESTAMP, TimeIndex, TimestampOffset

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

base_offsets = st.integers(min_value=0, max_value=2**40)


@st.composite
def offset_entries(draw: st.DrawFn) -> tuple[int, list[OffsetPosition]]:
    """A base offset and entries with strictly increasing offsets and positions."""
    base = draw(base_offsets)
    offset_steps = draw(st.lists(st.integers(min_value=1, max_value=50), max_size=60))
    entries: list[OffsetPosition] = []
    offset = base + draw(st.integers(min_value=0, max_value=5)) - 1
    position = draw(st.integers(min_value=0, max_value=100))
    for step in offset_steps:
        offset += step
        entries.append(OffsetPosition(offset, position))
        position += draw(st.integers(min_value=1, max_value=5_000))
    return base, entries


@st.composite
def time_appends(draw: st.DrawFn) -> tuple[int, list[TimestampOffset]]:
    """A base offset and appends with non-decreasing timestamps and offsets (ties included)."""
    base = draw(base_offsets)
    steps = draw(
        st.lists(
            st.tuples(st.integers(min_value=0, max_value=3), st.integers(min_value=0, max_value=3)),
            max_size=60,
        )
    )
    timestamp = draw(st.integers(min_value=-1, max_value=2**41))
    offset = base
    appends: list[TimestampOffset] = []
    for timestamp_step, offset_step in steps:
        timestamp += timestamp_step
        offset += offset_step
        appends.append(TimestampOffset(timestamp, offset))
    return base, appends


def oracle_offset_lookup(base: int, entries: list[OffsetPosition], target: int) -> OffsetPosition:
    found = OffsetPosition(base, 0)
    for entry in entries:
        if entry.offset <= target:
            found = entry
    return found


def oracle_upper_bound(entries: list[OffsetPosition], position: int) -> OffsetPosition | None:
    for entry in entries:
        if entry.position >= position:
            return entry
    return None


def oracle_time_lookup(base: int, entries: list[TimestampOffset], target: int) -> TimestampOffset:
    found = TimestampOffset(NO_TIMESTAMP, base)
    for entry in entries:
        if entry.timestamp <= target:
            found = entry
    return found


def expected_time_entries(appends: list[TimestampOffset]) -> list[TimestampOffset]:
    """Kafka's rule: an append adds an entry only if its timestamp beats the last entry's."""
    kept: list[TimestampOffset] = []
    for append in appends:
        last_timestamp = kept[-1].timestamp if kept else NO_TIMESTAMP
        if append.timestamp > last_timestamp:
            kept.append(append)
    return kept


@SETTINGS
@given(
    data=offset_entries(),
    targets=st.lists(st.integers(min_value=-10, max_value=4_000), min_size=1, max_size=20),
    truncate_at=st.integers(min_value=-10, max_value=4_000),
)
def test_offset_index_matches_linear_scan(
    data: tuple[int, list[OffsetPosition]], targets: list[int], truncate_at: int
) -> None:
    base, entries = data
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "0.index"
        index = OffsetIndex(path, base, max_index_size=8 * max(len(entries), 1))
        for entry in entries:
            index.append(entry.offset, entry.position)
        assert index.entries_list() == entries
        for relative in targets:
            target = base + relative
            assert index.lookup(target) == oracle_offset_lookup(base, entries, target)
            start = index.lookup(target)
            size = relative % 7_000
            assert index.fetch_upper_bound_offset(start, size) == oracle_upper_bound(
                entries, start.position + size
            )

        # Through the file: close trims, reopen reads the same entries.
        index.close()
        assert path.stat().st_size == 8 * len(entries)
        index = OffsetIndex(path, base, max_index_size=8 * 64)
        index.sanity_check()
        assert index.entries_list() == entries

        cut = base + truncate_at
        index.truncate_to(cut)
        kept = [entry for entry in entries if entry.offset < cut]
        assert index.entries_list() == kept
        assert index.last_offset == (kept[-1].offset if kept else base)
        for relative in targets:
            target = base + relative
            assert index.lookup(target) == oracle_offset_lookup(base, kept, target)
        index.close()


@SETTINGS
@given(
    data=time_appends(),
    targets=st.lists(st.integers(min_value=-5, max_value=300), min_size=1, max_size=20),
    truncate_at=st.integers(min_value=-5, max_value=250),
)
def test_time_index_matches_linear_scan(
    data: tuple[int, list[TimestampOffset]], targets: list[int], truncate_at: int
) -> None:
    base, appends = data
    expected = expected_time_entries(appends)
    first_timestamp = appends[0].timestamp if appends else 0
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "0.timeindex"
        index = TimeIndex(path, base, max_index_size=12 * (len(appends) + 2))
        for append in appends:
            index.maybe_append(append.timestamp, append.offset)
        assert index.entries_list() == expected
        assert index.last_entry == (expected[-1] if expected else TimestampOffset(-1, base))
        for relative in targets:
            target = first_timestamp + relative
            assert index.lookup(target) == oracle_time_lookup(base, expected, target)

        index.close()
        index = TimeIndex(path, base, max_index_size=12 * 64)
        index.sanity_check()
        assert index.entries_list() == expected

        cut = base + truncate_at
        index.truncate_to(cut)
        kept = [entry for entry in expected if entry.offset < cut]
        assert index.entries_list() == kept
        for relative in targets:
            target = first_timestamp + relative
            assert index.lookup(target) == oracle_time_lookup(base, kept, target)
        index.close()
