"""The real ``SocketServer`` on a TLS listener (loopback, certificates from ``security_support``):
the principal each request carries (a client certificate's DN after the mapping rules, or
ANONYMOUS), its listener and protocol, a DN no rule maps, and a fetch-sized response made of
file regions sent whole and byte-exact through TLS."""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
import struct
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from storage_core.protocol.messages import build, request_schema
from storage_core.records.file_region import FileRegion
from storage_core.security.kafka_principal import ANONYMOUS, KafkaPrincipal, SecurityProtocol
from storage_core.server import ssl_channel
from storage_core.server.handlers import ApiHandler
from storage_core.server.listeners import EndPoint, ListenerSecurity
from storage_core.server.protocol import encode_request
from storage_core.server.request_context import RequestContext
from storage_core.server.response_parts import ResponseParts
from storage_core.server.socket_server import SocketServer
from storage_core.server.socket_server_config import SocketServerConfig
from tests.security_support import Issued, TestPki, ssl_listener_props
from tests.unit.test_socket_server_errors import metadata_v10_request

CONFIG = SocketServerConfig(
    max_request_bytes=1 << 20,
    max_connections=10,
    max_connections_per_ip=10,
    connections_max_idle_ms=600_000,
    queued_max_request_bytes=1 << 21,
)
REGION_BYTES = 5 * 1024 * 1024 + 123  # many TLS chunks, not a multiple of one


def listener(
    pki: TestPki, broker: Issued, protocol: SecurityProtocol, **extra: str
) -> ListenerSecurity:
    props = {**ssl_listener_props(pki, broker, client_auth="required"), **extra}
    endpoint = EndPoint(
        listener_name="CLIENT", host="127.0.0.1", port=0, security_protocol=protocol
    )
    return ListenerSecurity.for_endpoint(props, endpoint)


def client_context(pki: TestPki, client: Issued | None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(pki.ca_pem))
    if client is not None:
        context.load_cert_chain(str(client.cert_file), str(client.key_file))
    return context


def services() -> Any:
    def run_io(call: Callable[[], Any]) -> Any:
        return asyncio.get_running_loop().run_in_executor(None, call)

    return SimpleNamespace(replica_manager=SimpleNamespace(run_io=run_io))


async def exchange(
    security: ListenerSecurity, handler: Any, context: ssl.SSLContext
) -> tuple[bytes, SocketServer]:
    registry = {3: ApiHandler(api_key=3, min_version=10, max_version=10, handle=handler)}
    server = SocketServer(services(), registry, config=CONFIG, listener=security)
    port = await server.start("127.0.0.1", 0)
    try:
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", port, ssl=context, server_hostname="localhost"
        )
        writer.write(metadata_v10_request())
        await writer.drain()
        try:
            (size,) = struct.unpack(">i", await reader.readexactly(4))
            answer = await reader.readexactly(size)
        except (asyncio.IncompleteReadError, ConnectionError):
            answer = b""
        writer.close()
    finally:
        await server.stop()
    return answer, server


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> TestPki:
    return TestPki(tmp_path_factory.mktemp("tls"))


def recording(seen: list[RequestContext]) -> Any:
    async def handle(ctx: RequestContext, request: Any) -> Any:
        seen.append(ctx)
        return struct.pack(">ii", 4, ctx.correlation_id)  # a frame: size, correlation id

    return handle


def test_a_client_certificate_dn_becomes_the_principal_of_every_request(pki: TestPki) -> None:
    broker = pki.issue("broker", "CN=localhost,OU=brokers,O=test")
    alice = pki.issue("alice", "CN=alice,OU=eng,O=acme,C=US")
    seen: list[RequestContext] = []
    security = listener(pki, broker, SecurityProtocol.SSL)

    answer, _ = asyncio.run(exchange(security, recording(seen), client_context(pki, alice)))

    assert answer == struct.pack(">i", 1)
    assert [c.principal for c in seen] == [KafkaPrincipal("User", "CN=alice,OU=eng,O=acme,C=US")]
    assert seen[0].listener_name == "CLIENT"
    assert seen[0].security_protocol is SecurityProtocol.SSL


