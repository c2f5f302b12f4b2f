"""Named errors of the storage engine.

Every error says what was wrong and where (file, position, offset, partition) so that an
operator can act on it. Invariants that protect stored data raise one of these; nothing
relies on ``assert``.
"""

from __future__ import annotations

from typing import ClassVar


class StorageError(Exception):
    """Base class of every error raised by ``storage_core``.

    ``error_code`` is the Kafka protocol error (by its lower-case name, as in
    ``ErrorCode``) that the broker answers with when this error reaches a client.
    """

    error_code: ClassVar[str] = "unknown_server_error"


class CorruptRecordError(StorageError):
    """A record batch failed validation (size, magic, CRC or record framing).

    Carries the file, the byte position of the batch in it and the batch's base offset when
    known, so that the damaged spot can be found with ``storage-core dump-log``.
    """

    error_code: ClassVar[str] = "corrupt_message"

    def __init__(
        self,
        message: str,
        *,
        file: str | None = None,
        position: int | None = None,
        offset: int | None = None,
    ) -> None:
        where = []
        if file is not None:
            where.append(f"file={file}")
        if position is not None:
            where.append(f"position={position}")
        if offset is not None:
            where.append(f"offset={offset}")
        super().__init__(f"{message} ({', '.join(where)})" if where else message)
        self.reason = message
        self.file = file
        self.position = position
        self.offset = offset


class InvalidRecordError(StorageError):
    """A batch is well formed but not acceptable here (bad timestamps, control misuse...).

    ``record_errors`` name the records at fault as ``(index in the batch, message)``; the
    Produce response (v8+) carries them as its ``record_errors``, as Kafka's do.
    """

    error_code: ClassVar[str] = "invalid_record"

    def __init__(self, message: str, *, record_errors: tuple[tuple[int, str], ...] = ()) -> None:
        super().__init__(message)
        self.record_errors = record_errors


class InvalidRecordTimestampError(InvalidRecordError):
    """A produced batch carries a timestamp type the topic refuses (Kafka's INVALID_TIMESTAMP
    with one record error per record); the producer must send CreateTime batches."""

    error_code: ClassVar[str] = "invalid_timestamp"


class UnsupportedCompressionError(StorageError):
    """The batch names a compression codec this engine does not know."""

    error_code: ClassVar[str] = "unsupported_compression_type"


class CorruptIndexError(StorageError):
    """An offset or time index file is inconsistent; it can be rebuilt from the log."""

    error_code: ClassVar[str] = "kafka_storage_error"


class IndexFullError(StorageError):
    """An append was attempted on an index that has no room left (the segment must roll)."""

    error_code: ClassVar[str] = "unknown_server_error"


class InvalidOffsetError(StorageError):
    """An offset is out of order or does not fit the segment (e.g. relative offset overflow)."""

    error_code: ClassVar[str] = "unknown_server_error"


class CorruptCheckpointError(StorageError):
    """A checkpoint file (offsets, leader epochs, partition metadata) cannot be parsed."""

    error_code: ClassVar[str] = "kafka_storage_error"


class InconsistentTopicIdError(StorageError):
    """``partition.metadata`` names a different topic id than the one expected."""

    error_code: ClassVar[str] = "inconsistent_topic_id"


class InvalidTopicError(StorageError):
    """A topic name breaks Kafka's rules (legal characters, length, ``.``/``..``)."""

    error_code: ClassVar[str] = "invalid_topic_exception"


class OffsetOutOfRangeError(StorageError):
    """A read or truncation asked for an offset outside ``[log start offset, log end offset]``."""

    error_code: ClassVar[str] = "offset_out_of_range"


class UnexpectedAppendOffsetError(StorageError):
    """A follower append does not start at the log end offset (offsets must be contiguous)."""

    error_code: ClassVar[str] = "unknown_server_error"


class LogEndOffsetMovedError(UnexpectedAppendOffsetError):
    """A conditional leader append found the log end offset other than the one it was
    planned against (something was appended meanwhile): nothing was written."""


class RecordBatchTooLargeError(StorageError):
    """The batches of one append are larger than ``segment.bytes`` allows."""

    error_code: ClassVar[str] = "record_list_too_large"


class KafkaStorageError(StorageError):
    """An I/O failure on a log dir; the affected partitions go offline."""

    error_code: ClassVar[str] = "kafka_storage_error"


class LogDirNotFoundError(StorageError):
    """A configured log dir is missing or not a directory."""

    error_code: ClassVar[str] = "log_dir_not_found"


class InvalidConfigError(StorageError):
    """A broker or topic config has a wrong type or value; the message names the key."""

    error_code: ClassVar[str] = "invalid_config"


class DecompressedSizeLimitError(CorruptRecordError):
    """A compressed batch expands beyond the decompression limit (a hostile or oversized batch).

    Raise ``max_decompressed_bytes`` if such batches are legitimate for the topic.
    """


