"""Framing of the protocol client: headers against bytes built independently with struct,
correlation ids, size limits, timeouts and the ApiVersions fallback, over a socketpair."""

from __future__ import annotations

import contextlib
import io
import socket
import struct
import threading
from collections.abc import Callable, Iterator

import pytest
from kio.schema.api_versions.v0.response import ApiVersion as ApiVersionV0
from kio.schema.api_versions.v0.response import ApiVersionsResponse as ApiVersionsResponseV0
from kio.schema.api_versions.v3.response import ApiVersion as ApiVersionV3
from kio.schema.api_versions.v3.response import ApiVersionsResponse as ApiVersionsResponseV3
from kio.schema.errors import ErrorCode
from kio.serial import entity_writer
from kio.static.primitive import i16

from storage_core.client.connection import ConnectionConfig, KafkaConnection, parse_host_port
from storage_core.client.consumer import decode_records
from storage_core.client.errors import (
    BrokerUnreachableError,
    ConnectionClosedError,
    ProtocolMismatchError,
    RequestTimeoutError,
    ResponseTooLargeError,
    UnsupportedVersionError,
)
from storage_core.client.framing import (
    RequestHeader,
    decode_request_header,
    decode_response_header,
    encode_request_header,
    encode_response_header,
    request_header_version,
    response_header_version,
)
from storage_core.client.framing import i32_timedelta as ms
from storage_core.client.negotiation import ApiKey, BrokerApiVersions, negotiate
from storage_core.records.memory_records_builder import build_batch
from storage_core.records.record import SimpleRecord


# ---------------------------------------------------------------------------- headers
def test_request_header_v1_matches_struct() -> None:
    header = RequestHeader(api_key=3, api_version=4, correlation_id=77, client_id="cli")
    expected = struct.pack(">hhih", 3, 4, 77, 3) + b"cli"
    assert encode_request_header(header, version=1) == expected


def test_request_header_v2_adds_empty_tagged_fields_and_keeps_legacy_client_id() -> None:
    header = RequestHeader(api_key=18, api_version=3, correlation_id=-5, client_id="é")
    client_id = "é".encode()
    expected = struct.pack(">hhih", 18, 3, -5, len(client_id)) + client_id + b"\x00"
    assert encode_request_header(header, version=2) == expected


def test_request_header_null_client_id() -> None:
    header = RequestHeader(api_key=0, api_version=9, correlation_id=1, client_id=None)
    assert encode_request_header(header, version=1) == struct.pack(">hhih", 0, 9, 1, -1)
    decoded, size = decode_request_header(struct.pack(">hhih", 0, 9, 1, -1) + b"\x00", version=2)
    assert decoded == header
    assert size == 11


@pytest.mark.parametrize("version", [1, 2])
def test_request_header_decodes_what_it_encodes(version: int) -> None:
    header = RequestHeader(api_key=1, api_version=12, correlation_id=2**31 - 1, client_id="x")
    data = encode_request_header(header, version=version) + b"body"
    decoded, size = decode_request_header(data, version=version)
    assert decoded == header
    assert data[size:] == b"body"


def test_response_header_v0() -> None:
    data = struct.pack(">i", 123456) + b"rest"
    assert decode_response_header(data, version=0) == (123456, 4)
    assert encode_response_header(123456, version=0) == struct.pack(">i", 123456)


def test_response_header_v1_skips_tagged_fields() -> None:
    # two tagged fields: tag 0 with 3 bytes, tag 300 (uvarint 0xAC 0x02) with 0 bytes
    tagged = b"\x02" + b"\x00\x03abc" + b"\xac\x02\x00"
    data = struct.pack(">i", 9) + tagged + b"body"
    correlation_id, size = decode_response_header(data, version=1)
    assert correlation_id == 9
    assert data[size:] == b"body"
    assert encode_response_header(9, version=1) == struct.pack(">i", 9) + b"\x00"


def test_truncated_response_headers_are_refused() -> None:
    with pytest.raises(ProtocolMismatchError):
        decode_response_header(b"\x00\x00", version=0)
    with pytest.raises(ProtocolMismatchError):
        decode_response_header(struct.pack(">i", 1) + b"\x01\x00\x05ab", version=1)


def test_header_versions_follow_flexibility_except_api_versions() -> None:
    assert request_header_version(3, flexible=True) == 2
    assert request_header_version(3, flexible=False) == 1
    assert response_header_version(3, flexible=True) == 1
    assert response_header_version(3, flexible=False) == 0
    assert request_header_version(18, flexible=True) == 2
    assert response_header_version(18, flexible=True) == 0


