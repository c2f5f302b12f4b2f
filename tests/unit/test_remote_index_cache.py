"""RemoteIndexCache: downloads once, LRU by bytes, eviction under readers, removal, restart,
corrupt downloads, and many threads at once."""

from __future__ import annotations

import io
import threading
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from storage_core.errors import CorruptIndexError
from storage_core.tiered.metadata.metadata import RemoteLogSegmentMetadata
from storage_core.tiered.remote_index_cache import (
    DIR_NAME,
    RemoteIndexCache,
    entry_file_stem,
)
from storage_core.tiered.remote_storage_manager import (
    IndexType,
    LogSegmentData,
    RemoteLogSegmentMetadataLike,
    RemoteSegmentRef,
    RemoteStorageError,
    RemoteStream,
)
from tests.unit.tiered_fixtures import TieredLog, build_tiered_log


class CountingRsm:
    """Delegates to the real store and counts ``fetch_index`` calls per segment."""

    def __init__(self, tiered: TieredLog) -> None:
        self.inner = tiered.rsm
        self.fetches: Counter[object] = Counter()
        self.lock = threading.Lock()
        self.corrupt_offset_index = False

    def fetch_index(
        self, metadata: RemoteLogSegmentMetadataLike, index_type: IndexType
    ) -> RemoteStream:
        with self.lock:
            self.fetches[RemoteSegmentRef.of(metadata).segment_id, index_type] += 1
        if index_type is IndexType.OFFSET and self.corrupt_offset_index:
            return io.BytesIO(b"\x00" * 13)  # not a whole number of 8-byte entries
        return self.inner.fetch_index(metadata, index_type)

    def copy_log_segment_data(
        self, metadata: RemoteLogSegmentMetadataLike, data: LogSegmentData
    ) -> bytes | None:
        return self.inner.copy_log_segment_data(metadata, data)

    def fetch_log_segment(
        self, metadata: RemoteLogSegmentMetadataLike, start: int, end: int | None = None
    ) -> RemoteStream:
        return self.inner.fetch_log_segment(metadata, start, end)

    def delete_log_segment_data(self, metadata: RemoteLogSegmentMetadataLike) -> None:
        self.inner.delete_log_segment_data(metadata)

    def close(self) -> None:
        pass


@pytest.fixture
def tiered(tmp_path: Path) -> Iterator[TieredLog]:
    t = build_tiered_log(tmp_path)
    yield t
    t.log.close()


def entry_bytes(tiered: TieredLog, metadata: RemoteLogSegmentMetadata, tmp_path: Path) -> int:
    probe = RemoteIndexCache(tiered.rsm, tmp_path / "probe", max_size_bytes=1 << 30)
    with probe.acquire(metadata) as entry:
        size = entry.size_bytes
    probe.close()
    return size


def cached_stems(log_dir: Path) -> set[str]:
    return {p.name.split(".")[0] for p in (log_dir / DIR_NAME).iterdir()}


def stem(metadata: RemoteLogSegmentMetadata) -> str:
    return entry_file_stem(metadata.start_offset, metadata.remote_log_segment_id.id)


def test_lookups_match_the_local_indexes_and_download_once(
    tiered: TieredLog, tmp_path: Path
) -> None:
    rsm = CountingRsm(tiered)
    cache = RemoteIndexCache(rsm, tmp_path / "logs", max_size_bytes=1 << 20)
    try:
        local = {s.base_offset: s for s in tiered.log.segments}
        for metadata in tiered.copied:
            segment = local[metadata.start_offset]
            for offset in range(metadata.start_offset, metadata.end_offset + 1):
                assert (
                    cache.lookup_offset(metadata, offset)
                    == segment.offset_index.lookup(offset).position
                )
        assert set(rsm.fetches.values()) == {1}
        stats = cache.stats()
        assert stats.misses == len(tiered.copied)
        assert stats.entries == len(tiered.copied)
        assert cached_stems(tmp_path / "logs") == {stem(m) for m in tiered.copied}
    finally:
        cache.close()


def test_lru_by_bytes_evicts_the_least_recently_used(tiered: TieredLog, tmp_path: Path) -> None:
    a, b, c = tiered.copied[:3]
    sizes = [entry_bytes(tiered, m, tmp_path) for m in (a, b, c)]
    assert all(size > 0 for size in sizes)
    limit = sizes[0] + sizes[1] + sizes[2] - 1  # room for two of the three, not all
    log_dir = tmp_path / "logs"
    cache = RemoteIndexCache(tiered.rsm, log_dir, max_size_bytes=limit)
    try:
        cache.lookup_offset(a, a.start_offset)
        cache.lookup_offset(b, b.start_offset)
        cache.lookup_offset(a, a.start_offset)  # a is now the most recently used
        cache.lookup_offset(c, c.start_offset)  # evicts b
        assert a.remote_log_segment_id.id in cache
        assert b.remote_log_segment_id.id not in cache
        assert c.remote_log_segment_id.id in cache
        assert cache.stats().size_bytes <= limit
        assert cached_stems(log_dir) == {stem(a), stem(c)}  # b's files are gone
    finally:
        cache.close()


