"""Producer state survives restarts: after any mix of appends, retries, rolls, clean restarts
and crashes, the reloaded state equals the state before, and every produce is answered as a
simple model of Kafka's rules predicts."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage_core.clock import ManualClock
from storage_core.errors import InvalidProducerEpochError, OutOfOrderSequenceError
from storage_core.log.log import Log
from storage_core.log.log_config import LogConfig
from storage_core.log.log_validator import LogAppendInfo
from tests.conftest import BASE_TIMESTAMP_MS, make_batch

PRODUCER_IDS = (10, 11, 12)
INT32_MAX = (1 << 31) - 1


@dataclass
class ProducerModel:
    """What the test expects of one producer: its epoch, next sequence and last batch."""

    epoch: int = 0
    next_seq: int = 0
    last_batch: tuple[int, int, int, int] | None = None  # seq, count, first, last offset


def snapshot_view(log: Log) -> dict[int, tuple[int, int, int, int, int, int, int | None]]:
    """The state a snapshot keeps: per producer its epoch and last batch."""
    return {
        pid: (
            entry.producer_epoch,
            entry.last_seq,
            entry.last_data_offset,
            entry.last_offset_delta,
            entry.last_timestamp,
            entry.coordinator_epoch,
            entry.current_txn_first_offset,
        )
        for pid, entry in log.active_producers.items()
    }


operation = st.one_of(
    st.tuples(
        st.sampled_from(["next", "retry", "gap", "bump", "stale"]),
        st.sampled_from(PRODUCER_IDS),
        st.integers(min_value=1, max_value=4),
    ),
    st.tuples(st.sampled_from(["roll", "restart", "crash", "plain"]), st.just(0), st.just(1)),
)


def _produce(log: Log, pid: int, epoch: int, seq: int, count: int, ts: int) -> LogAppendInfo:
    batch = make_batch(
        count, producer_id=pid, producer_epoch=epoch, base_sequence=seq, timestamp=ts
    )
    return log.append_as_leader(batch, leader_epoch=0)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    ops=st.lists(operation, min_size=1, max_size=40),
    start_seq=st.sampled_from([0, INT32_MAX - 3]),
)
def test_state_after_reload_equals_state_before(
    ops: list[tuple[str, int, int]], start_seq: int
) -> None:
    clock = ManualClock(BASE_TIMESTAMP_MS)
    config = LogConfig(segment_bytes=700)
    models = {pid: ProducerModel(next_seq=start_seq) for pid in PRODUCER_IDS}
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp) / "topic-0"
        log = Log(directory, config, clock=clock)
        try:
            for step, (kind, pid, count) in enumerate(ops):
                ts = BASE_TIMESTAMP_MS + step * 10
                model = models.get(pid)
                if kind == "next" and model is not None:
                    info = _produce(log, pid, model.epoch, model.next_seq, count, ts)
                    assert not info.is_duplicate
                    model.last_batch = (
                        model.next_seq,
                        count,
                        info.first_offset,
                        info.last_offset,
                    )
                    model.next_seq = (model.next_seq + count) % (INT32_MAX + 1)
                elif kind == "retry" and model is not None and model.last_batch is not None:
                    seq, n, first, last = model.last_batch
                    end = log.log_end_offset
                    info = _produce(log, pid, model.epoch, seq, n, ts)
                    assert info.is_duplicate
                    assert (info.first_offset, info.last_offset) == (first, last)
                    assert log.log_end_offset == end
                elif kind == "gap" and model is not None and model.last_batch is not None:
                    gap_seq = (model.next_seq + 1) % (INT32_MAX + 1)
                    with pytest.raises(OutOfOrderSequenceError):
                        _produce(log, pid, model.epoch, gap_seq, count, ts)
                elif kind == "bump" and model is not None:
                    model.epoch += 1
                    info = _produce(log, pid, model.epoch, 0, count, ts)
                    model.last_batch = (0, count, info.first_offset, info.last_offset)
                    model.next_seq = count
                elif kind == "stale" and model is not None and model.last_batch is not None:
                    if model.epoch > 0:
                        with pytest.raises(InvalidProducerEpochError):
                            _produce(log, pid, model.epoch - 1, 0, count, ts)
                elif kind == "roll":
                    log.roll()
                elif kind == "plain":
                    log.append_as_leader(make_batch(2, timestamp=ts), leader_epoch=0)
                elif kind in ("restart", "crash"):
                    before = snapshot_view(log)
                    end = log.log_end_offset
                    if kind == "restart":
                        log.close()
                    else:  # files closed, no snapshot written: what a crash leaves
                        log.flush()
                        for segment in log.segments:
                            segment.close()
                    log = Log(directory, config, clock=clock, had_clean_shutdown=kind == "restart")
                    assert log.log_end_offset == end
                    assert snapshot_view(log) == before
            before = snapshot_view(log)
            log.close()
            log = Log(directory, config, clock=clock)
            assert snapshot_view(log) == before
            # Snapshots never lie above the log end.
            assert all(s.offset <= log.log_end_offset for s in log.producer_snapshot_files())
        finally:
            log.close()
