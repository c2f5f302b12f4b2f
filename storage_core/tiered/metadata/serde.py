"""Kafka's ``RemoteLogMetadataSerde``: values of ``__remote_log_metadata`` records, byte for byte.

A record of the metadata topic has a null key; its value is (Kafka's ``BytesApiMessageSerde``
over ``AbstractApiMessageSerde``)::

    frame_version   unsigned varint   always 1 (0 was KRaft's 2.8 preview and is refused)
    api_key         unsigned varint   0..3, the message below
    version         unsigned varint   the message version (written: 0; read: 0..1)
    message         the flexible message body of that api key and version

Body encodings (every version is flexible, so): int8/int32/int64 big-endian; ``uuid`` 16
bytes (most significant half, then least, big-endian); ``string`` = unsigned varint
(length + 1) then UTF-8; nullable ``bytes`` = unsigned varint (length + 1, 0 for null) then
the bytes; ``[]`` arrays = unsigned varint (count + 1) then the entries; every struct, and
the message itself, ends with a tagged-field section = unsigned varint count, then per field
unsigned varint tag, unsigned varint size, ``size`` bytes (tags ascending; a field at its
default is not written). Field order, from storage/src/main/resources/message/*.json::

    0 RemoteLogSegmentMetadataRecord
        RemoteLogSegmentId { TopicIdPartition { Name string, Id uuid, Partition int32, tags },
                             Id uuid, tags }
        StartOffset int64, EndOffset int64, BrokerId int32, MaxTimestampMs int64,
        EventTimestampMs int64,
        SegmentLeaderEpochs [ { LeaderEpoch int32, Offset int64, tags } ],
        SegmentSizeInBytes int32, CustomMetadata nullable bytes, RemoteLogSegmentState int8,
        tags: 0 = TxnIndexEmpty bool (default false); v1+: 1 = BrokerLeaderEpoch int32
    1 RemoteLogSegmentMetadataUpdateRecord
        RemoteLogSegmentId (as above), BrokerId int32, EventTimestampMs int64,
        CustomMetadata nullable bytes, RemoteLogSegmentState int8,
        tags: v1+: 0 = BrokerLeaderEpoch int32, 1 = EndOffset int64
    2 RemotePartitionDeleteMetadataRecord
        TopicIdPartition (as above), BrokerId int32, EventTimestampMs int64,
        RemotePartitionDeleteState int8,
        tags: v1+: 0 = BrokerLeaderEpoch int32, 1 = EndOffset int64
    3 RemoteLogSegmentMetadataSnapshotRecord
        SegmentId uuid, StartOffset int64, EndOffset int64, BrokerId int32,
        MaxTimestampMs int64, EventTimestampMs int64, SegmentLeaderEpochs (as above),
        SegmentSizeInBytes int32, CustomMetadata nullable bytes, RemoteLogSegmentState int8,
        tags: 0 = TxnIndexEmpty bool (default false); v1+: 1 = BrokerLeaderEpoch int32

Version 0 is what released Kafka (3.6 to 4.1) writes for every api key; version 1 only adds
the tagged fields marked v1+, which this module reads, size-checks and drops (the values here
do not carry them). Unknown tags are skipped, as Kafka's generated readers do.

Decoding is strict: any truncation, a varint longer than 5 bytes, an unknown frame version,
api key, version or state id, a null non-nullable field, invalid UTF-8, tags out of order, a
value outside its type's rules or trailing bytes raise ``CorruptRemoteLogMetadataError``.
Leader epochs must come in strictly increasing epoch order, as Kafka writes them (from a
``TreeMap``). Values larger than ``MAX_REMOTE_LOG_METADATA_BYTES`` are refused both ways.
Stateless and thread-safe.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping
from typing import TypeVar

from storage_core.common import TopicIdPartition, TopicPartition, Uuid, validate_topic_name
from storage_core.errors import InvalidTopicError
from storage_core.records.varint import UINT32_MAX, encode_unsigned_varint
from storage_core.tiered.metadata.errors import CorruptRemoteLogMetadataError
from storage_core.tiered.metadata.metadata import (
    RemoteLogMetadata,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataSnapshot,
    RemoteLogSegmentMetadataUpdate,
    RemotePartitionDeleteMetadata,
)
from storage_core.tiered.metadata.states import RemoteLogSegmentState, RemotePartitionDeleteState

FRAME_VERSION = 1
REMOTE_LOG_SEGMENT_METADATA_API_KEY = 0
REMOTE_LOG_SEGMENT_METADATA_UPDATE_API_KEY = 1
REMOTE_PARTITION_DELETE_API_KEY = 2
REMOTE_LOG_SEGMENT_METADATA_SNAPSHOT_API_KEY = 3

WRITE_VERSION = 0
"""The message version written for every api key (Kafka's ``highestSupportedVersion`` up to 4.1)."""
HIGHEST_READ_VERSION = 1
"""Highest message version read (version 1 adds tagged fields only)."""

MAX_REMOTE_LOG_METADATA_BYTES = 1 << 20
"""Largest serialized value, 1 MiB (inclusive): Kafka's default ``max.message.bytes``."""

_TAG_TXN_INDEX_EMPTY = 0

_INT8 = struct.Struct(">b")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
_UUID = struct.Struct(">qq")
_EPOCH_ENTRY = struct.Struct(">iq")

_T = TypeVar("_T")


# --------------------------------------------------------------------------- writing


def _write_uuid(out: bytearray, uuid: Uuid) -> None:
    out += _UUID.pack(uuid.most_significant_bits, uuid.least_significant_bits)


def _write_topic_id_partition(out: bytearray, tip: TopicIdPartition) -> None:
    name = tip.topic_partition.topic.encode("utf-8")
    out += encode_unsigned_varint(len(name) + 1)
    out += name
    _write_uuid(out, tip.topic_id)
    out += _INT32.pack(tip.topic_partition.partition)
    out.append(0)  # no tagged fields


def _write_segment_id(out: bytearray, segment_id: RemoteLogSegmentId) -> None:
    _write_topic_id_partition(out, segment_id.topic_id_partition)
    _write_uuid(out, segment_id.id)
    out.append(0)


def _write_leader_epochs(out: bytearray, epochs: Mapping[int, int]) -> None:
    out += encode_unsigned_varint(len(epochs) + 1)
    for epoch, start_offset in epochs.items():
        out += _EPOCH_ENTRY.pack(epoch, start_offset)
        out.append(0)


def _write_nullable_bytes(out: bytearray, value: bytes | None) -> None:
    if value is None:
        out.append(0)
    else:
        out += encode_unsigned_varint(len(value) + 1)
        out += value


def _write_txn_index_empty_tag(out: bytearray, txn_idx_empty: bool) -> None:
    if txn_idx_empty:
        out += bytes((1, _TAG_TXN_INDEX_EMPTY, 1, 1))  # one field: tag 0, size 1, true
    else:
        out.append(0)


def _segment_metadata_body(metadata: RemoteLogSegmentMetadata) -> bytearray:
    out = bytearray()
    _write_segment_id(out, metadata.remote_log_segment_id)
    out += _INT64.pack(metadata.start_offset)
    out += _INT64.pack(metadata.end_offset)
    out += _INT32.pack(metadata.broker_id)
    out += _INT64.pack(metadata.max_timestamp_ms)
    out += _INT64.pack(metadata.event_timestamp_ms)
    _write_leader_epochs(out, metadata.segment_leader_epochs)
    out += _INT32.pack(metadata.segment_size_in_bytes)
    _write_nullable_bytes(out, metadata.custom_metadata)
    out += _INT8.pack(metadata.state)
    _write_txn_index_empty_tag(out, metadata.txn_idx_empty)
    return out


def _update_body(update: RemoteLogSegmentMetadataUpdate) -> bytearray:
    out = bytearray()
    _write_segment_id(out, update.remote_log_segment_id)
    out += _INT32.pack(update.broker_id)
    out += _INT64.pack(update.event_timestamp_ms)
    _write_nullable_bytes(out, update.custom_metadata)
    out += _INT8.pack(update.state)
    out.append(0)
    return out


def _partition_delete_body(metadata: RemotePartitionDeleteMetadata) -> bytearray:
    out = bytearray()
    _write_topic_id_partition(out, metadata.topic_id_partition)
    out += _INT32.pack(metadata.broker_id)
    out += _INT64.pack(metadata.event_timestamp_ms)
    out += _INT8.pack(metadata.state)
    out.append(0)
    return out


def _snapshot_body(snapshot: RemoteLogSegmentMetadataSnapshot) -> bytearray:
    out = bytearray()
    _write_uuid(out, snapshot.segment_id)
    out += _INT64.pack(snapshot.start_offset)
    out += _INT64.pack(snapshot.end_offset)
    out += _INT32.pack(snapshot.broker_id)
    out += _INT64.pack(snapshot.max_timestamp_ms)
    out += _INT64.pack(snapshot.event_timestamp_ms)
    _write_leader_epochs(out, snapshot.segment_leader_epochs)
    out += _INT32.pack(snapshot.segment_size_in_bytes)
    _write_nullable_bytes(out, snapshot.custom_metadata)
    out += _INT8.pack(snapshot.state)
    _write_txn_index_empty_tag(out, snapshot.txn_idx_empty)
    return out


def serialize(metadata: RemoteLogMetadata) -> bytes:
    """The record value Kafka's ``RemoteLogMetadataSerde.serialize`` writes for ``metadata``."""
    if isinstance(metadata, RemoteLogSegmentMetadata):
        api_key, body = REMOTE_LOG_SEGMENT_METADATA_API_KEY, _segment_metadata_body(metadata)
    elif isinstance(metadata, RemoteLogSegmentMetadataUpdate):
        api_key, body = REMOTE_LOG_SEGMENT_METADATA_UPDATE_API_KEY, _update_body(metadata)
    elif isinstance(metadata, RemotePartitionDeleteMetadata):
        api_key, body = REMOTE_PARTITION_DELETE_API_KEY, _partition_delete_body(metadata)
    elif isinstance(metadata, RemoteLogSegmentMetadataSnapshot):
        api_key, body = REMOTE_LOG_SEGMENT_METADATA_SNAPSHOT_API_KEY, _snapshot_body(metadata)
    else:
        raise TypeError(f"no remote log metadata serde for {type(metadata).__name__}")
    value = bytes((FRAME_VERSION, api_key, WRITE_VERSION)) + body
    if len(value) > MAX_REMOTE_LOG_METADATA_BYTES:
        raise ValueError(
            f"serialized remote log metadata is {len(value)} bytes, more than the limit of"
            f" {MAX_REMOTE_LOG_METADATA_BYTES} (shrink the custom metadata)"
        )
    return value


# --------------------------------------------------------------------------- reading


class _Reader:
    """Bounds-checked cursor over one value; every failure is a CorruptRemoteLogMetadataError."""

    __slots__ = ("buf", "pos", "what")

    def __init__(self, buf: memoryview, what: str) -> None:
        self.buf = buf
        self.pos = 0
        self.what = what

    def fail(self, reason: str) -> CorruptRemoteLogMetadataError:
        return CorruptRemoteLogMetadataError(f"{self.what}: {reason} (at byte {self.pos})")

    def take(self, size: int, field: str) -> memoryview:
        end = self.pos + size
        if end > len(self.buf):
            raise self.fail(
                f"truncated {field}: needs {size} bytes, {len(self.buf) - self.pos} left"
            )
        view = self.buf[self.pos : end]
        self.pos = end
        return view

    def uvarint(self, field: str) -> int:
        result = 0
        for shift in range(0, 35, 7):
            if self.pos >= len(self.buf):
                raise self.fail(f"truncated unsigned varint {field}")
            byte = self.buf[self.pos]
            self.pos += 1
            result |= (byte & 0x7F) << shift
            if byte < 0x80:
                if result > UINT32_MAX:
                    raise self.fail(f"unsigned varint {field} does not fit 32 bits")
                return result
        raise self.fail(f"unsigned varint {field} is longer than 5 bytes")

    def int8(self, field: str) -> int:
        value: int = _INT8.unpack(self.take(1, field))[0]
        return value

    def int32(self, field: str) -> int:
        value: int = _INT32.unpack(self.take(4, field))[0]
        return value

    def int64(self, field: str) -> int:
        value: int = _INT64.unpack(self.take(8, field))[0]
        return value

    def uuid(self, field: str) -> Uuid:
        most, least = _UUID.unpack(self.take(16, field))
        return Uuid(most, least)

    def string(self, field: str) -> str:
        length = self.uvarint(field) - 1
        if length < 0:
            raise self.fail(f"{field} is null, but it is not nullable")
        try:
            return bytes(self.take(length, field)).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise self.fail(f"{field} is not valid UTF-8") from exc

    def nullable_bytes(self, field: str) -> bytes | None:
        length = self.uvarint(field) - 1
        return None if length < 0 else bytes(self.take(length, field))

    def array_count(self, field: str, min_entry_size: int) -> int:
        count = self.uvarint(field) - 1
        if count < 0:
            raise self.fail(f"{field} is null, but it is not nullable")
        if count * min_entry_size > len(self.buf) - self.pos:
            raise self.fail(f"{field} claims {count} entries, more than the bytes left hold")
        return count

    def tagged_fields(self, field: str, known: Mapping[int, Callable[[memoryview], None]]) -> None:
        """Read a tagged-field section; call ``known[tag]`` with each known field's bytes."""
        count = self.uvarint(f"{field} tagged field count")
        previous_tag = -1
        for _ in range(count):
            tag = self.uvarint(f"{field} tag")
            if tag <= previous_tag:
                raise self.fail(f"{field} tag {tag} is not above the previous tag {previous_tag}")
            previous_tag = tag
            size = self.uvarint(f"{field} tag {tag} size")
            data = self.take(size, f"{field} tag {tag}")
            handler = known.get(tag)
            if handler is not None:
                handler(data)

    def no_tagged_fields(self, field: str) -> None:
        self.tagged_fields(field, {})


def _fixed_size(size: int, field: str, reader: _Reader) -> Callable[[memoryview], None]:
    """A tag handler that only checks the field's size (tags read but not kept)."""

    def check(data: memoryview) -> None:
        if len(data) != size:
            raise reader.fail(f"tagged {field} has {len(data)} bytes, expected {size}")

    return check


_DECODED_PARTITIONS: dict[bytes, TopicIdPartition] = {}
"""The bytes of TopicIdPartitionEntry values decoded (and checked) before -> their value, so
that the events of one partition share one ``TopicIdPartition`` (a cache of 10^5 segments held
10^5 copies, each one more for the garbage collector to walk) and its name is checked once.
Emptied when it reaches ``MAX_DECODED_PARTITIONS`` entries."""
MAX_DECODED_PARTITIONS = 10_000


def _read_topic_id_partition(reader: _Reader) -> TopicIdPartition:
    start = reader.pos
    name = reader.string("topic name")
    topic_id = reader.uuid("topic id")
    partition = reader.int32("partition")
    reader.no_tagged_fields("TopicIdPartitionEntry")
    entry = bytes(reader.buf[start : reader.pos])
    known = _DECODED_PARTITIONS.get(entry)
    if known is not None:
        return known
    try:
        validate_topic_name(name)
    except InvalidTopicError as exc:
        raise reader.fail(str(exc)) from exc
    decoded = TopicIdPartition(topic_id, TopicPartition(name, partition))
    if len(_DECODED_PARTITIONS) >= MAX_DECODED_PARTITIONS:
        _DECODED_PARTITIONS.clear()
    _DECODED_PARTITIONS[entry] = decoded
    return decoded


def _read_segment_id(reader: _Reader) -> RemoteLogSegmentId:
    tip = _read_topic_id_partition(reader)
    segment_id = reader.uuid("segment id")
    reader.no_tagged_fields("RemoteLogSegmentIdEntry")
    return _build(reader, RemoteLogSegmentId, topic_id_partition=tip, id=segment_id)


def _read_leader_epochs(reader: _Reader) -> dict[int, int]:
    count = reader.array_count("SegmentLeaderEpochs", _EPOCH_ENTRY.size + 1)
    epochs: dict[int, int] = {}
    previous: int | None = None
    for _ in range(count):
        epoch, start_offset = _EPOCH_ENTRY.unpack(reader.take(_EPOCH_ENTRY.size, "leader epoch"))
        reader.no_tagged_fields("SegmentLeaderEpochEntry")
        if previous is not None and epoch <= previous:
            raise reader.fail(f"leader epoch {epoch} follows {previous}: not strictly increasing")
        previous = epoch
        epochs[epoch] = start_offset
    return epochs


def _read_segment_state(reader: _Reader) -> RemoteLogSegmentState:
    state_id = reader.int8("RemoteLogSegmentState")
    state = RemoteLogSegmentState.for_id(state_id)
    if state is None:
        raise reader.fail(f"unknown RemoteLogSegmentState id {state_id}")
    return state


def _txn_index_empty_handler(reader: _Reader, sink: list[bool]) -> Callable[[memoryview], None]:
    def handle(data: memoryview) -> None:
        if len(data) != 1 or data[0] not in (0, 1):
            raise reader.fail(f"tagged TxnIndexEmpty is not a bool: {bytes(data).hex()}")
        sink[0] = data[0] == 1

    return handle


def _build(reader: _Reader, cls: type[_T], **fields: object) -> _T:
    try:
        return cls(**fields)
    except ValueError as exc:
        raise reader.fail(f"invalid {cls.__name__}: {exc}") from exc


def _read_segment_fields(reader: _Reader, version: int, record: str) -> dict[str, object]:
    """The fields a segment record and a snapshot record share, after the segment id."""
    fields: dict[str, object] = {
        "start_offset": reader.int64("StartOffset"),
        "end_offset": reader.int64("EndOffset"),
        "broker_id": reader.int32("BrokerId"),
        "max_timestamp_ms": reader.int64("MaxTimestampMs"),
        "event_timestamp_ms": reader.int64("EventTimestampMs"),
        "segment_leader_epochs": _read_leader_epochs(reader),
        "segment_size_in_bytes": reader.int32("SegmentSizeInBytes"),
        "custom_metadata": reader.nullable_bytes("CustomMetadata"),
        "state": _read_segment_state(reader),
    }
    txn_idx_empty = [False]
    known = {_TAG_TXN_INDEX_EMPTY: _txn_index_empty_handler(reader, txn_idx_empty)}
    if version >= 1:
        known[1] = _fixed_size(4, "BrokerLeaderEpoch", reader)
    reader.tagged_fields(record, known)
    fields["txn_idx_empty"] = txn_idx_empty[0]
    return fields


def _read_segment_metadata(reader: _Reader, version: int) -> RemoteLogSegmentMetadata:
    segment_id = _read_segment_id(reader)
    fields = _read_segment_fields(reader, version, "RemoteLogSegmentMetadataRecord")
    return _build(reader, RemoteLogSegmentMetadata, remote_log_segment_id=segment_id, **fields)


def _v1_epoch_and_end_offset_tags(
    reader: _Reader, version: int
) -> dict[int, Callable[[memoryview], None]]:
    if version < 1:
        return {}
    return {
        0: _fixed_size(4, "BrokerLeaderEpoch", reader),
        1: _fixed_size(8, "EndOffset", reader),
    }


def _read_update(reader: _Reader, version: int) -> RemoteLogSegmentMetadataUpdate:
    segment_id = _read_segment_id(reader)
    broker_id = reader.int32("BrokerId")
    event_timestamp_ms = reader.int64("EventTimestampMs")
    custom_metadata = reader.nullable_bytes("CustomMetadata")
    state = _read_segment_state(reader)
    reader.tagged_fields(
        "RemoteLogSegmentMetadataUpdateRecord", _v1_epoch_and_end_offset_tags(reader, version)
    )
    return _build(
        reader,
        RemoteLogSegmentMetadataUpdate,
        remote_log_segment_id=segment_id,
        event_timestamp_ms=event_timestamp_ms,
        state=state,
        broker_id=broker_id,
        custom_metadata=custom_metadata,
    )


def _read_partition_delete(reader: _Reader, version: int) -> RemotePartitionDeleteMetadata:
    tip = _read_topic_id_partition(reader)
    broker_id = reader.int32("BrokerId")
    event_timestamp_ms = reader.int64("EventTimestampMs")
    state_id = reader.int8("RemotePartitionDeleteState")
    state = RemotePartitionDeleteState.for_id(state_id)
    if state is None:
        raise reader.fail(f"unknown RemotePartitionDeleteState id {state_id}")
    reader.tagged_fields(
        "RemotePartitionDeleteMetadataRecord", _v1_epoch_and_end_offset_tags(reader, version)
    )
    return _build(
        reader,
        RemotePartitionDeleteMetadata,
        topic_id_partition=tip,
        state=state,
        event_timestamp_ms=event_timestamp_ms,
        broker_id=broker_id,
    )


def _read_snapshot(reader: _Reader, version: int) -> RemoteLogSegmentMetadataSnapshot:
    segment_id = reader.uuid("SegmentId")
    fields = _read_segment_fields(reader, version, "RemoteLogSegmentMetadataSnapshotRecord")
    return _build(reader, RemoteLogSegmentMetadataSnapshot, segment_id=segment_id, **fields)


_READERS: dict[int, Callable[[_Reader, int], RemoteLogMetadata]] = {
    REMOTE_LOG_SEGMENT_METADATA_API_KEY: _read_segment_metadata,
    REMOTE_LOG_SEGMENT_METADATA_UPDATE_API_KEY: _read_update,
    REMOTE_PARTITION_DELETE_API_KEY: _read_partition_delete,
    REMOTE_LOG_SEGMENT_METADATA_SNAPSHOT_API_KEY: _read_snapshot,
}


def deserialize(data: bytes | bytearray | memoryview) -> RemoteLogMetadata:
    """Decode a record value of ``__remote_log_metadata`` (or a snapshot entry)."""
    if len(data) > MAX_REMOTE_LOG_METADATA_BYTES:
        raise CorruptRemoteLogMetadataError(
            f"remote log metadata value of {len(data)} bytes is above the limit of"
            f" {MAX_REMOTE_LOG_METADATA_BYTES}"
        )
    reader = _Reader(memoryview(data).cast("B"), "remote log metadata value")
    frame_version = reader.uvarint("frame version")
    if frame_version != FRAME_VERSION:
        raise reader.fail(
            f"unknown frame version {frame_version} (only frame version {FRAME_VERSION} exists)"
        )
    api_key = reader.uvarint("api key")
    version = reader.uvarint("version")
    read = _READERS.get(api_key)
    if read is None:
        raise reader.fail(f"unknown api key {api_key} (0..3 exist)")
    if version > HIGHEST_READ_VERSION:
        raise reader.fail(
            f"version {version} of api key {api_key} is newer than {HIGHEST_READ_VERSION},"
            " the highest this broker reads"
        )
    reader.what = f"remote log metadata (api key {api_key}, version {version})"
    metadata = read(reader, version)
    if reader.pos != len(reader.buf):
        raise reader.fail(f"{len(reader.buf) - reader.pos} byte(s) of garbage after the message")
    return metadata


class RemoteLogMetadataSerde:
    """Kafka's class of the same name: ``serialize`` / ``deserialize`` of metadata values."""

    @staticmethod
    def serialize(metadata: RemoteLogMetadata) -> bytes:
        return serialize(metadata)

    @staticmethod
    def deserialize(data: bytes | bytearray | memoryview) -> RemoteLogMetadata:
        return deserialize(data)
