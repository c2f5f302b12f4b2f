"""The last stable offset of a Log (Kafka's ``UnifiedLog.lastStableOffset``): the first
offset of the oldest transaction still open, or whose marker is not yet below the HW."""

from __future__ import annotations

from collections.abc import Callable

from storage_core.log.log import Log
from storage_core.log.producer_append_info import AppendOrigin
from storage_core.log.producer_state_entry import CompletedTxn
from storage_core.records.end_transaction_marker import (
    ControlRecordType,
    build_end_txn_marker_batch,
)
from tests.conftest import make_batch

A, B = 1000, 2000


def transactional(log: Log, pid: int, seq: int, count: int = 1) -> int:
    batch = make_batch(
        count, producer_id=pid, producer_epoch=0, base_sequence=seq, is_transactional=True
    )
    return log.append_as_leader(batch, leader_epoch=0).first_offset


def end(log: Log, pid: int, *, commit: bool) -> int:
    marker = build_end_txn_marker_batch(
        producer_id=pid,
        producer_epoch=0,
        coordinator_epoch=0,
        control_type=ControlRecordType.COMMIT if commit else ControlRecordType.ABORT,
        timestamp=0,
    )
    return log.append_as_leader(
        marker, leader_epoch=0, origin=AppendOrigin.COORDINATOR
    ).first_offset


def replicated(log: Log) -> None:
    log.update_high_watermark(log.log_end_offset)


def test_the_lso_waits_for_open_transactions_and_for_their_markers_to_be_replicated(
    open_log: Callable[..., Log],
) -> None:
    log = open_log()
    log.append_as_leader(make_batch(2), leader_epoch=0)  # not transactional
    replicated(log)
    assert log.last_stable_offset == 2 == log.high_watermark
    assert transactional(log, A, 0, 2) == 2
    assert transactional(log, B, 0) == 4
    replicated(log)
    assert (log.high_watermark, log.last_stable_offset) == (5, 2)
    assert end(log, A, commit=True) == 5
    # A's marker is not replicated yet: its transaction still holds the LSO back
    assert log.last_stable_offset == 2
    replicated(log)
    assert log.last_stable_offset == 4  # B's transaction, open since 4
    assert end(log, B, commit=False) == 6
    assert log.last_stable_offset == 4
    replicated(log)
    assert log.last_stable_offset == 7 == log.high_watermark


def test_an_aborted_transactions_lso_is_the_next_open_one_of_another_producer(
    open_log: Callable[..., Log],
) -> None:
    log = open_log()
    transactional(log, A, 0)  # 0
    transactional(log, B, 0)  # 1
    manager = log.producer_state_manager
    completed = CompletedTxn(producer_id=A, first_offset=0, last_offset=2, is_aborted=True)
    assert manager.last_stable_offset(completed) == 1  # B is still open from 1
    completed_b = CompletedTxn(producer_id=B, first_offset=1, last_offset=2, is_aborted=True)
    assert manager.last_stable_offset(completed_b) == 0  # A is still open from 0
    end(log, A, commit=False)
    end(log, B, commit=False)
    alone = CompletedTxn(producer_id=A, first_offset=4, last_offset=5, is_aborted=True)
    assert manager.last_stable_offset(alone) == 6  # nothing else open: past the marker


def test_an_open_transaction_holds_the_lso_across_a_restart_and_a_truncation(
    open_log: Callable[..., Log],
) -> None:
    log = open_log()
    transactional(log, A, 0, 3)  # 0-2
    end(log, A, commit=True)  # 3
    transactional(log, B, 0)  # 4, left open
    replicated(log)
    assert log.last_stable_offset == 4
    log.close()
    reopened = open_log()
    reopened.update_high_watermark(reopened.log_end_offset)
    assert reopened.last_stable_offset == 4
    # a follower truncated below A's marker finds A's transaction open again
    reopened.truncate_to(3)
    reopened.update_high_watermark(3)
    assert reopened.last_stable_offset == 0


def test_the_lso_never_lies_below_the_log_start(open_log: Callable[..., Log]) -> None:
    log = open_log()
    transactional(log, A, 0)  # 0, left open
    log.append_as_leader(make_batch(3), leader_epoch=0)
    replicated(log)
    assert log.last_stable_offset == 0
    log.maybe_increment_log_start_offset(2, "DeleteRecords")
    assert log.last_stable_offset == 2
