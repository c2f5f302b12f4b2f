"""max.connections and max.connections.per.ip count the connections of every listener of a
broker together (Kafka's ConnectionQuotas): a connection held on one listener leaves no room
on another. Real SocketServers on loopback, one per listener, sharing their quotas."""

from __future__ import annotations

import asyncio
import logging

import pytest

from storage_core.server.connection_quotas import ConnectionQuotas
from storage_core.server.listeners import ListenerSecurity
from storage_core.server.socket_server import SocketServer
from storage_core.server.socket_server_config import SocketServerConfig


def config(*, max_connections: int, max_connections_per_ip: int) -> SocketServerConfig:
    return SocketServerConfig(
        max_request_bytes=1 << 20,
        max_connections=max_connections,
        max_connections_per_ip=max_connections_per_ip,
        connections_max_idle_ms=600_000,
        queued_max_request_bytes=1 << 21,
    )


async def second_listener_refuses(limits: SocketServerConfig) -> bool:
    """Hold a connection on listener A, then connect to B: True if B closed it at once."""
    quotas = ConnectionQuotas()
    servers = [
        SocketServer(
            object(),  # type: ignore[arg-type]  (no request is served)
            {},
            config=limits,
            listener=ListenerSecurity.plaintext(name),
            quotas=quotas,
        )
        for name in ("A", "B")
    ]
    ports = [await s.start("127.0.0.1", 0) for s in servers]
    try:
        _held_reader, held = await asyncio.open_connection("127.0.0.1", ports[0])
        await asyncio.sleep(0.2)  # A serves it
        reader, writer = await asyncio.open_connection("127.0.0.1", ports[1])
        try:
            closed = await asyncio.wait_for(reader.read(), 2) == b""
        except TimeoutError:
            closed = False
        writer.close()
        held.close()
        return closed
    finally:
        for server in servers:
            await server.stop()


def test_max_connections_counts_every_listener(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="storage_core.server.socket_server"):
        refused = asyncio.run(
            second_listener_refuses(config(max_connections=1, max_connections_per_ip=10))
        )
    assert refused
    assert "reason=max.connections reached" in caplog.text


def test_max_connections_per_ip_counts_every_listener(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="storage_core.server.socket_server"):
        refused = asyncio.run(
            second_listener_refuses(config(max_connections=10, max_connections_per_ip=1))
        )
    assert refused
    assert "(max.connections.per.ip)" in caplog.text
