"""LogManager: log dirs, partition placement, checkpoints, clean and unclean restarts."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from storage_core.clock import ManualClock
from storage_core.common import TopicPartition, Uuid
from storage_core.errors import (
    InvalidTopicError,
    KafkaStorageError,
    LogDirNotFoundError,
    StorageError,
)
from storage_core.log import log_file_utils as files
from storage_core.log.checkpoints import OffsetCheckpointFile
from storage_core.log.log import Log
from storage_core.log.log_config import LogConfig
from storage_core.log.log_manager import LogManager
from tests.conftest import BASE_TIMESTAMP_MS, make_batch


def start(dirs: list[Path], config: LogConfig | None = None, **kw: int) -> LogManager:
    manager = LogManager(dirs, config or LogConfig(), **kw)
    manager.startup(background_tasks=bool(kw))
    return manager


def test_partitions_spread_over_log_dirs(tmp_path: Path) -> None:
    dirs = [tmp_path / "a", tmp_path / "b"]
    manager = start(dirs)
    for p in range(4):
        manager.get_or_create_log(TopicPartition("t", p))
    parents = sorted(log.dir.parent.name for log in manager.all_logs().values())
    assert parents == ["a", "a", "b", "b"]
    manager.shutdown()


def test_clean_restart_restores_offsets_from_checkpoints(tmp_path: Path) -> None:
    dirs = [tmp_path / "a"]
    topic_id = Uuid.random()
    manager = start(dirs)
    log = manager.get_or_create_log(TopicPartition("events", 0), topic_id=topic_id)
    for _ in range(5):
        log.append_as_leader(make_batch(2), leader_epoch=0)
    log.update_high_watermark(8)
    log.maybe_increment_log_start_offset(3, "test")
    manager.shutdown()

    text = (dirs[0] / "replication-offset-checkpoint").read_text()
    assert text == "0\n1\nevents 0 8\n"
    assert (dirs[0] / "log-start-offset-checkpoint").read_text() == "0\n1\nevents 0 3\n"
    assert (dirs[0] / "recovery-point-offset-checkpoint").read_text() == "0\n1\nevents 0 10\n"
    assert (dirs[0] / ".kafka_cleanshutdown").exists()
    assert (dirs[0] / "events-0" / "partition.metadata").read_text() == (
        f"version: 0\ntopic_id: {topic_id}"  # Kafka writes no final newline
    )

    manager = start(dirs)
    assert not (dirs[0] / ".kafka_cleanshutdown").exists()  # a crash from now on is unclean
    log2 = manager.get_log(TopicPartition("events", 0))
    assert log2 is not None
    assert (log2.log_start_offset, log2.high_watermark, log2.log_end_offset) == (3, 8, 10)
    assert log2.topic_id == topic_id
    manager.shutdown()


def test_unclean_restart_recovers_torn_write(tmp_path: Path) -> None:
    dirs = [tmp_path / "a"]
    manager = start(dirs)
    log = manager.get_or_create_log(TopicPartition("events", 0))
    log.append_as_leader(make_batch(3), leader_epoch=0)
    path = log.active_segment.path
    for opened in manager.all_logs().values():
        opened.close()  # the process dies: no checkpoints, no marker
    with open(path, "ab") as out:
        out.write(make_batch(2)[:30])
    manager = start(dirs)
    recovered = manager.get_log(TopicPartition("events", 0))
    assert recovered is not None
    assert recovered.log_end_offset == 3
    assert recovered.recovered_segments == 1
    manager.shutdown()


def test_corrupt_checkpoint_forces_recovery_and_loses_nothing(tmp_path: Path) -> None:
    dirs = [tmp_path / "a"]
    manager = start(dirs)
    log = manager.get_or_create_log(TopicPartition("events", 0))
    log.append_as_leader(make_batch(4), leader_epoch=0)
    manager.shutdown()
    (dirs[0] / "recovery-point-offset-checkpoint").write_text("garbage\n")
    manager = start(dirs)
    log2 = manager.get_log(TopicPartition("events", 0))
    assert log2 is not None and log2.log_end_offset == 4
    assert log2.recovered_segments == 1
    manager.shutdown()


def test_illegal_topic_is_refused_and_nothing_is_created(tmp_path: Path) -> None:
    dirs = [tmp_path / "a"]
    manager = start(dirs)
    for bad in ("../escape", "a/b", "..", ""):
        with pytest.raises(InvalidTopicError):
            manager.get_or_create_log(TopicPartition(bad, 0))
    assert sorted(p.name for p in dirs[0].iterdir()) == []
    assert not (tmp_path / "escape-0").exists()
    manager.shutdown()


def test_a_partition_dir_planted_as_a_symlink_is_refused(tmp_path: Path) -> None:
    """A symlink in the log dir named as a partition would put its log elsewhere."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    manager = start([tmp_path / "a"])
    (tmp_path / "a" / "events-0").symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(StorageError, match="escape"):
        manager.get_or_create_log(TopicPartition("events", 0))
    assert list(elsewhere.iterdir()) == []
    manager.shutdown()