def test_parse_host_port() -> None:
    assert parse_host_port("127.0.0.1:9092") == ("127.0.0.1", 9092)
    assert parse_host_port("broker") == ("broker", 9092)
    assert parse_host_port("[::1]:19092") == ("::1", 19092)
    with pytest.raises(ValueError):
        parse_host_port("host:notaport")


# ---------------------------------------------------------------------------- fake broker
Reply = Callable[[RequestHeader, bytes], bytes | None]


def _read_frame(sock: socket.socket) -> bytes | None:
    def exactly(n: int) -> bytes | None:
        data = b""
        while len(data) < n:
            chunk = sock.recv(n - len(data))
            if not chunk:
                return None
            data += chunk
        return data

    prefix = exactly(4)
    if prefix is None:
        return None
    return exactly(struct.unpack(">i", prefix)[0])


@pytest.fixture
def fake_broker() -> Iterator[Callable[[list[Reply]], KafkaConnection]]:
    """A socketpair whose far end answers each request with the next scripted reply."""
    threads: list[threading.Thread] = []
    sockets: list[socket.socket] = []

    def start(replies: list[Reply], config: ConnectionConfig | None = None) -> KafkaConnection:
        client, server = socket.socketpair()
        sockets.extend([client, server])

        def serve() -> None:
            # OSError: the client closed its end (after a timeout or a refused response)
            with contextlib.suppress(OSError):
                script(server)

        def script(server: socket.socket) -> None:
            for reply in replies:
                request = _read_frame(server)
                if request is None:
                    break
                # every request this client sends with a flexible version has header v2;
                # v1 decoding suffices to read the fixed fields.
                header, size = decode_request_header(request, version=1)
                answer = reply(header, request[size:])
                if answer is not None:
                    server.sendall(answer)
            server.shutdown(socket.SHUT_WR)  # the script is over: like a broker closing

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        threads.append(thread)
        return KafkaConnection(
            client, host="fake", port=1, config=config or ConnectionConfig(request_timeout_ms=2000)
        )

    yield start  # type: ignore[misc]
    for s in sockets:
        s.close()
    for t in threads:
        t.join(timeout=2)


def _frame(correlation_id: int, body: bytes, *, header_version: int = 0) -> bytes:
    payload = encode_response_header(correlation_id, version=header_version) + body
    return struct.pack(">i", len(payload)) + payload


def _encode(entity: object) -> bytes:
    buffer = io.BytesIO()
    entity_writer(type(entity))(buffer, entity)  # type: ignore[arg-type]
    return buffer.getvalue()


def _api_versions_v3(ranges: dict[int, tuple[int, int]]) -> bytes:
    return _encode(
        ApiVersionsResponseV3(
            error_code=ErrorCode.none,
            api_keys=tuple(
                ApiVersionV3(api_key=i16(k), min_version=i16(lo), max_version=i16(hi))
                for k, (lo, hi) in ranges.items()
            ),
            throttle_time=ms(0),
        )
    )


def test_correlation_id_mismatch_closes_the_connection(fake_broker) -> None:  # type: ignore[no-untyped-def]
    conn = fake_broker([lambda h, _b: _frame(h.correlation_id + 1, b"")])
    with pytest.raises(ProtocolMismatchError, match="correlation id"):
        conn.send_raw(api_key=3, api_version=1, flexible=False, body=b"")
    assert conn.closed
    with pytest.raises(ConnectionClosedError):
        conn.send_raw(api_key=3, api_version=1, flexible=False, body=b"")


def test_matching_correlation_id_returns_the_body(fake_broker) -> None:  # type: ignore[no-untyped-def]
    conn = fake_broker(
        [
            lambda h, b: _frame(h.correlation_id, b"echo:" + b, header_version=1),
            lambda h, b: _frame(h.correlation_id, b"second"),
        ]
    )
    # the fake reads header v1, so the empty tagged-field byte of header v2 precedes the body
    echoed = conn.send_raw(api_key=3, api_version=12, flexible=True, body=b"\x01")
    assert echoed == b"echo:\x00\x01"
    assert conn.send_raw(api_key=3, api_version=1, flexible=False, body=b"") == b"second"


def test_response_larger_than_the_limit_is_refused_before_reading(fake_broker) -> None:  # type: ignore[no-untyped-def]
    config = ConnectionConfig(max_response_bytes=1024, request_timeout_ms=2000)
    conn = fake_broker([lambda h, _b: struct.pack(">i", 1025) + b"\x00" * 16], config)
    with pytest.raises(ResponseTooLargeError, match="1025 bytes exceeds the limit of 1024"):
        conn.send_raw(api_key=1, api_version=4, flexible=False, body=b"")
    assert conn.closed


