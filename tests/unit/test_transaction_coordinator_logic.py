"""The transaction coordinator's decisions (Kafka's TransactionCoordinator and the pure parts of
TransactionStateManager), driven as the broker will drive them: decide, append (its outcome
given here), complete.

Cases named after a Kafka test port ``TransactionCoordinatorTest.scala`` or
``TransactionStateManagerTest.scala`` (transaction.version 0, as Kafka 3.9 runs in ZooKeeper
mode). Where Kafka's test mocks the append, the outcome here is the ``append_error`` passed to
the completion.
"""

from __future__ import annotations

import itertools

import pytest
from kio.schema.errors import ErrorCode

from storage_core.common import TopicPartition
from storage_core.coordinator.group.offsets_records import OFFSETS_TOPIC_NAME
from storage_core.coordinator.group.offsets_records import partition_for as offsets_partition_for
from storage_core.coordinator.transaction.errors import ProducerIdGenerationError
from storage_core.coordinator.transaction.transaction_coordinator_logic import (
    abort_timed_out_transaction,
    after_end_txn_append,
    after_init_producer_id_append,
    handle_add_offsets_to_transaction,
    handle_add_partitions_to_transaction,
    handle_end_transaction,
    handle_init_producer_id,
    handle_verify_partitions_in_transaction,
)
from storage_core.coordinator.transaction.transaction_metadata import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    TransactionMetadata,
    TxnTransitMetadata,
)
from storage_core.coordinator.transaction.transaction_results import (
    ADD_OFFSETS_TO_TXN_KEY,
    ADD_PARTITIONS_TO_TXN_KEY,
    END_TXN_KEY,
    INIT_PRODUCER_ID_KEY,
    AddPartitionsResult,
    EndTxnResult,
    InitProducerIdResult,
    ProducerIdAndEpoch,
    TransactionResult,
    expected_producer_id_and_epoch,
    producer_fenced_for_version,
)
from storage_core.coordinator.transaction.transaction_state import TransactionState
from storage_core.coordinator.transaction.transaction_state_manager_logic import (
    TransactionalIdAndProducerIdEpoch,
    TransactionConfig,
    complete_append,
    complete_expiration,
    coordinator_error_for_append,
    expired_transactional_ids,
    timed_out_transactions,
    transactions_pending_completion,
)

E = ErrorCode
S = TransactionState
COMMIT, ABORT = TransactionResult.COMMIT, TransactionResult.ABORT
TXN_ID = "known"
PRODUCER_ID = 10
PRODUCER_EPOCH = 1
TXN_TIMEOUT_MS = 1000
NOW = 1_700_000_000_000
SHORT_MAX = 32767
PARTITIONS = frozenset({TopicPartition("topic1", 0)})
CONFIG = TransactionConfig()


class PidGenerator:
    """Producer ids 0, 1, 2, ... as a block-backed ProducerIdManager hands them out."""

    def __init__(self, first: int = 0) -> None:
        self._ids = itertools.count(first)
        self.calls = 0

    def __call__(self) -> int:
        self.calls += 1
        return next(self._ids)


def _metadata(
    state: TransactionState,
    *,
    producer_id: int = PRODUCER_ID,
    last_producer_id: int = PRODUCER_ID,
    producer_epoch: int = PRODUCER_EPOCH,
    last_producer_epoch: int = NO_PRODUCER_EPOCH,
    partitions: frozenset[TopicPartition] = frozenset(),
    start_ms: int = NOW,
    update_ms: int = NOW,
) -> TransactionMetadata:
    return TransactionMetadata(
        transactional_id=TXN_ID,
        producer_id=producer_id,
        last_producer_id=last_producer_id,
        producer_epoch=producer_epoch,
        last_producer_epoch=last_producer_epoch,
        txn_timeout_ms=TXN_TIMEOUT_MS,
        state=state,
        topic_partitions=partitions,
        txn_start_timestamp_ms=start_ms,
        txn_last_update_timestamp_ms=update_ms,
    )


def _init(
    metadata: TransactionMetadata | None,
    expected: ProducerIdAndEpoch | None = None,
    *,
    pids: PidGenerator | None = None,
    transactional_id: str | None = TXN_ID,
    timeout_ms: int = TXN_TIMEOUT_MS,
) -> InitProducerIdResult:
    return handle_init_producer_id(
        transactional_id,
        timeout_ms,
        expected,
        metadata,
        config=CONFIG,
        generate_producer_id=pids or PidGenerator(100),
        now_ms=NOW,
    )


def _init_and_append(
    metadata: TransactionMetadata,
    expected: ProducerIdAndEpoch | None = None,
    *,
    pids: PidGenerator | None = None,
) -> tuple[ErrorCode, int, int]:
    result = _init(metadata, expected, pids=pids)
    if result.append is None and result.end_txn is None:
        return result.error, result.producer_id, result.producer_epoch
    done = after_init_producer_id_append(result, metadata, E.none, NOW)
    return done.error, done.producer_id, done.producer_epoch


def _end(
    metadata: TransactionMetadata | None, epoch: int, result: TransactionResult
) -> EndTxnResult:
    return handle_end_transaction(TXN_ID, PRODUCER_ID, epoch, result, metadata, now_ms=NOW)


def _write_markers_and_complete(metadata: TransactionMetadata, end: EndTxnResult) -> None:
    done = after_end_txn_append(end, metadata, E.none, NOW)
    assert done.markers is not None
    assert complete_append(metadata, done.markers.complete, E.none) is E.none


