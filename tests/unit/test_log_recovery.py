"""Loading and recovery of a partition directory after clean and unclean shutdowns."""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from storage_core.log import log_file_utils as files
from storage_core.log.log import Log
from storage_core.log.log_config import LogConfig
from storage_core.records import iter_batches
from tests.conftest import BASE_TIMESTAMP_MS, make_batch

OpenLog = Callable[..., Log]


def fill(log: Log, batches: int, *, epoch: int = 0, count: int = 3) -> list[bytes]:
    for i in range(batches):
        log.append_as_leader(
            make_batch(count, value_size=40, timestamp=BASE_TIMESTAMP_MS + i, tag=f"b{i}-"),
            leader_epoch=epoch,
        )
    log.flush()
    return [log.read(0, 1 << 30).read_bytes()]


def all_values(log: Log) -> list[bytes]:
    return [r.value or b"" for b in log.read_batches(log.log_start_offset) for r in b.records()]


def test_torn_tail_is_cut_without_quarantine(open_log: OpenLog) -> None:
    log = open_log()
    fill(log, 5)
    expected = all_values(log)
    path = log.active_segment.path
    valid_size = path.stat().st_size
    log.close()
    torn = make_batch(3, value_size=500)
    with open(path, "ab") as out:
        out.write(torn[: len(torn) // 2])

    recovered = open_log(had_clean_shutdown=False, recovery_point=0)
    assert recovered.log_end_offset == 15
    assert path.stat().st_size == valid_size
    assert all_values(recovered) == expected
    assert not list(recovered.dir.glob("*.quarantined"))
    assert recovered.append_as_leader(make_batch(1), leader_epoch=0).first_offset == 15


def test_corrupt_batch_cuts_the_log_and_keeps_the_cut_bytes(open_log: OpenLog) -> None:
    batch_size = len(make_batch(3, value_size=40))
    log = open_log(LogConfig(segment_bytes=batch_size * 4))
    fill(log, 10)
    assert [s.base_offset for s in log.segments] == [0, 12, 24]
    first_path = log.segments[0].path
    original = first_path.read_bytes()
    later = [s.path.name for s in log.segments[1:]]
    log.close()
    damaged = bytearray(original)
    damaged[2 * batch_size + 70] ^= 0x01  # inside the third batch's records
    first_path.write_bytes(bytes(damaged))

    recovered = open_log(had_clean_shutdown=False, recovery_point=0)
    assert recovered.log_end_offset == 6
    assert first_path.read_bytes() == original[: 2 * batch_size]
    kept = first_path.with_name(f"{first_path.name}.at-{2 * batch_size}.quarantined")
    assert kept.read_bytes() == bytes(damaged[2 * batch_size :])
    for name in later:  # later segments are set aside, not deleted
        assert (recovered.dir / (name + ".quarantined")).exists()
        assert not (recovered.dir / name).exists()
    assert [s.base_offset for s in recovered.segments] == [0]
    assert recovered.append_as_leader(make_batch(1), leader_epoch=0).first_offset == 6


def test_clean_shutdown_skips_validation_below_recovery_point(open_log: OpenLog) -> None:
    log = open_log()
    fill(log, 3)
    path = log.active_segment.path
    log.close()
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF  # only a full recovery would notice
    path.write_bytes(bytes(data))
    reopened = open_log(had_clean_shutdown=True, recovery_point=9)
    assert reopened.log_end_offset == 9  # trusted: no recovery after a clean shutdown


def test_missing_and_corrupt_indexes_are_rebuilt_identically(open_log: OpenLog) -> None:
    config = LogConfig(segment_bytes=2000, index_interval_bytes=200)
    log = open_log(config)
    fill(log, 20)
    closed = log.segments[0]
    index_path = files.offset_index_file(log.dir, closed.base_offset)
    time_path = files.time_index_file(log.dir, closed.base_offset)
    log.close()
    index_bytes = index_path.read_bytes()
    time_bytes = time_path.read_bytes()
    assert len(index_bytes) > 0
    index_path.unlink()
    time_path.write_bytes(time_bytes + b"\x01\x02\x03")  # not a multiple of 12

    reopened = open_log(config, recovery_point=60)
    reopened.close()
    assert index_path.read_bytes() == index_bytes
    assert time_path.read_bytes() == time_bytes


def test_stray_files_are_removed_and_quarantined_ones_kept(open_log: OpenLog) -> None:
    log = open_log()
    fill(log, 2)
    directory = log.dir
    log.close()
    strays = [
        directory / "00000000000000000100.log.deleted",
        directory / "00000000000000000100.index.deleted",
        directory / "00000000000000000003.log.cleaned",
        directory / "00000000000000000003.log.swap",
        directory / "recovery.tmp",
        directory / "00000000000000000200.index",  # no .log beside it
    ]
    for stray in strays:
        stray.write_bytes(b"x")
    keep = directory / "00000000000000000000.log.quarantined"
    keep.write_bytes(b"kept")
    reopened = open_log()
    assert reopened.log_end_offset == 6
    for stray in strays:
        assert not stray.exists(), stray
    assert keep.read_bytes() == b"kept"


def test_recovery_rebuilds_epoch_cache_entries_missing_from_checkpoint(open_log: OpenLog) -> None:
    log = open_log()
    fill(log, 2, epoch=1)
    fill(log, 2, epoch=4)
    log.close()
    (log.dir / "leader-epoch-checkpoint").unlink()
    reopened = open_log(had_clean_shutdown=False, recovery_point=0)
    assert [(e.epoch, e.start_offset) for e in reopened.leader_epoch_cache.epoch_entries()] == [
        (1, 0),
        (4, 6),
    ]


def test_epoch_cache_is_cut_back_to_the_recovered_end(open_log: OpenLog) -> None:
    log = open_log()
    fill(log, 2, epoch=1)
    path = log.active_segment.path
    size = path.stat().st_size
    fill(log, 1, epoch=2)
    log.close()
    with open(path, "r+b") as f:
        f.truncate(size + 30)  # the epoch-2 batch is torn
    reopened = open_log(had_clean_shutdown=False, recovery_point=0)
    assert reopened.log_end_offset == 6
    assert reopened.leader_epoch_cache.latest_epoch == 1


def test_log_start_offset_checkpoint_above_all_data_restarts_empty(open_log: OpenLog) -> None:
    log = open_log()
    fill(log, 2)
    log.close()
    reopened = open_log(log_start_offset=50, recovery_point=6)
    assert (reopened.log_start_offset, reopened.log_end_offset) == (50, 50)


@pytest.mark.parametrize("garbage", [b"\x00" * 100, b"\xff" * 7, b"not a kafka batch at all" * 10])
def test_garbage_after_valid_batches_is_cut(open_log: OpenLog, garbage: bytes) -> None:
    log = open_log()
    fill(log, 3)
    path: Path = log.active_segment.path
    expected = path.read_bytes()
    log.close()
    with open(path, "ab") as out:
        out.write(garbage)
    reopened = open_log(had_clean_shutdown=False)
    assert reopened.log_end_offset == 9
    assert path.read_bytes() == expected
    assert [b.base_offset for _p, b in iter_batches(expected)] == [0, 3, 6]


def test_corrupt_epoch_checkpoint_is_set_aside_and_rebuilt(open_log: OpenLog) -> None:
    log = open_log()
    fill(log, 2, epoch=3)
    fill(log, 1, epoch=5)
    log.close()
    checkpoint = log.dir / "leader-epoch-checkpoint"
    checkpoint.write_text("0\n2\n3 zero\n")
    reopened = open_log()
    assert [(e.epoch, e.start_offset) for e in reopened.leader_epoch_cache.epoch_entries()] == [
        (3, 0),
        (5, 6),
    ]
    assert checkpoint.read_text() == "0\n2\n3 0\n5 6\n"
    assert (log.dir / "leader-epoch-checkpoint.quarantined").read_text() == "0\n2\n3 zero\n"
    assert reopened.log_end_offset == 9


def crash_copy(log: Log, target: Path) -> Path:
    """The partition dir as a crash leaves it: files copied while the log is still open
    (indexes untrimmed, still preallocated), then recovered from there."""
    log.flush()
    shutil.copytree(log.dir, target / log.dir.name)
    return target / log.dir.name


def rebuild_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if "rebuilding indexes" in r.getMessage()]


def test_unclean_restart_over_healthy_data_rebuilds_indexes_without_warning(
    open_log: OpenLog, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = LogConfig(segment_bytes=2000, index_interval_bytes=200)
    log = open_log(config)
    fill(log, 20)
    expected = all_values(log)
    crashed = crash_copy(log, tmp_path / "crash")
    assert crashed.joinpath(log.active_segment.offset_index.path.name).stat().st_size > 10_000

    with caplog.at_level(logging.INFO, logger="storage_core"):
        recovered = Log(crashed, config, had_clean_shutdown=False, recovery_point=0)
    try:
        assert all_values(recovered) == expected
        rebuilt = rebuild_records(caplog)
        assert rebuilt, "the untrimmed active indexes are rebuilt"
        assert all(r.levelno == logging.INFO for r in rebuilt), [r.getMessage() for r in rebuilt]
        assert "preallocated index not trimmed" in rebuilt[0].getMessage()
        assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    finally:
        recovered.close()


def test_index_entries_out_of_order_still_warn(
    open_log: OpenLog, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = LogConfig(index_interval_bytes=200)
    log = open_log(config)
    fill(log, 20)
    index_name = log.active_segment.offset_index.path.name
    crashed = crash_copy(log, tmp_path / "crash")
    index_path = crashed / index_name
    data = bytearray(index_path.read_bytes())
    data[0:8], data[8:16] = data[8:16], data[0:8]  # two real entries swapped
    index_path.write_bytes(bytes(data))

    with caplog.at_level(logging.INFO, logger="storage_core"):
        recovered = Log(crashed, config, had_clean_shutdown=False, recovery_point=0)
    try:
        rebuilt = rebuild_records(caplog)
        assert [r.levelno for r in rebuilt] == [logging.WARNING]
        assert "not larger than the previous entry" in rebuilt[0].getMessage()
        assert recovered.log_end_offset == 60
    finally:
        recovered.close()


@pytest.mark.parametrize("cut", ["inside-last-batch", "at-last-batch-start", "before-index-end"])
def test_clean_shutdown_with_a_cut_active_segment_recovers_it(open_log: OpenLog, cut: str) -> None:
    """A cut inside the last batch, one at a batch boundary that the offset index points past,
    and one far before the last index entry: each is recovered to its last complete batch."""
    config = LogConfig(index_interval_bytes=100)
    log = open_log(config)
    fill(log, 20)
    batches = [(b.base_offset, b.size_in_bytes) for b in log.read_batches(0)]
    path = log.active_segment.path
    original = path.read_bytes()
    end = log.log_end_offset
    log.close()
    last_start = len(original) - batches[-1][1]
    cut_at = {
        "inside-last-batch": last_start + 100,
        "at-last-batch-start": last_start,
        "before-index-end": len(original) // 3 + 7,
    }[cut]
    with open(path, "r+b") as file:
        file.truncate(cut_at)
    complete, position = 0, 0
    for _base, size in batches:
        if position + size > cut_at:
            break
        complete, position = complete + 1, position + size

    reopened = open_log(config, had_clean_shutdown=True, recovery_point=end)
    assert reopened.log_end_offset == complete * 3
    assert len(list(reopened.read_batches(0))) == complete
    assert path.read_bytes() == original[:position]
    kept = path.with_name(f"{path.name}.at-{position}.quarantined")
    if cut_at > position:
        assert kept.read_bytes() == original[position:cut_at]
    else:
        assert not list(reopened.dir.glob("*.quarantined"))
    assert reopened.append_as_leader(make_batch(1), leader_epoch=0).first_offset == complete * 3
