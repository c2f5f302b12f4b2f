"""The relay's reading of a Kafka request header, checked against kafka-python's encoder."""

from __future__ import annotations

import struct
from typing import Any

import pytest
from kafka.protocol.consumer import FetchRequest
from kafka.protocol.metadata import ApiVersionsRequest

from tests.chaos.tcp_relay import RequestHeaderError, parse_request_header


def _frame(request: Any, correlation_id: int, client_id: str | None) -> bytes:
    """The whole frame kafka-python sends (size, header, body)."""
    request.with_header(correlation_id=correlation_id, client_id=client_id)
    return bytes(request.encode(header=True, framed=True))


@pytest.mark.parametrize("version", [4, 12])  # header v1, and v2 of a flexible version
def test_reads_the_header_kafka_python_writes(version: int) -> None:
    request = FetchRequest(version=version, replica_id=-1, max_wait_ms=500, min_bytes=1)
    frame = _frame(request, correlation_id=77, client_id="broker-2-fetcher-0")

    header = parse_request_header(frame)

    assert header is not None
    assert (header.api_key, header.api_version, header.correlation_id) == (1, version, 77)
    assert header.client_id == "broker-2-fetcher-0"
    assert header.size == len(frame) - 4
    assert frame[header.header_bytes - len("broker-2-fetcher-0") : header.header_bytes] == (
        b"broker-2-fetcher-0"
    )


def test_needs_more_bytes_until_the_client_id_is_whole() -> None:
    frame = _frame(ApiVersionsRequest(version=0), correlation_id=1, client_id="rdkafka")
    whole = 14 + len("rdkafka")
    for cut in range(whole):
        assert parse_request_header(frame[:cut]) is None
    header = parse_request_header(frame[:whole])
    assert header is not None and header.client_id == "rdkafka" and header.header_bytes == whole


def test_null_client_id() -> None:
    request = ApiVersionsRequest(version=3, client_software_name="x", client_software_version="1")
    header = parse_request_header(_frame(request, correlation_id=5, client_id=None))
    assert header is not None and header.client_id is None and header.header_bytes == 14
    assert (header.api_key, header.api_version, header.correlation_id) == (18, 3, 5)


@pytest.mark.parametrize(
    "frame",
    [
        struct.pack(">ihhih", -5, 0, 0, 0, 0),  # negative size
        struct.pack(">ihhih", 10, 0, 0, 0, 100),  # client id longer than the request
        struct.pack(">ihhih", 200, 0, 0, 0, -7),  # length below -1
        b"GET / HTTP/1.1\r\n\r\n",  # not Kafka at all
    ],
)
def test_refuses_what_is_not_a_request_header(frame: bytes) -> None:
    with pytest.raises(RequestHeaderError):
        parse_request_header(frame)