# ====================================================================== InitProducerId
def test_should_return_invalid_request_when_transactional_id_is_empty() -> None:
    # Kafka: shouldReturnInvalidRequestWhenTransactionalIdIsEmpty
    result = _init(None, transactional_id="")
    assert (result.error, result.producer_id, result.producer_epoch) == (E.invalid_request, -1, -1)


def test_should_accept_init_pid_and_return_next_pid_when_transactional_id_is_null() -> None:
    # Kafka: shouldAcceptInitPidAndReturnNextPidWhenTransactionalIdIsNull
    pids = PidGenerator(0)
    first = _init(None, pids=pids, transactional_id=None)
    second = _init(None, pids=pids, transactional_id=None)
    assert (first.error, first.producer_id, first.producer_epoch) == (E.none, 0, 0)
    assert (second.producer_id, second.producer_epoch) == (1, 0)
    assert first.append is None and first.created is None


def test_should_init_pid_with_epoch_zero_for_new_transactional_id() -> None:
    # Kafka: shouldInitPidWithEpochZeroForNewTransactionalId
    result = _init(None, pids=PidGenerator(7))
    assert result.created is not None and result.append is not None
    assert result.created.producer_epoch == NO_PRODUCER_EPOCH
    assert result.append.txn_state is S.EMPTY
    done = after_init_producer_id_append(result, result.created, E.none, NOW)
    assert (done.error, done.producer_id, done.producer_epoch) == (E.none, 7, 0)
    assert (result.created.state, result.created.producer_epoch) == (S.EMPTY, 0)


def test_should_generate_new_producer_id_if_no_state_and_producer_id_and_epoch_provided() -> None:
    # Kafka: shouldGenerateNewProducerIdIfNoStateAndProducerIdAndEpochProvided
    result = _init(None, ProducerIdAndEpoch(PRODUCER_ID, PRODUCER_EPOCH), pids=PidGenerator(7))
    assert result.created is not None
    done = after_init_producer_id_append(result, result.created, E.none, NOW)
    assert (done.error, done.producer_id, done.producer_epoch) == (E.none, 7, 0)


def test_should_generate_new_producer_id_if_epochs_exhausted() -> None:
    # Kafka: shouldGenerateNewProducerIdIfEpochsExhausted
    metadata = _metadata(S.EMPTY, producer_epoch=SHORT_MAX - 1, last_producer_epoch=SHORT_MAX - 2)
    error, producer_id, epoch = _init_and_append(metadata, pids=PidGenerator(500))
    assert (error, producer_id, epoch) == (E.none, 500, 0)
    assert metadata.last_producer_id == PRODUCER_ID
    assert metadata.last_producer_epoch == NO_PRODUCER_EPOCH  # no epoch named: not a retry


@pytest.mark.parametrize("timeout_ms", [0, -1, CONFIG.transaction_max_timeout_ms + 1])
def test_transaction_timeout_above_the_maximum_is_refused(timeout_ms: int) -> None:
    # Kafka: testValidateTransactionTimeout (TransactionStateManagerTest)
    pids = PidGenerator()
    assert _init(None, pids=pids, timeout_ms=timeout_ms).error is E.invalid_transaction_timeout
    assert pids.calls == 0
    assert CONFIG.validate_transaction_timeout_ms(CONFIG.transaction_max_timeout_ms)


def test_a_producer_id_that_cannot_be_generated_is_answered_with_its_error() -> None:
    def unavailable() -> int:
        raise ProducerIdGenerationError("no block yet", E.coordinator_load_in_progress)

    result = handle_init_producer_id(
        TXN_ID,
        TXN_TIMEOUT_MS,
        None,
        None,
        config=CONFIG,
        generate_producer_id=unavailable,
        now_ms=NOW,
    )
    assert (result.error, result.created, result.append) == (
        E.coordinator_load_in_progress,
        None,
        None,
    )


@pytest.mark.parametrize("state", [S.EMPTY, S.COMPLETE_ABORT, S.COMPLETE_COMMIT])
def test_should_increment_epoch_and_update_metadata_on_handle_init_pid(
    state: TransactionState,
) -> None:
    # Kafka: shouldIncrementEpochAndUpdateMetadataOnHandleInitPidWhenExisting{Empty,Complete,
    # CompleteCommit}Transaction
    metadata = _metadata(state, last_producer_epoch=PRODUCER_EPOCH - 1)
    assert _init_and_append(metadata) == (E.none, PRODUCER_ID, PRODUCER_EPOCH + 1)
    assert (metadata.state, metadata.producer_epoch) == (S.EMPTY, PRODUCER_EPOCH + 1)


@pytest.mark.parametrize("state", [S.PREPARE_COMMIT, S.PREPARE_ABORT])
def test_should_wait_for_commit_to_complete_on_handle_init_pid(state: TransactionState) -> None:
    # Kafka: shouldWaitForCommitToCompleteOnHandleInitPidAndExistingTransactionInPrepare{Commit,
    # Abort}State
    result = _init(_metadata(state, partitions=PARTITIONS))
    assert (result.error, result.append, result.end_txn) == (E.concurrent_transactions, None, None)


