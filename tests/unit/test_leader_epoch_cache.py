"""LeaderEpochFileCache and its checkpoint, after Kafka's LeaderEpochFileCacheTest."""

from __future__ import annotations

import itertools
import threading
from pathlib import Path

import pytest

from storage_core.common import TopicPartition
from storage_core.errors import CorruptCheckpointError
from storage_core.log.leader_epoch_cache import (
    LEADER_EPOCH_CHECKPOINT_FILENAME,
    UNDEFINED_EPOCH,
    UNDEFINED_EPOCH_OFFSET,
    EpochEntry,
    LeaderEpochCheckpointFile,
    LeaderEpochFileCache,
)

TP = TopicPartition("topic", 0)
UNDEFINED = (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)


def make_cache(tmp_path: Path) -> LeaderEpochFileCache:
    return LeaderEpochFileCache(
        TP, LeaderEpochCheckpointFile(tmp_path / LEADER_EPOCH_CHECKPOINT_FILENAME)
    )


def entries(*pairs: tuple[int, int]) -> list[EpochEntry]:
    return [EpochEntry(epoch, start) for epoch, start in pairs]


@pytest.fixture
def cache(tmp_path: Path) -> LeaderEpochFileCache:
    return make_cache(tmp_path)


def test_checkpoint_exact_text(cache: LeaderEpochFileCache, tmp_path: Path) -> None:
    cache.assign(0, 0)
    cache.assign(2, 120)
    path = tmp_path / LEADER_EPOCH_CHECKPOINT_FILENAME
    assert path.read_bytes() == b"0\n2\n0 0\n2 120\n"
    assert LeaderEpochCheckpointFile(path).read() == entries((0, 0), (2, 120))
    assert sorted(p.name for p in tmp_path.iterdir()) == [LEADER_EPOCH_CHECKPOINT_FILENAME]


def test_epochs_persist_between_instances(cache: LeaderEpochFileCache, tmp_path: Path) -> None:
    cache.assign(2, 6)
    cache.assign(3, 8)
    assert make_cache(tmp_path).epoch_entries() == entries((2, 6), (3, 8))


def test_empty_cache(cache: LeaderEpochFileCache) -> None:
    assert cache.epoch_entries() == []
    assert cache.latest_entry() is None
    assert cache.latest_epoch is None
    assert cache.earliest_entry() is None
    assert cache.epoch_for_offset(0) is None
    assert cache.end_offset_for(0, 0) == UNDEFINED
    assert cache.end_offset_for(UNDEFINED_EPOCH, 0) == UNDEFINED


def test_same_epoch_later_offset_does_not_overwrite(cache: LeaderEpochFileCache) -> None:
    cache.assign(2, 6)
    cache.assign(2, 7)
    cache.assign(2, 6)
    assert cache.epoch_entries() == entries((2, 6))


def test_same_epoch_earlier_offset_truncates(cache: LeaderEpochFileCache) -> None:
    for epoch, start in [(5, 11), (6, 12), (7, 13)]:
        cache.assign(epoch, start)
    cache.assign(7, 12)
    assert cache.epoch_entries() == entries((5, 11), (7, 12))


def test_start_offsets_are_kept_monotonic(cache: LeaderEpochFileCache) -> None:
    cache.assign(2, 6)
    cache.assign(3, 5)  # a new epoch starting earlier replaces the conflicting one
    assert cache.epoch_entries() == entries((3, 5))
    cache.assign(4, 5)
    assert cache.epoch_entries() == entries((4, 5))


def test_lower_epoch_replaces_everything_at_or_above_it(cache: LeaderEpochFileCache) -> None:
    for epoch, start in [(1, 0), (3, 10), (5, 20)]:
        cache.assign(epoch, start)
    cache.assign(2, 30)
    assert cache.epoch_entries() == entries((1, 0), (2, 30))


def test_invalid_entries_are_refused(cache: LeaderEpochFileCache) -> None:
    with pytest.raises(ValueError, match="invalid partition leader epoch"):
        cache.assign(-1, 0)
    with pytest.raises(ValueError, match="topic-0"):
        cache.assign(0, -5)
    assert cache.epoch_entries() == []


