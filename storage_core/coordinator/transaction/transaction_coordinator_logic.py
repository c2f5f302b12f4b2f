"""The decisions of Kafka's ``TransactionCoordinator`` (and the pure parts of its
``TransactionStateManager``), without I/O: no log, no sockets, no clock, no threads.

The caller (the broker's transaction coordinator) owns the cache of ``TransactionMetadata``
per transactional id, its locks, the coordinator epoch and the writes to
``__transaction_state``. For each request it looks the metadata up, calls a ``handle_*``
function under the transactional id's lock, and acts on the plain result:

* ``error`` and the producer id / epoch to answer when there is nothing to append;
* ``append``: a ``TxnTransitMetadata`` (its pending state already set) to write to the
  transactional id's partition with acks=all. After the write the caller calls
  ``complete_append`` (InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, the final
  CompleteCommit/CompleteAbort) or ``after_end_txn_append`` / ``after_init_producer_id_append``
  (EndTxn and the aborts it stands for), which complete the transition or undo the pending
  state, and say what to answer;
* ``markers``: after a PrepareCommit / PrepareAbort is written, the markers to send to the
  partition leaders (WriteTxnMarkers, with the caller's coordinator epoch), and the
  CompleteCommit / CompleteAbort transit to append once every marker is written.

If the coordinator epoch of the id's partition changed between the lookup and the end of an
append, the caller answers NOT_COORDINATOR instead of calling the completion (Kafka does).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from kio.schema.errors import ErrorCode

from storage_core.common import TopicPartition
from storage_core.coordinator.group.offsets_records import OFFSETS_TOPIC_NAME
from storage_core.coordinator.group.offsets_records import partition_for as offsets_partition_for
from storage_core.coordinator.transaction.errors import (
    IllegalTransactionStateTransitionError,
    ProducerIdGenerationError,
)
from storage_core.coordinator.transaction.transaction_metadata import (
    NO_PRODUCER_EPOCH,
    TransactionMetadata,
    TxnTransitMetadata,
    is_epoch_exhausted,
)
from storage_core.coordinator.transaction.transaction_results import (
    AddPartitionsResult,
    EndTxnCompletion,
    EndTxnResult,
    InitProducerIdResult,
    ProducerIdAndEpoch,
    TransactionResult,
    markers_for,
)
from storage_core.coordinator.transaction.transaction_state import TransactionState
from storage_core.coordinator.transaction.transaction_state_manager_logic import (
    TransactionalIdAndProducerIdEpoch,
    TransactionConfig,
    complete_append,
)

_S = TransactionState
E = ErrorCode


def _generate(generate_producer_id: Callable[[], int]) -> int | ErrorCode:
    try:
        return generate_producer_id()
    except ProducerIdGenerationError as exc:
        return exc.error


def _illegal_state(metadata: TransactionMetadata) -> IllegalTransactionStateTransitionError:
    return IllegalTransactionStateTransitionError(
        f"Found transactional id {metadata.transactional_id!r} in state"
        f" {metadata.state.state_name}: it should never have moved to this state"
    )


# ====================================================================== InitProducerId
def handle_init_producer_id(
    transactional_id: str | None,
    txn_timeout_ms: int,
    expected: ProducerIdAndEpoch | None,
    metadata: TransactionMetadata | None,
    *,
    config: TransactionConfig,
    generate_producer_id: Callable[[], int],
    now_ms: int,
) -> InitProducerIdResult:
    """InitProducerId (``handleInitProducerId``); ``metadata`` is the cached one, if any."""
    if transactional_id is None:  # idempotent producer: a new id, epoch 0, nothing stored
        producer_id = _generate(generate_producer_id)
        if isinstance(producer_id, ErrorCode):
            return InitProducerIdResult(error=producer_id)
        return InitProducerIdResult(error=E.none, producer_id=producer_id, producer_epoch=0)
    if not transactional_id:
        return InitProducerIdResult(error=E.invalid_request)
    if not config.validate_transaction_timeout_ms(txn_timeout_ms):
        return InitProducerIdResult(error=E.invalid_transaction_timeout)
    created = None
    if metadata is None:
        producer_id = _generate(generate_producer_id)
        if isinstance(producer_id, ErrorCode):
            return InitProducerIdResult(error=producer_id)
        metadata = created = TransactionMetadata(
            transactional_id=transactional_id,
            producer_id=producer_id,
            producer_epoch=NO_PRODUCER_EPOCH,
            txn_timeout_ms=txn_timeout_ms,
            state=_S.EMPTY,
            txn_last_update_timestamp_ms=now_ms,
        )
    decided = _prepare_init_producer_id_transit(
        metadata, txn_timeout_ms, expected, generate_producer_id, now_ms
    )
    if isinstance(decided, ErrorCode):
        return InitProducerIdResult(error=decided, created=created)
    if decided.txn_state is _S.PREPARE_EPOCH_FENCE:
        # Abort the ongoing transaction first; the client retries and then gets its epoch.
        end = handle_end_transaction(
            transactional_id,
            decided.producer_id,
            decided.producer_epoch,
            TransactionResult.ABORT,
            metadata,
            from_client=False,
            now_ms=now_ms,
        )
        if end.append is None:
            return InitProducerIdResult(error=end.error, created=created)
        return InitProducerIdResult(error=E.none, created=created, end_txn=end)
    return InitProducerIdResult(
        error=E.none,
        producer_id=decided.producer_id,
        producer_epoch=decided.producer_epoch,
        created=created,
        append=decided,
    )


def _prepare_init_producer_id_transit(
    metadata: TransactionMetadata,
    txn_timeout_ms: int,
    expected: ProducerIdAndEpoch | None,
    generate_producer_id: Callable[[], int],
    now_ms: int,
) -> TxnTransitMetadata | ErrorCode:
    if metadata.pending_transition_in_progress:
        return E.concurrent_transactions
    # A producer id and epoch named by the request (KIP-360) are accepted if the metadata was
    # just created, if the id is the current one (its epoch is checked below), or if it is
    # the previous id and its epoch exhausted: a retry after a rotation it never heard of.
    if expected is not None and not (
        metadata.producer_epoch == NO_PRODUCER_EPOCH
        or expected.producer_id == metadata.producer_id
        or (
            expected.producer_id == metadata.last_producer_id and is_epoch_exhausted(expected.epoch)
        )
    ):
        return E.producer_fenced
    state = metadata.state
    if state in (_S.PREPARE_ABORT, _S.PREPARE_COMMIT):
        return E.concurrent_transactions
    if state in (_S.COMPLETE_ABORT, _S.COMPLETE_COMMIT, _S.EMPTY):
        if metadata.is_producer_epoch_exhausted and (
            expected is None or expected.epoch == metadata.producer_epoch
        ):
            producer_id = _generate(generate_producer_id)
            if isinstance(producer_id, ErrorCode):
                return producer_id
            return metadata.prepare_producer_id_rotation(
                producer_id, txn_timeout_ms, now_ms, record_last_epoch=expected is not None
            )
        return metadata.prepare_increment_producer_epoch(
            txn_timeout_ms, None if expected is None else expected.epoch, now_ms
        )
    if state is _S.ONGOING:
        # Fence the current producer; this epoch is never given to a client (it retries
        # and bumps again, rotating the id if the fence exhausted the epochs).
        return metadata.prepare_fence_producer_epoch()
    raise _illegal_state(metadata)


def after_init_producer_id_append(
    result: InitProducerIdResult,
    metadata: TransactionMetadata,
    append_error: ErrorCode,
    now_ms: int,
) -> EndTxnCompletion:
    """What to answer once ``result``'s append (``append`` or ``end_txn.append``) is done."""
    if result.end_txn is not None:
        completion = after_end_txn_append(result.end_txn, metadata, append_error, now_ms)
        answer = E.concurrent_transactions if completion.error is E.none else completion.error
        return EndTxnCompletion(error=answer, markers=completion.markers)
    if result.append is None:
        raise ValueError(f"{result} has nothing to append")
    error = complete_append(metadata, result.append, append_error)
    if error is not E.none:
        return EndTxnCompletion(error=error)
    return EndTxnCompletion(
        error=E.none, producer_id=result.producer_id, producer_epoch=result.producer_epoch
    )


