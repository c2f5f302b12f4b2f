"""A read from where the log ended before one of its last appends (a follower's next fetch, a
consumer at the high watermark) gets that append's batch, read from the position the append
remembered; after a truncation no stale position is used. ``recent_tail_bytes`` knows those
last appends only (what the leader reads for followers on its event loop)."""

from __future__ import annotations

from collections.abc import Callable

from storage_core.log.log import Log
from storage_core.log.log_config import LogConfig
from storage_core.log.log_segment import RECENT_APPENDS_MAX
from storage_core.records import SimpleRecord, build_batch
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


def test_the_recent_tail_covers_the_last_appends_only(open_log: OpenLog) -> None:
    log = open_log()
    starts, sizes = [], []
    for i in range(RECENT_APPENDS_MAX + 3):
        starts.append(log.log_end_offset)
        sizes.append(log.size_in_bytes)
        log.append_as_leader(make_batch(2, tag=f"t{i}"), leader_epoch=0)
    end_size = log.size_in_bytes
    assert log.recent_tail_bytes(log.log_end_offset) == 0
    recent = starts[-RECENT_APPENDS_MAX:]
    for start, size in zip(recent, sizes[-RECENT_APPENDS_MAX:], strict=True):
        assert log.recent_tail_bytes(start) == end_size - size
        assert read_from(log, start) == read_from(log, 0)[size:]
    # Older appends, and offsets inside a batch, are not known to be in the page cache.
    assert [log.recent_tail_bytes(s) for s in starts[:3]] == [None, None, None]
    assert log.recent_tail_bytes(recent[-1] + 1) is None


def test_a_roll_or_a_truncation_forgets_the_recent_tail(open_log: OpenLog) -> None:
    log = open_log()
    log.append_as_leader(make_batch(2, tag="a"), leader_epoch=0)
    log.append_as_leader(make_batch(2, tag="b"), leader_epoch=0)
    log.truncate_to(2)
    assert log.recent_tail_bytes(0) is None
    assert log.recent_tail_bytes(2) == 0  # the log end again
    log.append_as_leader(make_batch(2, tag="c"), leader_epoch=0)
    log.roll()
    assert log.recent_tail_bytes(2) is None  # in a segment no longer written to
    assert log.recent_tail_bytes(4) == 0


def test_a_read_from_a_follower_append_of_several_batches_starts_with_its_first(
    open_log: OpenLog,
) -> None:
    """The append remembers its first batch (last offset, position, size) from the bytes it
    writes: a read of one batch at most from there gets exactly that batch, as a scan of the
    segment from its start finds it."""
    log = open_log()
    log.append_as_follower(batch_at(0, 3, "a"))
    size_before = log.size_in_bytes
    first, second = batch_at(3, 4, "b"), batch_at(7, 2, "c")
    log.append_as_follower(first + second)
    assert log.recent_tail_bytes(3) == len(first) + len(second)
    one_batch = log.read(3, 1, min_one_message=True)  # at least one whole batch
    assert one_batch.read_bytes() == first
    assert one_batch.fetch_offset_metadata.relative_position_in_segment == size_before
    assert [b.base_offset for b in log.read_batches(3)] == [3, 7]
    segment = log.active_segment
    position = segment.translate_offset(3)
    scanned = segment.log.search_for_offset_with_size(3, 0)
    assert position is not None and scanned is not None
    assert (
        (position.offset, position.position, position.size)
        == scanned
        == (6, size_before, len(first))
    )


def batch_at(base_offset: int, count: int, tag: str) -> bytes:
    records = [
        SimpleRecord(value=f"{tag}{i}".encode(), timestamp=1_700_000_000_000 + i)
        for i in range(count)
    ]
    return build_batch(records, base_offset=base_offset, partition_leader_epoch=0)
