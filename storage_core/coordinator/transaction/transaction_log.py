r"""Records of ``__transaction_state``, byte for byte as Kafka's transaction coordinator writes
them (Kafka's ``TransactionLog``, schemas ``TransactionLogKey.json`` and
``TransactionLogValue.json``).

Every record has a key; a null value is a tombstone: the transactional id expired
(``transactional.id.expiration.ms``) and is forgotten. Strings, arrays, varints and tagged
fields are written as ``transaction_log_codec`` describes (version 1 is flexible)::

    TransactionLogKey      version 0 (the only one)
        version                            int16    0
        TransactionalId                    string

    TransactionLogValue    version 0 (Kafka 3.9 writes it) or 1 (flexible, KIP-915)
        version                            int16    0 | 1
        ProducerId                         int64
        ProducerEpoch                      int16
        TransactionTimeoutMs               int32
        TransactionStatus                  int8     TransactionState (Empty 0 .. 7)
        TransactionPartitions              nullable array (null when Empty) of:
            Topic                              string
            PartitionIds                       array of int32
            (v1: tagged fields, none known)
        TransactionLastUpdateTimestampMs   int64    epoch milliseconds
        TransactionStartTimestampMs        int64    epoch milliseconds, -1 when none started
        (v1: tagged fields)
            tag 0  PreviousProducerId          int64    default -1
            tag 1  NextProducerId              int64    default -1
            tag 2  ClientTransactionVersion    int16    default 0

A tagged field is written only when it differs from its default, in tag order; unknown
tags are skipped when read (a later version may add some). The transactional id lives in
partition ``Utils.abs(transactionalId.hashCode) % transaction.state.log.num.partitions``:
Java's ``String.hashCode`` and Kafka's ``Utils.abs`` (``Math.abs``, but 0 for
``Integer.MIN_VALUE``).

Pure functions over immutable values: safe from any thread.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import TypeAlias

from storage_core.common import TopicPartition
from storage_core.coordinator.group.offsets_records import java_string_hash_code
from storage_core.coordinator.transaction.transaction_log_codec import (
    INT16,
    INT16_MAX,
    INT64,
    Reader,
    Writer,
)
from storage_core.coordinator.transaction.transaction_metadata import (
    NO_PRODUCER_ID,
    TransactionMetadata,
    TxnTransitMetadata,
)
from storage_core.coordinator.transaction.transaction_state import TransactionState

TRANSACTION_STATE_TOPIC_NAME = "__transaction_state"

TRANSACTION_LOG_KEY_VERSION = 0
TRANSACTION_LOG_VALUE_VERSIONS = (0, 1)
NO_TIMESTAMP = -1
DEFAULT_CLIENT_TRANSACTION_VERSION = 0

_INT32_MIN = -(2**31)
_INT32_MAX = 2**31 - 1
_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1

_TAG_PREVIOUS_PRODUCER_ID = 0
_TAG_NEXT_PRODUCER_ID = 1
_TAG_CLIENT_TRANSACTION_VERSION = 2


# ====================================================================== values
@dataclass(frozen=True, slots=True, kw_only=True)
class TransactionLogKey:
    """The key of every record: the transactional id (version 0)."""

    transactional_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class UnknownKey:
    """A key of a version this broker does not know (Kafka's ``UnknownKey``): a loader skips
    the record, as Kafka does (a leftover of an aborted upgrade)."""

    version: int


TxnRecordKey: TypeAlias = TransactionLogKey | UnknownKey


@dataclass(frozen=True, slots=True, kw_only=True)
class TxnPartitions:
    """The partitions of one topic in a transaction (``PartitionsSchema``)."""

    topic: str
    partition_ids: tuple[int, ...]

    def __post_init__(self) -> None:
        for partition in self.partition_ids:
            _check_int(partition, 0, _INT32_MAX, "partition id")


@dataclass(frozen=True, slots=True, kw_only=True)
class TransactionLogValue:
    """A transactional id's metadata as stored (Kafka's generated ``TransactionLogValue``).

    ``transaction_partitions`` is None for an Empty transactional id, as Kafka writes it.
    The ``previous_producer_id``, ``next_producer_id`` and ``client_transaction_version``
    fields exist only in version 1 (tagged) and keep their defaults in version 0.
    """

    producer_id: int
    previous_producer_id: int = NO_PRODUCER_ID
    next_producer_id: int = NO_PRODUCER_ID
    producer_epoch: int
    transaction_timeout_ms: int
    transaction_status: TransactionState
    transaction_partitions: tuple[TxnPartitions, ...] | None
    transaction_last_update_timestamp_ms: int
    transaction_start_timestamp_ms: int
    client_transaction_version: int = DEFAULT_CLIENT_TRANSACTION_VERSION

    def __post_init__(self) -> None:
        _check_int(self.producer_id, _INT64_MIN, _INT64_MAX, "producer id")
        _check_int(self.previous_producer_id, _INT64_MIN, _INT64_MAX, "previous producer id")
        _check_int(self.next_producer_id, _INT64_MIN, _INT64_MAX, "next producer id")
        _check_int(self.producer_epoch, -(2**15), INT16_MAX, "producer epoch")
        _check_int(self.transaction_timeout_ms, _INT32_MIN, _INT32_MAX, "transaction timeout")
        _check_int(self.transaction_last_update_timestamp_ms, _INT64_MIN, _INT64_MAX, "timestamp")
        _check_int(self.transaction_start_timestamp_ms, _INT64_MIN, _INT64_MAX, "timestamp")
        _check_int(self.client_transaction_version, -(2**15), INT16_MAX, "txn version")


def _check_int(value: int, low: int, high: int, what: str) -> None:
    if not low <= value <= high:
        raise ValueError(f"{what} {value} is outside [{low}, {high}] (inclusive)")


# ====================================================================== partitioning
def partition_for(transactional_id: str, num_partitions: int) -> int:
    """The ``__transaction_state`` partition of ``transactional_id`` (Kafka's
    ``TransactionStateManager.partitionFor``)."""
    if num_partitions <= 0:
        raise ValueError(
            f"transaction.state.log.num.partitions must be positive, got {num_partitions}"
        )
    hash_code = java_string_hash_code(transactional_id)
    absolute = 0 if hash_code == _INT32_MIN else abs(hash_code)  # Kafka's Utils.abs
    return absolute % num_partitions


# ====================================================================== keys
def key_to_bytes(transactional_id: str) -> bytes:
    """The record key of ``transactional_id`` (Kafka's ``keyToBytes``, version 0)."""
    writer = Writer(flexible=False)
    writer.int16(TRANSACTION_LOG_KEY_VERSION)
    writer.string(transactional_id, "transactional id")
    return writer.getvalue()


def read_txn_record_key(data: bytes | memoryview) -> TxnRecordKey:
    """The key of a record (Kafka's ``readTxnRecordKey``); an unknown version is not an
    error but an ``UnknownKey`` the loader skips."""
    reader = Reader(data, "__transaction_state record key")
    version = reader.int16("version")
    if version != TRANSACTION_LOG_KEY_VERSION:
        return UnknownKey(version=version)
    key = TransactionLogKey(transactional_id=reader.string("TransactionalId"))
    reader.finish()
    return key


# ====================================================================== values
def encode_value(value: TransactionLogValue, version: int) -> bytes:
    """``value`` in ``version`` (0 or 1), version prefix included."""
    if version not in TRANSACTION_LOG_VALUE_VERSIONS:
        raise ValueError(f"TransactionLogValue version {version} is not one of 0 and 1")
    flexible = version >= 1
    writer = Writer(flexible=flexible)
    writer.int16(version)
    writer.int64(value.producer_id)
    writer.int16(value.producer_epoch)
    writer.int32(value.transaction_timeout_ms)
    writer.int8(int(value.transaction_status))
    partitions = value.transaction_partitions
    writer.array_length(None if partitions is None else len(partitions))
    for entry in partitions or ():
        writer.string(entry.topic, "topic")
        writer.array_length(len(entry.partition_ids))
        for partition in entry.partition_ids:
            writer.int32(partition)
        if flexible:
            writer.uvarint(0)  # no tagged fields in PartitionsSchema
    writer.int64(value.transaction_last_update_timestamp_ms)
    writer.int64(value.transaction_start_timestamp_ms)
    if flexible:
        tagged: list[tuple[int, bytes]] = []
        if value.previous_producer_id != NO_PRODUCER_ID:
            tagged.append((_TAG_PREVIOUS_PRODUCER_ID, INT64.pack(value.previous_producer_id)))
        if value.next_producer_id != NO_PRODUCER_ID:
            tagged.append((_TAG_NEXT_PRODUCER_ID, INT64.pack(value.next_producer_id)))
        if value.client_transaction_version != DEFAULT_CLIENT_TRANSACTION_VERSION:
            tagged.append(
                (_TAG_CLIENT_TRANSACTION_VERSION, INT16.pack(value.client_transaction_version))
            )
        writer.uvarint(len(tagged))
        for tag, payload in tagged:
            writer.uvarint(tag)
            writer.uvarint(len(payload))
            writer.raw(payload)
    return writer.getvalue()


def decode_value(data: bytes | memoryview) -> TransactionLogValue:
    """A value of version 0 or 1; any other version, a short or long record, or an unknown
    state raises ``CorruptTransactionLogRecordError`` (Kafka throws there too)."""
    reader = Reader(data, "__transaction_state record value")
    version = reader.int16("version")
    if version not in TRANSACTION_LOG_VALUE_VERSIONS:
        raise reader.corrupt(f"Unknown version {version} from the transaction log message value")
    reader.flexible = version >= 1
    producer_id = reader.int64("ProducerId")
    producer_epoch = reader.int16("ProducerEpoch")
    timeout_ms = reader.int32("TransactionTimeoutMs")
    status = TransactionState.from_id(reader.int8("TransactionStatus"))
    count = reader.array_length("TransactionPartitions", 2)
    partitions: tuple[TxnPartitions, ...] | None = None
    if count is not None:
        entries = []
        for _ in range(count):
            topic = reader.string("Topic")
            id_count = reader.array_length("PartitionIds", 4)
            if id_count is None:
                raise reader.corrupt(f"PartitionIds of topic {topic!r} is null but may not be")
            ids = tuple(reader.int32("PartitionIds") for _ in range(id_count))
            if any(partition < 0 for partition in ids):
                raise reader.corrupt(f"negative partition id in {ids} of topic {topic!r}")
            if reader.flexible:
                reader.tagged_fields("PartitionsSchema")  # none known: skipped
            entries.append(TxnPartitions(topic=topic, partition_ids=ids))
        partitions = tuple(entries)
    last_update_ms = reader.int64("TransactionLastUpdateTimestampMs")
    start_ms = reader.int64("TransactionStartTimestampMs")
    tagged = reader.tagged_fields("TransactionLogValue") if reader.flexible else {}
    reader.finish()
    return TransactionLogValue(
        producer_id=producer_id,
        previous_producer_id=_tagged_int(reader, tagged, _TAG_PREVIOUS_PRODUCER_ID, INT64),
        next_producer_id=_tagged_int(reader, tagged, _TAG_NEXT_PRODUCER_ID, INT64),
        producer_epoch=producer_epoch,
        transaction_timeout_ms=timeout_ms,
        transaction_status=status,
        transaction_partitions=partitions,
        transaction_last_update_timestamp_ms=last_update_ms,
        transaction_start_timestamp_ms=start_ms,
        client_transaction_version=_tagged_int(
            reader, tagged, _TAG_CLIENT_TRANSACTION_VERSION, INT16
        ),
    )


def _tagged_int(reader: Reader, tagged: dict[int, bytes], tag: int, shape: struct.Struct) -> int:
    payload = tagged.get(tag)
    if payload is None:
        return DEFAULT_CLIENT_TRANSACTION_VERSION if shape is INT16 else NO_PRODUCER_ID
    if len(payload) != shape.size:
        raise reader.corrupt(f"tagged field {tag} has {len(payload)} bytes, not {shape.size}")
    return int(shape.unpack(payload)[0])


# ====================================================================== metadata <-> records
def value_to_bytes(transit: TxnTransitMetadata, version: int = 0) -> bytes:
    """The record value of a transition (Kafka's ``valueToBytes``).

    Kafka 3.9 writes version 0 (``transaction.version`` 0); version 1 is written as Kafka
    4.0 does (only ``ClientTransactionVersion`` among the tagged fields). Topics and
    partitions are written sorted (Kafka writes them in hash-set order, which a reader
    never depends on).
    """
    if transit.txn_state is TransactionState.EMPTY and transit.topic_partitions:
        raise ValueError(
            "Transaction is not expected to have any partitions since its state is Empty:"
            f" {transit}"
        )
    partitions: tuple[TxnPartitions, ...] | None = None
    if transit.txn_state is not TransactionState.EMPTY:
        by_topic: dict[str, list[int]] = {}
        for tp in sorted(transit.topic_partitions):
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        partitions = tuple(
            TxnPartitions(topic=topic, partition_ids=tuple(ids)) for topic, ids in by_topic.items()
        )
    value = TransactionLogValue(
        producer_id=transit.producer_id,
        producer_epoch=transit.producer_epoch,
        transaction_timeout_ms=transit.txn_timeout_ms,
        transaction_status=transit.txn_state,
        transaction_partitions=partitions,
        transaction_last_update_timestamp_ms=transit.txn_last_update_timestamp_ms,
        transaction_start_timestamp_ms=transit.txn_start_timestamp_ms,
    )
    return encode_value(value, version)


def read_txn_record_value(
    transactional_id: str, data: bytes | memoryview | None
) -> TransactionMetadata | None:
    """The metadata a record value holds, None for a tombstone (Kafka's
    ``readTxnRecordValue``); the last producer epoch is not stored and reads as -1."""
    if data is None:
        return None
    value = decode_value(data)
    topic_partitions: set[TopicPartition] = set()
    if value.transaction_status is not TransactionState.EMPTY:
        for entry in value.transaction_partitions or ():
            topic_partitions.update(TopicPartition(entry.topic, p) for p in entry.partition_ids)
    return TransactionMetadata(
        transactional_id=transactional_id,
        producer_id=value.producer_id,
        last_producer_id=value.previous_producer_id,
        producer_epoch=value.producer_epoch,
        txn_timeout_ms=value.transaction_timeout_ms,
        state=value.transaction_status,
        topic_partitions=topic_partitions,
        txn_start_timestamp_ms=value.transaction_start_timestamp_ms,
        txn_last_update_timestamp_ms=value.transaction_last_update_timestamp_ms,
    )


def format_record_key_and_value(
    key: bytes | memoryview, value: bytes | memoryview | None
) -> tuple[str, str | None]:
    """A record in Kafka's words (``formatRecordKeyAndValue``, what dump-log prints)."""
    record_key = read_txn_record_key(key)
    if isinstance(record_key, UnknownKey):
        return f"unknown::version={record_key.version}", None
    transactional_id = record_key.transactional_id
    key_text = f"transaction_metadata::transactionalId={transactional_id}"
    metadata = read_txn_record_value(transactional_id, value)
    if metadata is None:
        return key_text, "<DELETE>"
    partitions = ",".join(str(tp) for tp in sorted(metadata.topic_partitions))
    return key_text, (
        f"producerId:{metadata.producer_id},producerEpoch:{metadata.producer_epoch},"
        f"state={metadata.state.state_name},partitions=[{partitions}],"
        f"txnLastUpdateTimestamp={metadata.txn_last_update_timestamp_ms},"
        f"txnTimeoutMs={metadata.txn_timeout_ms}"
    )
