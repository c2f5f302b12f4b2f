"""The eight states of a transactional id (Kafka's ``TransactionState``).

The int8 codes are those of ``TransactionLogValue.TransactionStatus``; the names those
DescribeTransactions and ListTransactions report. A state may be entered only from one of
its valid previous states (Kafka's ``validPreviousStates``)::

    Empty ---AddPartitions---> Ongoing ---EndTxn(commit)---> PrepareCommit --> CompleteCommit
                                |   |
                                |   +-----EndTxn(abort)----> PrepareAbort ---> CompleteAbort
                                |                               ^
                                +--> PrepareEpochFence ---------+
                                     (InitProducerId or timeout while Ongoing)

    CompleteCommit, CompleteAbort --> Empty (InitProducerId) or Ongoing (next transaction)
    Empty, CompleteCommit, CompleteAbort --> Dead (transactional id expired)

    Empty             <- Empty, CompleteCommit, CompleteAbort
    Ongoing           <- Ongoing, Empty, CompleteCommit, CompleteAbort
    PrepareCommit     <- Ongoing
    PrepareAbort      <- Ongoing, PrepareEpochFence
    CompleteCommit    <- PrepareCommit
    CompleteAbort     <- PrepareAbort
    Dead              <- Empty, CompleteCommit, CompleteAbort   (transactional id expiry)
    PrepareEpochFence <- Ongoing

Empty, CompleteCommit and CompleteAbort may expire (``transactional.id.expiration.ms``).
Repeating Empty or Ongoing is a valid transition (a re-init, more partitions); the others
happen once per transaction. Immutable: safe from any thread.
"""

from __future__ import annotations

import enum

from storage_core.coordinator.transaction.errors import CorruptTransactionLogRecordError


class TransactionState(enum.IntEnum):
    """A transactional id's state; the value is its int8 code in ``__transaction_state``."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def state_name(self) -> str:
        """Kafka's name of the state (``PrepareCommit``), as DescribeTransactions reports it."""
        return _NAMES[self]

    @property
    def valid_previous_states(self) -> frozenset[TransactionState]:
        return _VALID_PREVIOUS_STATES[self]

    @property
    def is_expiration_allowed(self) -> bool:
        """Whether a transactional id left in this state may expire (Kafka's
        ``isExpirationAllowed``): no transaction is open or being completed."""
        return self in _EXPIRATION_ALLOWED

    @staticmethod
    def from_id(state_id: int) -> TransactionState:
        """The state of an int8 code read from ``__transaction_state``."""
        try:
            return TransactionState(state_id)
        except ValueError:
            raise CorruptTransactionLogRecordError(
                f"Unknown transaction state id {state_id} from the transaction status message"
                " (known: 0-7)"
            ) from None

    @staticmethod
    def from_name(name: str) -> TransactionState | None:
        """The state Kafka names ``name`` (``Ongoing``), or None (ListTransactions filters)."""
        return _BY_NAME.get(name)


def is_valid_transition(current: TransactionState, target: TransactionState) -> bool:
    """Whether ``target`` may be entered from ``current``."""
    return current in _VALID_PREVIOUS_STATES[target]


_S = TransactionState

_NAMES: dict[TransactionState, str] = {
    _S.EMPTY: "Empty",
    _S.ONGOING: "Ongoing",
    _S.PREPARE_COMMIT: "PrepareCommit",
    _S.PREPARE_ABORT: "PrepareAbort",
    _S.COMPLETE_COMMIT: "CompleteCommit",
    _S.COMPLETE_ABORT: "CompleteAbort",
    _S.DEAD: "Dead",
    _S.PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}

_BY_NAME: dict[str, TransactionState] = {name: state for state, name in _NAMES.items()}

_VALID_PREVIOUS_STATES: dict[TransactionState, frozenset[TransactionState]] = {
    _S.EMPTY: frozenset({_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.ONGOING: frozenset({_S.ONGOING, _S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.PREPARE_COMMIT: frozenset({_S.ONGOING}),
    _S.PREPARE_ABORT: frozenset({_S.ONGOING, _S.PREPARE_EPOCH_FENCE}),
    _S.COMPLETE_COMMIT: frozenset({_S.PREPARE_COMMIT}),
    _S.COMPLETE_ABORT: frozenset({_S.PREPARE_ABORT}),
    _S.DEAD: frozenset({_S.EMPTY, _S.COMPLETE_ABORT, _S.COMPLETE_COMMIT}),
    _S.PREPARE_EPOCH_FENCE: frozenset({_S.ONGOING}),
}

_EXPIRATION_ALLOWED = frozenset({_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT})