# ====================================================================== AddPartitions / AddOffsets
def handle_add_partitions_to_transaction(
    transactional_id: str | None,
    producer_id: int,
    producer_epoch: int,
    partitions: Iterable[TopicPartition],
    metadata: TransactionMetadata | None,
    *,
    now_ms: int,
) -> AddPartitionsResult:
    """AddPartitionsToTxn v0-3 (``handleAddPartitionsToTransaction``)."""
    if not transactional_id:
        return AddPartitionsResult(error=E.invalid_request)
    if metadata is None or metadata.producer_id != producer_id:
        return AddPartitionsResult(error=E.invalid_producer_id_mapping)
    if metadata.producer_epoch != producer_epoch:
        return AddPartitionsResult(error=E.producer_fenced)
    if metadata.pending_transition_in_progress or metadata.state in (
        _S.PREPARE_COMMIT,
        _S.PREPARE_ABORT,
    ):
        return AddPartitionsResult(error=E.concurrent_transactions)
    added = frozenset(partitions)
    if metadata.state is _S.ONGOING and added <= metadata.topic_partitions:
        return AddPartitionsResult(error=E.none)  # already in: nothing to write
    return AddPartitionsResult(error=E.none, append=metadata.prepare_add_partitions(added, now_ms))


def handle_add_offsets_to_transaction(
    transactional_id: str | None,
    producer_id: int,
    producer_epoch: int,
    group_id: str,
    metadata: TransactionMetadata | None,
    *,
    offsets_topic_num_partitions: int,
    now_ms: int,
) -> AddPartitionsResult:
    """AddOffsetsToTxn: adds the group's ``__consumer_offsets`` partition (KafkaApis)."""
    offsets_partition = TopicPartition(
        OFFSETS_TOPIC_NAME, offsets_partition_for(group_id, offsets_topic_num_partitions)
    )
    return handle_add_partitions_to_transaction(
        transactional_id, producer_id, producer_epoch, (offsets_partition,), metadata, now_ms=now_ms
    )


