"""Records of ``__transaction_state`` (Kafka's TransactionLog), byte for byte.

The expected bytes are built here by hand from ``TransactionLogKey.json`` and
``TransactionLogValue.json`` (Kafka 3.9), independently of the module's writer: ``struct`` for
the fixed-size fields, a hand-written unsigned varint for the flexible version. Cases named
after a Kafka test port ``TransactionLogTest.scala``.
"""

from __future__ import annotations

import struct

import pytest

from storage_core.common import TopicPartition
from storage_core.coordinator.transaction.errors import CorruptTransactionLogRecordError
from storage_core.coordinator.transaction.transaction_log import (
    TransactionLogKey,
    TransactionLogValue,
    TxnPartitions,
    UnknownKey,
    decode_value,
    encode_value,
    format_record_key_and_value,
    key_to_bytes,
    partition_for,
    read_txn_record_key,
    read_txn_record_value,
    value_to_bytes,
)
from storage_core.coordinator.transaction.transaction_metadata import TransactionMetadata
from storage_core.coordinator.transaction.transaction_state import TransactionState
from storage_core.records import SimpleRecord, build_batch
from storage_core.records.batch import RecordBatch

S = TransactionState
PRODUCER_EPOCH = 0
TXN_TIMEOUT_MS = 1000
TOPIC_PARTITIONS = {
    TopicPartition("topic1", 0),
    TopicPartition("topic1", 1),
    TopicPartition("topic2", 0),
    TopicPartition("topic2", 1),
    TopicPartition("topic2", 2),
}


def _string(text: str) -> bytes:
    raw = text.encode()
    return struct.pack(">h", len(raw)) + raw


def _uvarint(value: int) -> bytes:
    out = b""
    while True:
        if value < 0x80:
            return out + bytes([value])
        out += bytes([(value & 0x7F) | 0x80])
        value >>= 7


def _compact_string(text: str) -> bytes:
    raw = text.encode()
    return _uvarint(len(raw) + 1) + raw


def _metadata(
    transactional_id: str, producer_id: int, state: TransactionState
) -> TransactionMetadata:
    return TransactionMetadata(
        transactional_id=transactional_id,
        producer_id=producer_id,
        producer_epoch=PRODUCER_EPOCH,
        txn_timeout_ms=TXN_TIMEOUT_MS,
        state=state,
        txn_start_timestamp_ms=0,
        txn_last_update_timestamp_ms=0,
    )


# ---------------------------------------------------------------- keys
def test_key_is_version_0_and_an_int16_length_string() -> None:
    assert key_to_bytes("transactionalId") == b"\x00\x00" + _string("transactionalId")
    assert read_txn_record_key(key_to_bytes("transactionalId")) == TransactionLogKey(
        transactional_id="transactionalId"
    )


def test_read_txn_record_key_can_read_unknown_message() -> None:
    # Kafka: testReadTxnRecordKeyCanReadUnknownMessage
    assert read_txn_record_key(struct.pack(">h", 32767)) == UnknownKey(version=32767)


# ---------------------------------------------------------------- values, version 0
def test_value_version_0_byte_for_byte() -> None:
    value = TransactionLogValue(
        producer_id=23423,
        producer_epoch=7,
        transaction_timeout_ms=60_000,
        transaction_status=S.ONGOING,
        transaction_partitions=(
            TxnPartitions(topic="topic1", partition_ids=(0, 1)),
            TxnPartitions(topic="topic2", partition_ids=(2,)),
        ),
        transaction_last_update_timestamp_ms=1_700_000_000_123,
        transaction_start_timestamp_ms=1_700_000_000_000,
    )
    expected = (
        struct.pack(">hqhib", 0, 23423, 7, 60_000, 1)
        + struct.pack(">i", 2)
        + _string("topic1")
        + struct.pack(">iii", 2, 0, 1)
        + _string("topic2")
        + struct.pack(">ii", 1, 2)
        + struct.pack(">qq", 1_700_000_000_123, 1_700_000_000_000)
    )
    assert encode_value(value, 0) == expected
    assert decode_value(expected) == value


def test_empty_value_writes_null_partitions() -> None:
    transit = _metadata("id", 5, S.EMPTY).prepare_no_transit()
    expected = (
        struct.pack(">hqhib", 0, 5, 0, 1000, 0) + struct.pack(">i", -1) + struct.pack(">qq", 0, 0)
    )
    assert value_to_bytes(transit) == expected
    metadata = read_txn_record_value("id", expected)
    assert metadata is not None and metadata.state is S.EMPTY and not metadata.topic_partitions


def test_should_throw_exception_write_invalid_txn() -> None:
    # Kafka: shouldThrowExceptionWriteInvalidTxn
    metadata = _metadata("transactionalId", 23423, S.EMPTY)
    metadata.add_partitions(TOPIC_PARTITIONS)
    with pytest.raises(ValueError, match="not expected to have any partitions"):
        value_to_bytes(metadata.prepare_no_transit(), 1)