def test_end_offset_for(cache: LeaderEpochFileCache) -> None:
    for epoch, start in [(0, 10), (2, 13), (4, 17)]:
        cache.assign(epoch, start)
    assert cache.end_offset_for(UNDEFINED_EPOCH, 100) == UNDEFINED
    assert cache.end_offset_for(4, 100) == (4, 100)  # latest epoch: the log end offset
    assert cache.end_offset_for(0, 100) == (0, 13)
    assert cache.end_offset_for(1, 100) == (0, 13)  # unknown epoch: the one below it
    assert cache.end_offset_for(2, 100) == (2, 17)
    assert cache.end_offset_for(3, 100) == (2, 17)
    assert cache.end_offset_for(5, 100) == UNDEFINED


def test_end_offset_for_epoch_below_the_first(cache: LeaderEpochFileCache) -> None:
    for epoch, start in [(5, 11), (6, 12), (7, 13)]:
        cache.assign(epoch, start)
    assert cache.end_offset_for(4, 0) == (4, 11)


def test_epoch_for_offset_and_neighbours(cache: LeaderEpochFileCache) -> None:
    for epoch, start in [(1, 5), (3, 10), (4, 15), (6, 20)]:
        cache.assign(epoch, start)
    assert cache.epoch_for_offset(4) is None
    assert cache.epoch_for_offset(5) == 1
    assert cache.epoch_for_offset(14) == 3
    assert cache.epoch_for_offset(15) == 4
    assert cache.epoch_for_offset(10**12) == 6
    assert cache.previous_epoch(4) == 3
    assert cache.previous_epoch(5) == 4
    assert cache.previous_epoch(1) is None
    assert cache.next_epoch(4) == 6
    assert cache.next_epoch(6) is None
    assert cache.epoch_entry(3) == EpochEntry(3, 10)
    assert cache.epoch_entry(2) is None
    assert cache.earliest_entry() == EpochEntry(1, 5)
    assert cache.latest_entry() == EpochEntry(6, 20)
    assert cache.latest_epoch == 6


def test_truncate_from_end(cache: LeaderEpochFileCache, tmp_path: Path) -> None:
    for epoch, start in [(2, 6), (3, 8), (4, 11)]:
        cache.assign(epoch, start)
    cache.truncate_from_end(UNDEFINED_EPOCH_OFFSET)
    cache.truncate_from_end(12)
    assert cache.epoch_entries() == entries((2, 6), (3, 8), (4, 11))
    cache.truncate_from_end(9)
    assert cache.epoch_entries() == entries((2, 6), (3, 8))
    cache.truncate_from_end(8)
    assert cache.epoch_entries() == entries((2, 6))
    assert make_cache(tmp_path).epoch_entries() == entries((2, 6))
    cache.truncate_from_end(0)
    assert cache.epoch_entries() == []


@pytest.mark.parametrize(
    ("start_offset", "expected"),
    [
        (5, [(2, 6), (3, 8), (4, 11)]),
        (6, [(2, 6), (3, 8), (4, 11)]),
        (7, [(2, 7), (3, 8), (4, 11)]),
        (8, [(3, 8), (4, 11)]),
        (9, [(3, 9), (4, 11)]),
        (11, [(4, 11)]),
        (12, [(4, 12)]),
    ],
)
def test_truncate_from_start(
    tmp_path: Path, start_offset: int, expected: list[tuple[int, int]]
) -> None:
    cache = make_cache(tmp_path)
    for epoch, start in [(2, 6), (3, 8), (4, 11)]:
        cache.assign(epoch, start)
    cache.truncate_from_start(start_offset)
    assert cache.epoch_entries() == entries(*expected)
    assert make_cache(tmp_path).epoch_entries() == entries(*expected)


def test_truncate_from_start_at_the_first_epoch_start_leaves_the_checkpoint_unwritten(
    cache: LeaderEpochFileCache, tmp_path: Path
) -> None:
    """Every log loaded at startup truncates its epochs from its log start offset; where that
    changes nothing the checkpoint is not rewritten (an fsync per partition at startup)."""
    cache.assign(2, 6)
    cache.assign(3, 8)
    path = tmp_path / LEADER_EPOCH_CHECKPOINT_FILENAME
    written = path.stat()
    for start_offset in (0, 5, 6):
        cache.truncate_from_start(start_offset)
    assert path.stat().st_ino == written.st_ino  # a rewrite renames a new file in place
    assert cache.epoch_entries() == entries((2, 6), (3, 8))
    cache.truncate_from_start(7)
    assert path.stat().st_ino != written.st_ino
    assert make_cache(tmp_path).epoch_entries() == entries((2, 7), (3, 8))