def test_delete_log_and_leftover_delete_dirs(tmp_path: Path) -> None:
    dirs = [tmp_path / "a"]
    manager = start(dirs)
    manager.get_or_create_log(TopicPartition("gone", 0)).append_as_leader(
        make_batch(1), leader_epoch=0
    )
    manager.delete_log(TopicPartition("gone", 0))
    assert manager.get_log(TopicPartition("gone", 0)) is None
    assert list(dirs[0].glob("gone-0*")) == []
    manager.shutdown()
    (dirs[0] / "old-0.0123abcd-delete").mkdir()
    (dirs[0] / "not a partition").mkdir()
    manager = start(dirs)
    assert not (dirs[0] / "old-0.0123abcd-delete").exists()
    assert (dirs[0] / "not a partition").exists()
    assert manager.all_logs() == {}
    manager.shutdown()


def test_log_dir_that_is_a_file_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "file"
    bad.write_text("x")
    with pytest.raises(LogDirNotFoundError, match="not a directory"):
        start([bad])


def test_background_retention_runs_on_schedule(tmp_path: Path) -> None:
    batch = make_batch(1, value_size=100)
    config = LogConfig(segment_bytes=len(batch), retention_bytes=len(batch))
    manager = LogManager([tmp_path / "a"], config, retention_check_interval_ms=50)
    manager.startup()
    log = manager.get_or_create_log(TopicPartition("t", 0))
    for _ in range(5):
        log.append_as_leader(batch, leader_epoch=0)
    log.update_high_watermark(log.log_end_offset)
    deadline = time.monotonic() + 10
    while log.log_start_offset < 4 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert log.log_start_offset == 4
    manager.shutdown()


def test_idle_producers_expire_after_producer_id_expiration_ms(tmp_path: Path) -> None:
    clock = ManualClock(BASE_TIMESTAMP_MS)
    manager = LogManager([tmp_path], LogConfig(), clock=clock, producer_id_expiration_ms=60_000)
    manager.startup(background_tasks=False)
    log = manager.get_or_create_log(TopicPartition("t", 0))
    log.append_as_leader(
        make_batch(2, producer_id=7, producer_epoch=0, base_sequence=0), leader_epoch=0
    )
    clock.sleep(59_000)
    assert manager.remove_expired_producers() == 0
    assert 7 in log.active_producers
    clock.sleep(2_000)
    assert manager.remove_expired_producers() == 1
    assert 7 not in log.active_producers
    manager.shutdown()


def test_delete_dir_name_fits_the_file_system_limit_for_the_longest_topic() -> None:
    topic = "t" * 249  # the longest legal topic name
    name = files.log_delete_dir_name(topic, 12345)
    assert len(name.encode()) == 255
    assert name.endswith("-delete")
    short_topic, rest = name.split("-12345.")
    assert topic.startswith(short_topic) and len(short_topic) == 255 - len("-12345.") - len(rest)
    assert len(rest) == 32 + len("-delete")  # a hex uuid and the suffix, as Kafka
    short = files.log_delete_dir_name("orders", 3)
    assert short.startswith("orders-3.") and short.endswith("-delete") and len(short) == 48


def test_longest_topic_name_can_be_deleted_and_created_again(tmp_path: Path) -> None:
    dirs = [tmp_path / "a"]
    manager = start(dirs)
    tp = TopicPartition("x" * 249, 0)
    manager.get_or_create_log(tp).append_as_leader(make_batch(2), leader_epoch=0)
    manager.delete_log(tp)  # before the fix: OSError [Errno 36] File name too long
    assert manager.get_log(tp) is None
    assert [p for p in dirs[0].iterdir() if p.is_dir()] == []
    again = manager.get_or_create_log(tp)
    assert again.log_end_offset == 0
    assert again.append_as_leader(make_batch(1), leader_epoch=0).first_offset == 0
    manager.shutdown()


