"""How the group coordinator writes ``__consumer_offsets``: through the broker's replica manager.

Every write is one record batch v2 appended to the group's offsets partition with
``required_acks=-1`` and ``offsets.commit.timeout.ms``, as Kafka's ``appendForGroup`` does
(internal topic allowed, origin Coordinator): it completes once every in-sync replica has it
(the high watermark passed it), or fails with the append's error. ``ReplicaAppender`` is the
one method of ``ReplicaManager`` that this needs; the coordinator does not import the broker.

Append errors become coordinator errors (Kafka's ``maybeConvertOffsetCommitError`` for
commits and the runtime's ``handleOperationException`` for the rest), by error code so that
errors raised by the replication layer need no import here::

    UNKNOWN_TOPIC_OR_PARTITION, NOT_ENOUGH_REPLICAS,
    NOT_ENOUGH_REPLICAS_AFTER_APPEND, REQUEST_TIMED_OUT   -> COORDINATOR_NOT_AVAILABLE
    NOT_LEADER_OR_FOLLOWER, KAFKA_STORAGE_ERROR           -> NOT_COORDINATOR
    MESSAGE_TOO_LARGE, RECORD_LIST_TOO_LARGE,
    INVALID_FETCH_SIZE                                    -> INVALID_COMMIT_OFFSET_SIZE (commits),
                                                             UNKNOWN_SERVER_ERROR (group records)
    INVALID_PRODUCER_EPOCH, PRODUCER_FENCED,
    TRANSACTION_COORDINATOR_FENCED, INVALID_TXN_STATE,
    INVALID_PRODUCER_ID_MAPPING                           -> themselves (transactional commits)
    anything else                                         -> UNKNOWN_SERVER_ERROR
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Protocol

from storage_core.common import TopicPartition
from storage_core.coordinator.group.errors import (
    CoordinatorNotAvailableError,
    InvalidCommitOffsetSizeError,
    NotCoordinatorError,
)
from storage_core.errors import StorageError
from storage_core.log.producer_append_info import AppendOrigin

logger = logging.getLogger(__name__)

REQUIRED_ACKS_ALL = -1

_COORDINATOR_NOT_AVAILABLE = frozenset(
    {
        "unknown_topic_or_partition",
        "not_enough_replicas",
        "not_enough_replicas_after_append",
        "request_timed_out",
    }
)
_NOT_COORDINATOR = frozenset({"not_leader_or_follower", "kafka_storage_error"})
_TOO_LARGE = frozenset({"message_too_large", "record_list_too_large", "invalid_fetch_size"})


class AppendOutcome(Protocol):
    """One partition's append result (``ReplicaManager``'s ``ProduceResult``)."""

    @property
    def error(self) -> StorageError | None: ...


class AppendedBatch(Protocol):
    """Where an append landed (``LogAppendInfo``)."""

    @property
    def first_offset(self) -> int: ...


class OffsetsAppendOutcome(AppendOutcome, Protocol):
    """An append result with its batch's offset, which orders offset commits."""

    @property
    def info(self) -> AppendedBatch | None: ...


class ReplicaAppender(Protocol):
    """Appends to partitions this broker leads and waits for ``required_acks``; the group
    coordinator appends with ``AppendOrigin.COORDINATOR``, as Kafka's ``appendForGroup``."""

    async def append_records(
        self,
        entries: Mapping[TopicPartition, bytes],
        *,
        required_acks: int,
        timeout_ms: int,
        origin: AppendOrigin,
    ) -> Mapping[TopicPartition, OffsetsAppendOutcome]: ...


def map_commit_error(group_id: str, error: StorageError) -> StorageError:
    """The OffsetCommit answer for an append that failed with ``error``."""
    logger.warning(
        "offset commit not written group=%s error_code=%s error=%s",
        group_id,
        error.error_code,
        error,
    )
    if error.error_code in _TOO_LARGE:
        return InvalidCommitOffsetSizeError(
            f"group {group_id}: the commit does not fit one batch ({error}); commit fewer"
            " partitions per request"
        )
    return _map_common(group_id, error)


# A TxnOffsetCommit's own errors reach the producer as they are (Kafka's
# ``maybeConvertOffsetCommitError`` passes them through): it learns it is fenced.
_TXN_ERRORS = frozenset(
    {
        "invalid_producer_epoch",
        "producer_fenced",
        "transaction_coordinator_fenced",
        "invalid_txn_state",
        "invalid_producer_id_mapping",
    }
)


def map_txn_commit_error(group_id: str, error: StorageError) -> StorageError:
    """The TxnOffsetCommit answer for an append that failed with ``error``."""
    if error.error_code in _TXN_ERRORS:
        logger.info(
            "transactional offset commit refused group=%s error_code=%s error=%s",
            group_id,
            error.error_code,
            error,
        )
        return error
    return map_commit_error(group_id, error)


def map_group_write_error(group_id: str, error: StorageError) -> StorageError:
    """The answer for a group record or tombstones whose append failed with ``error``."""
    logger.warning(
        "group metadata not written group=%s error_code=%s error=%s",
        group_id,
        error.error_code,
        error,
    )
    return _map_common(group_id, error)


def _map_common(group_id: str, error: StorageError) -> StorageError:
    code = error.error_code
    if code in _COORDINATOR_NOT_AVAILABLE:
        return CoordinatorNotAvailableError(
            f"group {group_id}: __consumer_offsets did not take the write ({error}); retry"
        )
    if code in _NOT_COORDINATOR:
        return NotCoordinatorError(
            f"group {group_id}: this broker cannot write its __consumer_offsets partition"
            f" ({error}); find the coordinator again"
        )
    return StorageError(f"group {group_id}: the group metadata was not written: {error}")
