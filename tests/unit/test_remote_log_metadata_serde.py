"""RemoteLogMetadataSerde against bytes built here from Kafka's message schemas.

The expected bytes are assembled field by field from storage/src/main/resources/message/
Remote*Record.json (apache/kafka) with struct and a varint helper written in this file, so the
encoder is checked against an independent reading of the schemas, not against itself.
"""

from __future__ import annotations

import struct

import pytest

from storage_core.common import TopicIdPartition, TopicPartition, Uuid
from storage_core.tiered.metadata import (
    CorruptRemoteLogMetadataError,
    RemoteLogMetadataSerde,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataSnapshot,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
)
from storage_core.tiered.metadata.serde import deserialize, serialize

TOPIC_ID = Uuid.from_string("k8YHc0mdT2a4dG1nbbcX2w")
SEGMENT_UUID = Uuid.from_string("rDUCr3U6RkGdx_V-Y1-0Ag")
TIP = TopicIdPartition(TOPIC_ID, TopicPartition("orders", 3))
SEGMENT_ID = RemoteLogSegmentId(topic_id_partition=TIP, id=SEGMENT_UUID)


# ---- an independent encoder of Kafka's flexible message fields -------------------------


def uvarint(value: int) -> bytes:
    out = b""
    while True:
        low = value & 0x7F
        value >>= 7
        if value:
            out += bytes([low | 0x80])
        else:
            return out + bytes([low])


def i8(v: int) -> bytes:
    return struct.pack(">b", v)


def i32(v: int) -> bytes:
    return struct.pack(">i", v)


def i64(v: int) -> bytes:
    return struct.pack(">q", v)


def uuid(u: Uuid) -> bytes:
    return struct.pack(">qq", u.most_significant_bits, u.least_significant_bits)


def compact_string(s: str) -> bytes:
    raw = s.encode()
    return uvarint(len(raw) + 1) + raw


def compact_nullable_bytes(b: bytes | None) -> bytes:
    return b"\x00" if b is None else uvarint(len(b) + 1) + b


NO_TAGS = b"\x00"


def tags(*fields: tuple[int, bytes]) -> bytes:
    out = uvarint(len(fields))
    for tag, data in fields:
        out += uvarint(tag) + uvarint(len(data)) + data
    return out


def frame(api_key: int, version: int = 0) -> bytes:
    # BytesApiMessageSerde / AbstractApiMessageSerde: frame version 1, api key, version.
    return uvarint(1) + uvarint(api_key) + uvarint(version)


def topic_id_partition_entry(tip: TopicIdPartition) -> bytes:
    return (
        compact_string(tip.topic_partition.topic)
        + uuid(tip.topic_id)
        + i32(tip.topic_partition.partition)
        + NO_TAGS
    )


def segment_id_entry(segment_id: RemoteLogSegmentId) -> bytes:
    return topic_id_partition_entry(segment_id.topic_id_partition) + uuid(segment_id.id) + NO_TAGS


def leader_epochs(epochs: dict[int, int]) -> bytes:
    out = uvarint(len(epochs) + 1)
    for epoch, offset in epochs.items():
        out += i32(epoch) + i64(offset) + NO_TAGS
    return out


# ---- the values --------------------------------------------------------------------------

EPOCHS = {0: 0, 1: 20, 2: 80}


def segment_metadata(**overrides: object) -> RemoteLogSegmentMetadata:
    fields: dict[str, object] = {
        "remote_log_segment_id": SEGMENT_ID,
        "start_offset": 0,
        "end_offset": 100,
        "max_timestamp_ms": 1_700_000_000_123,
        "broker_id": 7,
        "event_timestamp_ms": 1_700_000_000_999,
        "segment_size_in_bytes": 1_048_576,
        "segment_leader_epochs": EPOCHS,
        "custom_metadata": b"\x01\x02\x03",
        "state": RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
    }
    fields.update(overrides)
    return RemoteLogSegmentMetadata(**fields)  # type: ignore[arg-type]


def test_remote_log_segment_metadata_record_bytes() -> None:
    metadata = segment_metadata()
    expected = (
        frame(0)
        + segment_id_entry(SEGMENT_ID)
        + i64(0)  # StartOffset
        + i64(100)  # EndOffset
        + i32(7)  # BrokerId
        + i64(1_700_000_000_123)  # MaxTimestampMs
        + i64(1_700_000_000_999)  # EventTimestampMs
        + leader_epochs(EPOCHS)
        + i32(1_048_576)  # SegmentSizeInBytes
        + compact_nullable_bytes(b"\x01\x02\x03")
        + i8(1)  # RemoteLogSegmentState COPY_SEGMENT_FINISHED
        + NO_TAGS  # TxnIndexEmpty false is the default: not written
    )
    assert serialize(metadata) == expected
    assert deserialize(expected) == metadata