def test_an_entry_in_use_survives_eviction_until_released(
    tiered: TieredLog, tmp_path: Path
) -> None:
    a, b = tiered.copied[:2]
    cache = RemoteIndexCache(tiered.rsm, tmp_path / "logs", max_size_bytes=1)
    try:
        with cache.acquire(a) as held:
            cache.lookup_offset(b, b.start_offset)  # evicts a while it is held
            assert a.remote_log_segment_id.id not in cache
            assert held.lookup_offset(a.start_offset + 3) >= 0  # still mapped and readable
            assert held.offset_index.path.exists()
        assert not held.offset_index.path.exists()  # the last reader deleted the files
    finally:
        cache.close()


def test_remove_drops_a_deleted_segment(tiered: TieredLog, tmp_path: Path) -> None:
    a = tiered.copied[0]
    cache = RemoteIndexCache(tiered.rsm, tmp_path / "logs", max_size_bytes=1 << 20)
    try:
        cache.lookup_offset(a, a.start_offset)
        cache.remove(a.remote_log_segment_id.id)
        cache.remove(a.remote_log_segment_id.id)  # idempotent
        assert cache.stats().entries == 0
        assert cached_stems(tmp_path / "logs") == set()
    finally:
        cache.close()


def test_entries_survive_a_restart_and_leftovers_are_cleaned(
    tiered: TieredLog, tmp_path: Path
) -> None:
    log_dir = tmp_path / "logs"
    rsm = CountingRsm(tiered)
    cache = RemoteIndexCache(rsm, log_dir, max_size_bytes=1 << 20)
    a = tiered.copied[0]
    expected = cache.lookup_offset(a, a.start_offset + 9)
    cache.close()
    (log_dir / DIR_NAME / "00000000000000000005_junk.index.tmp").write_bytes(b"x")
    (log_dir / DIR_NAME / (stem(tiered.copied[1]) + ".index")).write_bytes(b"")  # no txnindex
    reopened = RemoteIndexCache(rsm, log_dir, max_size_bytes=1 << 20)
    try:
        assert reopened.lookup_offset(a, a.start_offset + 9) == expected
        assert rsm.fetches[a.remote_log_segment_id.id, IndexType.OFFSET] == 1
        assert cached_stems(log_dir) == {stem(a)}
    finally:
        reopened.close()


def test_a_corrupt_download_is_rejected_and_retried(tiered: TieredLog, tmp_path: Path) -> None:
    rsm = CountingRsm(tiered)
    rsm.corrupt_offset_index = True
    cache = RemoteIndexCache(rsm, tmp_path / "logs", max_size_bytes=1 << 20)
    a = tiered.copied[0]
    try:
        with pytest.raises(CorruptIndexError):
            cache.lookup_offset(a, a.start_offset)
        assert cached_stems(tmp_path / "logs") == set()
        rsm.corrupt_offset_index = False
        assert cache.lookup_offset(a, a.start_offset) == 0
    finally:
        cache.close()


def test_many_threads_share_downloads_and_stay_within_the_limit(
    tiered: TieredLog, tmp_path: Path
) -> None:
    rsm = CountingRsm(tiered)
    one = entry_bytes(tiered, tiered.copied[0], tmp_path)
    limit = one * 2  # far fewer bytes than the segments being read
    cache = RemoteIndexCache(rsm, tmp_path / "logs", max_size_bytes=limit)
    local = {s.base_offset: s for s in tiered.log.segments}

    def work(i: int) -> None:
        metadata = tiered.copied[i % len(tiered.copied)]
        offset = metadata.start_offset + i % (metadata.end_offset - metadata.start_offset + 1)
        expected = local[metadata.start_offset].offset_index.lookup(offset).position
        assert cache.lookup_offset(metadata, offset) == expected

    try:
        with ThreadPoolExecutor(max_workers=8) as pool:
            for future in [pool.submit(work, i) for i in range(400)]:
                future.result(timeout=30)
        assert cache.stats().size_bytes <= max(limit, one * 2)
        assert cache.stats().hits + cache.stats().misses == 400
    finally:
        cache.close()