def handle_verify_partitions_in_transaction(
    transactional_id: str | None,
    producer_id: int,
    producer_epoch: int,
    partitions: Iterable[TopicPartition],
    metadata: TransactionMetadata | None,
) -> dict[TopicPartition, ErrorCode]:
    """AddPartitionsToTxn v4 verify-only (KIP-890 part 1): per partition, NONE if it is in
    the transaction, TRANSACTION_ABORTABLE if not; a pending state is not checked."""
    requested = frozenset(partitions)
    error: ErrorCode | None = None
    if not transactional_id:
        error = E.invalid_request
    elif metadata is None or metadata.producer_id != producer_id:
        error = E.invalid_producer_id_mapping
    elif metadata.producer_epoch != producer_epoch:
        error = E.producer_fenced
    elif metadata.state in (_S.PREPARE_COMMIT, _S.PREPARE_ABORT):
        error = E.concurrent_transactions
    if error is not None or metadata is None:
        return dict.fromkeys(requested, E.invalid_producer_id_mapping if error is None else error)
    return {
        tp: E.none if tp in metadata.topic_partitions else E.transaction_abortable
        for tp in requested
    }


# ====================================================================== EndTxn
def handle_end_transaction(
    transactional_id: str | None,
    producer_id: int,
    producer_epoch: int,
    result: TransactionResult,
    metadata: TransactionMetadata | None,
    *,
    from_client: bool = True,
    now_ms: int,
) -> EndTxnResult:
    """EndTxn v0-4 (``endTransaction``); ``from_client=False`` for the coordinator's own
    aborts, whose epoch was just bumped by a fence."""
    if not transactional_id:
        return EndTxnResult(error=E.invalid_request, result=result)
    if metadata is None or metadata.producer_id != producer_id:
        return EndTxnResult(error=E.invalid_producer_id_mapping, result=result)
    # A client must name the current epoch; the coordinator's abort names the fenced one.
    if (from_client and producer_epoch != metadata.producer_epoch) or (
        producer_epoch < metadata.producer_epoch
    ):
        return EndTxnResult(error=E.producer_fenced, result=result)
    if metadata.pending_state not in (None, _S.PREPARE_EPOCH_FENCE):
        return EndTxnResult(error=E.concurrent_transactions, result=result)
    commit = result is TransactionResult.COMMIT
    state = metadata.state
    if state is _S.ONGOING:
        is_epoch_fence = not commit and metadata.pending_state is _S.PREPARE_EPOCH_FENCE
        if is_epoch_fence:
            # Replace the pending fence with the abort, carrying the bumped epoch.
            metadata.pending_state = None
            metadata.producer_epoch = producer_epoch
            metadata.last_producer_epoch = NO_PRODUCER_EPOCH
        next_state = _S.PREPARE_COMMIT if commit else _S.PREPARE_ABORT
        return EndTxnResult(
            error=E.none,
            result=result,
            append=metadata.prepare_abort_or_commit(next_state, now_ms),
            is_epoch_fence=is_epoch_fence,
        )
    if state in (_S.COMPLETE_COMMIT, _S.COMPLETE_ABORT):
        if commit == (state is _S.COMPLETE_COMMIT):  # a retry of an EndTxn that completed
            return EndTxnResult(
                error=E.none,
                producer_id=metadata.producer_id,
                producer_epoch=metadata.producer_epoch,
                result=result,
            )
        return EndTxnResult(error=E.invalid_txn_state, result=result)
    if state in (_S.PREPARE_COMMIT, _S.PREPARE_ABORT):
        if commit == (state is _S.PREPARE_COMMIT):  # still writing the markers
            return EndTxnResult(error=E.concurrent_transactions, result=result)
        return EndTxnResult(error=E.invalid_txn_state, result=result)
    if state is _S.EMPTY:
        return EndTxnResult(error=E.invalid_txn_state, result=result)
    raise _illegal_state(metadata)


