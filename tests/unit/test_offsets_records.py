"""``__consumer_offsets`` record formats against bytes built independently with ``struct``."""

from __future__ import annotations

import struct

import pytest

from storage_core.coordinator.group.errors import CorruptCoordinatorRecordError
from storage_core.coordinator.group.offsets_records import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
    encode_group_metadata_value,
    encode_key,
    encode_offset_commit_value,
    java_string_hash_code,
    partition_for,
)


def s(text: str) -> bytes:
    raw = text.encode()
    return struct.pack(">h", len(raw)) + raw


def b(raw: bytes) -> bytes:
    return struct.pack(">i", len(raw)) + raw


NULL_STRING = struct.pack(">h", -1)


def reference_hash_code(text: str) -> int:
    """Java's definition written differently: sum of c[i] * 31^(n-1-i) mod 2^32, signed."""
    units = [
        int.from_bytes(text.encode("utf-16-be", "surrogatepass")[i : i + 2], "big")
        for i in range(0, len(text.encode("utf-16-be", "surrogatepass")), 2)
    ]
    n = len(units)
    total = sum(u * pow(31, n - 1 - i, 2**32) for i, u in enumerate(units)) % 2**32
    return total - 2**32 if total >= 2**31 else total


# ---------------------------------------------------------------------- partitioning
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", 0),
        ("a", 97),
        ("group", 98629247),  # Java: "group".hashCode()
        ("hello", 99162322),
        ("Aa", 2112),
        ("BB", 2112),
        ("polygenelubricants", -(2**31)),  # Integer.MIN_VALUE
        ("\U0001f600", 0xD83D * 31 + 0xDE00),  # one code point, two UTF-16 units
    ],
)
def test_java_string_hash_code_vectors(text: str, expected: int) -> None:
    assert java_string_hash_code(text) == expected
    assert reference_hash_code(text) == expected


@pytest.mark.parametrize(
    "group_id",
    ["my-group", "console-consumer-12345", "Ünïcødé-grüppe", "x" * 300, "group", "a"],
)
def test_hash_code_matches_the_reference_definition(group_id: str) -> None:
    assert java_string_hash_code(group_id) == reference_hash_code(group_id)


def test_partition_for_uses_kafka_utils_abs() -> None:
    assert partition_for("group", 50) == 98629247 % 50 == 47
    # Utils.abs(Integer.MIN_VALUE) is 0, not a negative number.
    assert partition_for("polygenelubricants", 50) == 0
    negative = "my-consumer-group-7"
    h = reference_hash_code(negative)
    assert partition_for(negative, 50) == (h & 0x7FFFFFFF) % 50
    assert all(0 <= partition_for(f"g{i}", 7) < 7 for i in range(200))
    with pytest.raises(ValueError, match="positive"):
        partition_for("g", 0)


# ---------------------------------------------------------------------- keys
def test_offset_commit_key_bytes() -> None:
    key = OffsetCommitKey(group="group", topic="orders", partition=3)
    expected = struct.pack(">h", 1) + s("group") + s("orders") + struct.pack(">i", 3)
    assert encode_key(key) == expected
    assert decode_key(expected) == key
    # Version 0 has the same layout.
    assert decode_key(struct.pack(">h", 0) + expected[2:]) == key


def test_group_metadata_key_bytes() -> None:
    expected = struct.pack(">h", 2) + s("gruppe-ä")
    assert encode_key(GroupMetadataKey(group="gruppe-ä")) == expected
    assert decode_key(expected) == GroupMetadataKey(group="gruppe-ä")


def test_bad_keys_are_named_errors() -> None:
    with pytest.raises(CorruptCoordinatorRecordError, match="unknown version 7"):
        decode_key(struct.pack(">h", 7) + s("g"))
    with pytest.raises(CorruptCoordinatorRecordError, match="needs"):
        decode_key(struct.pack(">h", 1) + s("group") + s("t"))  # partition missing
    with pytest.raises(CorruptCoordinatorRecordError, match="left after"):
        decode_key(struct.pack(">h", 2) + s("g") + b"\x00")


# ---------------------------------------------------------------------- offset values
def test_offset_commit_value_v3_bytes() -> None:
    value = OffsetCommitValue(
        offset=1234, leader_epoch=5, metadata="meta", commit_timestamp_ms=1_700_000_000_123
    )
    expected = struct.pack(">hqi", 3, 1234, 5) + s("meta") + struct.pack(">q", 1_700_000_000_123)
    assert encode_offset_commit_value(value) == expected
    assert decode_offset_commit_value(expected) == value


