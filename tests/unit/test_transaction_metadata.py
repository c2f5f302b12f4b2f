"""A transactional id's state machine (Kafka's TransactionMetadata, transaction.version 0).

Cases named after a Kafka test port ``TransactionMetadataTest.scala``; the table tests walk
every (state, prepare) pair so that each transition of ``TransactionState`` is covered, the
allowed ones and the refused ones.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from kio.schema.errors import ErrorCode

from storage_core.common import TopicPartition
from storage_core.coordinator.transaction.errors import (
    CorruptTransactionLogRecordError,
    IllegalTransactionStateTransitionError,
)
from storage_core.coordinator.transaction.transaction_metadata import (
    NO_PRODUCER_EPOCH,
    TransactionMetadata,
    TxnTransitMetadata,
)
from storage_core.coordinator.transaction.transaction_state import (
    TransactionState,
    is_valid_transition,
)

S = TransactionState
NOW = 1_000_000
PRODUCER_ID = 23423
SHORT_MAX = 32767


def _metadata(
    *,
    producer_epoch: int,
    state: TransactionState,
    last_producer_epoch: int = NO_PRODUCER_EPOCH,
    start_ms: int = -1,
    partitions: set[TopicPartition] | None = None,
) -> TransactionMetadata:
    return TransactionMetadata(
        transactional_id="txnlId",
        producer_id=PRODUCER_ID,
        producer_epoch=producer_epoch,
        last_producer_epoch=last_producer_epoch,
        txn_timeout_ms=30000,
        state=state,
        topic_partitions=partitions or set(),
        txn_start_timestamp_ms=start_ms,
        txn_last_update_timestamp_ms=NOW,
    )


def _increment(
    metadata: TransactionMetadata, expected: int | None, now_ms: int = NOW
) -> TxnTransitMetadata:
    transit = metadata.prepare_increment_producer_epoch(30000, expected, now_ms)
    assert isinstance(transit, TxnTransitMetadata), transit
    return transit


# ---------------------------------------------------------------- Kafka's cases
def test_initialize_epoch() -> None:
    # Kafka: testInitializeEpoch
    metadata = _metadata(producer_epoch=NO_PRODUCER_EPOCH, state=S.EMPTY)
    metadata.complete_transition_to(_increment(metadata, None))
    assert metadata.producer_id == PRODUCER_ID
    assert metadata.producer_epoch == 0
    assert metadata.last_producer_epoch == NO_PRODUCER_EPOCH


def test_normal_epoch_bump() -> None:
    # Kafka: testNormalEpochBump
    metadata = _metadata(producer_epoch=735, state=S.EMPTY)
    metadata.complete_transition_to(_increment(metadata, None))
    assert (metadata.producer_epoch, metadata.last_producer_epoch) == (736, NO_PRODUCER_EPOCH)


def test_bump_epoch_not_allowed_if_epochs_exhausted() -> None:
    # Kafka: testBumpEpochNotAllowedIfEpochsExhausted
    metadata = _metadata(producer_epoch=SHORT_MAX - 1, state=S.EMPTY)
    assert metadata.is_producer_epoch_exhausted
    with pytest.raises(IllegalTransactionStateTransitionError, match="rotate the producer id"):
        metadata.prepare_increment_producer_epoch(30000, None, NOW)
    assert metadata.pending_state is None


def test_tolerate_update_time_shift_during_epoch_bump() -> None:
    # Kafka: testTolerateUpdateTimeShiftDuringEpochBump
    metadata = _metadata(producer_epoch=1, state=S.EMPTY, start_ms=1)
    metadata.complete_transition_to(_increment(metadata, 1, NOW - 1))
    assert (metadata.producer_epoch, metadata.last_producer_epoch) == (2, 1)
    assert metadata.txn_start_timestamp_ms == 1
    assert metadata.txn_last_update_timestamp_ms == NOW - 1


def test_tolerate_update_time_reset_during_producer_id_rotation() -> None:
    # Kafka: testTolerateUpdateTimeResetDuringProducerIdRotation
    metadata = _metadata(producer_epoch=1, state=S.EMPTY, start_ms=1)
    transit = metadata.prepare_producer_id_rotation(
        PRODUCER_ID + 1, 30000, NOW - 1, record_last_epoch=True
    )
    metadata.complete_transition_to(transit)
    assert metadata.producer_id == PRODUCER_ID + 1
    assert (metadata.producer_epoch, metadata.last_producer_epoch) == (0, 1)
    assert metadata.txn_start_timestamp_ms == 1
    assert metadata.txn_last_update_timestamp_ms == NOW - 1


def test_tolerate_time_shift_during_add_partitions() -> None:
    # Kafka: testTolerateTimeShiftDuringAddPartitions
    metadata = _metadata(producer_epoch=1, state=S.EMPTY, start_ms=NOW)
    metadata.complete_transition_to(
        metadata.prepare_add_partitions({TopicPartition("topic1", 0)}, NOW - 1)
    )
    assert metadata.topic_partitions == {TopicPartition("topic1", 0)}
    assert metadata.txn_start_timestamp_ms == NOW - 1  # a transaction begun now starts now
    assert metadata.txn_last_update_timestamp_ms == NOW - 1
    metadata.complete_transition_to(
        metadata.prepare_add_partitions({TopicPartition("topic2", 0)}, NOW - 2)
    )
    assert metadata.topic_partitions == {TopicPartition("topic1", 0), TopicPartition("topic2", 0)}
    assert metadata.txn_start_timestamp_ms == NOW - 1  # Ongoing: the start does not move
    assert metadata.txn_last_update_timestamp_ms == NOW - 2
    assert (metadata.producer_epoch, metadata.last_producer_epoch) == (1, NO_PRODUCER_EPOCH)


@pytest.mark.parametrize("target", [S.PREPARE_COMMIT, S.PREPARE_ABORT])
def test_tolerate_time_shift_during_prepare_commit_and_abort(target: TransactionState) -> None:
    # Kafka: testTolerateTimeShiftDuringPrepareCommit, testTolerateTimeShiftDuringPrepareAbort
    metadata = _metadata(producer_epoch=1, state=S.ONGOING, start_ms=1)
    metadata.complete_transition_to(metadata.prepare_abort_or_commit(target, NOW - 1))
    assert metadata.state is target
    assert (metadata.producer_epoch, metadata.last_producer_epoch) == (1, NO_PRODUCER_EPOCH)
    assert metadata.txn_start_timestamp_ms == 1
    assert metadata.txn_last_update_timestamp_ms == NOW - 1


@pytest.mark.parametrize(
    ("prepared", "completed"),
    [(S.PREPARE_COMMIT, S.COMPLETE_COMMIT), (S.PREPARE_ABORT, S.COMPLETE_ABORT)],
)
def test_tolerate_time_shift_during_complete(
    prepared: TransactionState, completed: TransactionState
) -> None:
    # Kafka: testTolerateTimeShiftDuringCompleteCommit, testTolerateTimeShiftDuringCompleteAbort
    metadata = _metadata(
        producer_epoch=1, state=prepared, start_ms=1, partitions={TopicPartition("t", 0)}
    )
    metadata.complete_transition_to(metadata.prepare_complete(NOW - 1))
    assert metadata.state is completed
    assert (metadata.producer_epoch, metadata.last_producer_epoch) == (1, NO_PRODUCER_EPOCH)
    assert metadata.txn_start_timestamp_ms == 1
    assert metadata.txn_last_update_timestamp_ms == NOW - 1
    assert metadata.topic_partitions == set()


def test_fence_producer_after_epochs_exhausted() -> None:
    # Kafka: testFenceProducerAfterEpochsExhausted
    metadata = _metadata(producer_epoch=SHORT_MAX - 1, state=S.ONGOING, start_ms=NOW)
    assert metadata.is_producer_epoch_exhausted
    fence = metadata.prepare_fence_producer_epoch()
    assert fence.producer_epoch == SHORT_MAX
    assert fence.last_producer_epoch == NO_PRODUCER_EPOCH
    assert metadata.pending_state is S.PREPARE_EPOCH_FENCE
    metadata.pending_state = None  # the coordinator replaces the fence with the abort
    transit = metadata.prepare_abort_or_commit(S.PREPARE_ABORT, NOW)
    metadata.complete_transition_to(transit)
    assert transit.producer_id == PRODUCER_ID


def test_fence_producer_not_allowed_if_it_would_overflow() -> None:
    # Kafka: testFenceProducerNotAllowedIfItWouldOverflow
    metadata = _metadata(producer_epoch=SHORT_MAX, state=S.ONGOING)
    assert metadata.is_producer_epoch_exhausted
    with pytest.raises(IllegalTransactionStateTransitionError, match="overflow"):
        metadata.prepare_fence_producer_epoch()


def test_fence_after_a_failed_fence_keeps_the_epoch() -> None:
    metadata = _metadata(producer_epoch=5, state=S.ONGOING)
    metadata.has_failed_epoch_fence = True
    assert metadata.prepare_fence_producer_epoch().producer_epoch == 5


def test_rotate_producer_id() -> None:
    # Kafka: testRotateProducerId
    metadata = _metadata(producer_epoch=SHORT_MAX - 1, state=S.EMPTY)
    metadata.complete_transition_to(
        metadata.prepare_producer_id_rotation(9893, 30000, NOW, record_last_epoch=True)
    )
    assert metadata.producer_id == 9893
    assert metadata.last_producer_id == PRODUCER_ID
    assert (metadata.producer_epoch, metadata.last_producer_epoch) == (0, SHORT_MAX - 1)


@pytest.mark.parametrize("state", [S.ONGOING, S.PREPARE_ABORT, S.PREPARE_COMMIT])
def test_rotate_producer_id_with_a_pending_transaction(state: TransactionState) -> None:
    # Kafka: testRotateProducerIdInOngoingState, ...InPrepareAbortState, ...InPrepareCommitState
    metadata = _metadata(producer_epoch=SHORT_MAX - 1, state=state)
    with pytest.raises(IllegalTransactionStateTransitionError, match="still pending"):
        metadata.prepare_producer_id_rotation(9893, 30000, NOW, record_last_epoch=False)


def test_attempted_epoch_bump_with_newly_created_metadata() -> None:
    # Kafka: testAttemptedEpochBumpWithNewlyCreatedMetadata
    metadata = _metadata(producer_epoch=NO_PRODUCER_EPOCH, state=S.EMPTY)
    metadata.complete_transition_to(_increment(metadata, 735))
    assert (metadata.producer_epoch, metadata.last_producer_epoch) == (0, NO_PRODUCER_EPOCH)


def test_epoch_bump_with_current_epoch_provided() -> None:
    # Kafka: testEpochBumpWithCurrentEpochProvided
    metadata = _metadata(producer_epoch=735, state=S.EMPTY)
    metadata.complete_transition_to(_increment(metadata, 735))
    assert (metadata.producer_epoch, metadata.last_producer_epoch) == (736, 735)


def test_attempted_epoch_bump_with_last_epoch() -> None:
    # Kafka: testAttemptedEpochBumpWithLastEpoch: a retry gets the current epoch again
    metadata = _metadata(producer_epoch=735, last_producer_epoch=734, state=S.EMPTY)
    metadata.complete_transition_to(_increment(metadata, 734))
    assert (metadata.producer_epoch, metadata.last_producer_epoch) == (735, 734)


def test_attempted_epoch_bump_with_fenced_epoch() -> None:
    # Kafka: testAttemptedEpochBumpWithFencedEpoch
    metadata = _metadata(producer_epoch=735, last_producer_epoch=734, state=S.EMPTY)
    assert metadata.prepare_increment_producer_epoch(30000, 733, NOW) is ErrorCode.producer_fenced
    assert metadata.pending_state is None


def test_transaction_state_id_and_name_mapping() -> None:
    # Kafka: testTransactionStateIdAndNameMapping, testAllTransactionStatesAreMapped
    names = {
        S.EMPTY: ("Empty", 0),
        S.ONGOING: ("Ongoing", 1),
        S.PREPARE_COMMIT: ("PrepareCommit", 2),
        S.PREPARE_ABORT: ("PrepareAbort", 3),
        S.COMPLETE_COMMIT: ("CompleteCommit", 4),
        S.COMPLETE_ABORT: ("CompleteAbort", 5),
        S.DEAD: ("Dead", 6),
        S.PREPARE_EPOCH_FENCE: ("PrepareEpochFence", 7),
    }
    assert set(names) == set(TransactionState)
    for state, (name, state_id) in names.items():
        assert TransactionState.from_id(state_id) is state
        assert TransactionState.from_name(name) is state
        assert state.state_name == name
    assert TransactionState.from_name("Unknown") is None
    with pytest.raises(CorruptTransactionLogRecordError, match="Unknown transaction state id 8"):
        TransactionState.from_id(8)


# ---------------------------------------------------------------- every transition
VALID_PREVIOUS = {
    S.EMPTY: {S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
    S.ONGOING: {S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
    S.PREPARE_COMMIT: {S.ONGOING},
    S.PREPARE_ABORT: {S.ONGOING, S.PREPARE_EPOCH_FENCE},
    S.COMPLETE_COMMIT: {S.PREPARE_COMMIT},
    S.COMPLETE_ABORT: {S.PREPARE_ABORT},
    S.DEAD: {S.EMPTY, S.COMPLETE_ABORT, S.COMPLETE_COMMIT},
    S.PREPARE_EPOCH_FENCE: {S.ONGOING},
}


@pytest.mark.parametrize("target", list(TransactionState))
@pytest.mark.parametrize("current", list(TransactionState))
def test_valid_previous_states_are_kafkas(
    current: TransactionState, target: TransactionState
) -> None:
    assert is_valid_transition(current, target) == (current in VALID_PREVIOUS[target])
    assert target.is_expiration_allowed == (
        target in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT)
    )


TP1 = TopicPartition("t", 1)
# (name, target state, prepare) for every prepare that moves to a state
PREPARES: list[tuple[str, TransactionState, Callable[[TransactionMetadata], object]]] = [
    ("increment epoch", S.EMPTY, lambda m: m.prepare_increment_producer_epoch(30000, None, NOW)),
    ("add partitions", S.ONGOING, lambda m: m.prepare_add_partitions({TP1}, NOW)),
    ("commit", S.PREPARE_COMMIT, lambda m: m.prepare_abort_or_commit(S.PREPARE_COMMIT, NOW)),
    ("abort", S.PREPARE_ABORT, lambda m: m.prepare_abort_or_commit(S.PREPARE_ABORT, NOW)),
    ("fence", S.PREPARE_EPOCH_FENCE, lambda m: m.prepare_fence_producer_epoch()),
    ("dead", S.DEAD, lambda m: m.prepare_dead()),
]  # fmt: skip


@pytest.mark.parametrize("current", list(TransactionState))
@pytest.mark.parametrize(("name", "target", "prepare"), PREPARES, ids=[p[0] for p in PREPARES])
def test_each_prepare_from_each_state(
    current: TransactionState,
    name: str,
    target: TransactionState,
    prepare: Callable[[TransactionMetadata], object],
) -> None:
    metadata = _metadata(
        producer_epoch=3, state=current, start_ms=NOW, partitions={TopicPartition("t", 0)}
    )
    if current in VALID_PREVIOUS[target]:
        transit = prepare(metadata)
        assert isinstance(transit, TxnTransitMetadata)
        assert transit.txn_state is target
        assert metadata.pending_state is target
        assert metadata.state is current  # nothing moves before the append completes
    else:
        with pytest.raises(IllegalTransactionStateTransitionError, match=target.state_name):
            prepare(metadata)
        assert metadata.pending_state is None


@pytest.mark.parametrize("current", list(TransactionState))
def test_prepare_complete_only_from_prepare_commit_or_abort(current: TransactionState) -> None:
    metadata = _metadata(producer_epoch=3, state=current, start_ms=NOW)
    if current in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
        transit = metadata.prepare_complete(NOW)
        metadata.complete_transition_to(transit)
        expected = S.COMPLETE_COMMIT if current is S.PREPARE_COMMIT else S.COMPLETE_ABORT
        assert metadata.state is expected
    else:
        with pytest.raises(IllegalTransactionStateTransitionError):
            metadata.prepare_complete(NOW)


def test_a_second_prepare_while_one_is_pending_is_refused() -> None:
    metadata = _metadata(producer_epoch=3, state=S.ONGOING, start_ms=NOW)
    metadata.prepare_abort_or_commit(S.PREPARE_COMMIT, NOW)
    with pytest.raises(IllegalTransactionStateTransitionError, match="already has a pending"):
        metadata.prepare_abort_or_commit(S.PREPARE_ABORT, NOW)
    assert metadata.pending_state is S.PREPARE_COMMIT


def test_end_txn_prepares_only_prepare_commit_or_abort() -> None:
    metadata = _metadata(producer_epoch=3, state=S.ONGOING, start_ms=NOW)
    with pytest.raises(IllegalTransactionStateTransitionError, match="not CompleteCommit"):
        metadata.prepare_abort_or_commit(S.COMPLETE_COMMIT, NOW)


def test_prepare_dead_keeps_an_uninitialised_epoch() -> None:
    metadata = _metadata(producer_epoch=NO_PRODUCER_EPOCH, state=S.EMPTY)
    assert metadata.prepare_dead().producer_epoch == NO_PRODUCER_EPOCH


# ---------------------------------------------------------------- completion checks
def test_complete_without_a_pending_state_is_refused() -> None:
    metadata = _metadata(producer_epoch=3, state=S.EMPTY)
    transit = metadata.prepare_no_transit()
    with pytest.raises(IllegalTransactionStateTransitionError, match="does not have a pending"):
        metadata.complete_transition_to(transit)


def test_complete_of_another_target_is_refused_and_changes_nothing() -> None:
    metadata = _metadata(producer_epoch=3, state=S.ONGOING, start_ms=NOW)
    metadata.prepare_abort_or_commit(S.PREPARE_COMMIT, NOW + 5)
    other = _metadata(producer_epoch=3, state=S.ONGOING, start_ms=NOW)
    abort = other.prepare_abort_or_commit(S.PREPARE_ABORT, NOW + 5)
    with pytest.raises(IllegalTransactionStateTransitionError, match="unexpected metadata"):
        metadata.complete_transition_to(abort)
    assert metadata.state is S.ONGOING and metadata.txn_last_update_timestamp_ms == NOW


def test_complete_with_an_epoch_that_does_not_follow_is_refused() -> None:
    metadata = _metadata(producer_epoch=3, state=S.ONGOING, start_ms=NOW)
    transit = metadata.prepare_abort_or_commit(S.PREPARE_COMMIT, NOW)
    metadata.producer_epoch = 4  # someone bumped it meanwhile
    with pytest.raises(IllegalTransactionStateTransitionError):
        metadata.complete_transition_to(transit)
    assert metadata.state is S.ONGOING


def test_complete_of_an_epoch_fence_or_dead_is_refused() -> None:
    metadata = _metadata(producer_epoch=3, state=S.ONGOING, start_ms=NOW)
    fence = metadata.prepare_fence_producer_epoch()
    with pytest.raises(IllegalTransactionStateTransitionError):
        metadata.complete_transition_to(fence)
    empty = _metadata(producer_epoch=3, state=S.EMPTY)
    dead = empty.prepare_dead()
    with pytest.raises(IllegalTransactionStateTransitionError, match="Dead"):
        empty.complete_transition_to(dead)


def test_remove_partition_only_while_markers_are_written() -> None:
    tp = TopicPartition("t", 0)
    metadata = _metadata(producer_epoch=3, state=S.PREPARE_COMMIT, partitions={tp})
    metadata.remove_partition(tp)
    assert metadata.topic_partitions == set()
    ongoing = _metadata(producer_epoch=3, state=S.ONGOING, partitions={tp})
    with pytest.raises(IllegalTransactionStateTransitionError, match="not expected"):
        ongoing.remove_partition(tp)