def test_txn_index_empty_is_tagged_field_0() -> None:
    metadata = segment_metadata(txn_idx_empty=True, custom_metadata=None)
    encoded = serialize(metadata)
    assert encoded.endswith(compact_nullable_bytes(None) + i8(1) + tags((0, b"\x01")))
    assert deserialize(encoded) == metadata


def test_remote_log_segment_metadata_update_record_bytes() -> None:
    update = RemoteLogSegmentMetadataUpdate(
        remote_log_segment_id=SEGMENT_ID,
        event_timestamp_ms=42,
        state=RemoteLogSegmentState.DELETE_SEGMENT_STARTED,
        broker_id=-1,
        custom_metadata=None,
    )
    expected = (
        frame(1)
        + segment_id_entry(SEGMENT_ID)
        + i32(-1)  # BrokerId
        + i64(42)  # EventTimestampMs
        + compact_nullable_bytes(None)
        + i8(2)
        + NO_TAGS
    )
    assert serialize(update) == expected
    assert deserialize(expected) == update


def test_remote_partition_delete_metadata_record_literal_bytes() -> None:
    tip = TopicIdPartition(Uuid(0, 1), TopicPartition("t", 0))
    delete = RemotePartitionDeleteMetadata(
        topic_id_partition=tip,
        state=RemotePartitionDeleteState.DELETE_PARTITION_MARKED,
        event_timestamp_ms=5,
        broker_id=2,
    )
    expected = bytes.fromhex(
        "010200"  # frame version 1, api key 2, version 0
        "0274"  # Name "t"
        "00000000000000000000000000000001"  # Id
        "00000000"  # Partition
        "00"  # TopicIdPartitionEntry tags
        "00000002"  # BrokerId
        "0000000000000005"  # EventTimestampMs
        "00"  # RemotePartitionDeleteState
        "00"  # tags
    )
    assert serialize(delete) == expected
    assert deserialize(expected) == delete


def test_remote_log_segment_metadata_snapshot_record_bytes() -> None:
    snapshot = RemoteLogSegmentMetadataSnapshot.create(segment_metadata(txn_idx_empty=True))
    expected = (
        frame(3)
        + uuid(SEGMENT_UUID)
        + i64(0)
        + i64(100)
        + i32(7)
        + i64(1_700_000_000_123)
        + i64(1_700_000_000_999)
        + leader_epochs(EPOCHS)
        + i32(1_048_576)
        + compact_nullable_bytes(b"\x01\x02\x03")
        + i8(1)
        + tags((0, b"\x01"))
    )
    assert serialize(snapshot) == expected
    assert deserialize(expected) == snapshot


def test_serde_class_matches_functions() -> None:
    metadata = segment_metadata()
    assert RemoteLogMetadataSerde().serialize(metadata) == serialize(metadata)
    assert RemoteLogMetadataSerde.deserialize(serialize(metadata)) == metadata


def test_version_1_tagged_fields_are_read() -> None:
    # Version 1 (newer Kafka) adds BrokerLeaderEpoch (tag 1) and, on updates, EndOffset.
    body = (
        segment_id_entry(SEGMENT_ID)
        + i32(7)
        + i64(42)
        + compact_nullable_bytes(b"x")
        + i8(1)
        + tags((0, i32(5)), (1, i64(100)))
    )
    update = deserialize(frame(1, version=1) + body)
    assert isinstance(update, RemoteLogSegmentMetadataUpdate)
    assert update.state is RemoteLogSegmentState.COPY_SEGMENT_FINISHED
    assert update.custom_metadata == b"x"


def test_unknown_tags_are_skipped() -> None:
    expected = segment_metadata(custom_metadata=None)
    encoded = serialize(expected)[:-1] + tags((0, b"\x00"), (9, b"anything"))
    assert deserialize(encoded) == expected


