"""The chunk cache (memory and disk) and the chunk fetcher's cache use and prefetch, over the
local-directory store with a real segment."""

from __future__ import annotations

import resource
import shutil
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from storage_core.tiered.chunked.chunk_cache import (
    ChunkCache,
    ChunkKey,
    DiskChunkCache,
    MemoryChunkCache,
)
from storage_core.tiered.chunked.chunked_storage_manager import ChunkedRemoteStorageManager
from storage_core.tiered.remote_storage_manager import RemoteSegmentRef
from storage_core.tiered.rsm_loader import load_remote_storage_manager
from tests.chunked_support import closed_segment, segment_ref


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(params=["memory", "disk"])
def cache_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def make_cache(kind: str, tmp_path: Path, *, max_bytes: int, clock: Clock) -> ChunkCache:
    if kind == "memory":
        return MemoryChunkCache(max_bytes=max_bytes, retention_ms=10_000, clock=clock)
    return DiskChunkCache(tmp_path, max_bytes=max_bytes, retention_ms=10_000, clock=clock)


def test_least_recently_used_chunks_go_first_and_the_bytes_stay_bounded(
    tmp_path: Path, cache_kind: str
) -> None:
    clock = Clock()
    cache = make_cache(cache_kind, tmp_path, max_bytes=300, clock=clock)
    for i in range(3):
        cache.put(ChunkKey("s", i), bytes([i]) * 100)
    assert cache.get(ChunkKey("s", 0)) == b"\x00" * 100  # 0 is now the most recent
    cache.put(ChunkKey("s", 3), b"\x03" * 100)
    assert cache.get(ChunkKey("s", 1)) is None  # the least recent went
    assert cache.get(ChunkKey("s", 0)) == b"\x00" * 100
    assert cache.get(ChunkKey("s", 3)) == b"\x03" * 100
    cache.put(ChunkKey("s", 9), b"x" * 301)  # larger than the whole cache: not kept
    stats = cache.stats()
    assert (stats.hits, stats.misses, stats.evictions) == (3, 1, 1)
    assert stats.size_bytes == 300 and stats.entries == 3
    if isinstance(cache, DiskChunkCache):
        assert sorted(p.name for p in cache.directory.iterdir()) == ["s-0", "s-2", "s-3"]


def test_an_entry_not_read_for_the_retention_goes(tmp_path: Path, cache_kind: str) -> None:
    clock = Clock()
    cache = make_cache(cache_kind, tmp_path, max_bytes=1000, clock=clock)
    cache.put(ChunkKey("s", 0), b"a")
    clock.now = 9.0
    assert cache.get(ChunkKey("s", 0)) == b"a"  # read: retention starts again
    clock.now = 18.0
    assert cache.get(ChunkKey("s", 0)) == b"a"
    clock.now = 28.5
    assert cache.get(ChunkKey("s", 0)) is None
    assert cache.stats().entries == 0


def test_the_disk_cache_starts_empty_and_survives_its_directory_being_deleted(
    tmp_path: Path,
) -> None:
    (tmp_path / "chunks").mkdir()
    (tmp_path / "chunks" / "old-0").write_bytes(b"left by a previous process")
    cache = DiskChunkCache(tmp_path, max_bytes=1000, retention_ms=10_000)
    assert list(cache.directory.iterdir()) == []
    cache.put(ChunkKey("s", 0), b"a")
    shutil.rmtree(cache.directory)
    assert cache.get(ChunkKey("s", 0)) is None  # a miss, not an error
    cache.put(ChunkKey("s", 1), b"b")  # the directory comes back
    assert cache.get(ChunkKey("s", 1)) == b"b"


def test_a_disk_cache_file_cut_short_or_altered_is_a_miss(tmp_path: Path) -> None:
    cache = DiskChunkCache(tmp_path, max_bytes=1000, retention_ms=10_000)
    cache.put(ChunkKey("s", 0), b"a" * 100)
    cache.put(ChunkKey("s", 1), b"b" * 100)
    (cache.directory / "s-0").write_bytes(b"a" * 99)
    (cache.directory / "s-1").write_bytes(b"c" * 100)
    assert cache.get(ChunkKey("s", 0)) is None
    assert cache.get(ChunkKey("s", 1)) is None
    cache.put(ChunkKey("s", 1), b"b" * 100)  # read again from the store and cached anew
    assert cache.get(ChunkKey("s", 1)) == b"b" * 100


def test_a_full_disk_cache_skips_writes_and_reads_still_work(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cache = DiskChunkCache(tmp_path, max_bytes=1 << 20, retention_ms=10_000)
    previous_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (1000, hard))  # writes past 1000 bytes fail
    try:
        cache.put(ChunkKey("s", 0), b"x" * 5000)
        cache.put(ChunkKey("s", 1), b"y" * 5000)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous_handler)
    assert cache.get(ChunkKey("s", 0)) is None
    assert list(cache.directory.iterdir()) == []  # no half-written chunk left behind
    warnings = [r for r in caplog.records if "chunk cache cannot write" in r.getMessage()]
    assert len(warnings) == 1  # once, not per chunk


# -- the fetcher: cache and prefetch over a real segment ---------------------------------------


@pytest.fixture
def copied(tmp_path: Path) -> Iterator[tuple[Path, list[RemoteSegmentRef], list[bytes]]]:
    """Three segments copied in 1000-byte chunks; their refs and original bytes."""
    writer = manager(tmp_path)
    refs, originals = [], []
    for i in range(3):
        data = closed_segment(tmp_path / f"log{i}", batches=4)
        segment = segment_ref(start_offset=40 * i)
        writer.copy_log_segment_data(segment, data)
        refs.append(segment)
        originals.append(data.log_segment.read_bytes())
    writer.close()
    yield tmp_path, refs, originals


