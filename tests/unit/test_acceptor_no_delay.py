"""Acceptor: every accepted connection has TCP_NODELAY, as Kafka's Acceptor sets.

Without it the small last write of a response (the tagged fields after a sendfile of records)
waits for the client's ACK of the records, which a client still waiting for the rest of the
response delays: up to 40 ms per fetch on Linux."""

from __future__ import annotations

import asyncio
import socket

from storage_core.server.acceptor import Acceptor


def test_an_accepted_connection_sends_small_writes_at_once() -> None:
    async def run() -> int:
        accepted: asyncio.Queue[socket.socket] = asyncio.Queue()
        acceptor = Acceptor(accepted.put_nowait)
        port = await acceptor.start("127.0.0.1", 0)
        try:
            client = socket.create_connection(("127.0.0.1", port))
            try:
                conn = await asyncio.wait_for(accepted.get(), 10)
                with conn:
                    return conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
            finally:
                client.close()
        finally:
            await acceptor.stop()

    assert asyncio.run(run()) != 0