def test_should_abort_transaction_on_handle_init_pid_when_existing_transaction_ongoing() -> None:
    # Kafka: shouldAbortTransactionOnHandleInitPidWhenExistingTransactionInOngoingState
    metadata = _metadata(S.ONGOING, last_producer_epoch=PRODUCER_EPOCH - 1, partitions=PARTITIONS)
    result = _init(metadata)
    assert result.end_txn is not None and result.end_txn.is_epoch_fence
    assert result.end_txn.append == TxnTransitMetadata(
        producer_id=PRODUCER_ID,
        last_producer_id=PRODUCER_ID,
        producer_epoch=PRODUCER_EPOCH + 1,
        last_producer_epoch=NO_PRODUCER_EPOCH,
        txn_timeout_ms=TXN_TIMEOUT_MS,
        txn_state=S.PREPARE_ABORT,
        topic_partitions=PARTITIONS,
        txn_start_timestamp_ms=NOW,
        txn_last_update_timestamp_ms=NOW,
    )
    done = after_init_producer_id_append(result, metadata, E.none, NOW)
    assert (done.error, done.producer_id, done.producer_epoch) == (
        E.concurrent_transactions,
        -1,
        -1,
    )
    assert done.markers is not None
    assert (done.markers.result, done.markers.producer_epoch) == (ABORT, PRODUCER_EPOCH + 1)
    assert done.markers.topic_partitions == PARTITIONS
    # Markers written, CompleteAbort appended: the client's retry gets the next epoch.
    assert complete_append(metadata, done.markers.complete, E.none) is E.none
    assert metadata.state is S.COMPLETE_ABORT
    assert _init_and_append(metadata) == (E.none, PRODUCER_ID, PRODUCER_EPOCH + 2)


def test_should_fail_to_abort_transaction_on_handle_init_pid_when_producer_epoch_is_smaller() -> (
    None
):
    # Kafka: shouldFailToAbortTransactionOnHandleInitPidWhenProducerEpochIsSmaller: the epoch
    # moved past the fence before the abort is decided.
    metadata = _metadata(S.ONGOING, partitions=PARTITIONS)
    fence = metadata.prepare_fence_producer_epoch()
    metadata.producer_epoch = PRODUCER_EPOCH + 2
    end = handle_end_transaction(
        TXN_ID, PRODUCER_ID, fence.producer_epoch, ABORT, metadata, from_client=False, now_ms=NOW
    )
    assert (end.error, end.append) == (E.producer_fenced, None)


def test_should_not_repeatedly_bump_epoch_due_to_init_pid_during_ongoing_txn_if_append_fails() -> (
    None
):
    # Kafka: shouldNotRepeatedlyBumpEpochDueToInitPidDuringOngoingTxnIfAppendToLogFails
    metadata = _metadata(S.ONGOING, partitions=PARTITIONS)
    for _ in range(2):
        result = _init(metadata)
        done = after_init_producer_id_append(result, metadata, E.not_enough_replicas, NOW)
        assert done.error is E.coordinator_not_available  # the append error as clients see it
        assert metadata.producer_epoch == PRODUCER_EPOCH + 1
        assert metadata.has_failed_epoch_fence
        assert (metadata.state, metadata.pending_state) == (S.ONGOING, None)
    result = _init(metadata)
    assert result.end_txn is not None and result.end_txn.append is not None
    assert result.end_txn.append.producer_epoch == PRODUCER_EPOCH + 1
    done = after_init_producer_id_append(result, metadata, E.none, NOW)
    assert done.error is E.concurrent_transactions
    assert metadata.producer_epoch == PRODUCER_EPOCH + 1
    assert not metadata.has_failed_epoch_fence


def test_should_use_last_epoch_to_fence_when_epochs_are_exhausted() -> None:
    # Kafka: shouldUseLastEpochToFenceWhenEpochsAreExhausted
    metadata = _metadata(
        S.ONGOING,
        producer_epoch=SHORT_MAX - 1,
        last_producer_epoch=SHORT_MAX - 2,
        partitions=PARTITIONS,
    )
    result = _init(metadata)
    assert result.end_txn is not None and result.end_txn.append is not None
    assert result.end_txn.append.producer_epoch == SHORT_MAX
    assert result.end_txn.append.last_producer_epoch == NO_PRODUCER_EPOCH
    assert result.end_txn.append.txn_state is S.PREPARE_ABORT
    done = after_init_producer_id_append(result, metadata, E.none, NOW)
    assert done.error is E.concurrent_transactions and metadata.producer_epoch == SHORT_MAX
    assert done.markers is not None
    complete_append(metadata, done.markers.complete, E.none)
    # The retry rotates the producer id: the epochs of the old one are used up.
    assert _init_and_append(metadata, pids=PidGenerator(900)) == (E.none, 900, 0)


def test_init_producer_id_with_no_last_producer_data() -> None:
    # Kafka: testInitProducerIdWithNoLastProducerData
    metadata = _metadata(
        S.EMPTY, last_producer_id=NO_PRODUCER_ID, producer_epoch=PRODUCER_EPOCH + 1
    )
    result = _init(metadata, ProducerIdAndEpoch(PRODUCER_ID, PRODUCER_EPOCH))
    assert (result.error, result.producer_id, result.producer_epoch) == (E.producer_fenced, -1, -1)


def test_fence_producer_when_mapping_exists_with_different_producer_id() -> None:
    # Kafka: testFenceProducerWhenMappingExistsWithDifferentProducerId
    metadata = _metadata(S.EMPTY, producer_id=PRODUCER_ID + 1, last_producer_id=PRODUCER_ID)
    result = _init(metadata, ProducerIdAndEpoch(PRODUCER_ID, PRODUCER_EPOCH))
    assert result.error is E.producer_fenced and result.append is None


def test_init_producer_id_with_current_epoch_provided() -> None:
    # Kafka: testInitProducerIdWithCurrentEpochProvided: a retry gets the same answer
    metadata = _metadata(S.EMPTY, producer_epoch=10, last_producer_epoch=9)
    assert _init_and_append(metadata, ProducerIdAndEpoch(PRODUCER_ID, 10)) == (
        E.none,
        PRODUCER_ID,
        11,
    )
    assert _init_and_append(metadata, ProducerIdAndEpoch(PRODUCER_ID, 10)) == (
        E.none,
        PRODUCER_ID,
        11,
    )


