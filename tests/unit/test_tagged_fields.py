"""KIP-482: a receiver skips the tagged fields it does not know, wherever they are (request
header, body, any struct within), and a null in a nullable tagged field is a null. kio refuses
both ('Unknown tagged field tag: N'); the request decoder drops them before kio decodes.

Frames are built by hand around kio's encoding; the decoded request must equal the one
decoded from the same frame without the extra tags."""

from __future__ import annotations

import dataclasses
import datetime
import io
import struct
from typing import Any

import pytest
from kio.index import load_request_schema
from kio.schema.index import api_key_map, schema_name_map
from kio.serial._implicit_defaults import get_tagged_field_default
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    classify_field,
    get_field_tag,
    is_optional,
)
from kio.serial._serialize import get_field_writer

from storage_core.server.handlers import follower_fetch
from storage_core.server.protocol import (
    MalformedRequestError,
    encode_request,
    is_flexible,
    parse_request,
)
from tests.kafka_samples import sample_message
from tests.unit.test_follower_fetch import frame_of, partition_fetch

UNKNOWN_TAGS = (7, 42, 1000)  # 1000 takes a two-byte varint


def tags(*fields: tuple[int, bytes]) -> bytes:
    """A tag section: count, then per field its tag, size and bytes (all sizes < 128)."""
    out = _uvarint(len(fields))
    for tag, value in fields:
        out += _uvarint(tag) + _uvarint(len(value)) + value
    return out


def _uvarint(value: int) -> bytes:
    out = b""
    while value >= 0x80:
        out += bytes(((value & 0x7F) | 0x80,))
        value >>= 7
    return out + bytes((value,))


def flexible_schemas() -> list[tuple[int, int, Any]]:
    return [
        (key, version, load_request_schema(key, version))
        for key, name in api_key_map.items()
        for version in schema_name_map[name]
        if is_flexible(key, version)
    ]


def without_tag_values(schema: Any) -> Any:
    """A sample message whose top-level tagged fields hold their defaults (so none is written
    and the body ends with a tag count of 0), or None when a tagged field has no default."""
    message = sample_message(schema, nulls=False)
    defaults: dict[str, Any] = {}
    for field in dataclasses.fields(schema):
        if get_field_tag(field) is None:
            continue
        if field.default is dataclasses.MISSING:
            return None
        defaults[field.name] = field.default
    return dataclasses.replace(message, **defaults)


@pytest.mark.parametrize("tag", UNKNOWN_TAGS)
def test_unknown_tags_in_the_header_and_the_body_of_every_flexible_request_are_skipped(
    tag: int,
) -> None:
    checked = 0
    for key, version, schema in flexible_schemas():
        message = without_tag_values(schema)
        if message is None:
            continue
        frame = encode_request(key, version, 3, "c", message)[4:]
        assert frame[10 + 1] == 0 and frame[-1] == 0, schema  # no tags in header nor body
        header_tagged = frame[:11] + tags((tag, b"\x01\x02")) + frame[12:]
        body_tagged = frame[:-1] + tags((tag, b""), (tag + 1, b"\xff" * 3))
        for tagged in (header_tagged, body_tagged):
            header, body = parse_request(tagged)
            assert (header.correlation_id, header.client_id) == (3, "c"), schema
            assert body == message, schema
        checked += 1
    assert checked > 150  # nearly every flexible (API, version)


def fetch_v12(**tag_sections: bytes) -> bytes:
    """A follower's Fetch v12 of one partition with the given tag sections (header, partition,
    topic, body) in place of its empty ones."""
    frame = frame_of(partition_fetch(), client_id=b"f")
    # ... header tags at byte 11; the body ends: partition tags, topic tags, forgotten [],
    # rack_id "", body tags.
    assert frame[11] == 0 and frame[-5:] == b"\x00\x00\x01\x01\x00"
    empty = b"\x00"
    return (
        frame[:11]
        + tag_sections.get("header", empty)
        + frame[12:-5]
        + tag_sections.get("partition", empty)
        + tag_sections.get("topic", empty)
        + b"\x01\x01"
        + tag_sections.get("body", empty)
    )


@pytest.mark.parametrize("tag", UNKNOWN_TAGS)
@pytest.mark.parametrize("level", ["header", "body", "topic", "partition"])
def test_an_unknown_tag_at_any_level_of_a_fetch_is_skipped(level: str, tag: int) -> None:
    header, request = parse_request(fetch_v12(**{level: tags((tag, b"abc"))}))
    assert (header.correlation_id, header.client_id) == (77, "f")
    assert request == parse_request(fetch_v12())[1]


def test_unknown_tags_at_every_level_at_once_and_beside_a_known_one() -> None:
    header, request = parse_request(
        fetch_v12(
            header=tags((0, b"x"), (1000, b"")),
            partition=tags(*((t, b"\x00") for t in range(5))),
            topic=tags((42, b"\x01" * 100)),
            body=tags((0, b"\x03c1"), (7, b"abc")),  # ClusterId "c1" and an unknown tag
        )
    )
    assert request.cluster_id == "c1"
    assert header.client_id == "f"
    (topic,) = request.topics
    (partition,) = topic.partitions
    assert (topic.topic, int(partition.partition)) == ("events", 0)