def test_failed_rename_or_commit_leaves_every_log_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dirs = [tmp_path / "a"]
    manager = start(dirs)
    tps = [TopicPartition("whole", p) for p in range(3)]
    for tp in tps:
        manager.get_or_create_log(tp).append_as_leader(make_batch(2), leader_epoch=0)
    names_before = sorted(p.name for p in dirs[0].iterdir())

    def refuse() -> None:
        raise RuntimeError("metadata store unavailable")

    with pytest.raises(RuntimeError, match="metadata store unavailable"):
        manager.delete_logs(tps, refuse)
    assert sorted(p.name for p in dirs[0].iterdir()) == names_before

    real_rename = Path.rename

    def rename_fails_for_partition_2(self: Path, target: Path) -> Path:
        if self.name == "whole-2":
            raise OSError(36, "File name too long")
        return real_rename(self, target)

    monkeypatch.setattr(Path, "rename", rename_fails_for_partition_2)
    with pytest.raises(KafkaStorageError, match=r"whole-2.*nothing was deleted"):
        manager.delete_logs(tps)
    monkeypatch.undo()
    assert sorted(p.name for p in dirs[0].iterdir()) == names_before
    for tp in tps:  # still open, readable and writable
        log = manager.get_log(tp)
        assert log is not None
        assert len(list(log.read_batches(0))) == 1
        assert log.append_as_leader(make_batch(1), leader_epoch=0).first_offset == 2
    manager.delete_logs(tps)
    assert [p for p in dirs[0].iterdir() if p.is_dir()] == []
    manager.shutdown()


def test_a_manager_stopped_before_it_loaded_leaves_the_dirs_as_they_were(tmp_path: Path) -> None:
    # a crashed broker's dir: checkpoints and data, no clean-shutdown marker
    dirs = [tmp_path / "a"]
    manager = start(dirs)
    log = manager.get_or_create_log(TopicPartition("events", 0), topic_id=Uuid.random())
    log.append_as_leader(make_batch(5), leader_epoch=0)
    log.update_high_watermark(log.log_end_offset)
    manager.checkpoint_high_watermarks()
    manager.checkpoint_recovery_points()
    for open_log in manager.all_logs().values():
        open_log.close()
    before = {p: p.read_bytes() for p in dirs[0].rglob("*") if p.is_file()}
    assert not (dirs[0] / files.CLEAN_SHUTDOWN_FILE).exists()

    LogManager(dirs, LogConfig()).shutdown()  # a start refused before the logs loaded

    assert {p: p.read_bytes() for p in dirs[0].rglob("*") if p.is_file()} == before


def test_a_new_log_writes_its_partition_metadata_in_the_background(tmp_path: Path) -> None:
    """As Kafka schedules the write of partition.metadata instead of syncing it while it
    creates the log: it reaches the disk shortly after, with the topic id, and a log deleted
    before that leaves no partition dir behind and no error."""
    manager = LogManager([tmp_path / "a"], LogConfig())
    manager.startup(background_tasks=True)
    topic_id = Uuid.random()
    logs = [manager.get_or_create_log(TopicPartition("t", p), topic_id=topic_id) for p in range(20)]
    manager.delete_logs([TopicPartition("t", 19)])
    deadline = time.monotonic() + 20
    while not all((log.dir / "partition.metadata").exists() for log in logs[:19]):
        assert time.monotonic() < deadline, "partition.metadata never written"
        time.sleep(0.05)
    assert not (tmp_path / "a" / "t-19").exists()
    manager.shutdown()
    restarted = start([tmp_path / "a"])
    assert {log.topic_id for log in restarted.all_logs().values()} == {topic_id}
    assert len(restarted.all_logs()) == 19
    restarted.shutdown()


def test_partition_metadata_recorded_but_not_yet_written_is_written_on_close(
    tmp_path: Path,
) -> None:
    manager = start([tmp_path / "a"])  # no background tasks: nothing writes it meanwhile
    topic_id = Uuid.random()
    log = manager.get_or_create_log(TopicPartition("t", 0), topic_id=topic_id)
    assert (log.dir / "partition.metadata").exists()  # written at once without a scheduler
    manager.shutdown()

    deferred = Log(
        tmp_path / "b" / "u-0", LogConfig(), topic_id=topic_id, defer_metadata_flush=True
    )
    assert not (deferred.dir / "partition.metadata").exists()
    deferred.close()
    assert Log(tmp_path / "b" / "u-0", LogConfig()).topic_id == topic_id