def test_init_producer_id_stale_current_epoch_provided() -> None:
    # Kafka: testInitProducerIdStaleCurrentEpochProvided
    metadata = _metadata(S.EMPTY, producer_epoch=10, last_producer_epoch=9)
    assert _init_and_append(metadata) == (E.none, PRODUCER_ID, 11)
    assert _init_and_append(metadata, ProducerIdAndEpoch(PRODUCER_ID, 10)) == (
        E.producer_fenced,
        -1,
        -1,
    )


def test_retry_init_producer_id_after_producer_id_rotation() -> None:
    # Kafka: testRetryInitProducerIdAfterProducerIdRotation
    metadata = _metadata(S.EMPTY, producer_epoch=SHORT_MAX - 1, last_producer_epoch=SHORT_MAX - 2)
    old = ProducerIdAndEpoch(PRODUCER_ID, SHORT_MAX - 1)
    assert _init_and_append(metadata, old, pids=PidGenerator(PRODUCER_ID + 1)) == (
        E.none,
        PRODUCER_ID + 1,
        0,
    )
    assert _init_and_append(metadata, old, pids=PidGenerator(999)) == (E.none, PRODUCER_ID + 1, 0)


def test_init_producer_id_with_invalid_epoch_after_producer_id_rotation() -> None:
    # Kafka: testInitProducerIdWithInvalidEpochAfterProducerIdRotation
    metadata = _metadata(S.EMPTY, producer_epoch=SHORT_MAX - 1, last_producer_epoch=SHORT_MAX - 2)
    old = ProducerIdAndEpoch(PRODUCER_ID, SHORT_MAX - 1)
    assert _init_and_append(metadata, old, pids=PidGenerator(PRODUCER_ID + 1))[0] is E.none
    stale = ProducerIdAndEpoch(PRODUCER_ID, SHORT_MAX - 2)
    assert _init_and_append(metadata, stale) == (E.producer_fenced, -1, -1)


def test_should_not_bump_epoch_with_pending_transaction() -> None:
    # Kafka: shouldNotBumpEpochWithPendingTransaction
    metadata = _metadata(S.ONGOING, partitions=PARTITIONS)
    metadata.prepare_abort_or_commit(S.PREPARE_COMMIT, NOW)
    result = _init(metadata, ProducerIdAndEpoch(PRODUCER_ID, 10))
    assert (result.error, result.producer_id, result.producer_epoch) == (
        E.concurrent_transactions,
        -1,
        -1,
    )


def test_init_append_failure_answers_the_error_and_leaves_the_epoch() -> None:
    metadata = _metadata(S.EMPTY)
    result = _init(metadata)
    done = after_init_producer_id_append(result, metadata, E.not_leader_or_follower, NOW)
    assert (done.error, done.producer_id) == (E.not_coordinator, -1)
    assert (metadata.producer_epoch, metadata.pending_state) == (PRODUCER_EPOCH, None)


# ====================================================================== AddPartitions / AddOffsets
def _add(
    metadata: TransactionMetadata | None,
    producer_id: int = PRODUCER_ID,
    epoch: int = PRODUCER_EPOCH,
    transactional_id: str | None = TXN_ID,
) -> AddPartitionsResult:
    return handle_add_partitions_to_transaction(
        transactional_id, producer_id, epoch, PARTITIONS, metadata, now_ms=NOW
    )


def test_add_partitions_invalid_pid_mapping_when_transactional_id_not_present() -> None:
    # Kafka:
    # shouldRespondWithInvalidPidMappingOnAddPartitionsToTransactionWhenTransactionalIdNotPresent
    assert _add(None).error is E.invalid_producer_id_mapping
    assert (
        _add(_metadata(S.EMPTY), producer_id=PRODUCER_ID + 1).error is E.invalid_producer_id_mapping
    )


@pytest.mark.parametrize("transactional_id", ["", None])
def test_should_respond_with_invalid_request_add_partitions_when_transactional_id_empty_or_null(
    transactional_id: str | None,
) -> None:
    # Kafka:
    # shouldRespondWithInvalidRequestAddPartitionsToTransactionWhenTransactionalIdIs{Empty,Null}
    assert _add(_metadata(S.EMPTY), transactional_id=transactional_id).error is E.invalid_request


@pytest.mark.parametrize("state", [S.PREPARE_COMMIT, S.PREPARE_ABORT])
def test_should_respond_with_concurrent_transactions_on_add_partitions(
    state: TransactionState,
) -> None:
    # Kafka: shouldRespondWithConcurrentTransactionsOnAddPartitionsWhenStateIsPrepareCommit,
    # shouldRespondWithConcurrentTransactionOnAddPartitionsWhenStateIsPrepareAbort
    assert _add(_metadata(state)).error is E.concurrent_transactions


def test_add_partitions_while_a_transition_is_pending_is_concurrent() -> None:
    metadata = _metadata(S.EMPTY)
    metadata.prepare_increment_producer_epoch(TXN_TIMEOUT_MS, None, NOW)
    assert _add(metadata).error is E.concurrent_transactions


def test_should_respond_with_producer_fenced_on_add_partitions_when_epochs_are_different() -> None:
    # Kafka: shouldRespondWithProducerFencedOnAddPartitionsWhenEpochsAreDifferent
    metadata = _metadata(S.PREPARE_COMMIT, producer_epoch=10, last_producer_epoch=9)
    assert _add(metadata, epoch=0).error is E.producer_fenced


