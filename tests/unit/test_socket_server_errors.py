"""The listener's last line of defence: a handler that raises, or that returns a response the
codec cannot encode, closes that one connection with one log record; the next connection is
served. Runs the real ``SocketServer`` on a loopback port with stub handlers."""

from __future__ import annotations

import asyncio
import datetime
import logging
import struct
from types import SimpleNamespace
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v10 import response as metadata_v10

from storage_core.protocol.messages import build, request_schema
from storage_core.server.handlers import ApiHandler, build_registry
from storage_core.server.protocol import encode_request
from storage_core.server.request_context import RequestContext
from storage_core.server.socket_server import SocketServer
from storage_core.server.socket_server_config import SocketServerConfig


async def unencodable(ctx: RequestContext, request: Any) -> Any:
    """A Metadata v10 response with a null topic name, which v10 cannot carry."""
    topic = build(
        metadata_v10.MetadataResponseTopic,
        error_code=ErrorCode.unknown_topic_id,
        name=None,
        topic_id=None,
        is_internal=False,
        partitions=(),
        topic_authorized_operations=-2147483648,
    )
    return build(
        metadata_v10.MetadataResponse,
        throttle_time=datetime.timedelta(0),
        brokers=(),
        cluster_id=None,
        controller_id=-1,
        topics=(topic,),
        cluster_authorized_operations=-2147483648,
    )


async def failing(ctx: RequestContext, request: Any) -> Any:
    raise RuntimeError("handler bug")


API_REGISTRY = {
    3: ApiHandler(api_key=3, min_version=10, max_version=10, handle=unencodable),
    23: ApiHandler(api_key=23, min_version=4, max_version=4, handle=failing),
}


class StubServices:
    """Nothing of the broker: the stub handlers use none of its managers."""


def metadata_v10_request() -> bytes:
    body = build(
        request_schema(3, 10),
        topics=None,
        allow_auto_topic_creation=False,
        include_cluster_authorized_operations=False,
        include_topic_authorized_operations=False,
    )
    return encode_request(3, 10, 1, "test", body)


def offset_for_leader_epoch_v4_request() -> bytes:
    return encode_request(23, 4, 2, "test", build(request_schema(23, 4), replica_id=-1, topics=()))


async def send_and_wait_for_close(port: int, frame: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(frame)
    await writer.drain()
    data = await asyncio.wait_for(reader.read(), 5)
    writer.close()
    return data


async def scenario(frame: bytes) -> tuple[bytes, bytes]:
    config = SocketServerConfig(
        max_request_bytes=1 << 20,
        max_connections=10,
        max_connections_per_ip=10,
        connections_max_idle_ms=600_000,
        queued_max_request_bytes=1 << 21,
    )
    server = SocketServer(StubServices(), API_REGISTRY, config=config)  # type: ignore[arg-type]
    port = await server.start("127.0.0.1", 0)
    try:
        first = await send_and_wait_for_close(port, frame)
        second = await send_and_wait_for_close(port, frame)
    finally:
        await server.stop()
    return first, second


@pytest.mark.parametrize(
    ("frame", "api"),
    [
        (metadata_v10_request(), "API key 3 v10"),
        (offset_for_leader_epoch_v4_request(), "API key 23 v4"),
    ],
    ids=["response-does-not-encode", "handler-raises"],
)
def test_a_handler_bug_closes_that_connection_with_one_record(
    caplog: pytest.LogCaptureFixture, frame: bytes, api: str
) -> None:
    caplog.set_level(logging.INFO, logger="storage_core.server.socket_server")
    first, second = asyncio.run(scenario(frame))
    assert first == b"" and second == b"", "nothing may be sent for a failed request"
    records = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(records) == 2  # one per connection, and nothing from asyncio itself
    for record in records:
        assert record.getMessage().endswith(f"reason=handler of {api} failed")
        assert record.exc_info is not None
    assert struct.unpack(">i", frame[:4])[0] == len(frame) - 4


def test_an_api_versions_newer_than_served_is_answered_at_v0_by_its_handler(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """KIP-511 through the registry: the listener hands a version it does not serve to the
    handler's answer for it (ApiVersions': v0, UNSUPPORTED_VERSION, the served ranges)."""
    caplog.set_level(logging.INFO, logger="storage_core.server.socket_server")
    registry = build_registry()
    services = SimpleNamespace(api_versions=registry)
    frame = struct.pack(">hhih", 18, 99, 7, 4) + b"test" + b"\x00"  # v99: unknown layout
    config = SocketServerConfig(
        max_request_bytes=1 << 20,
        max_connections=10,
        max_connections_per_ip=10,
        connections_max_idle_ms=600_000,
        queued_max_request_bytes=1 << 21,
    )

    async def run() -> bytes:
        server = SocketServer(services, registry, config=config)  # type: ignore[arg-type]
        port = await server.start("127.0.0.1", 0)
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(struct.pack(">i", len(frame)) + frame)
            await writer.drain()
            size = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), 5))[0]
            answer = await asyncio.wait_for(reader.readexactly(size), 5)
            writer.close()
            return answer
        finally:
            await server.stop()

    answer = asyncio.run(run())
    correlation_id, error_code, count = struct.unpack_from(">ihi", answer)
    assert (correlation_id, error_code) == (7, 35)
    keys = [struct.unpack_from(">hhh", answer, 10 + 6 * i) for i in range(count)]
    assert keys == sorted((h.api_key, h.min_version, h.max_version) for h in registry.values())
    assert [r.getMessage().split(" client=")[0] for r in caplog.records] == [
        "ApiVersions v99 is newer than this broker serves; answering v0"
    ]