class InvalidTimestampError(StorageError):
    """A time index append carries a timestamp below the index's last one.

    Time index timestamps never decrease; the caller must append the largest timestamp seen so
    far in the segment, not the batch's own.
    """

    error_code: ClassVar[str] = "invalid_timestamp"


class CheckpointWriteError(KafkaStorageError):
    """A checkpoint or metadata file could not be written (temp file, fsync or rename failed).

    The previous version of the file, if any, is left in place. Check the log dir's disk and
    permissions; the log dir should be treated as failed.
    """


class RecordTooLargeError(RecordBatchTooLargeError):
    """One batch is larger than the topic's ``max.message.bytes``."""

    error_code: ClassVar[str] = "message_too_large"


class UnknownTopicOrPartitionError(StorageError):
    """The topic or partition does not exist on this cluster."""

    error_code: ClassVar[str] = "unknown_topic_or_partition"


class RequestTimedOutError(StorageError):
    """The request's timeout passed before what it waits for happened (followers reaching an
    offset, a change reaching this broker's metadata); what was done stays done."""

    error_code: ClassVar[str] = "request_timed_out"


class TopicExistsError(StorageError):
    """A topic with this name already exists."""

    error_code: ClassVar[str] = "topic_already_exists"


class InvalidPartitionsError(StorageError):
    """A partition count is not positive, or would shrink an existing topic."""

    error_code: ClassVar[str] = "invalid_partitions"


class InvalidReplicationFactorError(StorageError):
    """A replication factor is not positive or exceeds the number of live brokers."""

    error_code: ClassVar[str] = "invalid_replication_factor"


class PolicyViolationError(StorageError):
    """A request is well formed but breaks a rule of the cluster (e.g. internal topics)."""

    error_code: ClassVar[str] = "policy_violation"


class NotLeaderOrFollowerError(StorageError):
    """This broker does not lead (or follow) the partition; the client must refresh metadata."""

    error_code: ClassVar[str] = "not_leader_or_follower"


class FencedLeaderEpochError(StorageError):
    """The request names a leader epoch older than the partition's current one."""

    error_code: ClassVar[str] = "fenced_leader_epoch"


class UnknownLeaderEpochError(StorageError):
    """The request names a leader epoch newer than this broker knows."""

    error_code: ClassVar[str] = "unknown_leader_epoch"


class InvalidRequiredAcksError(StorageError):
    """Produce ``acks`` must be 0, 1 or -1."""

    error_code: ClassVar[str] = "invalid_required_acks"


class NotEnoughReplicasAfterAppendError(StorageError):
    """An ``acks=all`` produce was appended, but the ISR shrank below ``min.insync.replicas``
    before it was replicated (the records may still be committed later)."""

    error_code: ClassVar[str] = "not_enough_replicas_after_append"


class NotEnoughReplicasError(StorageError):
    """Fewer in-sync replicas than ``min.insync.replicas`` for an ``acks=all`` produce."""

    error_code: ClassVar[str] = "not_enough_replicas"


class OutOfOrderSequenceError(StorageError):
    """A producer's batch does not continue its sequence (a gap, or a new epoch not at 0).

    The producer must resend from its first unacknowledged batch (clients do this on their
    own); a batch retried after its producer state expired may need a new producer id.
    """

    error_code: ClassVar[str] = "out_of_order_sequence_number"


class InvalidProducerEpochError(StorageError):
    """A producer's batch carries an epoch older than the one the partition last saw.

    A newer instance of the producer (same id, higher epoch) has fenced this one.
    """

    error_code: ClassVar[str] = "invalid_producer_epoch"


class InvalidTxnStateError(StorageError):
    """A producer with an open transaction wrote a batch outside it."""

    error_code: ClassVar[str] = "invalid_txn_state"


class TransactionCoordinatorFencedError(StorageError):
    """A transaction marker comes from a coordinator epoch older than the last one seen."""

    error_code: ClassVar[str] = "transaction_coordinator_fenced"


class CorruptSnapshotError(StorageError):
    """A producer state ``.snapshot`` file failed its version, CRC or length check.

    The log sets such a file aside as ``<name>.quarantined`` and rebuilds the producer state
    from an older snapshot and the log; no action is needed unless it happens repeatedly.
    """

    error_code: ClassVar[str] = "kafka_storage_error"


class TooManyOpenFilesError(StorageError):
    """The broker has no descriptor left to open a segment file (EMFILE/ENFILE) even after
    closing its idle ones. Nothing was written; the request may be retried.

    REQUEST_TIMED_OUT, not KAFKA_STORAGE_ERROR: clients treat KAFKA_STORAGE_ERROR as a replica
    gone offline (an ``InvalidMetadataException`` in Kafka's clients: they look for a new
    leader) and Kafka takes the log dir offline on it; here the log dir is healthy and the
    leader stays, so the producer should only back off and retry, which REQUEST_TIMED_OUT (a
    ``RetriableException``, retried by every client) tells it without claiming anything about
    replicas, as NOT_ENOUGH_REPLICAS would."""

    error_code: ClassVar[str] = "request_timed_out"
