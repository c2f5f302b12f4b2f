"""A new partition's log costs one file until it takes records: its first segment's
``.index`` and ``.timeindex`` are created by its first append, reading the empty log creates
nothing, and a restart before any append finds nothing wrong with it."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from storage_core.common import TopicPartition, Uuid
from storage_core.log.log_config import LogConfig
from storage_core.log.log_manager import LogManager
from tests.conftest import make_batch

TP = TopicPartition("events", 0)


def start(directory: Path) -> LogManager:
    manager = LogManager([directory], LogConfig(index_interval_bytes=100))
    manager.startup(background_tasks=False)
    return manager


def index_files(partition_dir: Path) -> list[str]:
    return sorted(p.name for p in partition_dir.iterdir() if p.suffix in (".index", ".timeindex"))


def test_a_new_log_has_no_index_files_until_its_first_append(tmp_path: Path) -> None:
    manager = start(tmp_path)
    log = manager.get_or_create_log(TP, topic_id=Uuid.random())
    assert index_files(log.dir) == []
    assert (log.dir / "00000000000000000000.log").exists()

    # a follower's fetch of the empty log and a timestamp lookup read nothing and create nothing
    assert log.read(0, 1_000_000).size_in_bytes == 0
    assert log.offset_for_timestamp(0) is None
    assert index_files(log.dir) == []

    log.append_as_leader(make_batch(3, value_size=200), leader_epoch=0)
    assert index_files(log.dir) == [
        "00000000000000000000.index",
        "00000000000000000000.timeindex",
    ]
    for _ in range(3):  # past index.interval.bytes: entries are written
        log.append_as_leader(make_batch(3, value_size=200), leader_epoch=0)
    assert [b.base_offset for b in log.read_batches(9)] == [9]
    manager.shutdown()


def test_a_restart_before_the_first_append_finds_the_new_log_whole(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    manager = start(tmp_path)
    log_dir = manager.get_or_create_log(TP, topic_id=Uuid.random()).dir
    manager.shutdown()

    with caplog.at_level(logging.INFO, logger="storage_core.log"):
        manager = start(tmp_path)
    assert "rebuilding indexes" not in caplog.text
    log = manager.get_log(TP)
    assert log is not None and log.log_end_offset == 0
    assert index_files(log_dir) == []
    log.append_as_leader(make_batch(2), leader_epoch=0)
    assert log.log_end_offset == 2
    assert len(index_files(log_dir)) == 2
    manager.shutdown()

    manager = start(tmp_path)
    log = manager.get_log(TP)
    assert log is not None and log.log_end_offset == 2
    manager.shutdown()


def test_index_files_lost_from_a_segment_with_records_are_still_rebuilt(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    manager = start(tmp_path)
    log = manager.get_or_create_log(TP)
    for _ in range(4):
        log.append_as_leader(make_batch(3, value_size=200), leader_epoch=0)
    log_dir = log.dir
    manager.shutdown()
    for name in index_files(log_dir):
        (log_dir / name).unlink()

    with caplog.at_level(logging.INFO, logger="storage_core.log"):
        manager = start(tmp_path)
    assert "missing index file" in caplog.text
    log = manager.get_log(TP)
    assert log is not None and log.log_end_offset == 12
    assert [b.base_offset for b in log.read_batches(6)] == [6, 9]
    manager.shutdown()


def test_an_empty_new_log_rolls_and_truncates_like_any_other(tmp_path: Path) -> None:
    manager = start(tmp_path)
    log = manager.get_or_create_log(TP)
    log.truncate_fully_and_start_at(5)
    assert log.log_end_offset == 5
    log.append_as_leader(make_batch(2), leader_epoch=0)
    log.roll()
    assert len(index_files(log.dir)) == 4  # the rolled segment's and the new active one's
    log.append_as_leader(make_batch(1), leader_epoch=0)
    assert log.log_end_offset == 8
    manager.shutdown()


def test_a_new_logs_first_leader_epoch_is_written_to_its_checkpoint(tmp_path: Path) -> None:
    manager = start(tmp_path)
    log = manager.get_or_create_log(TP)
    assert not (log.dir / "leader-epoch-checkpoint").exists()
    log.leader_epoch_cache.assign(0, 0)
    assert (log.dir / "leader-epoch-checkpoint").read_text() == "0\n1\n0 0\n"
    log.append_as_leader(make_batch(1), leader_epoch=0)
    manager.shutdown()

    manager = start(tmp_path)
    log = manager.get_log(TP)
    assert log is not None and log.latest_epoch == 0
    manager.shutdown()
