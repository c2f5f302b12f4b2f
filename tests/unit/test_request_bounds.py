"""The pre-decode bounds walk: every well-formed request of every API and version passes and
ends exactly where kio's encoder stopped; a count or length beyond the frame is refused
before kio reserves memory for it (a compact array claiming 2**32 - 2 elements used to abort
the broker process with a failed 32 GiB allocation)."""

from __future__ import annotations

import io
import struct
from typing import Any

import pytest
from kio.index import load_request_schema
from kio.schema.index import api_key_map, schema_name_map
from kio.serial import entity_writer

from storage_core.server.protocol import MalformedRequestError, encode_request, parse_request
from storage_core.server.request_bounds import RequestBoundsError, check_collection_lengths
from tests.kafka_samples import sample_message


def every_request_schema() -> list[Any]:
    return [
        load_request_schema(key, version)
        for key, name in api_key_map.items()
        for version in schema_name_map[name]
    ]


@pytest.mark.parametrize("nulls", [False, True], ids=["values", "nulls"])
def test_every_well_formed_request_passes_and_is_walked_to_its_end(nulls: bool) -> None:
    schemas = every_request_schema()
    assert len(schemas) > 300
    for schema in schemas:
        buffer = io.BytesIO()
        buffer.write(b"head")
        entity_writer(schema)(buffer, sample_message(schema, nulls=nulls))
        encoded = buffer.getvalue()
        check_collection_lengths(schema, encoded, 4)
        # The walk must reach exactly the end: a trailing byte is still accepted (kio then
        # reports unread bytes), one byte less is refused.
        check_collection_lengths(schema, encoded + b"\x00", 4)
        if len(encoded) > 4:  # some requests have no fields at all (ListGroups v0)
            with pytest.raises(RequestBoundsError):
                check_collection_lengths(schema, encoded[:-1], 4)


def metadata_v12_frame(array_count_varint: bytes) -> bytes:
    # header v2: key 3, version 12, correlation 9, client id "x", no tagged fields
    return struct.pack(">hhih", 3, 12, 9, 1) + b"x" + b"\x00" + array_count_varint


@pytest.mark.parametrize(
    ("count_varint", "message"),
    [
        (b"\xff\xff\xff\xff\x0f", "array of 4294967294 elements"),
        (b"\x80\x80\x80\x80\x08", "array of 2147483647 elements"),
        (b"\x80\x80\x80\x80\x80\x01", "varint longer than 5 bytes"),
        (b"\x03\x00", "frame with 1 bytes left"),
    ],
)
def test_absurd_compact_array_counts_are_refused(count_varint: bytes, message: str) -> None:
    with pytest.raises(MalformedRequestError, match=message):
        parse_request(metadata_v12_frame(count_varint))


def test_absurd_legacy_array_count_and_string_length_are_refused() -> None:
    header_v1 = struct.pack(">hhih", 3, 1, 9, 1) + b"x"
    with pytest.raises(MalformedRequestError, match="array of 2147483647 elements"):
        parse_request(header_v1 + struct.pack(">i", 2**31 - 1))
    with pytest.raises(MalformedRequestError, match="32767 bytes"):
        parse_request(header_v1 + struct.pack(">ih", 1, 32767) + b"abc")


def test_real_requests_still_parse() -> None:
    schema = load_request_schema(3, 12)
    module = __import__(schema.__module__, fromlist=["MetadataRequestTopic"])
    body = schema(
        topics=(module.MetadataRequestTopic(name="t", topic_id=None),),
        allow_auto_topic_creation=True,
        include_topic_authorized_operations=False,
    )
    frame = encode_request(3, 12, 5, "client", body)[4:]
    header, parsed = parse_request(frame)
    assert header.correlation_id == 5
    assert parsed == body


def test_a_null_non_nullable_array_is_refused() -> None:
    """kio decodes it as None; Produce's handler then failed iterating ``topic_data``."""
    flexible = struct.pack(">hhih", 0, 9, 1, -1) + b"\x00" + b"\x00" + struct.pack(">hi", 1, 1000)
    with pytest.raises(MalformedRequestError, match="non-nullable array topic_data is null"):
        parse_request(flexible + b"\x00" + b"\x00")
    legacy = struct.pack(">hhih", 0, 3, 1, -1) + struct.pack(">hhii", -1, 1, 1000, -1)
    with pytest.raises(MalformedRequestError, match="non-nullable array topic_data is null"):
        parse_request(legacy)
    # Metadata v1+ topics is nullable (all topics): still accepted.
    _header, body = parse_request(struct.pack(">hhih", 3, 1, 1, -1) + struct.pack(">i", -1))
    assert body.topics is None