def test_mapping_rules_shape_the_principal(pki: TestPki) -> None:
    broker = pki.issue("broker", "CN=localhost,OU=brokers,O=test")
    alice = pki.issue("alice", "CN=Alice,OU=eng,O=acme,C=US")
    seen: list[RequestContext] = []
    security = listener(
        pki,
        broker,
        SecurityProtocol.SSL,
        **{"listener.name.client.ssl.principal.mapping.rules": "RULE:^CN=(.*?),OU=.*$/$1/L"},
    )

    asyncio.run(exchange(security, recording(seen), client_context(pki, alice)))

    assert [str(c.principal) for c in seen] == ["User:alice"]


def test_a_dn_no_rule_maps_closes_the_connection_with_kafkas_line(
    pki: TestPki, caplog: pytest.LogCaptureFixture
) -> None:
    broker = pki.issue("broker", "CN=localhost,OU=brokers,O=test")
    bob = pki.issue("bob", "CN=bob,OU=sales,O=acme")
    seen: list[RequestContext] = []
    security = listener(
        pki,
        broker,
        SecurityProtocol.SSL,
        **{"ssl.principal.mapping.rules": "RULE:^CN=(.*?),OU=eng.*$/$1/"},
    )

    with caplog.at_level(logging.INFO, logger="storage_core.server.socket_server"):
        answer, _ = asyncio.run(exchange(security, recording(seen), client_context(pki, bob)))

    assert answer == b""
    assert seen == []
    assert "Failed to map name for 'CN=bob,OU=sales,O=acme'" in caplog.text


def test_sasl_ssl_serves_nothing_before_sasl_then_the_sasl_principal(pki: TestPki) -> None:
    """On SASL_SSL the client certificate makes no principal: a request before SASL is closed
    without an answer; after PLAIN over the TLS connection, requests carry User:<sasl user>."""
    broker = pki.issue("broker", "CN=localhost,OU=brokers,O=test")
    alice = pki.issue("alice", "CN=alice,OU=eng,O=acme,C=US")
    seen: list[RequestContext] = []
    security = listener(
        pki,
        broker,
        SecurityProtocol.SASL_SSL,
        **{
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.client.plain.sasl.jaas.config": (
                "org.apache.kafka.common.security.plain.PlainLoginModule required"
                ' user_carol="carol-pw";'
            ),
        },
    )

    answer, _ = asyncio.run(exchange(security, recording(seen), client_context(pki, alice)))
    assert (answer, seen) == (b"", [])

    async def sasl_then_metadata() -> bytes:
        registry = {
            3: ApiHandler(api_key=3, min_version=10, max_version=10, handle=recording(seen))
        }
        server = SocketServer(services(), registry, config=CONFIG, listener=security)
        port = await server.start("127.0.0.1", 0)
        try:
            reader, writer = await asyncio.open_connection(
                "127.0.0.1", port, ssl=client_context(pki, alice), server_hostname="localhost"
            )

            async def roundtrip(frame: bytes) -> bytes:
                writer.write(frame)
                await writer.drain()
                (size,) = struct.unpack(">i", await reader.readexactly(4))
                return await reader.readexactly(size)

            handshake = await roundtrip(request(17, 1, 1, mechanism="PLAIN"))
            assert struct.unpack_from(">h", handshake, 4)[0] == 0
            auth = await roundtrip(request(36, 1, 2, auth_bytes=b"\0carol\0carol-pw"))
            assert struct.unpack_from(">h", auth, 4)[0] == 0
            answer = await roundtrip(metadata_v10_request())
            writer.close()
            return answer
        finally:
            await server.stop()

    assert asyncio.run(sasl_then_metadata()) != b""
    assert [c.principal for c in seen] == [KafkaPrincipal("User", "carol")]
    assert seen[0].security_protocol is SecurityProtocol.SASL_SSL


