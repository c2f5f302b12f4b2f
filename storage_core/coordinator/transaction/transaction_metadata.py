"""One transactional id's state (Kafka's ``TransactionMetadata``) and the transitions it may
make (``TxnTransitMetadata``), as Kafka 3.9 has them (transaction.version 0: EndTxn does not
bump the epoch).

Every change is two steps, because the new state must be in ``__transaction_state`` before
anyone acts on it:

1. ``prepare_*`` checks the transition, builds the ``TxnTransitMetadata`` to append and
   sets ``pending_state``; a second prepare while one is pending is refused;
2. once the append is replicated, ``complete_transition_to(transit)`` checks the transit
   again against the current values and makes it the current state (Kafka's rules: the
   epoch is the same, one more, or 0 with a new producer id; partitions only grow while
   Ongoing; ...). If the append fails, the caller clears ``pending_state`` instead.

A transition the state machine forbids raises ``IllegalTransactionStateTransitionError`` and
leaves everything unchanged. Not thread-safe: the caller holds the transactional id's lock
around a prepare and around the completion (Kafka's ``inLock``). Time comes in as
milliseconds; nothing here reads a clock.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import NoReturn

from kio.schema.errors import ErrorCode

from storage_core.common import TopicPartition
from storage_core.coordinator.transaction.errors import IllegalTransactionStateTransitionError
from storage_core.coordinator.transaction.transaction_state import TransactionState
from storage_core.records.batch import NO_PRODUCER_EPOCH, NO_PRODUCER_ID

__all__ = [
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "TransactionMetadata",
    "TxnTransitMetadata",
    "is_epoch_exhausted",
]

SHORT_MAX = 2**15 - 1
NO_TIMESTAMP = -1

_S = TransactionState


def is_epoch_exhausted(producer_epoch: int) -> bool:
    """Kafka's ``isEpochExhausted``: a client never gets ``Short.MaxValue``, so that the
    coordinator can always fence it by one more bump."""
    return producer_epoch >= SHORT_MAX - 1


@dataclass(frozen=True, slots=True, kw_only=True)
class TxnTransitMetadata:
    """The state a transactional id moves to, as appended to ``__transaction_state``.

    ``last_producer_id`` is the producer id before the transition (Kafka 3.9's
    ``lastProducerId``, ``previousProducerId`` in 4.0). Timestamps are epoch milliseconds;
    ``txn_start_timestamp_ms`` is -1 while no transaction is open.
    """

    producer_id: int
    last_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    txn_timeout_ms: int
    txn_state: TransactionState
    topic_partitions: frozenset[TopicPartition]
    txn_start_timestamp_ms: int
    txn_last_update_timestamp_ms: int


class TransactionMetadata:
    """The cached state of one transactional id (see the module docstring).

    ``pending_state`` is the target of a prepared transition not yet completed;
    ``has_failed_epoch_fence`` remembers that the append of an epoch fence failed, so that
    the next fence does not bump the epoch a second time (the bumped epoch was never given
    to a client).
    """

    __slots__ = (
        "has_failed_epoch_fence",
        "last_producer_epoch",
        "last_producer_id",
        "pending_state",
        "producer_epoch",
        "producer_id",
        "state",
        "topic_partitions",
        "transactional_id",
        "txn_last_update_timestamp_ms",
        "txn_start_timestamp_ms",
        "txn_timeout_ms",
    )

    def __init__(
        self,
        *,
        transactional_id: str,
        producer_id: int,
        last_producer_id: int = NO_PRODUCER_ID,
        producer_epoch: int,
        last_producer_epoch: int = NO_PRODUCER_EPOCH,
        txn_timeout_ms: int,
        state: TransactionState,
        topic_partitions: Iterable[TopicPartition] = (),
        txn_start_timestamp_ms: int = NO_TIMESTAMP,
        txn_last_update_timestamp_ms: int,
    ) -> None:
        self.transactional_id = transactional_id
        self.producer_id = producer_id
        self.last_producer_id = last_producer_id
        self.producer_epoch = producer_epoch
        self.last_producer_epoch = last_producer_epoch
        self.txn_timeout_ms = txn_timeout_ms
        self.state = state
        self.topic_partitions: set[TopicPartition] = set(topic_partitions)
        self.txn_start_timestamp_ms = txn_start_timestamp_ms
        self.txn_last_update_timestamp_ms = txn_last_update_timestamp_ms
        self.pending_state: TransactionState | None = None
        self.has_failed_epoch_fence = False

    def __repr__(self) -> str:
        return (
            f"TransactionMetadata(transactional_id={self.transactional_id!r},"
            f" producer_id={self.producer_id}, last_producer_id={self.last_producer_id},"
            f" producer_epoch={self.producer_epoch},"
            f" last_producer_epoch={self.last_producer_epoch},"
            f" txn_timeout_ms={self.txn_timeout_ms}, state={self.state.state_name},"
            f" pending_state={self.pending_state and self.pending_state.state_name},"
            f" topic_partitions={sorted(str(tp) for tp in self.topic_partitions)},"
            f" txn_start_timestamp_ms={self.txn_start_timestamp_ms},"
            f" txn_last_update_timestamp_ms={self.txn_last_update_timestamp_ms})"
        )

    # ------------------------------------------------------------------ queries
    @property
    def is_producer_epoch_exhausted(self) -> bool:
        return is_epoch_exhausted(self.producer_epoch)

    @property
    def pending_transition_in_progress(self) -> bool:
        return self.pending_state is not None

    @property
    def has_pending_transaction(self) -> bool:
        """A transaction is open or being completed (Ongoing, PrepareCommit, PrepareAbort)."""
        return self.state in (_S.ONGOING, _S.PREPARE_ABORT, _S.PREPARE_COMMIT)

    # ------------------------------------------------------------------ partitions
    def add_partitions(self, partitions: Iterable[TopicPartition]) -> None:
        self.topic_partitions.update(partitions)

    def remove_partition(self, topic_partition: TopicPartition) -> None:
        """Forget a partition whose marker was written (only while PrepareCommit or
        PrepareAbort: the markers are being sent)."""
        if self.state not in (_S.PREPARE_COMMIT, _S.PREPARE_ABORT):
            raise IllegalTransactionStateTransitionError(
                f"Transaction metadata's current state is {self.state.state_name}, and its"
                f" pending state is {self.pending_state}, while trying to remove partition"
                f" {topic_partition} whose txn marker has been sent: not expected"
            )
        self.topic_partitions.discard(topic_partition)

    # ------------------------------------------------------------------ prepare
    def prepare_no_transit(self) -> TxnTransitMetadata:
        """The current state as a transit, without setting a pending state."""
        return TxnTransitMetadata(
            producer_id=self.producer_id,
            last_producer_id=self.last_producer_id,
            producer_epoch=self.producer_epoch,
            last_producer_epoch=self.last_producer_epoch,
            txn_timeout_ms=self.txn_timeout_ms,
            txn_state=self.state,
            topic_partitions=frozenset(self.topic_partitions),
            txn_start_timestamp_ms=self.txn_start_timestamp_ms,
            txn_last_update_timestamp_ms=self.txn_last_update_timestamp_ms,
        )

    def prepare_fence_producer_epoch(self) -> TxnTransitMetadata:
        """Bump the epoch of an Ongoing transaction to fence its producer before aborting it
        (InitProducerId while Ongoing, or the transaction timed out). The last epoch is
        forgotten: the fenced producer may not resume."""
        if self.producer_epoch == SHORT_MAX:
            raise IllegalTransactionStateTransitionError(
                f"Cannot fence producer {self.producer_id} of {self.transactional_id!r} with"
                " epoch equal to Short.MaxValue since this would overflow"
            )
        bumped = self.producer_epoch if self.has_failed_epoch_fence else self.producer_epoch + 1
        return self._prepare_transition_to(
            _S.PREPARE_EPOCH_FENCE,
            producer_id=self.producer_id,
            epoch=bumped,
            last_epoch=NO_PRODUCER_EPOCH,
            timeout_ms=self.txn_timeout_ms,
            partitions=frozenset(self.topic_partitions),
            start_ms=self.txn_start_timestamp_ms,
            update_ms=self.txn_last_update_timestamp_ms,
        )

    def prepare_increment_producer_epoch(
        self, new_txn_timeout_ms: int, expected_producer_epoch: int | None, now_ms: int
    ) -> TxnTransitMetadata | ErrorCode:
        """InitProducerId of an existing id: the next epoch, or PRODUCER_FENCED (KIP-360).

        Without an expected epoch the epoch is bumped and the last epoch forgotten. With
        one: if it is the current epoch (or there is none yet) the producer resumes after
        an error, both epochs move up; if it is the last epoch this is a retry of a call
        that succeeded, answered with the current epoch unchanged; otherwise the producer
        was fenced.
        """
        if self.is_producer_epoch_exhausted:
            raise IllegalTransactionStateTransitionError(
                f"Cannot allocate any more producer epochs for producer id {self.producer_id}"
                f" of {self.transactional_id!r}: rotate the producer id instead"
            )
        bumped = self.producer_epoch + 1
        if expected_producer_epoch is None:
            epoch, last_epoch = bumped, NO_PRODUCER_EPOCH
        elif self.producer_epoch in (NO_PRODUCER_EPOCH, expected_producer_epoch):
            epoch, last_epoch = bumped, self.producer_epoch
        elif expected_producer_epoch == self.last_producer_epoch:
            epoch, last_epoch = self.producer_epoch, self.last_producer_epoch
        else:
            return ErrorCode.producer_fenced
        return self._prepare_transition_to(
            _S.EMPTY,
            producer_id=self.producer_id,
            epoch=epoch,
            last_epoch=last_epoch,
            timeout_ms=new_txn_timeout_ms,
            partitions=frozenset(),
            start_ms=NO_TIMESTAMP,
            update_ms=now_ms,
        )

    def prepare_producer_id_rotation(
        self, new_producer_id: int, new_txn_timeout_ms: int, now_ms: int, *, record_last_epoch: bool
    ) -> TxnTransitMetadata:
        """A new producer id at epoch 0 once the epochs of the current one are exhausted;
        the old epoch is kept as the last epoch if the client named it (KIP-360 retry)."""
        if self.has_pending_transaction:
            raise IllegalTransactionStateTransitionError(
                f"Cannot rotate the producer id of {self.transactional_id!r} while a"
                f" transaction is still pending (state {self.state.state_name})"
            )
        return self._prepare_transition_to(
            _S.EMPTY,
            producer_id=new_producer_id,
            epoch=0,
            last_epoch=self.producer_epoch if record_last_epoch else NO_PRODUCER_EPOCH,
            timeout_ms=new_txn_timeout_ms,
            partitions=frozenset(),
            start_ms=NO_TIMESTAMP,
            update_ms=now_ms,
        )

    def prepare_add_partitions(
        self, added: Iterable[TopicPartition], now_ms: int
    ) -> TxnTransitMetadata:
        """Ongoing with more partitions; a transaction begun now starts at ``now_ms``."""
        starting = self.state in (_S.EMPTY, _S.COMPLETE_ABORT, _S.COMPLETE_COMMIT)
        return self._prepare_transition_to(
            _S.ONGOING,
            producer_id=self.producer_id,
            epoch=self.producer_epoch,
            last_epoch=self.last_producer_epoch,
            timeout_ms=self.txn_timeout_ms,
            partitions=frozenset(self.topic_partitions).union(added),
            start_ms=now_ms if starting else self.txn_start_timestamp_ms,
            update_ms=now_ms,
        )

    def prepare_abort_or_commit(
        self, new_state: TransactionState, now_ms: int
    ) -> TxnTransitMetadata:
        """PrepareCommit or PrepareAbort of the open transaction (EndTxn)."""
        if new_state not in (_S.PREPARE_COMMIT, _S.PREPARE_ABORT):
            raise IllegalTransactionStateTransitionError(
                f"EndTxn prepares PrepareCommit or PrepareAbort, not {new_state.state_name}"
            )
        return self._prepare_transition_to(
            new_state,
            producer_id=self.producer_id,
            epoch=self.producer_epoch,
            last_epoch=self.last_producer_epoch,
            timeout_ms=self.txn_timeout_ms,
            partitions=frozenset(self.topic_partitions),
            start_ms=self.txn_start_timestamp_ms,
            update_ms=now_ms,
        )

    def prepare_complete(self, now_ms: int) -> TxnTransitMetadata:
        """CompleteCommit or CompleteAbort once every marker is written; the partitions
        are cleared. A completed write clears a failed epoch fence."""
        new_state = _S.COMPLETE_COMMIT if self.state is _S.PREPARE_COMMIT else _S.COMPLETE_ABORT
        self.has_failed_epoch_fence = False
        return self._prepare_transition_to(
            new_state,
            producer_id=self.producer_id,
            epoch=self.producer_epoch,
            last_epoch=self.last_producer_epoch,
            timeout_ms=self.txn_timeout_ms,
            partitions=frozenset(),
            start_ms=self.txn_start_timestamp_ms,
            update_ms=now_ms,
        )

    def prepare_dead(self) -> TxnTransitMetadata:
        """Dead: the transactional id expired; its tombstone is about to be written."""
        return self._prepare_transition_to(
            _S.DEAD,
            producer_id=self.producer_id,
            epoch=self.producer_epoch,
            last_epoch=self.last_producer_epoch,
            timeout_ms=self.txn_timeout_ms,
            partitions=frozenset(),
            start_ms=self.txn_start_timestamp_ms,
            update_ms=self.txn_last_update_timestamp_ms,
        )

    def _prepare_transition_to(
        self,
        target: TransactionState,
        *,
        producer_id: int,
        epoch: int,
        last_epoch: int,
        timeout_ms: int,
        partitions: frozenset[TopicPartition],
        start_ms: int,
        update_ms: int,
    ) -> TxnTransitMetadata:
        if self.pending_state is not None:
            raise IllegalTransactionStateTransitionError(
                f"Preparing transaction state transition of {self.transactional_id!r} to"
                f" {target.state_name} while it already has a pending state"
                f" {self.pending_state.state_name}"
            )
        if producer_id < 0:
            raise IllegalTransactionStateTransitionError(
                f"Illegal new producer id {producer_id} for {self.transactional_id!r}"
            )
        # The epoch is -1 while a new id waits for its first InitProducerId; only Dead keeps it.
        if target is not _S.DEAD and epoch < 0:
            raise IllegalTransactionStateTransitionError(
                f"Illegal new producer epoch {epoch} for {self.transactional_id!r}"
            )
        if self.state not in target.valid_previous_states:
            raise IllegalTransactionStateTransitionError(
                f"Preparing transaction state transition of {self.transactional_id!r} to"
                f" {target.state_name} failed since {target.state_name} cannot follow the"
                f" current state {self.state.state_name}"
            )
        transit = TxnTransitMetadata(
            producer_id=producer_id,
            last_producer_id=self.producer_id,
            producer_epoch=epoch,
            last_producer_epoch=last_epoch,
            txn_timeout_ms=timeout_ms,
            txn_state=target,
            topic_partitions=partitions,
            txn_start_timestamp_ms=start_ms,
            txn_last_update_timestamp_ms=update_ms,
        )
        self.pending_state = target
        return transit

    # ------------------------------------------------------------------ complete
    def complete_transition_to(self, transit: TxnTransitMetadata) -> None:
        """Make ``transit`` (prepared, now appended and replicated) the current state.

        Raises ``IllegalTransactionStateTransitionError`` if nothing is pending, if it is
        not the pending target, or if its values do not follow from the current ones; then
        nothing changes.
        """
        target = self.pending_state
        if target is None:
            raise IllegalTransactionStateTransitionError(
                f"{self.transactional_id!r} is completing a transition to"
                f" {transit.txn_state.state_name} while it does not have a pending state"
            )
        if target is not transit.txn_state:
            self._raise_transition_failure(transit)
        if target is _S.EMPTY:  # InitProducerId
            if (
                (
                    self.producer_epoch != transit.producer_epoch
                    and not self._valid_epoch_bump(transit)
                )
                or transit.topic_partitions
                or transit.txn_start_timestamp_ms != NO_TIMESTAMP
            ):
                self._raise_transition_failure(transit)
            self.txn_timeout_ms = transit.txn_timeout_ms
            self.producer_epoch = transit.producer_epoch
            self.last_producer_epoch = transit.last_producer_epoch
            self.producer_id = transit.producer_id
            self.last_producer_id = transit.last_producer_id
        elif target is _S.ONGOING:  # AddPartitionsToTxn, AddOffsetsToTxn
            if (
                not self._valid_producer_epoch(transit)
                or not self.topic_partitions <= transit.topic_partitions
                or self.txn_timeout_ms != transit.txn_timeout_ms
            ):
                self._raise_transition_failure(transit)
            self.txn_start_timestamp_ms = transit.txn_start_timestamp_ms
            self.add_partitions(transit.topic_partitions)
        elif target in (_S.PREPARE_ABORT, _S.PREPARE_COMMIT):  # EndTxn
            if (
                not self._valid_producer_epoch(transit)
                or self.topic_partitions != transit.topic_partitions
                or self.txn_timeout_ms != transit.txn_timeout_ms
                or self.txn_start_timestamp_ms != transit.txn_start_timestamp_ms
            ):
                self._raise_transition_failure(transit)
        elif target in (_S.COMPLETE_ABORT, _S.COMPLETE_COMMIT):  # markers written
            if (
                not self._valid_producer_epoch(transit)
                or self.txn_timeout_ms != transit.txn_timeout_ms
                or transit.txn_start_timestamp_ms == NO_TIMESTAMP
            ):
                self._raise_transition_failure(transit)
            self.txn_start_timestamp_ms = transit.txn_start_timestamp_ms
            self.topic_partitions.clear()
        elif target is _S.PREPARE_EPOCH_FENCE:
            # A fence is immediately replaced by PrepareAbort (the coordinator clears the
            # pending fence and prepares the abort with the bumped epoch): never completed.
            self._raise_transition_failure(transit)
        else:  # Dead
            raise IllegalTransactionStateTransitionError(
                f"{self.transactional_id!r} is trying to complete a transition to Dead: an"
                " expiring transactional id is removed from the cache once its tombstone is"
                " written, never moved to Dead"
            )
        self.txn_last_update_timestamp_ms = transit.txn_last_update_timestamp_ms
        self.pending_state = None
        self.state = target

    def _valid_producer_epoch(self, transit: TxnTransitMetadata) -> bool:
        return (
            transit.producer_epoch == self.producer_epoch
            and transit.producer_id == self.producer_id
        )

    def _valid_epoch_bump(self, transit: TxnTransitMetadata) -> bool:
        return transit.producer_epoch == self.producer_epoch + 1 or (
            transit.producer_epoch == 0 and transit.producer_id != self.producer_id
        )

    def _raise_transition_failure(self, transit: TxnTransitMetadata) -> NoReturn:
        raise IllegalTransactionStateTransitionError(
            f"{self!r} failed transition to {transit}: unexpected metadata"
        )
