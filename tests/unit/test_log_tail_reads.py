"""A read from where the log ended before its last append (a follower's next fetch, a
consumer at the high watermark) gets that append's batch, read from the position the append
remembered; after a truncation no stale position is used."""

from __future__ import annotations

from collections.abc import Callable

from storage_core.log.log import Log
from storage_core.log.log_config import LogConfig
from tests.conftest import make_batch

OpenLog = Callable[..., Log]


def read_from(log: Log, offset: int) -> bytes:
    return log.read(offset, 1 << 20).read_bytes()


def test_a_read_from_the_previous_end_gets_the_last_append(open_log: OpenLog) -> None:
    log = open_log()
    starts = []
    for count in (2, 3, 1, 4):
        starts.append(log.log_end_offset)
        size_before = log.size_in_bytes
        log.append_as_leader(make_batch(count, tag=f"n{count}"), leader_epoch=0)
        # exactly the bytes this append wrote, which hold its one batch
        assert read_from(log, starts[-1]) == read_from(log, 0)[size_before:]
        assert [b.base_offset for b in log.read_batches(starts[-1])] == [starts[-1]]
    # Earlier starts and offsets inside batches still read from the batch that holds them.
    assert [b.base_offset for b in log.read_batches(3)] == [2, 5, 6]
    assert read_from(log, starts[1]) == read_from(log, 2)


def test_after_a_truncation_the_new_batch_is_read_not_the_old(open_log: OpenLog) -> None:
    log = open_log(LogConfig())
    log.append_as_leader(make_batch(2, tag="a"), leader_epoch=0)
    log.append_as_leader(make_batch(5, tag="old", value_size=40), leader_epoch=0)
    log.truncate_to(2)
    assert log.read(2, 1 << 20).records is None  # the log end: nothing to read
    log.append_as_leader(make_batch(1, tag="new"), leader_epoch=1)
    (batch,) = log.read_batches(2)
    assert (batch.base_offset, batch.last_offset, batch.partition_leader_epoch) == (2, 2, 1)
    assert b"new0" in read_from(log, 2)