def request(api_key: int, version: int, correlation_id: int, **fields: Any) -> bytes:
    body = build(request_schema(api_key, version), **fields)
    return encode_request(api_key, version, correlation_id, "tls-test", body)


def test_requested_client_auth_without_a_certificate_is_anonymous(pki: TestPki) -> None:
    broker = pki.issue("broker", "CN=localhost,OU=brokers,O=test")
    seen: list[RequestContext] = []
    security = listener(pki, broker, SecurityProtocol.SSL, **{"ssl.client.auth": "requested"})

    asyncio.run(exchange(security, recording(seen), client_context(pki, None)))

    assert [c.principal for c in seen] == [ANONYMOUS]


def test_required_client_auth_without_a_certificate_is_refused(
    pki: TestPki, caplog: pytest.LogCaptureFixture
) -> None:
    broker = pki.issue("broker", "CN=localhost,OU=brokers,O=test")
    seen: list[RequestContext] = []
    security = listener(pki, broker, SecurityProtocol.SSL)

    with caplog.at_level(logging.INFO, logger="storage_core.server.socket_server"):
        answer, _ = asyncio.run(exchange(security, recording(seen), client_context(pki, None)))

    assert answer == b""
    assert seen == []
    assert "SSL handshake failed" in caplog.text


def test_file_regions_go_through_tls_whole_and_in_order(pki: TestPki, tmp_path: Path) -> None:
    """A fetch-sized response of bytes and file regions (sendfile cannot encrypt): every byte
    arrives, in order, though the file is read a chunk at a time."""
    broker = pki.issue("broker", "CN=localhost,OU=brokers,O=test")
    alice = pki.issue("alice", "CN=alice,OU=eng,O=acme,C=US")
    segment = tmp_path / "00000000000000000000.log"
    content = os.urandom(REGION_BYTES + 1000)
    segment.write_bytes(content)

    async def fetch_like(ctx: RequestContext, request: Any) -> ResponseParts:
        parts = ResponseParts()
        parts.append_bytes(bytearray(struct.pack(">ii", 0, ctx.correlation_id)))
        fd = os.open(segment, os.O_RDONLY)
        parts.append_region(FileRegion(fd, 500, REGION_BYTES, path=str(segment)))
        parts.append_bytes(b"tail")
        resident = FileRegion(os.open(segment, os.O_RDONLY), 0, 100, path=str(segment))
        resident.resident = True
        parts.append_region(resident)
        parts.seal()
        return parts

    security = listener(pki, broker, SecurityProtocol.SSL)
    answer, _ = asyncio.run(exchange(security, fetch_like, client_context(pki, alice)))

    assert (
        answer == struct.pack(">i", 1) + content[500 : 500 + REGION_BYTES] + b"tail" + content[:100]
    )


def test_a_client_that_never_finishes_its_handshake_is_closed(
    pki: TestPki, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The handshake is bounded (TLS_HANDSHAKE_TIMEOUT_S): a client that connects and says
    nothing is closed, with Kafka's line and the reason."""
    monkeypatch.setattr(ssl_channel, "TLS_HANDSHAKE_TIMEOUT_S", 0.5)
    broker = pki.issue("broker", "CN=localhost,OU=brokers,O=test")
    security = listener(pki, broker, SecurityProtocol.SSL)

    async def scenario() -> bytes:
        server = SocketServer(services(), {}, config=CONFIG, listener=security)
        port = await server.start("127.0.0.1", 0)
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            data = await asyncio.wait_for(reader.read(), 5)  # b"" once the broker closes
            writer.close()
            return data
        finally:
            await server.stop()

    with caplog.at_level(logging.INFO, logger="storage_core.server.socket_server"):
        assert asyncio.run(scenario()) == b""
    assert "(SSL handshake failed) reason=SSL handshake is taking longer than 0.5 seconds" in (
        caplog.text
    )