def test_offset_commit_value_older_versions_decode() -> None:
    v0 = struct.pack(">hq", 0, 10) + s("") + struct.pack(">q", 99)
    assert decode_offset_commit_value(v0) == OffsetCommitValue(
        offset=10, leader_epoch=-1, metadata="", commit_timestamp_ms=99
    )
    v1 = struct.pack(">hq", 1, 10) + s("m") + struct.pack(">qq", 99, 199)
    decoded = decode_offset_commit_value(v1)
    assert decoded.expire_timestamp_ms == 199
    assert encode_offset_commit_value(decoded) == v1  # Kafka writes v1 when expiring
    v2 = struct.pack(">hq", 2, 10) + s("m") + struct.pack(">q", 99)
    assert decode_offset_commit_value(v2).commit_timestamp_ms == 99
    with pytest.raises(CorruptCoordinatorRecordError, match="unsupported version 4"):
        decode_offset_commit_value(struct.pack(">h", 4) + v2[2:])


# ---------------------------------------------------------------------- group values
def test_group_metadata_value_v3_bytes() -> None:
    value = GroupMetadataValue(
        protocol_type="consumer",
        generation=7,
        protocol="range",
        leader="c1-abc",
        current_state_timestamp_ms=1_700_000_000_000,
        members=(
            MemberMetadataValue(
                member_id="c1-abc",
                group_instance_id=None,
                client_id="c1",
                client_host="/127.0.0.1",
                rebalance_timeout_ms=300_000,
                session_timeout_ms=10_000,
                subscription=b"\x00\x01sub",
                assignment=b"asg",
            ),
            MemberMetadataValue(
                member_id="c2-def",
                group_instance_id="instance-2",
                client_id="c2",
                client_host="/10.0.0.2",
                rebalance_timeout_ms=60_000,
                session_timeout_ms=45_000,
                subscription=b"",
                assignment=b"",
            ),
        ),
    )
    expected = (
        struct.pack(">h", 3)
        + s("consumer")
        + struct.pack(">i", 7)
        + s("range")
        + s("c1-abc")
        + struct.pack(">q", 1_700_000_000_000)
        + struct.pack(">i", 2)
        + s("c1-abc")
        + NULL_STRING
        + s("c1")
        + s("/127.0.0.1")
        + struct.pack(">ii", 300_000, 10_000)
        + b(b"\x00\x01sub")
        + b(b"asg")
        + s("c2-def")
        + s("instance-2")
        + s("c2")
        + s("/10.0.0.2")
        + struct.pack(">ii", 60_000, 45_000)
        + b(b"")
        + b(b"")
    )
    assert encode_group_metadata_value(value) == expected
    assert decode_group_metadata_value(expected) == value


def test_empty_group_value_has_null_protocol_and_leader() -> None:
    value = GroupMetadataValue(
        protocol_type="consumer", generation=3, protocol=None, leader=None, members=()
    )
    expected = (
        struct.pack(">h", 3)
        + s("consumer")
        + struct.pack(">i", 3)
        + NULL_STRING
        + NULL_STRING
        + struct.pack(">qi", -1, 0)
    )
    assert encode_group_metadata_value(value) == expected
    assert decode_group_metadata_value(expected) == value


def test_group_metadata_value_v0_and_v1_decode() -> None:
    member_v0 = s("m") + s("c") + s("h") + struct.pack(">i", 10_000) + b(b"s") + b(b"a")
    v0 = (
        struct.pack(">h", 0)
        + s("consumer")
        + struct.pack(">i", 1)
        + s("range")
        + s("m")
        + struct.pack(">i", 1)
        + member_v0
    )
    decoded = decode_group_metadata_value(v0)
    assert decoded.members[0].rebalance_timeout_ms == 10_000  # defaults to the session
    assert decoded.current_state_timestamp_ms == -1
    member_v1 = s("m") + s("c") + s("h") + struct.pack(">ii", 20_000, 10_000) + b(b"s") + b(b"a")
    v1 = v0[: -len(member_v0)].replace(struct.pack(">h", 0), struct.pack(">h", 1), 1) + member_v1
    assert decode_group_metadata_value(v1).members[0].rebalance_timeout_ms == 20_000


def test_corrupt_group_value_is_a_named_error() -> None:
    good = encode_group_metadata_value(
        GroupMetadataValue(protocol_type="consumer", generation=1, protocol=None, leader=None)
    )
    with pytest.raises(CorruptCoordinatorRecordError):
        decode_group_metadata_value(good[:-1])
    with pytest.raises(CorruptCoordinatorRecordError, match="element count"):
        decode_group_metadata_value(good[:-4] + struct.pack(">i", 1_000_000))


def test_oversized_strings_are_refused_before_writing() -> None:
    with pytest.raises(ValueError, match="more than a string field holds"):
        encode_key(GroupMetadataKey(group="g" * 40_000))