@pytest.mark.parametrize("state", [S.EMPTY, S.ONGOING, S.COMPLETE_COMMIT, S.COMPLETE_ABORT])
def test_should_append_new_metadata_to_log_on_add_partitions(state: TransactionState) -> None:
    # Kafka: shouldAppendNewMetadataToLogOnAddPartitionsWhenPartitionsAdded,
    # shouldRespondWithSuccessOnAddPartitionsWhenStateIs{Ongoing,CompleteCommit,CompleteAbort}
    metadata = _metadata(state, start_ms=NOW - 50, update_ms=NOW - 50)
    result = _add(metadata)
    assert result.error is E.none and result.append is not None
    assert result.append.txn_state is S.ONGOING and result.append.topic_partitions == PARTITIONS
    assert complete_append(metadata, result.append, E.none) is E.none
    assert metadata.state is S.ONGOING and metadata.topic_partitions == PARTITIONS
    expected_start = NOW - 50 if state is S.ONGOING else NOW
    assert metadata.txn_start_timestamp_ms == expected_start


def test_add_partition_errors_none_when_no_errors_and_partitions_the_same() -> None:
    # Kafka: shouldRespondWithErrorsNoneOnAddPartitionWhenNoErrorsAndPartitionsTheSame
    metadata = _metadata(S.ONGOING, partitions=PARTITIONS)
    result = _add(metadata)
    assert (result.error, result.append, metadata.pending_state) == (E.none, None, None)


def test_add_offsets_adds_the_groups_consumer_offsets_partition() -> None:
    # KafkaApis.handleAddOffsetsToTxnRequest: the group's partition as its coordinator finds it
    metadata = _metadata(S.EMPTY)
    result = handle_add_offsets_to_transaction(
        TXN_ID,
        PRODUCER_ID,
        PRODUCER_EPOCH,
        "my-group",
        metadata,
        offsets_topic_num_partitions=50,
        now_ms=NOW,
    )
    offsets_tp = TopicPartition(OFFSETS_TOPIC_NAME, offsets_partition_for("my-group", 50))
    assert result.append is not None and result.append.topic_partitions == {offsets_tp}
    fenced = handle_add_offsets_to_transaction(
        TXN_ID,
        PRODUCER_ID,
        0,
        "my-group",
        _metadata(S.EMPTY),
        offsets_topic_num_partitions=50,
        now_ms=NOW,
    )
    assert fenced.error is E.producer_fenced


def test_verify_partition_handling() -> None:
    # Kafka: testVerifyPartitionHandling
    wrong_pid = _metadata(S.PREPARE_COMMIT, producer_id=1, producer_epoch=0, partitions=PARTITIONS)
    verify = handle_verify_partitions_in_transaction
    assert verify(TXN_ID, 0, 0, PARTITIONS, wrong_pid) == dict.fromkeys(
        PARTITIONS, E.invalid_producer_id_mapping
    )
    old_epoch = _metadata(S.PREPARE_COMMIT, producer_id=0, producer_epoch=0, partitions=PARTITIONS)
    assert verify(TXN_ID, 0, 1, PARTITIONS, old_epoch) == dict.fromkeys(
        PARTITIONS, E.producer_fenced
    )
    assert verify(TXN_ID, 0, 0, PARTITIONS, old_epoch) == dict.fromkeys(
        PARTITIONS, E.concurrent_transactions
    )
    ongoing = _metadata(S.ONGOING, producer_id=0, producer_epoch=0)
    ongoing.pending_state = S.COMPLETE_COMMIT  # a pending state is not checked
    assert verify(TXN_ID, 0, 0, PARTITIONS, ongoing) == dict.fromkeys(
        PARTITIONS, E.transaction_abortable
    )
    assert verify("", 0, 0, PARTITIONS, ongoing) == dict.fromkeys(PARTITIONS, E.invalid_request)
    assert verify(TXN_ID, 0, 0, PARTITIONS, None) == dict.fromkeys(
        PARTITIONS, E.invalid_producer_id_mapping
    )


def test_verify_only_errors_none_when_ongoing_and_partitions_the_same() -> None:
    # Kafka: shouldRespondWithErrorsNoneOnAddPartitionWhenOngoingVerifyOnlyAndPartitionsTheSame
    metadata = _metadata(S.ONGOING, producer_id=0, producer_epoch=0, partitions=PARTITIONS)
    assert handle_verify_partitions_in_transaction(
        TXN_ID, 0, 0, PARTITIONS, metadata
    ) == dict.fromkeys(PARTITIONS, E.none)


def test_should_respond_with_invalid_txn_state_when_verify_only_and_partition_not_present() -> None:
    # Kafka: shouldRespondWithInvalidTxnStateWhenVerifyOnlyAndPartitionNotPresent
    metadata = _metadata(S.EMPTY, producer_id=0, producer_epoch=0, partitions=PARTITIONS)
    extra = TopicPartition("topic2", 0)
    errors = handle_verify_partitions_in_transaction(TXN_ID, 0, 0, PARTITIONS | {extra}, metadata)
    assert errors == {TopicPartition("topic1", 0): E.none, extra: E.transaction_abortable}


# ====================================================================== EndTxn
def test_should_reply_with_invalid_pid_mapping_on_end_txn() -> None:
    # Kafka: shouldReplyWithInvalidPidMappingOnEndTxnWhenTxnIdDoesntExist,
    # shouldReplyWithInvalidPidMappingOnEndTxnWhenPidDosentMatchMapped
    assert _end(None, 0, COMMIT).error is E.invalid_producer_id_mapping
    other = _metadata(S.ONGOING, producer_id=PRODUCER_ID + 5, producer_epoch=0)
    assert _end(other, 0, COMMIT).error is E.invalid_producer_id_mapping


