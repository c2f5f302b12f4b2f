r"""Records of ``__consumer_offsets``, byte for byte as Kafka's group coordinator writes them.

Every record has a non-null key; its leading int16 version says what the record is about.
Strings are int16 length + UTF-8 bytes (nullable: length -1 for null), ``bytes`` are int32
length + bytes, arrays int32 count + elements; all integers big-endian. None of the versions
below is flexible (no tagged fields). From Kafka's ``OffsetCommitKey.json``,
``OffsetCommitValue.json``, ``GroupMetadataKey.json`` and ``GroupMetadataValue.json``::

    OffsetCommitKey      key version 0 or 1 (this module writes 1)
        version           int16    1
        group             string
        topic             string
        partition         int32

    OffsetCommitValue    value version 0-3 (this module writes 3)
        version           int16    3
        offset            int64
        leaderEpoch       int32    v3+, -1 when unknown
        metadata          string
        commitTimestamp   int64    epoch milliseconds
        expireTimestamp   int64    v1 only

    GroupMetadataKey     key version 2
        version           int16    2
        group             string

    GroupMetadataValue   value version 0-3 (this module writes 3)
        version                int16    3
        protocolType           string
        generation             int32
        protocol               nullable string
        leader                 nullable string
        currentStateTimestamp  int64    v2+, epoch milliseconds, -1 when unknown
        members                array of MemberMetadata:
            memberId               string
            groupInstanceId        nullable string   v3+
            clientId               string
            clientHost             string
            rebalanceTimeout       int32             v1+, milliseconds
            sessionTimeout         int32             milliseconds
            subscription           bytes
            assignment             bytes

A null value is a tombstone: it deletes the offset, or the group, named by the key.

A group lives in partition ``Utils.abs(groupId.hashCode()) % offsets.topic.num.partitions``,
where ``hashCode`` is Java's ``String.hashCode`` (``h = 31 * h + c`` over UTF-16 code units,
in int32 arithmetic) and ``Utils.abs(n)`` is ``n & 0x7fffffff``.

Everything here is a pure function over immutable values: safe from any thread.
"""

from __future__ import annotations

import functools
import struct
from dataclasses import dataclass
from typing import TypeAlias

from storage_core.coordinator.group.errors import CorruptCoordinatorRecordError

OFFSETS_TOPIC_NAME = "__consumer_offsets"

OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
OFFSET_COMMIT_VALUE_VERSION = 3
GROUP_METADATA_VALUE_VERSION = 3

NO_LEADER_EPOCH = -1
NO_TIMESTAMP = -1

INT16_MAX = 2**15 - 1
INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
# A string's length prefix is an int16; a bytes field's an int32.
MAX_STRING_BYTES = INT16_MAX
MAX_BYTES_FIELD_BYTES = INT32_MAX
HASH_CODES_CACHED = 65_536  # group and transactional ids placed recently

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")


# ====================================================================== values
@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetCommitKey:
    """Key of a committed offset: group, topic and partition."""

    group: str
    topic: str
    partition: int

    def __post_init__(self) -> None:
        if not 0 <= self.partition <= INT32_MAX:
            raise ValueError(f"partition {self.partition} is not a valid int32 partition index")


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupMetadataKey:
    """Key of a group's metadata record."""

    group: str


RecordKey: TypeAlias = OffsetCommitKey | GroupMetadataKey


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetCommitValue:
    """A committed offset; ``expire_timestamp_ms`` exists only in version 1 (-1 otherwise)."""

    offset: int
    leader_epoch: int = NO_LEADER_EPOCH
    metadata: str = ""
    commit_timestamp_ms: int
    expire_timestamp_ms: int = NO_TIMESTAMP

    def __post_init__(self) -> None:
        _check_int(self.offset, INT64_MIN, INT64_MAX, "offset")
        _check_int(self.leader_epoch, INT32_MIN, INT32_MAX, "leader epoch")
        _check_int(self.commit_timestamp_ms, INT64_MIN, INT64_MAX, "commit timestamp")
        _check_int(self.expire_timestamp_ms, INT64_MIN, INT64_MAX, "expire timestamp")