def test_a_checkpoint_whose_offsets_did_not_change_is_not_written_again(tmp_path: Path) -> None:
    """An idle broker's high-watermark checkpoint, due every few seconds, costs no write."""
    manager = start([tmp_path / "a"])
    log = manager.get_or_create_log(TopicPartition("t", 0), topic_id=Uuid.random())
    path = tmp_path / "a" / "replication-offset-checkpoint"
    manager.checkpoint_high_watermarks()
    written = path.stat().st_ino
    manager.checkpoint_high_watermarks()
    assert path.stat().st_ino == written  # a write replaces the file with a new one

    log.append_as_leader(make_batch(3), leader_epoch=0)
    log.update_high_watermark(3)
    manager.checkpoint_high_watermarks()
    assert path.stat().st_ino != written
    assert "t 0 3" in path.read_text()
    manager.shutdown()


def test_the_high_watermark_checkpoint_follows_created_removed_and_moved_logs(
    tmp_path: Path,
) -> None:
    """The checkpoint skips its walk over the logs while no high watermark moved: a log
    created or removed since, or a high watermark moved by any log, is still written."""
    manager = start([tmp_path / "a"])
    path = tmp_path / "a" / "replication-offset-checkpoint"
    first = manager.get_or_create_log(TopicPartition("t", 0), topic_id=Uuid.random())
    manager.checkpoint_high_watermarks()
    assert OffsetCheckpointFile(path).read() == {TopicPartition("t", 0): 0}

    manager.get_or_create_log(TopicPartition("t", 1), topic_id=Uuid.random())
    manager.checkpoint_high_watermarks()
    assert set(OffsetCheckpointFile(path).read()) == {TopicPartition("t", p) for p in (0, 1)}

    first.append_as_leader(make_batch(4), leader_epoch=0)
    first.update_high_watermark(4)
    manager.checkpoint_high_watermarks()
    assert OffsetCheckpointFile(path).read()[TopicPartition("t", 0)] == 4

    manager.delete_log(TopicPartition("t", 1))
    manager.checkpoint_high_watermarks()
    assert OffsetCheckpointFile(path).read() == {TopicPartition("t", 0): 4}
    manager.shutdown()


def test_the_recovery_point_and_log_start_checkpoints_follow_moved_offsets(
    tmp_path: Path,
) -> None:
    """Like the high watermarks', these checkpoints skip their walk while nothing moved, and
    write a flushed log's recovery point and a moved log start offset."""
    manager = start([tmp_path / "a"])
    recovery = tmp_path / "a" / "recovery-point-offset-checkpoint"
    starts = tmp_path / "a" / "log-start-offset-checkpoint"
    log = manager.get_or_create_log(TopicPartition("t", 0), topic_id=Uuid.random())
    manager.checkpoint_recovery_points()
    manager.checkpoint_log_start_offsets()
    assert OffsetCheckpointFile(recovery).read() == {TopicPartition("t", 0): 0}
    assert OffsetCheckpointFile(starts).read() == {TopicPartition("t", 0): 0}

    log.append_as_leader(make_batch(5), leader_epoch=0)
    log.flush()
    log.update_high_watermark(5)
    manager.checkpoint_recovery_points()
    assert OffsetCheckpointFile(recovery).read() == {TopicPartition("t", 0): 5}

    assert log.maybe_increment_log_start_offset(2, "test")
    manager.checkpoint_log_start_offsets()
    assert OffsetCheckpointFile(starts).read() == {TopicPartition("t", 0): 2}
    manager.shutdown()


def test_logs_created_by_concurrent_threads_are_one_log_per_partition(tmp_path: Path) -> None:
    """A batch of new partitions is hosted by several threads: each partition gets one log,
    whichever threads ask for it, and the logs all load again after a restart."""
    manager = start([tmp_path / "a"])
    topic_id = Uuid.random()
    wanted = [TopicPartition("t", p % 40) for p in range(160)]  # every partition asked 4 times
    with ThreadPoolExecutor(8) as pool:
        logs = list(pool.map(lambda tp: manager.get_or_create_log(tp, topic_id=topic_id), wanted))
    by_partition: dict[TopicPartition, set[int]] = {}
    for tp, log in zip(wanted, logs, strict=True):
        by_partition.setdefault(tp, set()).add(id(log))
    assert len(by_partition) == 40
    assert all(len(ids) == 1 for ids in by_partition.values())
    assert manager.all_logs().keys() == by_partition.keys()
    manager.shutdown()
    restarted = start([tmp_path / "a"])
    assert len(restarted.all_logs()) == 40
    restarted.shutdown()