def manager(tmp_path: Path, **settings: str) -> ChunkedRemoteStorageManager:
    rsm = load_remote_storage_manager(
        "LocalTieredStorage",
        {
            "rsm.config.local.storage.dir": str(tmp_path / "remote"),
            "rsm.config.chunk.size": "1000",
            **settings,
        },
    )
    assert isinstance(rsm, ChunkedRemoteStorageManager)
    return rsm


def read(rsm: ChunkedRemoteStorageManager, segment: RemoteSegmentRef, start: int) -> bytes:
    with rsm.fetch_log_segment(segment, start) as stream:
        return stream.read()


def test_a_second_read_is_served_from_the_cache(
    copied: tuple[Path, list[RemoteSegmentRef], list[bytes]],
) -> None:
    tmp_path, refs, originals = copied
    rsm = manager(tmp_path)
    assert read(rsm, refs[0], 0) == originals[0]
    first = rsm.fetcher.cache.stats()
    assert first.hits == 0 and first.misses == len(originals[0]) // 1000 + 1
    # The store's bytes go away: every chunk still reads, from the cache.
    shutil.rmtree(tmp_path / "remote" / next(iter(p.name for p in (tmp_path / "remote").iterdir())))
    assert read(rsm, refs[0], 1500) == originals[0][1500:]
    assert rsm.fetcher.cache.stats().hits == len(originals[0]) // 1000  # chunks 1..last


def test_without_prefetch_a_short_read_caches_its_chunk(tmp_path: Path) -> None:
    """The broker reads views of the bytes it needs (a first batch, a fetch smaller than a
    chunk). With prefetch off (the default) the read waits for the frames it needs alone and
    the chunk is then read whole in the background and cached: the next read of that chunk
    is a hit."""
    framed = {"rsm.config.chunk.frame.size": "250"}
    writer = manager(tmp_path, **framed)
    data = closed_segment(tmp_path / "framed", batches=4)
    segment = segment_ref(start_offset=200)
    writer.copy_log_segment_data(segment, data)
    original = data.log_segment.read_bytes()
    rsm = manager(tmp_path, **framed)
    with rsm.fetch_log_segment(segment, 10) as stream:
        assert bytes(stream.raw.read_view(100)) == original[10:110]  # one frame of four
    wait_for(lambda: rsm.fetcher.cache.stats().entries == 1)
    with rsm.fetch_log_segment(segment, 600) as stream:
        assert bytes(stream.raw.read_view(100)) == original[600:700]
    stats = rsm.fetcher.cache.stats()
    assert (stats.hits, stats.misses) == (1, 1)


def wait_for(condition: object, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_prefetch_reads_ahead_into_the_next_segment_of_the_lineage(
    copied: tuple[Path, list[RemoteSegmentRef], list[bytes]],
) -> None:
    tmp_path, refs, originals = copied
    rsm = manager(tmp_path, **{"rsm.config.fetch.chunk.cache.prefetch.max.size": "3000"})
    following = {str(refs[0].segment_id): refs[1], str(refs[1].segment_id): refs[2]}
    rsm.fetcher.next_segment = lambda metadata: following.get(
        str(RemoteSegmentRef.of(metadata).segment_id)
    )
    last_chunk = (len(originals[0]) - 1) // 1000
    with rsm.fetch_log_segment(refs[0], last_chunk * 1000) as stream:
        assert stream.read() == originals[0][last_chunk * 1000 :]
    # The window (3000 bytes) goes past the segment's end into the next one's first chunks.
    cache = rsm.fetcher.cache
    next_id = str(refs[1].segment_id)
    wait_for(lambda: all(cache.contains(ChunkKey(next_id, i)) for i in range(3)))
    assert not cache.contains(ChunkKey(next_id, 3))
    before = cache.stats()
    with rsm.fetch_log_segment(refs[1], 0, 2999) as stream:
        assert stream.read() == originals[1][:3000]
    after = cache.stats()
    assert (after.hits - before.hits, after.misses - before.misses) == (3, 0)


def test_a_store_hanging_mid_prefetch_does_not_hold_the_reader(
    copied: tuple[Path, list[RemoteSegmentRef], list[bytes]], monkeypatch: pytest.MonkeyPatch
) -> None:
    tmp_path, refs, originals = copied
    rsm = manager(tmp_path, **{"rsm.config.fetch.chunk.cache.prefetch.max.size": "2000"})
    release = threading.Event()
    store_fetch = rsm.store.fetch_log_segment
    calls = []

    def hanging_after_the_first(metadata: object, start: int, end: int | None = None) -> object:
        calls.append(threading.current_thread().name)
        if threading.current_thread().name.startswith("rsm-prefetch"):
            release.wait(30)  # the store hangs for prefetches
        return store_fetch(metadata, start, end)  # type: ignore[arg-type]

    monkeypatch.setattr(rsm.store, "fetch_log_segment", hanging_after_the_first)
    monkeypatch.setattr("storage_core.tiered.chunked.chunk_fetcher.IN_FLIGHT_WAIT_S", 0.2)
    with rsm.fetch_log_segment(refs[0], 0) as stream:
        assert stream.read(10) == originals[0][:10]  # asks for read-ahead
    deadline = time.monotonic() + 5
    while not any(name.startswith("rsm-prefetch") for name in calls):
        assert time.monotonic() < deadline, "no prefetch reached the store"
        time.sleep(0.01)
    started = time.monotonic()
    assert read(rsm, refs[0], 0) == originals[0]
    assert time.monotonic() - started < 5  # each chunk waited at most 0.2 s for the prefetch
    release.set()
    rsm.close()
