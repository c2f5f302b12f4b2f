"""An append that may not wait for the disk (the broker's event loop) refuses, with nothing
written, the appends that would: a roll (it fsyncs the rolled segment), ``flush.messages``
(an fsync) and a new leader epoch (its checkpoint is written and fsynced). The others are the
same append as ever: same offsets, same bytes."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from storage_core.log.log import AppendWouldWaitError, Log
from storage_core.log.log_config import LogConfig
from tests.conftest import BASE_TIMESTAMP_MS, make_batch

OpenLog = Callable[..., Log]


def snapshot(log: Log) -> tuple[int, int, int, int | None, int]:
    return (
        log.log_end_offset,
        log.size_in_bytes,
        len(log.segments),
        log.leader_epoch_cache.latest_epoch,
        log.unflushed_messages,
    )


def test_an_append_into_the_page_cache_is_the_usual_append(open_log: OpenLog) -> None:
    log = open_log()
    log.append_as_leader(make_batch(2), leader_epoch=0)
    info = log.append_as_leader(make_batch(3), leader_epoch=0, disk_wait_allowed=False)
    assert (info.first_offset, info.last_offset) == (2, 4)
    assert [b.base_offset for b in log.read_batches(0)] == [0, 2]


def test_a_new_leader_epoch_waits_for_its_checkpoint(open_log: OpenLog) -> None:
    log = open_log()
    log.append_as_leader(make_batch(2), leader_epoch=0)
    before = snapshot(log)
    with pytest.raises(AppendWouldWaitError, match="must roll, fsync or checkpoint"):
        log.append_as_leader(make_batch(1), leader_epoch=1, disk_wait_allowed=False)
    assert snapshot(log) == before
    log.append_as_leader(make_batch(1), leader_epoch=1)
    assert log.leader_epoch_cache.latest_epoch == 1


def test_a_full_segment_waits_for_its_roll(open_log: OpenLog) -> None:
    batch_bytes = len(make_batch(2))
    log = open_log(LogConfig(segment_bytes=2 * batch_bytes))
    log.append_as_leader(make_batch(2), leader_epoch=0)
    log.append_as_leader(make_batch(2), leader_epoch=0, disk_wait_allowed=False)
    before = snapshot(log)
    with pytest.raises(AppendWouldWaitError):
        log.append_as_leader(make_batch(2), leader_epoch=0, disk_wait_allowed=False)
    assert snapshot(log) == before
    log.append_as_leader(make_batch(2), leader_epoch=0)
    assert [s.base_offset for s in log.segments] == [0, 4]


def test_a_segment_old_enough_to_roll_waits_too(open_log: OpenLog) -> None:
    log = open_log(LogConfig(segment_ms=1000))
    log.append_as_leader(make_batch(1), leader_epoch=0)
    later = make_batch(1, timestamp=BASE_TIMESTAMP_MS + 1001)  # segment.ms counts from here
    with pytest.raises(AppendWouldWaitError):
        log.append_as_leader(later, leader_epoch=0, disk_wait_allowed=False)
    assert len(log.segments) == 1


def test_flush_messages_waits_for_its_fsync(open_log: OpenLog) -> None:
    log = open_log(LogConfig(flush_messages=5))
    log.append_as_leader(make_batch(2), leader_epoch=0)
    log.append_as_leader(make_batch(2), leader_epoch=0, disk_wait_allowed=False)
    before = snapshot(log)
    assert before[-1] == 4  # unflushed
    with pytest.raises(AppendWouldWaitError):
        log.append_as_leader(make_batch(1), leader_epoch=0, disk_wait_allowed=False)
    assert snapshot(log) == before
    log.append_as_leader(make_batch(1), leader_epoch=0)
    assert log.unflushed_messages == 0