@pytest.mark.parametrize("transactional_id", ["", None])
def test_should_respond_with_invalid_request_on_end_txn(transactional_id: str | None) -> None:
    # Kafka: shouldRespondWithInvalidRequestOnEndTxnWhenTransactionalIdIs{Null,Empty}
    end = handle_end_transaction(transactional_id, 0, 0, COMMIT, _metadata(S.ONGOING), now_ms=NOW)
    assert end.error is E.invalid_request


def test_should_reply_with_producer_fenced_on_end_txn_when_epoch_is_not_same_as_transaction() -> (
    None
):
    # Kafka: shouldReplyWithProducerFencedOnEndTxnWhenEpochIsNotSameAsTransaction
    metadata = _metadata(S.ONGOING, last_producer_epoch=PRODUCER_EPOCH - 1)
    assert _end(metadata, 0, COMMIT).error is E.producer_fenced


@pytest.mark.parametrize("request_epoch", [2, 0], ids=["larger", "smaller"])
def test_should_return_invalid_epoch_on_end_txn(request_epoch: int) -> None:
    # Kafka: shouldReturnInvalidEpochOnEndTxnWhenEpochIsLarger, ...WhenEpochIsSmaller
    metadata = _metadata(S.COMPLETE_COMMIT, producer_epoch=1, last_producer_epoch=1)
    assert _end(metadata, request_epoch, COMMIT).error is E.producer_fenced


@pytest.mark.parametrize(
    ("state", "result", "error"),
    [
        (S.COMPLETE_COMMIT, COMMIT, E.none),  # ...WhenStatusIsCompleteCommitAndResultIsCommit
        (S.COMPLETE_ABORT, ABORT, E.none),  # ...WhenStatusIsCompleteAbortAndResultIsAbort
        (S.COMPLETE_ABORT, COMMIT, E.invalid_txn_state),  # ...CompleteAbortAndResultIsNotAbort
        (S.COMPLETE_COMMIT, ABORT, E.invalid_txn_state),  # ...CompleteCommitAndResultIsNotCommit
        (S.PREPARE_COMMIT, COMMIT, E.concurrent_transactions),  # ...WhenStatusIsPrepareCommit
        (S.PREPARE_ABORT, ABORT, E.concurrent_transactions),
        (S.PREPARE_ABORT, COMMIT, E.invalid_txn_state),  # ...WhenStatusIsPrepareAbort
        (S.PREPARE_COMMIT, ABORT, E.invalid_txn_state),
        (S.EMPTY, COMMIT, E.invalid_txn_state),
        (S.EMPTY, ABORT, E.invalid_txn_state),
    ],
)  # fmt: skip
def test_end_txn_outside_an_ongoing_transaction(
    state: TransactionState, result: TransactionResult, error: ErrorCode
) -> None:
    # Kafka: the shouldReturn...OnEndTxn... cases named beside each row
    metadata = _metadata(state, last_producer_epoch=PRODUCER_EPOCH - 1)
    end = _end(metadata, PRODUCER_EPOCH, result)
    assert (end.error, end.append, metadata.pending_state) == (error, None, None)
    answer = (PRODUCER_ID, PRODUCER_EPOCH) if error is E.none else (-1, -1)
    assert (end.producer_id, end.producer_epoch) == answer


def test_end_txn_while_a_transition_is_pending_is_concurrent() -> None:
    metadata = _metadata(S.ONGOING, partitions=PARTITIONS)
    metadata.prepare_add_partitions({TopicPartition("topic2", 0)}, NOW)
    assert _end(metadata, PRODUCER_EPOCH, COMMIT).error is E.concurrent_transactions


@pytest.mark.parametrize(
    ("result", "prepared", "completed"),
    [(COMMIT, S.PREPARE_COMMIT, S.COMPLETE_COMMIT), (ABORT, S.PREPARE_ABORT, S.COMPLETE_ABORT)],
)
def test_should_append_prepare_to_log_on_end_txn_then_send_markers(
    result: TransactionResult, prepared: TransactionState, completed: TransactionState
) -> None:
    # Kafka: shouldAppendPrepareCommitToLogOnEndTxnWhenStatusIsOngoingAndResultIsCommit,
    # shouldAppendPrepareAbortToLogOnEndTxnWhenStatusIsOngoingAndResultIsAbort, then the
    # markers (sendTxnMarkersCallback) and a retry of the completed EndTxn.
    metadata = _metadata(S.ONGOING, partitions=PARTITIONS)
    end = _end(metadata, PRODUCER_EPOCH, result)
    assert end.error is E.none and end.append is not None and not end.is_epoch_fence
    assert end.append.txn_state is prepared and end.append.topic_partitions == PARTITIONS
    done = after_end_txn_append(end, metadata, E.none, NOW + 1)
    assert (done.error, done.producer_id, done.producer_epoch) == (
        E.none,
        PRODUCER_ID,
        PRODUCER_EPOCH,
    )
    assert done.markers is not None
    assert done.markers.result is result and done.markers.topic_partitions == PARTITIONS
    assert (done.markers.producer_id, done.markers.producer_epoch) == (PRODUCER_ID, PRODUCER_EPOCH)
    assert done.markers.complete.txn_state is completed
    assert metadata.state is prepared and metadata.pending_state is completed
    # Until the markers are written, a retry waits; then it is answered as a success.
    assert _end(metadata, PRODUCER_EPOCH, result).error is E.concurrent_transactions
    assert complete_append(metadata, done.markers.complete, E.none) is E.none
    assert metadata.state is completed and metadata.topic_partitions == set()
    retry = _end(metadata, PRODUCER_EPOCH, result)
    assert (retry.error, retry.producer_id, retry.producer_epoch) == (
        E.none,
        PRODUCER_ID,
        PRODUCER_EPOCH,
    )