def test_negative_frame_size_is_a_protocol_mismatch(fake_broker) -> None:  # type: ignore[no-untyped-def]
    conn = fake_broker([lambda h, _b: struct.pack(">i", -7)])
    with pytest.raises(ProtocolMismatchError, match="negative frame size"):
        conn.send_raw(api_key=1, api_version=4, flexible=False, body=b"")


def test_silent_broker_times_out(fake_broker) -> None:  # type: ignore[no-untyped-def]
    silent: Reply = lambda h, _b: None  # noqa: E731
    # the second entry keeps the fake reading (it never closes while the client waits)
    conn = fake_broker([silent, silent], ConnectionConfig(request_timeout_ms=200))
    with pytest.raises(RequestTimeoutError, match="did not answer within 200 ms"):
        conn.send_raw(api_key=3, api_version=1, flexible=False, body=b"")
    assert conn.closed


def test_broker_closing_mid_response(fake_broker) -> None:  # type: ignore[no-untyped-def]
    def half(h: RequestHeader, _b: bytes) -> bytes:
        return struct.pack(">i", 100) + b"\x00" * 10

    conn = fake_broker([half])
    with pytest.raises(ConnectionClosedError, match="after 10 of 100 bytes"):
        conn.send_raw(api_key=3, api_version=1, flexible=False, body=b"")


def test_unreachable_broker_is_named() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(BrokerUnreachableError, match=f"127.0.0.1:{port}"):
        KafkaConnection.connect("127.0.0.1", port, ConnectionConfig(connect_timeout_ms=1000))


# ---------------------------------------------------------------------------- negotiation
def test_negotiation_picks_highest_common_version(fake_broker) -> None:  # type: ignore[no-untyped-def]
    ranges = {18: (0, 4), 3: (0, 9), 0: (3, 12), 1: (4, 11)}
    conn = fake_broker([lambda h, _b: _frame(h.correlation_id, _api_versions_v3(ranges))])
    versions = negotiate(conn)
    assert versions.pick(ApiKey.METADATA) == 4  # the client implements 4 and 12
    assert versions.pick(ApiKey.PRODUCE) == 9
    assert versions.pick(ApiKey.FETCH) == 4
    with pytest.raises(UnsupportedVersionError, match="DESCRIBE_CONFIGS"):
        versions.pick(ApiKey.DESCRIBE_CONFIGS)


def test_api_versions_fallback_to_v0(fake_broker) -> None:  # type: ignore[no-untyped-def]
    """KIP-511: an old broker answers v3 with a v0 body, error 35 and its own range."""
    seen: list[int] = []

    def unsupported(h: RequestHeader, _b: bytes) -> bytes:
        seen.append(h.api_version)
        body = _encode(
            ApiVersionsResponseV0(
                error_code=ErrorCode.unsupported_version,
                api_keys=(ApiVersionV0(api_key=i16(18), min_version=i16(0), max_version=i16(2)),),
            )
        )
        return _frame(h.correlation_id, body)

    def answer_v0(h: RequestHeader, _b: bytes) -> bytes:
        seen.append(h.api_version)
        body = _encode(
            ApiVersionsResponseV0(
                error_code=ErrorCode.none,
                api_keys=(
                    ApiVersionV0(api_key=i16(18), min_version=i16(0), max_version=i16(2)),
                    ApiVersionV0(api_key=i16(3), min_version=i16(0), max_version=i16(5)),
                ),
            )
        )
        return _frame(h.correlation_id, body)

    conn = fake_broker([unsupported, answer_v0])
    versions = negotiate(conn)
    assert seen == [3, 0]
    assert versions.pick(ApiKey.METADATA) == 4


def test_pick_without_overlap() -> None:
    versions = BrokerApiVersions(ranges={})
    with pytest.raises(UnsupportedVersionError, match="does not support it"):
        versions.pick(ApiKey.FETCH)


# ---------------------------------------------------------------------------- fetch decoding
def test_decode_records_drops_earlier_offsets_and_a_truncated_tail() -> None:
    first = bytearray(
        build_batch([SimpleRecord(value=b"%d" % i) for i in range(5)], base_offset=10)
    )
    second = build_batch([SimpleRecord(value=b"x")], base_offset=15)
    data = first + second[:-3]  # the broker cut the second batch
    records, next_offset = decode_records(data, fetch_offset=12)
    assert [r.offset for r in records] == [12, 13, 14]
    assert [r.value for r in records] == [b"2", b"3", b"4"]
    assert next_offset == 15
    records, next_offset = decode_records(b"", fetch_offset=7)
    assert (records, next_offset) == ([], 7)
