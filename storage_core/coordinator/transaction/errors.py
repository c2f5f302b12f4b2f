"""Errors of the transaction coordinator's core.

Client mistakes are not raised: the coordinator answers them with a Kafka error code
(``kio`` ``ErrorCode``) in its results. What is raised here is either a record of
``__transaction_state`` that does not parse, or a state transition the coordinator itself
should never have asked for (a bug, as Kafka's ``IllegalStateException`` there).
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from storage_core.errors import CorruptRecordError, StorageError


class CorruptTransactionLogRecordError(CorruptRecordError):
    """A ``__transaction_state`` record key or value does not parse (unknown version or
    state, short or trailing bytes). Inspect the partition with ``storage-core dump-log``."""


class IllegalTransactionStateTransitionError(StorageError):
    """A transactional id's metadata was asked to move in a way its state machine forbids
    (a target state the current state cannot reach, a second pending transition, an epoch
    or producer id that does not follow). The metadata is left unchanged; this is a bug in
    the coordinator, never a client mistake, and the request is answered with
    UNKNOWN_SERVER_ERROR."""


class ProducerIdGenerationError(StorageError):
    """The producer id source could not hand out an id (its block in the metadata store could
    not be taken). ``error`` is what InitProducerId answers: the client retries on
    COORDINATOR_LOAD_IN_PROGRESS; UNKNOWN_SERVER_ERROR otherwise."""

    def __init__(self, message: str, error: ErrorCode = ErrorCode.unknown_server_error) -> None:
        super().__init__(message)
        self.error = error
