"""The broker-wide LRU of open segment files and the lazily mapped indexes.

Descriptors are counted in /proc/self/fd (what the kernel holds against RLIMIT_NOFILE), index
mappings in /proc/self/maps: both are what a user of the broker would see grow. A mapped index
holds a descriptor too (CPython's mmap keeps a duplicate of the file's), so the active segment
holds three: its ``.log`` and its two indexes.
"""

from __future__ import annotations

import os
import random
import resource
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from storage_core.common import TopicPartition
from storage_core.errors import TooManyOpenFilesError
from storage_core.log import log_file_utils as files
from storage_core.log.log import Log
from storage_core.log.log_config import LogConfig
from storage_core.log.log_manager import LogManager
from storage_core.records import FileRecords, iter_batches
from storage_core.records.file_region import FileRegion
from storage_core.records.open_file_cache import OpenFileCache
from tests.conftest import make_batch

ACTIVE_SEGMENT_DESCRIPTORS = 3


def descriptors_on(directory: Path) -> int:
    """Descriptors this process holds on files under ``directory``."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(str(directory)):
            count += 1
    return count


def mappings_of(directory: Path, suffix: str) -> int:
    text = Path("/proc/self/maps").read_text()
    return sum(1 for line in text.splitlines() if str(directory) in line and line.endswith(suffix))


def write_files(directory: Path, count: int, cache: OpenFileCache) -> list[FileRecords]:
    out = []
    for i in range(count):
        records = FileRecords.open(directory / f"{i:020d}.log", cache=cache)
        records.append(f"file {i}".encode())
        out.append(records)
    return out


@pytest.fixture
def cache() -> OpenFileCache:
    return OpenFileCache(max_idle_files=3)


def test_idle_files_beyond_the_limit_are_closed_least_recently_used_first(
    tmp_path: Path, cache: OpenFileCache
) -> None:
    records = write_files(tmp_path, 10, cache)
    assert descriptors_on(tmp_path) == 3
    assert [r.holds_descriptor for r in records] == [False] * 7 + [True] * 3
    assert records[0].read(0, 100) == b"file 0"  # opened again on demand
    assert records[0].holds_descriptor and not records[7].holds_descriptor
    assert descriptors_on(tmp_path) == 3
    for r in records:
        r.close()
    assert descriptors_on(tmp_path) == 0


def test_a_file_in_use_is_never_closed_under_its_reader(
    tmp_path: Path, cache: OpenFileCache
) -> None:
    records = write_files(tmp_path, 2, cache)
    big = FileRecords.open(tmp_path / "big.log", cache=cache)
    big.append(make_batch(3))
    big_scan = big.batches(0)
    assert next(big_scan)[1].last_offset == 2
    (tmp_path / "more").mkdir()
    others = write_files(tmp_path / "more", 8, cache)  # evicts every idle file
    assert big.holds_descriptor, "evicted while a scan was in progress"
    assert next(big_scan, None) is None  # the scan ends: unpinned, now idle
    for other in others:
        other.read(0, 1)
    assert not big.holds_descriptor
    assert records[1].read(0, 100) == b"file 1"
    big.close()


def test_the_active_segment_file_stays_open(tmp_path: Path, cache: OpenFileCache) -> None:
    active = FileRecords.open(tmp_path / "active.log", cache=cache)
    active.set_evictable(False)
    (tmp_path / "x").mkdir()
    (tmp_path / "y").mkdir()
    write_files(tmp_path / "x", 10, cache)
    assert active.holds_descriptor
    active.set_evictable(True)  # rolled: from now on an idle file like the others
    write_files(tmp_path / "y", 5, cache)
    assert not active.holds_descriptor


def test_a_region_being_sent_keeps_its_bytes_after_eviction(
    tmp_path: Path, cache: OpenFileCache
) -> None:
    records = write_files(tmp_path, 1, cache)[0]
    region = FileRegion.of(records, 0, 6)
    (tmp_path / "x").mkdir()
    write_files(tmp_path / "x", 6, cache)
    assert not records.holds_descriptor
    assert region.read() == b"file 0"
    region.close()


def test_out_of_descriptors_closes_idle_files_and_then_refuses_with_a_named_error(
    tmp_path: Path,
) -> None:
    cache = OpenFileCache(max_idle_files=1000)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    held: list[FileRecords] = []
    try:
        # a few spare for other threads of the test process (a worker runs other tests' leftovers)
        resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")) + 30, hard))
        # Far more files than descriptors: each open past the limit closes the idle ones.
        idle = write_files(tmp_path, 90, cache)
        assert [r.read(0, 100) for r in idle[:3]] == [b"file 0", b"file 1", b"file 2"]
        # Files that may not be closed (active segments) use up what is left.
        with pytest.raises(TooManyOpenFilesError) as refused:
            for i in range(100):
                active = FileRecords.open(tmp_path / f"active-{i}.log", cache=cache)
                active.set_evictable(False)
                held.append(active)
        assert refused.value.error_code == "request_timed_out"
        assert "log.segment.open.files.max" in str(refused.value)
        assert "ulimit -n" in str(refused.value)
        assert cache.exhaustions >= 1
    finally:
        for r in held:
            r.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_nonsense_limits_are_refused() -> None:
    with pytest.raises(ValueError, match=r"log\.segment\.open\.files\.max must be >= 1"):
        OpenFileCache(max_idle_files=0)


# ---------------------------------------------------------------------- a log's segments
@pytest.fixture
def loaded(tmp_path: Path) -> Iterator[tuple[Log, OpenFileCache]]:
    config = LogConfig(segment_bytes=1024, index_interval_bytes=100)
    directory = tmp_path / "topic-0"
    log = Log(directory, config)
    for _ in range(40):
        log.append_as_leader(make_batch(1, value_size=900), leader_epoch=0)
    log.close()
    cache = OpenFileCache(max_idle_files=4)
    reopened = Log(directory, config, file_cache=cache)
    yield reopened, cache
    reopened.close()


def test_a_loaded_log_maps_no_index_of_a_closed_segment_until_used(
    loaded: tuple[Log, OpenFileCache],
) -> None:
    log, _cache = loaded
    segments = log.segments
    assert len(segments) == 40
    assert [s.offset_index.is_loaded for s in segments[:-1]] == [False] * 39
    assert [s.time_index.is_loaded for s in segments[:-1]] == [False] * 39
    assert mappings_of(log.dir, ".index") == 1  # the active segment's
    assert mappings_of(log.dir, ".timeindex") == 1
    assert [b.base_offset for b in log.read_batches(5, max_offset=7)] == [5, 6]
    assert segments[5].offset_index.is_loaded


def test_descriptors_and_mappings_follow_the_files_in_use_not_the_segments(
    loaded: tuple[Log, OpenFileCache],
) -> None:
    log, cache = loaded
    assert descriptors_on(log.dir) <= ACTIVE_SEGMENT_DESCRIPTORS + cache.max_idle_files
    values = [batch.base_offset for batch in log.read_batches(0)]  # every segment, in turn
    assert values == list(range(40))
    for offset in range(40):
        assert log.read(offset, 2000).read_bytes()  # index lookups of every segment
    assert cache.evictions > 0
    assert descriptors_on(log.dir) <= ACTIVE_SEGMENT_DESCRIPTORS + cache.max_idle_files
    assert mappings_of(log.dir, "index") <= 2 + cache.max_idle_files
    log.append_as_leader(make_batch(1, value_size=900), leader_epoch=0)  # rolls
    assert log.log_end_offset == 41
    assert files.offset_index_file(log.dir, 39).stat().st_size == 0  # trimmed on roll
    assert descriptors_on(log.dir) <= ACTIVE_SEGMENT_DESCRIPTORS + cache.max_idle_files


def test_a_roll_at_the_descriptor_limit_is_refused_and_the_active_segment_stays(
    tmp_path: Path,
) -> None:
    config = LogConfig(segment_bytes=1024, index_interval_bytes=100)
    cache = OpenFileCache(max_idle_files=1000)
    log = Log(tmp_path / "topic-0", config, file_cache=cache)
    log.append_as_leader(make_batch(1, value_size=900), leader_epoch=0)
    active = log.active_segment
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    hogs: list[int] = []
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")) + 8, hard))
        with pytest.raises(OSError):  # another part of the broker holds every descriptor left
            while True:
                hogs.append(os.open(os.devnull, os.O_RDONLY))
        with pytest.raises(TooManyOpenFilesError) as refused:
            log.append_as_leader(make_batch(1, value_size=900), leader_epoch=0)  # must roll
        assert refused.value.error_code == "request_timed_out"
        assert "log.segment.open.files.max" in str(refused.value)
    finally:
        for fd in hogs:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert log.active_segment is active
    assert sorted(p.name for p in log.dir.glob("0*")) == [
        "00000000000000000000.index",
        "00000000000000000000.log",
        "00000000000000000000.timeindex",
    ]
    # Descriptors back: the same append rolls and lands at the next offset.
    assert log.append_as_leader(make_batch(1, value_size=900), leader_epoch=0).first_offset == 1
    assert [b.base_offset for b in log.read_batches(0)] == [0, 1]
    log.close()


def test_a_load_without_descriptors_refuses_the_start_instead_of_taking_partitions_offline(
    tmp_path: Path,
) -> None:
    manager = LogManager([tmp_path], LogConfig(), segment_open_files_max=4)
    manager.startup(background_tasks=False)
    for partition in range(3):
        log = manager.get_or_create_log(TopicPartition("orders", partition))
        log.append_as_leader(make_batch(2), leader_epoch=0)
    manager.shutdown()
    restarted = LogManager([tmp_path], LogConfig(), segment_open_files_max=4)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    hogs: list[int] = []
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")) + 8, hard))
        with pytest.raises(OSError):
            while True:
                hogs.append(os.open(os.devnull, os.O_RDONLY))
        for _ in range(2):  # room for the checkpoints, not for three partitions' files
            os.close(hogs.pop())
        with pytest.raises(TooManyOpenFilesError, match="raise ulimit -n"):
            restarted.startup(background_tasks=False)
        assert restarted.offline_logs() == {}
    finally:
        for fd in hogs:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        restarted.shutdown()
    # Nothing was marked or changed: with descriptors the next start loads every partition.
    again = LogManager([tmp_path], LogConfig(), segment_open_files_max=4)
    again.startup(background_tasks=False)
    try:
        assert sorted(tp.partition for tp in again.all_logs()) == [0, 1, 2]
        assert [log.log_end_offset for log in again.all_logs().values()] == [2, 2, 2]
        assert again.offline_logs() == {}
    finally:
        again.shutdown()


def test_reads_racing_with_eviction_always_get_their_bytes(
    loaded: tuple[Log, OpenFileCache],
) -> None:
    """Four threads read random old offsets (bytes, index lookups, regions to send) while each
    read evicts another's files: a pin keeps a descriptor open for exactly as long as it is
    used, so no read sees a closed or reused descriptor."""
    log, cache = loaded
    expected = {b.base_offset: next(b.records()).value for b in log.read_batches(0)}
    errors: list[BaseException] = []

    def reader(seed: int) -> None:
        rng = random.Random(seed)
        try:
            for _ in range(300):
                offset = rng.randrange(40)
                info = log.read(offset, 2000)
                assert info.records is not None
                region = FileRegion.of(
                    info.records.file_records, info.records.position, info.records.size
                )
                try:
                    data = region.read() if rng.random() < 0.5 else info.read_bytes()
                finally:
                    region.close()
                _position, batch = next(iter_batches(data))
                assert batch.base_offset == offset
                assert next(batch.records()).value == expected[offset]
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=reader, args=(seed,)) for seed in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert cache.evictions > 100
    assert descriptors_on(log.dir) <= ACTIVE_SEGMENT_DESCRIPTORS + cache.max_idle_files