@dataclass(frozen=True, slots=True, kw_only=True)
class MemberMetadataValue:
    """One member as stored in a group metadata record."""

    member_id: str
    group_instance_id: str | None = None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes

    def __post_init__(self) -> None:
        _check_int(self.rebalance_timeout_ms, INT32_MIN, INT32_MAX, "rebalance timeout")
        _check_int(self.session_timeout_ms, INT32_MIN, INT32_MAX, "session timeout")


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupMetadataValue:
    """A group's generation, protocol, leader and members (with their assignments)."""

    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp_ms: int = NO_TIMESTAMP
    members: tuple[MemberMetadataValue, ...] = ()

    def __post_init__(self) -> None:
        _check_int(self.generation, INT32_MIN, INT32_MAX, "generation")
        _check_int(self.current_state_timestamp_ms, INT64_MIN, INT64_MAX, "current state timestamp")


def _check_int(value: int, low: int, high: int, what: str) -> None:
    if not low <= value <= high:
        raise ValueError(f"{what} {value} is outside [{low}, {high}] (inclusive)")


# ====================================================================== partitioning
@functools.lru_cache(maxsize=HASH_CODES_CACHED)
def java_string_hash_code(text: str) -> int:
    """Java's ``String.hashCode``: ``h = 31 * h + c`` over UTF-16 code units, as an int32.
    Cached: the coordinators place every request's group or transactional id with it, and a
    loop over the id's characters cost a transaction a good part of a millisecond."""
    encoded = text.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(encoded), 2):
        h = (31 * h + ((encoded[i] << 8) | encoded[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h > INT32_MAX else h


def partition_for(group_id: str, num_partitions: int) -> int:
    """The ``__consumer_offsets`` partition that holds ``group_id`` (Kafka's ``partitionFor``)."""
    if num_partitions <= 0:
        raise ValueError(f"offsets.topic.num.partitions must be positive, got {num_partitions}")
    return (java_string_hash_code(group_id) & 0x7FFFFFFF) % num_partitions


# ====================================================================== writer / reader
class _Writer:
    __slots__ = ("_parts",)

    def __init__(self) -> None:
        self._parts: list[bytes] = []

    def int16(self, value: int) -> None:
        self._parts.append(_INT16.pack(value))

    def int32(self, value: int) -> None:
        self._parts.append(_INT32.pack(value))

    def int64(self, value: int) -> None:
        self._parts.append(_INT64.pack(value))

    def string(self, value: str, what: str) -> None:
        encoded = value.encode("utf-8")
        if len(encoded) > MAX_STRING_BYTES:
            raise ValueError(
                f"{what} is {len(encoded)} bytes in UTF-8, more than a string field holds"
                f" ({MAX_STRING_BYTES})"
            )
        self._parts.append(_INT16.pack(len(encoded)))
        self._parts.append(encoded)

    def nullable_string(self, value: str | None, what: str) -> None:
        if value is None:
            self._parts.append(_INT16.pack(-1))
        else:
            self.string(value, what)

    def bytes_field(self, value: bytes, what: str) -> None:
        if len(value) > MAX_BYTES_FIELD_BYTES:
            raise ValueError(f"{what} is {len(value)} bytes, more than a bytes field holds")
        self._parts.append(_INT32.pack(len(value)))
        self._parts.append(bytes(value))

    def getvalue(self) -> bytes:
        return b"".join(self._parts)


class _Reader:
    """Bounds-checked reads; every failure is a ``CorruptCoordinatorRecordError``."""

    __slots__ = ("_data", "_position", "_what")

    def __init__(self, data: bytes | memoryview, what: str) -> None:
        self._data = bytes(data)
        self._position = 0
        self._what = what

    def _take(self, size: int, field: str) -> bytes:
        end = self._position + size
        if size < 0 or end > len(self._data):
            raise CorruptCoordinatorRecordError(
                f"{self._what}: {field} needs {size} bytes at byte {self._position} but only"
                f" {len(self._data) - self._position} remain"
            )
        chunk = self._data[self._position : end]
        self._position = end
        return chunk

    def int16(self, field: str) -> int:
        return int(_INT16.unpack(self._take(2, field))[0])

    def int32(self, field: str) -> int:
        return int(_INT32.unpack(self._take(4, field))[0])

    def int64(self, field: str) -> int:
        return int(_INT64.unpack(self._take(8, field))[0])

    def nullable_string(self, field: str) -> str | None:
        length = self.int16(field)
        if length == -1:
            return None
        if length < 0:
            raise CorruptCoordinatorRecordError(
                f"{self._what}: {field} has an invalid length {length}"
            )
        raw = self._take(length, field)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CorruptCoordinatorRecordError(
                f"{self._what}: {field} is not valid UTF-8 ({exc})"
            ) from None

    def string(self, field: str) -> str:
        value = self.nullable_string(field)
        if value is None:
            raise CorruptCoordinatorRecordError(f"{self._what}: {field} is null but may not be")
        return value

    def bytes_field(self, field: str) -> bytes:
        length = self.int32(field)
        if length < 0:  # Kafka writes empty, never null, subscriptions and assignments
            raise CorruptCoordinatorRecordError(
                f"{self._what}: {field} has an invalid length {length}"
            )
        return self._take(length, field)

    def array_length(self, field: str) -> int:
        count = self.int32(field)
        # Each element takes at least one byte: a larger count cannot be honest.
        if count < 0 or count > len(self._data) - self._position:
            raise CorruptCoordinatorRecordError(
                f"{self._what}: {field} has an invalid element count {count}"
            )
        return count

    def finish(self) -> None:
        left = len(self._data) - self._position
        if left:
            raise CorruptCoordinatorRecordError(f"{self._what}: {left} bytes left after the end")


# ====================================================================== keys
def encode_key(key: RecordKey) -> bytes:
    writer = _Writer()
    if isinstance(key, OffsetCommitKey):
        writer.int16(OFFSET_COMMIT_KEY_VERSION)
        writer.string(key.group, "group id")
        writer.string(key.topic, "topic")
        writer.int32(key.partition)
    else:
        writer.int16(GROUP_METADATA_KEY_VERSION)
        writer.string(key.group, "group id")
    return writer.getvalue()


def decode_key(data: bytes | memoryview) -> RecordKey:
    """An offset commit key (versions 0 and 1) or a group metadata key (version 2)."""
    reader = _Reader(data, "__consumer_offsets record key")
    version = reader.int16("version")
    key: RecordKey
    if version in (0, 1):
        group = reader.string("group")
        topic = reader.string("topic")
        partition = reader.int32("partition")
        if partition < 0:
            raise CorruptCoordinatorRecordError(
                f"__consumer_offsets record key: negative partition {partition}"
            )
        key = OffsetCommitKey(group=group, topic=topic, partition=partition)
    elif version == GROUP_METADATA_KEY_VERSION:
        key = GroupMetadataKey(group=reader.string("group"))
    else:
        raise CorruptCoordinatorRecordError(
            f"__consumer_offsets record key has unknown version {version}"
            " (0-1 offset commit, 2 group metadata)"
        )
    reader.finish()
    return key


# ====================================================================== offset commit values
def encode_offset_commit_value(value: OffsetCommitValue) -> bytes:
    """Version 3, or version 1 when an expire timestamp is set (as Kafka chooses)."""
    writer = _Writer()
    if value.expire_timestamp_ms != NO_TIMESTAMP:
        writer.int16(1)
        writer.int64(value.offset)
        writer.string(value.metadata, "offset metadata")
        writer.int64(value.commit_timestamp_ms)
        writer.int64(value.expire_timestamp_ms)
        return writer.getvalue()
    writer.int16(OFFSET_COMMIT_VALUE_VERSION)
    writer.int64(value.offset)
    writer.int32(value.leader_epoch)
    writer.string(value.metadata, "offset metadata")
    writer.int64(value.commit_timestamp_ms)
    return writer.getvalue()


def decode_offset_commit_value(data: bytes | memoryview) -> OffsetCommitValue:
    reader = _Reader(data, "__consumer_offsets offset commit value")
    version = reader.int16("version")
    if not 0 <= version <= OFFSET_COMMIT_VALUE_VERSION:
        raise CorruptCoordinatorRecordError(
            f"__consumer_offsets offset commit value has unsupported version {version} (0-3)"
        )
    offset = reader.int64("offset")
    leader_epoch = reader.int32("leaderEpoch") if version >= 3 else NO_LEADER_EPOCH
    metadata = reader.string("metadata")
    commit_timestamp = reader.int64("commitTimestamp")
    expire_timestamp = reader.int64("expireTimestamp") if version == 1 else NO_TIMESTAMP
    reader.finish()
    return OffsetCommitValue(
        offset=offset,
        leader_epoch=leader_epoch,
        metadata=metadata,
        commit_timestamp_ms=commit_timestamp,
        expire_timestamp_ms=expire_timestamp,
    )


# ====================================================================== group metadata values
def encode_group_metadata_value(value: GroupMetadataValue) -> bytes:
    writer = _Writer()
    writer.int16(GROUP_METADATA_VALUE_VERSION)
    writer.string(value.protocol_type, "protocol type")
    writer.int32(value.generation)
    writer.nullable_string(value.protocol, "protocol")
    writer.nullable_string(value.leader, "leader")
    writer.int64(value.current_state_timestamp_ms)
    writer.int32(len(value.members))
    for member in value.members:
        writer.string(member.member_id, "member id")
        writer.nullable_string(member.group_instance_id, "group instance id")
        writer.string(member.client_id, "client id")
        writer.string(member.client_host, "client host")
        writer.int32(member.rebalance_timeout_ms)
        writer.int32(member.session_timeout_ms)
        writer.bytes_field(member.subscription, "subscription")
        writer.bytes_field(member.assignment, "assignment")
    return writer.getvalue()


def decode_group_metadata_value(data: bytes | memoryview) -> GroupMetadataValue:
    reader = _Reader(data, "__consumer_offsets group metadata value")
    version = reader.int16("version")
    if not 0 <= version <= GROUP_METADATA_VALUE_VERSION:
        raise CorruptCoordinatorRecordError(
            f"__consumer_offsets group metadata value has unsupported version {version} (0-3)"
        )
    protocol_type = reader.string("protocolType")
    generation = reader.int32("generation")
    protocol = reader.nullable_string("protocol")
    leader = reader.nullable_string("leader")
    state_timestamp = reader.int64("currentStateTimestamp") if version >= 2 else NO_TIMESTAMP
    members = []
    for _ in range(reader.array_length("members")):
        member_id = reader.string("memberId")
        instance_id = reader.nullable_string("groupInstanceId") if version >= 3 else None
        client_id = reader.string("clientId")
        client_host = reader.string("clientHost")
        rebalance_timeout = reader.int32("rebalanceTimeout") if version >= 1 else -1
        session_timeout = reader.int32("sessionTimeout")
        if version == 0:
            rebalance_timeout = session_timeout  # Kafka's default before version 1
        members.append(
            MemberMetadataValue(
                member_id=member_id,
                group_instance_id=instance_id,
                client_id=client_id,
                client_host=client_host,
                rebalance_timeout_ms=rebalance_timeout,
                session_timeout_ms=session_timeout,
                subscription=reader.bytes_field("subscription"),
                assignment=reader.bytes_field("assignment"),
            )
        )
    reader.finish()
    return GroupMetadataValue(
        protocol_type=protocol_type,
        generation=generation,
        protocol=protocol,
        leader=leader,
        current_state_timestamp_ms=state_timestamp,
        members=tuple(members),
    )