def test_a_loaded_epoch_at_the_log_end_costs_no_write_when_its_leader_assigns_it_again(
    cache: LeaderEpochFileCache, tmp_path: Path
) -> None:
    """A restarted leader: the loader drops the epoch that starts at the log end (it has no
    data yet) without rewriting the file, and the leader assigning the same epoch again
    leaves the file as it was; a new epoch is written before ``assign`` returns."""
    cache.assign(0, 0)
    cache.assign(1, 5)
    path = tmp_path / LEADER_EPOCH_CHECKPOINT_FILENAME
    written = path.stat().st_ino
    loaded = make_cache(tmp_path)
    loaded.truncate_from_end(5, flush=False)
    assert loaded.epoch_entries() == entries((0, 0))
    assert path.stat().st_ino == written
    loaded.assign(1, 5)
    assert path.stat().st_ino == written
    loaded.assign(2, 9)
    assert make_cache(tmp_path).epoch_entries() == entries((0, 0), (1, 5), (2, 9))


def test_clear_and_flush(cache: LeaderEpochFileCache, tmp_path: Path) -> None:
    cache.assign(1, 0)
    cache.clear_and_flush()
    assert cache.epoch_entries() == []
    assert (tmp_path / LEADER_EPOCH_CHECKPOINT_FILENAME).read_text() == "0\n0\n"


def test_snapshot_up_to_and_write_to(cache: LeaderEpochFileCache, tmp_path: Path) -> None:
    for epoch, start in [(0, 0), (1, 50), (3, 90)]:
        cache.assign(epoch, start)
    assert cache.snapshot_up_to(50) == entries((0, 0))
    assert cache.snapshot_up_to(51) == entries((0, 0), (1, 50))
    assert cache.snapshot_up_to(0) == []
    copy_path = tmp_path / "copy" / LEADER_EPOCH_CHECKPOINT_FILENAME
    copy_path.parent.mkdir()
    copy = cache.write_to(copy_path)
    assert copy.epoch_entries() == cache.epoch_entries()
    assert LeaderEpochCheckpointFile(copy_path).read() == cache.epoch_entries()
    copy.assign(4, 100)
    assert cache.latest_epoch == 3  # the copy is independent


def test_loading_a_non_monotonic_checkpoint_applies_assign_rules(tmp_path: Path) -> None:
    path = tmp_path / LEADER_EPOCH_CHECKPOINT_FILENAME
    path.write_text("0\n3\n1 10\n2 5\n3 20\n")
    assert make_cache(tmp_path).epoch_entries() == entries((2, 5), (3, 20))


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("1\n0\n", "version 1"),
        ("0\n2\n0 0\n", "Expected 2 entries"),
        ("0\n1\n0\n", "line 3"),
        ("0\n1\n-1 0\n", "line 3"),
        ("0\n1\n0 -4\n", "line 3"),
        ("0\n1\nzero 0\n", "line 3"),
        ("0\n1\n2147483648 0\n", "line 3"),
    ],
)
def test_corrupt_epoch_checkpoint(tmp_path: Path, content: str, expected: str) -> None:
    path = tmp_path / LEADER_EPOCH_CHECKPOINT_FILENAME
    path.write_text(content)
    with pytest.raises(CorruptCheckpointError, match=expected) as excinfo:
        make_cache(tmp_path)
    assert str(path) in str(excinfo.value)


def test_concurrent_assign_and_reads_keep_the_invariant(cache: LeaderEpochFileCache) -> None:
    errors: list[BaseException] = []

    def writer(first_epoch: int) -> None:
        try:
            for k in range(50):
                cache.assign(first_epoch + 2 * k, 10 * (first_epoch + 2 * k))
                cache.epoch_for_offset(k)
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    got = cache.epoch_entries()
    for before, after in itertools.pairwise(got):
        assert before.epoch < after.epoch
        assert before.start_offset < after.start_offset