def after_end_txn_append(
    end: EndTxnResult,
    metadata: TransactionMetadata,
    append_error: ErrorCode,
    now_ms: int,
) -> EndTxnCompletion:
    """Once ``end.append`` (PrepareCommit / PrepareAbort) is written: complete it, prepare
    CompleteCommit / CompleteAbort and the markers; or, if the append failed, remember a
    failed epoch fence and answer the error."""
    transit = end.append
    if transit is None:
        raise ValueError(f"{end} has nothing to append")
    error = complete_append(metadata, transit, append_error)
    if error is not E.none:
        if end.is_epoch_fence:
            metadata.has_failed_epoch_fence = True  # the next fence keeps this epoch
        return EndTxnCompletion(error=error)
    if metadata.producer_id != transit.producer_id:
        return EndTxnCompletion(error=E.invalid_producer_id_mapping)
    if metadata.producer_epoch != transit.producer_epoch:
        return EndTxnCompletion(error=E.producer_fenced)
    if metadata.pending_transition_in_progress:
        return EndTxnCompletion(error=E.concurrent_transactions)
    expected = _S.PREPARE_COMMIT if end.result is TransactionResult.COMMIT else _S.PREPARE_ABORT
    if metadata.state is not expected:
        if metadata.state in (_S.DEAD, _S.PREPARE_EPOCH_FENCE):
            raise _illegal_state(metadata)
        return EndTxnCompletion(error=E.invalid_txn_state)
    markers = markers_for(metadata, end.result, now_ms)
    return EndTxnCompletion(
        error=E.none,
        producer_id=metadata.producer_id,
        producer_epoch=metadata.producer_epoch,
        markers=markers,
    )


# ====================================================================== timed-out transactions
def abort_timed_out_transaction(
    metadata: TransactionMetadata, timed_out: TransactionalIdAndProducerIdEpoch, now_ms: int
) -> EndTxnResult | None:
    """Fence and abort one timed-out transaction (``abortTimedOutTransactions``); None if its
    producer id changed or a transition is pending since it was found."""
    if metadata.producer_id != timed_out.producer_id or metadata.pending_transition_in_progress:
        return None
    fence = metadata.prepare_fence_producer_epoch()
    return handle_end_transaction(
        metadata.transactional_id,
        fence.producer_id,
        fence.producer_epoch,
        TransactionResult.ABORT,
        metadata,
        from_client=False,
        now_ms=now_ms,
    )