@pytest.mark.parametrize("version", [0, 1])
def test_should_read_write_messages(version: int) -> None:
    # Kafka: shouldReadWriteMessages, through a real record batch
    pid_mappings = {"zero": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5}
    states = {
        0: S.EMPTY,
        1: S.ONGOING,
        2: S.PREPARE_COMMIT,
        3: S.COMPLETE_COMMIT,
        4: S.PREPARE_ABORT,
        5: S.COMPLETE_ABORT,
    }
    records = []
    for transactional_id, producer_id in pid_mappings.items():
        metadata = _metadata(transactional_id, producer_id, states[producer_id])
        if metadata.state is not S.EMPTY:
            metadata.add_partitions(TOPIC_PARTITIONS)
        records.append(
            SimpleRecord(
                key=key_to_bytes(transactional_id),
                value=value_to_bytes(metadata.prepare_no_transit(), version),
            )
        )
    batch = RecordBatch.from_buffer(build_batch(records))
    count = 0
    for record in batch.records():
        assert record.key is not None and record.value is not None
        key = read_txn_record_key(record.key)
        assert isinstance(key, TransactionLogKey)
        read = read_txn_record_value(key.transactional_id, record.value)
        assert read is not None
        assert read.producer_id == pid_mappings[key.transactional_id]
        assert read.producer_epoch == PRODUCER_EPOCH
        assert read.txn_timeout_ms == TXN_TIMEOUT_MS
        assert read.state is states[read.producer_id]
        expected = set() if read.state is S.EMPTY else TOPIC_PARTITIONS
        assert read.topic_partitions == expected
        count += 1
    assert count == len(pid_mappings)


def test_serialize_transaction_log_value_to_highest_non_flexible_version() -> None:
    # Kafka: testSerializeTransactionLogValueToHighestNonFlexibleVersion
    transit = _metadata("id", 1, S.COMPLETE_COMMIT).prepare_no_transit()
    assert value_to_bytes(transit)[:2] == b"\x00\x00"


def test_serialize_transaction_log_value_to_flexible_version() -> None:
    # Kafka: testSerializeTransactionLogValueToFlexibleVersion
    transit = _metadata("id", 1, S.COMPLETE_COMMIT).prepare_no_transit()
    assert value_to_bytes(transit, 1)[:2] == b"\x00\x01"


# ---------------------------------------------------------------- values, version 1
def _v1_body(partitions: bytes, tagged: bytes = b"\x00") -> bytes:
    return (
        struct.pack(">hqhib", 1, 100, 50, 500, 4)
        + partitions
        + struct.pack(">qq", 1000, 750)
        + tagged
    )


def test_value_version_1_byte_for_byte() -> None:
    value = TransactionLogValue(
        producer_id=100,
        producer_epoch=50,
        transaction_timeout_ms=500,
        transaction_status=S.COMPLETE_COMMIT,
        transaction_partitions=(TxnPartitions(topic="topic", partition_ids=(0, 3)),),
        transaction_last_update_timestamp_ms=1000,
        transaction_start_timestamp_ms=750,
    )
    partitions = (
        _uvarint(2) + _compact_string("topic") + _uvarint(3) + struct.pack(">ii", 0, 3) + b"\x00"
    )
    assert encode_value(value, 1) == _v1_body(partitions)
    assert decode_value(_v1_body(partitions)) == value


def test_value_version_1_tagged_fields_written_when_not_default_in_tag_order() -> None:
    value = TransactionLogValue(
        producer_id=100,
        previous_producer_id=99,
        next_producer_id=101,
        producer_epoch=50,
        transaction_timeout_ms=500,
        transaction_status=S.COMPLETE_COMMIT,
        transaction_partitions=(),
        transaction_last_update_timestamp_ms=1000,
        transaction_start_timestamp_ms=750,
        client_transaction_version=2,
    )
    tagged = (
        _uvarint(3)
        + _uvarint(0) + _uvarint(8) + struct.pack(">q", 99)
        + _uvarint(1) + _uvarint(8) + struct.pack(">q", 101)
        + _uvarint(2) + _uvarint(2) + struct.pack(">h", 2)
    )  # fmt: skip
    encoded = _v1_body(_uvarint(1), tagged)
    assert encode_value(value, 1) == encoded
    assert decode_value(encoded) == value
    # Version 0 has no place for them: written without, read back as defaults.
    assert decode_value(encode_value(value, 0)).previous_producer_id == -1


def test_version_1_null_partitions_is_a_zero_length_prefix() -> None:
    transit = _metadata("id", 100, S.EMPTY).prepare_no_transit()
    expected = struct.pack(">hqhib", 1, 100, 0, 1000, 0) + b"\x00" + struct.pack(">qq", 0, 0)
    assert value_to_bytes(transit, 1) == expected + b"\x00"  # no tagged fields