def test_a_null_cluster_id_is_a_null() -> None:
    """Fetch's ClusterId (tag 0) is nullable with a null default: a null sent is no filter."""
    _header, request = parse_request(fetch_v12(body=tags((0, b"\x00"))))
    assert request.cluster_id is None
    assert request == parse_request(fetch_v12())[1]


def test_a_tagged_struct_with_unknown_tags_of_its_own_keeps_its_fields() -> None:
    """Fetch v15's ReplicaState (tag 1) is a struct with tags of its own: dropping one inside
    it changes the size of tag 1, which is written again."""
    module = __import__(load_request_schema(1, 15).__module__, fromlist=["ReplicaState"])
    state = module.ReplicaState(replica_id=2, replica_epoch=9)
    request = load_request_schema(1, 15)(
        cluster_id=None,
        replica_state=state,
        max_wait=datetime.timedelta(milliseconds=500),
        min_bytes=1,
        max_bytes=1000,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=(),
        forgotten_topics_data=(),
        rack_id="",
    )
    frame = encode_request(1, 15, 4, None, request)[4:]
    replica_state = struct.pack(">iq", 2, 9)
    plain = tags((1, replica_state + b"\x00"))
    assert frame.endswith(plain)
    with_unknown = frame[: -len(plain)] + tags(
        (1, replica_state + tags((1000, b"xyz"), (5, b""))), (9, b"")
    )
    assert parse_request(with_unknown)[1] == request


def test_a_tagged_field_past_its_frame_or_a_non_null_bad_value_is_still_refused() -> None:
    with pytest.raises(MalformedRequestError, match="tagged field of 9 bytes"):
        parse_request(fetch_v12(partition=b"\x01\x07\x09abc"))
    with pytest.raises(MalformedRequestError, match="UTF-8"):
        parse_request(fetch_v12(body=tags((0, b"\x02\xff"))))  # ClusterId not UTF-8


def test_a_follower_fetch_with_tags_goes_the_general_way_and_means_the_same() -> None:
    assert follower_fetch.decode(fetch_v12()) is not None
    tagged = fetch_v12(partition=tags((42, b"")))
    assert follower_fetch.decode(tagged) is None
    assert parse_request(tagged)[1] == parse_request(fetch_v12())[1]


def encode_with_unknown_tags(entity: Any, unknown: int | None) -> bytes:
    """kio's encoding of ``entity`` (known tagged fields in tag order, those at their default
    left out), with, when ``unknown`` is given, one more tagged field that the schema does not
    define at the end of every flexible struct at every level: ``unknown`` itself or, where
    the struct knows that tag, the next free one."""
    schema = type(entity)
    flexible = bool(schema.__flexible__)
    out = io.BytesIO()
    tagged: list[tuple[int, bytes]] = []
    for field in dataclasses.fields(schema):
        tag = get_field_tag(field)
        value = getattr(entity, field.name)
        if tag is not None:
            default = field.default
            if default is dataclasses.MISSING:
                default = get_tagged_field_default(field)
            if value == default:
                continue
        kind = classify_field(field)
        if isinstance(kind, EntityField):
            if value is None:
                encoded = struct.pack(">b", -1)
            else:
                marker = struct.pack(">b", 1) if tag is None and is_optional(field) else b""
                encoded = marker + encode_with_unknown_tags(value, unknown)
        elif isinstance(kind, EntityTupleField):
            if value is None:
                encoded = _uvarint(0) if flexible else struct.pack(">i", -1)
            else:
                count = _uvarint(len(value) + 1) if flexible else struct.pack(">i", len(value))
                encoded = count + b"".join(encode_with_unknown_tags(v, unknown) for v in value)
        else:
            buffer = io.BytesIO()
            writer = get_field_writer(
                field, flexible, is_request_header=False, is_tag=tag is not None
            )
            writer(buffer, value)
            encoded = buffer.getvalue()
        if tag is None:
            out.write(encoded)
        else:
            tagged.append((int(tag), encoded))
    if flexible:
        if unknown is not None:
            known = {
                int(t) for f in dataclasses.fields(schema) if (t := get_field_tag(f)) is not None
            }
            free = unknown
            while free in known:
                free += 1
            tagged.append((free, b"\x00unknown"))
        out.write(tags(*sorted(tagged)))
    return out.getvalue()


@pytest.mark.parametrize("nulls", [False, True], ids=["values", "nulls"])
@pytest.mark.parametrize("tag", UNKNOWN_TAGS)
def test_unknown_tags_in_every_struct_of_every_flexible_request_are_skipped(
    nulls: bool, tag: int
) -> None:
    """Every flexible (API, version), a sample request with every field set (arrays of two,
    nested structs, known tagged fields) and an unknown tag in each of its structs, at every
    level: decoded as the same request without them."""
    checked = 0
    for key, version, schema in flexible_schemas():
        message = sample_message(schema, nulls=nulls)
        header = struct.pack(">hhih", key, version, 9, 1) + b"c" + tags((tag, b"h"))
        plain = encode_with_unknown_tags(message, None)
        assert plain == encode_request(key, version, 9, "c", message)[16:], schema
        tagged = encode_with_unknown_tags(message, tag)
        assert len(tagged) > len(plain), schema
        decoded_header, body = parse_request(header + tagged)
        assert (decoded_header.correlation_id, decoded_header.client_id) == (9, "c"), schema
        assert body == message, schema
        checked += 1
    assert checked > 150
