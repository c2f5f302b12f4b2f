"""Transaction verification on the log and its leader (KIP-890 part 1): the guard a producer's first
transactional batch on a partition must carry, cleared by any transactional append of the
producer, and the lowest sequence a waiting producer may write (Kafka's
``VerificationGuardTest``, ``ProducerStateManagerTest`` and ``UnifiedLogTest`` cases)."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from storage_core.clock import ManualClock
from storage_core.common import TopicPartition, Uuid
from storage_core.errors import (
    InvalidTxnStateError,
    NotLeaderOrFollowerError,
    OutOfOrderSequenceError,
)
from storage_core.log.log import Log
from storage_core.log.producer_append_info import AppendOrigin
from storage_core.log.verification_guard import VerificationGuard, VerificationStateEntry
from storage_core.records.end_transaction_marker import (
    ControlRecordType,
    build_end_txn_marker_batch,
)
from storage_core.replication.partition import Partition
from storage_core.replication.transaction_verification import (
    maybe_start_transaction_verification,
    transactional_batches,
)
from tests.conftest import make_batch

PID = 4000
SENTINEL = VerificationGuard.SENTINEL


def transactional(
    log: Log, seq: int, guard: VerificationGuard | None, *, epoch: int = 0, count: int = 1
) -> int:
    batch = make_batch(
        count, producer_id=PID, producer_epoch=epoch, base_sequence=seq, is_transactional=True
    )
    return log.append_as_leader(batch, leader_epoch=0, verification_guard=guard).first_offset


def marker(log: Log, *, commit: bool, epoch: int = 0) -> int:
    batch = build_end_txn_marker_batch(
        producer_id=PID,
        producer_epoch=epoch,
        coordinator_epoch=0,
        control_type=ControlRecordType.COMMIT if commit else ControlRecordType.ABORT,
        timestamp=0,
    )
    return log.append_as_leader(batch, leader_epoch=0, origin=AppendOrigin.COORDINATOR).first_offset


# ------------------------------------------------------------------------ values
def test_the_sentinel_verifies_nothing_and_each_guard_only_itself() -> None:
    first, second = VerificationGuard.create(), VerificationGuard.create()
    assert first != second
    assert first.verify(first)
    assert not first.verify(second)
    assert not first.verify(SENTINEL)
    assert not SENTINEL.verify(SENTINEL)


def test_the_entry_keeps_the_lowest_sequence_of_its_epoch_and_restarts_with_a_newer_one() -> None:
    entry = VerificationStateEntry.create(100, 5, 1)
    lower = entry.with_lowest_sequence_and_epoch(3, 1)
    assert (lower.lowest_sequence, lower.epoch) == (3, 1)
    assert lower.with_lowest_sequence_and_epoch(4, 1) == lower  # higher: kept
    assert lower.with_lowest_sequence_and_epoch(0, 0) == lower  # older epoch: ignored
    newer = lower.with_lowest_sequence_and_epoch(7, 2)
    assert (newer.lowest_sequence, newer.epoch) == (7, 2)
    assert newer.verification_guard == entry.verification_guard
    assert newer.timestamp_ms == 100


# ------------------------------------------------------------------------ the log
def test_a_transaction_opened_without_its_guard_is_refused_and_nothing_is_stored(
    open_log: Callable[..., Log],
) -> None:
    log = open_log()
    with pytest.raises(InvalidTxnStateError, match="not part of an ongoing transaction"):
        transactional(log, 0, SENTINEL)
    guard = log.maybe_start_transaction_verification(PID, 0, 0)
    with pytest.raises(InvalidTxnStateError):
        transactional(log, 0, VerificationGuard.create())  # another verification's guard
    assert log.log_end_offset == 0
    assert log.active_producers == {}
    assert transactional(log, 0, guard) == 0


def test_once_the_transaction_is_open_no_guard_is_needed_until_it_ends(
    open_log: Callable[..., Log],
) -> None:
    log = open_log()
    guard = log.maybe_start_transaction_verification(PID, 0, 0)
    assert guard != SENTINEL
    transactional(log, 0, guard, count=2)
    assert log.producer_state_manager.verification_state_entry(PID) is None  # cleared
    assert log.maybe_start_transaction_verification(PID, 2, 0) == SENTINEL  # ongoing
    assert transactional(log, 2, SENTINEL) == 2
    marker(log, commit=True)
    with pytest.raises(InvalidTxnStateError):
        transactional(log, 3, SENTINEL)  # the next transaction needs a verification again
    assert log.log_end_offset == 4


def test_a_marker_between_verification_and_append_makes_the_append_fail(
    open_log: Callable[..., Log],
) -> None:
    """Kafka's hanging-transaction race: the coordinator confirmed the partition, then the
    transaction was aborted (its marker written here) before the produce appended; the
    late batch must not open a transaction that the coordinator knows nothing of."""
    log = open_log()
    stale = log.maybe_start_transaction_verification(PID, 0, 0)
    assert marker(log, commit=False) == 0
    assert log.producer_state_manager.verification_state_entry(PID) is None
    with pytest.raises(InvalidTxnStateError):
        transactional(log, 0, stale)
    assert log.log_end_offset == 1
    assert log.active_producers[PID].current_txn_first_offset is None  # none was opened
    # A new verification (the producer's retry) has a guard of its own: the stale one
    # stays refused, the fresh one passes (no ABA).
    fresh = log.maybe_start_transaction_verification(PID, 0, 0)
    assert fresh != stale
    with pytest.raises(InvalidTxnStateError):
        transactional(log, 0, stale)
    assert transactional(log, 0, fresh) == 1


def test_while_waiting_a_higher_sequence_is_out_of_order(open_log: Callable[..., Log]) -> None:
    log = open_log()
    log.maybe_start_transaction_verification(PID, 5, 0)
    guard = log.maybe_start_transaction_verification(PID, 3, 0)  # the same entry, lower
    entry = log.producer_state_manager.verification_state_entry(PID)
    assert entry is not None and entry.lowest_sequence == 3
    with pytest.raises(OutOfOrderSequenceError, match="earliest seen sequence"):
        transactional(log, 5, guard)
    assert log.log_end_offset == 0
    assert transactional(log, 3, guard) == 0


def test_verification_off_coordinator_appends_and_plain_batches_are_not_checked(
    open_log: Callable[..., Log],
) -> None:
    log = open_log()
    assert transactional(log, 0, None) == 0  # transaction.partition.verification.enable=false
    marker(log, commit=True)
    # a coordinator's own transactional batch (TxnOffsetCommit's offsets) needs no guard
    offsets = make_batch(
        1, producer_id=PID + 1, producer_epoch=0, base_sequence=0, is_transactional=True
    )
    log.append_as_leader(
        offsets, leader_epoch=0, origin=AppendOrigin.COORDINATOR, verification_guard=SENTINEL
    )
    # nor an idempotent producer's batch
    plain = make_batch(1, producer_id=PID + 2, producer_epoch=0, base_sequence=0)
    log.append_as_leader(plain, leader_epoch=0, verification_guard=SENTINEL)
    assert log.log_end_offset == 4


def test_lingering_entries_expire_with_the_producer_state(
    open_log: Callable[..., Log], clock: ManualClock
) -> None:
    log = open_log(producer_id_expiration_ms=1000)
    stale = log.maybe_start_transaction_verification(PID, 0, 0)
    clock.sleep(999)
    log.remove_expired_producers()
    assert log.producer_state_manager.verification_state_entry(PID) is not None
    clock.sleep(1)
    log.remove_expired_producers()
    assert log.producer_state_manager.verification_state_entry(PID) is None
    with pytest.raises(InvalidTxnStateError):
        transactional(log, 0, stale)


# ------------------------------------------------------------------------ the leader's side
def test_a_produces_transactional_batches_and_first_sequences() -> None:
    tp0, tp1, tp2 = (TopicPartition("t", p) for p in range(3))
    found = transactional_batches(
        {
            tp0: make_batch(
                2, producer_id=PID, producer_epoch=3, base_sequence=7, is_transactional=True
            ),
            tp1: make_batch(1, producer_id=PID + 1, producer_epoch=0, base_sequence=0),
            tp2: b"\x00\x01broken",  # its append reports the framing error
        }
    )
    assert found.producers == frozenset({(PID, 3)})
    assert dict(found.first_sequences) == {tp0: 7}


def test_the_event_loop_never_waits_for_a_held_log(open_log: Callable[..., Log]) -> None:
    tp = TopicPartition("topic", 0)
    partition = Partition(tp, Uuid.random(), open_log(), local_broker_id=0)

    def start(*, wait: bool) -> VerificationGuard | None:
        return maybe_start_transaction_verification(
            lambda _tp: partition,
            tp,
            producer_id=PID,
            producer_epoch=0,
            base_sequence=0,
            wait=wait,
        )

    with pytest.raises(NotLeaderOrFollowerError):
        start(wait=True)
    partition.make_leader(leader_epoch=0, replicas=(0,), isr=(0,))
    held, release = threading.Event(), threading.Event()

    def hold() -> None:  # an I/O thread appending (rolling, fsyncing)
        assert partition.log.try_hold()
        held.set()
        release.wait(10)
        partition.log.release_hold()

    holder = threading.Thread(target=hold)
    holder.start()
    held.wait(10)
    try:
        assert start(wait=False) is None
    finally:
        release.set()
        holder.join(10)
    guard = start(wait=False)
    assert guard is not None and guard != SENTINEL
    assert start(wait=True) == guard  # the same entry while it waits