def test_deserialize_highest_supported_transaction_log_value() -> None:
    # Kafka: testDeserializeHighestSupportedTransactionLogValue
    partitions = (
        _uvarint(2) + _compact_string("topic") + _uvarint(2) + struct.pack(">i", 0) + b"\x00"
    )
    metadata = read_txn_record_value("transactionId", _v1_body(partitions))
    assert metadata is not None
    assert metadata.producer_id == 100
    assert metadata.producer_epoch == 50
    assert metadata.state is S.COMPLETE_COMMIT
    assert metadata.txn_start_timestamp_ms == 750
    assert metadata.txn_last_update_timestamp_ms == 1000
    assert metadata.txn_timeout_ms == 500
    assert metadata.topic_partitions == {TopicPartition("topic", 0)}


def test_deserialize_future_transaction_log_value() -> None:
    # Kafka: testDeserializeFutureTransactionLogValue: unknown tags 100 (a STRING) and 101 (an
    # INT32) in the value and in each partitions entry are read and ignored.
    unknown_tags = (
        _uvarint(2)
        + _uvarint(100) + _uvarint(5) + _string("foo")
        + _uvarint(101) + _uvarint(4) + struct.pack(">i", 4000)
    )  # fmt: skip
    partitions = (
        _uvarint(2) + _compact_string("topic") + _uvarint(2) + struct.pack(">i", 1) + unknown_tags
    )
    encoded = (
        struct.pack(">hqhib", 1, 1000, 100, 1000, 4)
        + partitions
        + struct.pack(">qq", 2000, 3000)
        + unknown_tags
    )
    metadata = read_txn_record_value("transaction-id", encoded)
    assert metadata is not None
    assert metadata.producer_id == 1000
    assert metadata.producer_epoch == 100
    assert metadata.txn_timeout_ms == 1000
    assert metadata.state is S.COMPLETE_COMMIT
    assert metadata.topic_partitions == {TopicPartition("topic", 1)}
    assert metadata.txn_last_update_timestamp_ms == 2000
    assert metadata.txn_start_timestamp_ms == 3000


# ---------------------------------------------------------------- tombstones and formatting
def test_null_value_is_a_tombstone() -> None:
    assert read_txn_record_value("id", None) is None


def test_transaction_metadata_parsing() -> None:
    # Kafka: testTransactionMetadataParsing
    metadata = _metadata("id", 1334, S.ONGOING)
    metadata.add_partitions({TopicPartition("topic", 0)})
    metadata.txn_last_update_timestamp_ms = 0
    key_text, value_text = format_record_key_and_value(
        key_to_bytes("id"), value_to_bytes(metadata.prepare_no_transit())
    )
    assert key_text == "transaction_metadata::transactionalId=id"
    assert value_text == (
        "producerId:1334,producerEpoch:0,state=Ongoing,partitions=[topic-0],"
        "txnLastUpdateTimestamp=0,txnTimeoutMs=1000"
    )


def test_transaction_metadata_tombstone_parsing() -> None:
    # Kafka: testTransactionMetadataTombstoneParsing
    assert format_record_key_and_value(key_to_bytes("id"), None) == (
        "transaction_metadata::transactionalId=id",
        "<DELETE>",
    )


# ---------------------------------------------------------------- corrupt records
@pytest.mark.parametrize(
    ("data", "message"),
    [
        (struct.pack(">h", 2) + bytes(40), "Unknown version 2"),
        (struct.pack(">hqhib", 0, 1, 0, 1, 8) + struct.pack(">iqq", -1, 0, 0), "state id 8"),
        (struct.pack(">hqhib", 0, 1, 0, 1, 0) + struct.pack(">iqqb", -1, 0, 0, 9), "1 bytes left"),
        (struct.pack(">hqhib", 0, 1, 0, 1, 0) + struct.pack(">iq", -1, 0), "needs 8 bytes"),
        (struct.pack(">hqhib", 0, 1, 0, 1, 1) + struct.pack(">i", 1000), "invalid element count"),
    ],
)  # fmt: skip
def test_corrupt_values_are_refused_with_what_is_wrong(data: bytes, message: str) -> None:
    with pytest.raises(CorruptTransactionLogRecordError, match=message):
        decode_value(data)


# ---------------------------------------------------------------- partitioning
def test_partition_for_is_kafka_utils_abs_of_java_hash_code() -> None:
    # "hello".hashCode() == 99162322; "my-group".hashCode() == -1906497762, whose
    # Math.abs % 50 is 12 (a mask with 0x7fffffff would give 36);
    # "polygenelubricants".hashCode() == Integer.MIN_VALUE, for which Utils.abs is 0.
    assert partition_for("hello", 50) == 99162322 % 50
    assert partition_for("my-group", 50) == 1906497762 % 50 == 12
    assert partition_for("polygenelubricants", 50) == 0
    assert partition_for("polygenelubricants", 7) == 0
    with pytest.raises(ValueError, match="must be positive"):
        partition_for("id", 0)