def test_end_txn_append_failure_leaves_the_transaction_ongoing() -> None:
    metadata = _metadata(S.ONGOING, partitions=PARTITIONS)
    end = _end(metadata, PRODUCER_EPOCH, COMMIT)
    done = after_end_txn_append(end, metadata, E.not_enough_replicas_after_append, NOW)
    assert (done.error, done.markers) == (E.coordinator_not_available, None)
    assert (metadata.state, metadata.pending_state) == (S.ONGOING, None)
    assert not metadata.has_failed_epoch_fence


# ====================================================================== request versions
@pytest.mark.parametrize(
    ("api_key", "old", "new"),
    [
        (INIT_PRODUCER_ID_KEY, 3, 4),
        (ADD_PARTITIONS_TO_TXN_KEY, 1, 2),
        (ADD_OFFSETS_TO_TXN_KEY, 1, 2),
        (END_TXN_KEY, 1, 2),
    ],
)  # fmt: skip
def test_producer_fenced_is_invalid_producer_epoch_for_older_clients(
    api_key: int, old: int, new: int
) -> None:
    assert producer_fenced_for_version(api_key, old, E.producer_fenced) is E.invalid_producer_epoch
    assert producer_fenced_for_version(api_key, new, E.producer_fenced) is E.producer_fenced
    assert (
        producer_fenced_for_version(api_key, 0, E.concurrent_transactions)
        is E.concurrent_transactions
    )


def test_expected_producer_id_and_epoch_both_or_none() -> None:
    assert expected_producer_id_and_epoch(-1, -1) is None
    assert expected_producer_id_and_epoch(-1, 5) is E.invalid_request
    assert expected_producer_id_and_epoch(5, -1) is E.invalid_request
    assert expected_producer_id_and_epoch(5, 3) == ProducerIdAndEpoch(5, 3)


# ====================================================================== appends
@pytest.mark.parametrize(
    ("append_error", "answer"),
    [
        (E.unknown_topic_or_partition, E.coordinator_not_available),  # ...NotAvailableError
        (E.not_enough_replicas, E.coordinator_not_available),
        (E.not_enough_replicas_after_append, E.coordinator_not_available),
        (E.request_timed_out, E.coordinator_not_available),
        (E.not_leader_or_follower, E.not_coordinator),  # testAppendFailToNotCoordinatorError
        (E.kafka_storage_error, E.not_coordinator),
        (E.message_too_large, E.unknown_server_error),  # testAppendFailToUnknownError
        (E.record_list_too_large, E.unknown_server_error),
        (E.coordinator_load_in_progress, E.coordinator_load_in_progress),  # ...LoadingError
    ],
)  # fmt: skip
def test_append_errors_as_clients_see_them(append_error: ErrorCode, answer: ErrorCode) -> None:
    # Kafka: TransactionStateManagerTest's testAppendFailTo... cases
    assert coordinator_error_for_append(append_error) is answer
    metadata = _metadata(S.EMPTY)
    transit = metadata.prepare_add_partitions(PARTITIONS, NOW)
    assert complete_append(metadata, transit, append_error) is answer
    assert (metadata.state, metadata.pending_state) == (S.EMPTY, None)


def test_pending_state_not_reset_on_retry_append() -> None:
    # Kafka: testPendingStateNotResetOnRetryAppend
    metadata = _metadata(S.EMPTY)
    transit = metadata.prepare_add_partitions(PARTITIONS, NOW)
    error = complete_append(metadata, transit, E.not_enough_replicas, retry_on_error=True)
    assert (error, metadata.pending_state) == (E.coordinator_not_available, S.ONGOING)


def test_complete_transition_when_append_succeeded() -> None:
    # Kafka: testCompleteTransitionWhenAppendSucceeded
    metadata = _metadata(S.EMPTY)
    transit = metadata.prepare_add_partitions(PARTITIONS, NOW + 3)
    assert complete_append(metadata, transit, E.none) is E.none
    assert (metadata.state, metadata.txn_last_update_timestamp_ms) == (S.ONGOING, NOW + 3)


# ====================================================================== timed-out transactions
def test_should_only_consider_transactions_in_the_ongoing_state_to_abort() -> None:
    # Kafka: shouldOnlyConsiderTransactionsInTheOngoingStateToAbort
    metadatas = [
        _metadata(state, start_ms=NOW) for state in TransactionState if state is not S.DEAD
    ]
    later = NOW + TXN_TIMEOUT_MS + 1
    assert timed_out_transactions(metadatas, later) == [
        TransactionalIdAndProducerIdEpoch(
            transactional_id=TXN_ID, producer_id=PRODUCER_ID, producer_epoch=PRODUCER_EPOCH
        )
    ]
    assert timed_out_transactions(metadatas, NOW + TXN_TIMEOUT_MS) == []  # the bound is exclusive


def test_should_abort_expired_transactions_in_ongoing_state_and_bump_epoch() -> None:
    # Kafka: shouldAbortExpiredTransactionsInOngoingStateAndBumpEpoch
    metadata = _metadata(S.ONGOING, partitions=PARTITIONS)
    later = NOW + CONFIG.abort_timed_out_transactions_interval_ms
    (timed_out,) = timed_out_transactions([metadata], later)
    end = abort_timed_out_transaction(metadata, timed_out, later)
    assert end is not None and end.is_epoch_fence
    assert end.append == TxnTransitMetadata(
        producer_id=PRODUCER_ID,
        last_producer_id=PRODUCER_ID,
        producer_epoch=PRODUCER_EPOCH + 1,
        last_producer_epoch=NO_PRODUCER_EPOCH,
        txn_timeout_ms=TXN_TIMEOUT_MS,
        txn_state=S.PREPARE_ABORT,
        topic_partitions=PARTITIONS,
        txn_start_timestamp_ms=NOW,
        txn_last_update_timestamp_ms=later,
    )
    done = after_end_txn_append(end, metadata, E.none, later)
    assert done.markers is not None and done.markers.result is ABORT
    # The fenced producer's next request is refused.
    assert _end(metadata, PRODUCER_EPOCH, COMMIT).error is E.producer_fenced