def local_timestamp_position(
    tiered: TieredLog, metadata: RemoteLogSegmentMetadata, timestamp: int, starting: int
) -> int:
    segment = {s.base_offset: s for s in tiered.log.segments}[metadata.start_offset]
    found = segment.time_index.lookup(timestamp)
    return segment.offset_index.lookup(max(found.offset, starting)).position


def test_the_time_index_is_fetched_when_a_timestamp_lookup_first_needs_it(
    tiered: TieredLog, tmp_path: Path
) -> None:
    """A read at an offset fetches no time index; the first timestamp lookup fetches it
    once, answers as the local indexes do, counts it in the cache size, and a restart keeps
    entries with and without one."""
    log_dir = tmp_path / "logs"
    rsm = CountingRsm(tiered)
    a, b = tiered.copied[:2]
    cache = RemoteIndexCache(rsm, log_dir, max_size_bytes=1 << 20)
    cache.lookup_offset(a, a.start_offset + 3)
    cache.lookup_offset(b, b.start_offset + 3)
    a_id, b_id = a.remote_log_segment_id.id, b.remote_log_segment_id.id
    assert rsm.fetches[a_id, IndexType.TIMESTAMP] == 0
    assert not list((log_dir / DIR_NAME).glob("*.timeindex"))
    before = cache.stats().size_bytes

    timestamps = [a.max_timestamp_ms - 20, a.max_timestamp_ms, 0]
    for timestamp in timestamps:
        assert cache.lookup_timestamp(a, timestamp, a.start_offset) == local_timestamp_position(
            tiered, a, timestamp, a.start_offset
        )
    assert rsm.fetches[a_id, IndexType.TIMESTAMP] == 1
    assert [p.name for p in (log_dir / DIR_NAME).glob("*.timeindex")] == [stem(a) + ".timeindex"]
    assert cache.stats().size_bytes > before
    cache.close()

    reopened = RemoteIndexCache(rsm, log_dir, max_size_bytes=1 << 20)
    try:
        assert reopened.stats().entries == 2
        assert reopened.lookup_timestamp(a, a.max_timestamp_ms, 0) == local_timestamp_position(
            tiered, a, a.max_timestamp_ms, 0
        )
        assert reopened.lookup_timestamp(b, b.max_timestamp_ms, 0) == local_timestamp_position(
            tiered, b, b.max_timestamp_ms, 0
        )
        assert rsm.fetches[a_id, IndexType.TIMESTAMP] == 1  # kept across the restart
        assert rsm.fetches[b_id, IndexType.TIMESTAMP] == 1
        assert rsm.fetches[a_id, IndexType.OFFSET] == rsm.fetches[b_id, IndexType.OFFSET] == 1
    finally:
        reopened.close()


def test_a_time_index_fetched_for_an_evicted_entry_goes_with_it(
    tiered: TieredLog, tmp_path: Path
) -> None:
    """An entry evicted while a reader holds it still answers timestamp lookups; the time
    index fetched for it is deleted with its other files when the reader lets go, and never
    takes the name of a newer entry of the same segment."""
    a, b = tiered.copied[:2]
    log_dir = tmp_path / "logs"
    cache = RemoteIndexCache(tiered.rsm, log_dir, max_size_bytes=1)
    try:
        with cache.acquire(a) as held:
            cache.lookup_offset(b, b.start_offset)  # evicts a while it is held
            cache.lookup_offset(a, a.start_offset)  # a newer entry of a, then evicted by b
            assert cache.lookup_timestamp(a, a.max_timestamp_ms, 0) == local_timestamp_position(
                tiered, a, a.max_timestamp_ms, 0
            )  # the newer entry's own time index
            cache._fetch_time_index(a, held)
            assert held.time_index is not None
            assert held.time_index.path.name.endswith(".deleted")
            assert held.lookup_timestamp(a.max_timestamp_ms, 0) == local_timestamp_position(
                tiered, a, a.max_timestamp_ms, 0
            )
        assert not held.time_index.path.exists()
        assert not list((log_dir / DIR_NAME).glob("*.deleted"))
        assert not list((log_dir / DIR_NAME).glob("*.tmp"))
    finally:
        cache.close()


def test_a_time_index_fetched_after_the_cache_closed_is_dropped(
    tiered: TieredLog, tmp_path: Path
) -> None:
    """A timestamp lookup that outlives the broker's shutdown fails as every lookup then
    does, and leaves no file behind."""
    a = tiered.copied[0]
    log_dir = tmp_path / "logs"
    cache = RemoteIndexCache(tiered.rsm, log_dir, max_size_bytes=1 << 20)
    with cache.acquire(a) as held:
        cache.close()
        with pytest.raises(RemoteStorageError, match="closed"):
            cache._fetch_time_index(a, held)
    assert held.time_index is None
    assert not list((log_dir / DIR_NAME).glob("*.timeindex*"))