def test_multi_byte_varints_for_long_names_and_arrays() -> None:
    tip = TopicIdPartition(TOPIC_ID, TopicPartition("t" * 200, 0))
    epochs = {epoch: epoch * 10 for epoch in range(130)}
    metadata = segment_metadata(
        remote_log_segment_id=RemoteLogSegmentId(topic_id_partition=tip, id=SEGMENT_UUID),
        end_offset=2000,
        segment_leader_epochs=epochs,
        custom_metadata=bytes(300),
    )
    encoded = serialize(metadata)
    assert encoded[3:5] == uvarint(201) == b"\xc9\x01"
    assert leader_epochs(epochs) in encoded and compact_nullable_bytes(bytes(300)) in encoded
    assert deserialize(encoded) == metadata


# ---- corrupt input -----------------------------------------------------------------------


def test_every_truncation_is_refused() -> None:
    encoded = serialize(segment_metadata(txn_idx_empty=True))
    for length in range(len(encoded)):
        with pytest.raises(CorruptRemoteLogMetadataError):
            deserialize(encoded[:length])


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"\x00\x02\x00", "unknown frame version 0"),
        (b"\x02\x02\x00", "unknown frame version 2"),
        (b"\x01\x04\x00", "unknown api key 4"),
        (b"\x01\x02\x02", "version 2 of api key 2 is newer"),
        (b"\x01\xff\xff\xff\xff\xff\x01", "longer than 5 bytes"),
        (b"\x01\xff\xff\xff\xff\x10", "does not fit 32 bits"),
    ],
)
def test_bad_frames_are_refused(data: bytes, reason: str) -> None:
    with pytest.raises(CorruptRemoteLogMetadataError, match=reason):
        deserialize(data)


def test_trailing_garbage_is_refused() -> None:
    with pytest.raises(CorruptRemoteLogMetadataError, match="garbage"):
        deserialize(serialize(segment_metadata()) + b"\x00")


def _delete_body(name: bytes, state: int, tag_bytes: bytes = NO_TAGS, version: int = 0) -> bytes:
    return (
        frame(2, version)
        + name
        + uuid(TOPIC_ID)
        + i32(0)
        + NO_TAGS
        + i32(1)
        + i64(1)
        + i8(state)
        + tag_bytes
    )


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (_delete_body(b"\x00", 0), "null"),
        (_delete_body(b"\x03\xff\xfe", 0), "UTF-8"),
        (_delete_body(b"\x03..", 0), "Topic name"),
        (_delete_body(compact_string("t"), 3), "RemotePartitionDeleteState id 3"),
        (_delete_body(compact_string("t"), 0, tags((1, b""), (0, b""))), "previous tag"),
        (_delete_body(compact_string("t"), 0, tags((0, b"\x00")), version=1), "BrokerLeaderEpoch"),
    ],
)
def test_bad_partition_delete_records_are_refused(data: bytes, reason: str) -> None:
    with pytest.raises(CorruptRemoteLogMetadataError, match=reason):
        deserialize(data)


def test_bad_segment_fields_are_refused() -> None:
    good = serialize(segment_metadata(custom_metadata=None))
    state_at = len(good) - 2
    with pytest.raises(CorruptRemoteLogMetadataError, match="RemoteLogSegmentState id 9"):
        deserialize(good[:state_at] + i8(9) + good[state_at + 1 :])
    with pytest.raises(CorruptRemoteLogMetadataError, match="not a bool"):
        deserialize(good[:-1] + tags((0, b"\x02")))
    epochs_at = good.index(leader_epochs(EPOCHS))
    swapped = uvarint(3) + i32(1) + i64(20) + NO_TAGS + i32(0) + i64(0) + NO_TAGS
    with pytest.raises(CorruptRemoteLogMetadataError, match="strictly increasing"):
        deserialize(good[:epochs_at] + swapped + good[epochs_at + len(leader_epochs(EPOCHS)) :])
    start_at = len(frame(0)) + len(segment_id_entry(SEGMENT_ID))
    with pytest.raises(CorruptRemoteLogMetadataError, match="start_offset"):
        deserialize(good[:start_at] + i64(-5) + good[start_at + 8 :])
    with pytest.raises(CorruptRemoteLogMetadataError, match="claims"):
        deserialize(good[:epochs_at] + uvarint(1_000_000))


def test_oversized_values_are_refused() -> None:
    with pytest.raises(ValueError, match="limit"):
        serialize(segment_metadata(custom_metadata=bytes(1 << 20)))
    with pytest.raises(CorruptRemoteLogMetadataError, match="limit"):
        deserialize(bytes((1 << 20) + 1))