def test_should_not_abort_expired_transactions_that_have_a_pending_state_transition() -> None:
    # Kafka: shouldNotAbortExpiredTransactionsThatHaveAPendingStateTransition
    metadata = _metadata(S.ONGOING, partitions=PARTITIONS)
    later = NOW + TXN_TIMEOUT_MS + 1
    found = timed_out_transactions([metadata], later)
    metadata.prepare_abort_or_commit(S.PREPARE_COMMIT, later)
    assert timed_out_transactions([metadata], later) == []
    assert abort_timed_out_transaction(metadata, found[0], later) is None


def test_timed_out_transaction_of_another_producer_id_is_left_alone() -> None:
    metadata = _metadata(S.ONGOING, partitions=PARTITIONS)
    (found,) = timed_out_transactions([metadata], NOW + TXN_TIMEOUT_MS + 1)
    metadata.producer_id += 1
    assert abort_timed_out_transaction(metadata, found, NOW) is None
    assert metadata.pending_state is None


def test_should_not_bump_epoch_when_aborting_expired_transaction_if_append_to_log_fails() -> None:
    # Kafka: shouldNotBumpEpochWhenAbortingExpiredTransactionIfAppendToLogFails
    metadata = _metadata(S.ONGOING, partitions=PARTITIONS)
    later = NOW + TXN_TIMEOUT_MS + 1
    for _ in range(2):
        (found,) = timed_out_transactions([metadata], later)
        end = abort_timed_out_transaction(metadata, found, later)
        assert end is not None and end.append is not None
        assert end.append.producer_epoch == PRODUCER_EPOCH + 1
        done = after_end_txn_append(end, metadata, E.not_enough_replicas, later)
        assert done.error is E.coordinator_not_available
        assert metadata.producer_epoch == PRODUCER_EPOCH + 1 and metadata.has_failed_epoch_fence


# ====================================================================== expired transactional ids
@pytest.mark.parametrize("state", list(TransactionState))
def test_expired_transactional_ids_by_state(state: TransactionState) -> None:
    # Kafka: shouldRemove{CompleteCommit,CompleteAbort,Empty}ExpiredTransactionalIds,
    # shouldNotRemove{Ongoing,PrepareAbort,PrepareCommit}TransactionalIds
    expiration_ms = CONFIG.transactional_id_expiration_ms
    metadata = _metadata(state, update_ms=NOW)
    assert expired_transactional_ids([metadata], NOW + expiration_ms - 1, CONFIG) == []
    expired = expired_transactional_ids([metadata], NOW + expiration_ms, CONFIG)  # inclusive
    if state in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
        assert [(m, t.txn_state) for m, t in expired] == [(metadata, S.DEAD)]
        assert metadata.pending_state is S.DEAD
        assert complete_expiration(metadata, expired[0][1], E.none) is True
    else:
        assert expired == [] and metadata.pending_state is None


def test_should_not_remove_expired_transactional_ids_if_log_append_fails() -> None:
    # Kafka: shouldNotRemoveExpiredTransactionalIdsIfLogAppendFails
    metadata = _metadata(S.COMPLETE_COMMIT, update_ms=NOW)
    later = NOW + CONFIG.transactional_id_expiration_ms
    ((_, transit),) = expired_transactional_ids([metadata], later, CONFIG)
    assert complete_expiration(metadata, transit, E.not_enough_replicas) is False
    assert (metadata.state, metadata.pending_state) == (S.COMPLETE_COMMIT, None)
    # Expired again at the next round.
    assert len(expired_transactional_ids([metadata], later, CONFIG)) == 1


def test_expiration_skips_an_id_with_a_pending_transition() -> None:
    metadata = _metadata(S.EMPTY, update_ms=NOW)
    metadata.prepare_add_partitions(PARTITIONS, NOW)
    assert (
        expired_transactional_ids([metadata], NOW + CONFIG.transactional_id_expiration_ms, CONFIG)
        == []
    )


# ====================================================================== load
@pytest.mark.parametrize(
    ("state", "result", "completed"),
    [(S.PREPARE_COMMIT, COMMIT, S.COMPLETE_COMMIT), (S.PREPARE_ABORT, ABORT, S.COMPLETE_ABORT)],
)
def test_should_write_txn_markers_for_transaction_in_prepared_state_after_load(
    state: TransactionState, result: TransactionResult, completed: TransactionState
) -> None:
    # Kafka: shouldWriteTxnMarkersForTransactionInPreparedCommitState,
    # shouldWriteTxnMarkersForTransactionInPreparedAbortState
    prepared = _metadata(state, partitions=PARTITIONS)
    others = [_metadata(s) for s in (S.EMPTY, S.ONGOING, S.COMPLETE_COMMIT, S.COMPLETE_ABORT)]
    (markers,) = transactions_pending_completion([*others, prepared], NOW + 7)
    assert markers.result is result and markers.topic_partitions == PARTITIONS
    assert (markers.producer_id, markers.producer_epoch) == (PRODUCER_ID, PRODUCER_EPOCH)
    assert markers.complete.txn_state is completed
    assert markers.complete.txn_last_update_timestamp_ms == NOW + 7
    assert all(m.pending_state is None for m in others)
