"""The asyncio listener that speaks the Kafka protocol (Kafka's ``SocketServer`` + ``KafkaApis``).

One task per connection reads a frame, serves it, writes the response, then reads the next:
requests of one connection are answered in order, as Kafka does by muting a channel until its
response is sent. A frame that cannot be served closes that connection only, with one log
line that says who sent what and why; every other connection keeps going.

- size < 0 or > ``socket.request.max.bytes``      -> close (the frame is not read)
- unknown API key, or an unsupported version       -> close, except ApiVersions, which answers
                                                      with v0 and UNSUPPORTED_VERSION (KIP-511)
- a body that does not decode or fill the frame    -> close
- the client closes in the middle of a frame       -> close (logged; a close between frames
                                                      is not)
- a handler that raises, or whose response does   -> close (logged with the traceback)
  not encode
"""

from __future__ import annotations

import asyncio
import logging
import socket
import struct
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from storage_core.server.acceptor import Acceptor
from storage_core.server.handlers.api_versions import api_versions_response
from storage_core.server.protocol import (
    API_VERSIONS_KEY,
    MalformedRequestError,
    encode_response,
    parse_request,
    peek_key_version_correlation,
    response_module,
)
from storage_core.server.request_context import RequestContext
from storage_core.server.response_parts import ResponseParts, send_response_parts

if TYPE_CHECKING:
    from storage_core.server.kafka_broker import KafkaBroker

logger = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")


class SocketServer:
    """Accepts connections on one listener and serves their requests through the broker."""

    def __init__(
        self, broker: KafkaBroker, *, max_request_bytes: int, max_connections: int
    ) -> None:
        self._broker = broker
        self._max_request_bytes = max_request_bytes
        self._max_connections = max_connections
        self._acceptor = Acceptor(self._on_accepted)
        self._connections: set[asyncio.Task[None]] = set()
        self.bound_port = -1

    async def start(self, host: str, port: int) -> int:
        self.bound_port = await self._acceptor.start(host, port)
        return self.bound_port

    async def stop(self) -> None:
        """Stop accepting, then close every connection (in-flight requests are cancelled)."""
        await self._acceptor.stop()
        for task in list(self._connections):
            task.cancel()
        if self._connections:
            await asyncio.gather(*self._connections, return_exceptions=True)

    def _on_accepted(self, conn: socket.socket) -> None:
        task = asyncio.create_task(self._open(conn))
        self._connections.add(task)
        task.add_done_callback(self._connections.discard)

    async def _open(self, conn: socket.socket) -> None:
        try:
            reader, writer = await asyncio.open_connection(sock=conn, limit=1 << 20)
        except OSError:
            conn.close()
            return
        await self._on_connection(reader, writer)

    async def _on_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        peer = writer.get_extra_info("peername")
        client = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        if len(self._connections) > self._max_connections:
            logger.warning("refusing connection client=%s reason=max.connections reached", client)
            writer.close()
            return
        try:
            await self._serve(reader, writer, client)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the client went away; nothing to answer
        except asyncio.CancelledError:
            pass
        finally:
            writer.close()

    async def _serve(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, client: str
    ) -> None:
        host = client.rsplit(":", 1)[0]
        while True:
            try:
                (size,) = _SIZE.unpack(await reader.readexactly(4))
            except asyncio.IncompleteReadError as eof:
                if eof.partial:  # a clean close between frames is not worth a line
                    self._log_truncated(client, len(eof.partial), 4)
                return
            if size <= 0 or size > self._max_request_bytes:
                logger.warning(
                    "closing connection client=%s reason=frame of %d bytes is outside"
                    " (0, socket.request.max.bytes=%d]",
                    client,
                    size,
                    self._max_request_bytes,
                )
                return
            try:
                frame = await reader.readexactly(size)
            except asyncio.IncompleteReadError as eof:
                self._log_truncated(client, len(eof.partial), size)
                return
            response = await self._serve_frame(frame, client, host)
            if response is _CLOSE:
                return
            if isinstance(response, bytes):
                writer.write(response)
                await writer.drain()
            elif isinstance(response, ResponseParts):
                await send_response_parts(writer, response, self._broker.replica_manager.run_io)

    @staticmethod
    def _log_truncated(client: str, received_bytes: int, expected_bytes: int) -> None:
        logger.warning(
            "closing connection client=%s reason=the client closed it after %d of %d bytes"
            " of a frame",
            client,
            received_bytes,
            expected_bytes,
        )

    async def _serve_frame(self, frame: bytes, client: str, host: str) -> bytes | object | None:
        try:
            key, version, correlation_id = peek_key_version_correlation(frame)
        except MalformedRequestError as error:
            logger.warning("closing connection client=%s reason=%s", client, error)
            return _CLOSE
        handler = self._broker.api_registry.get(key)
        if handler is None or not handler.supports(version):
            if key == API_VERSIONS_KEY:
                return self._unsupported_api_versions(correlation_id, client, host, version)
            reason = (
                f"unknown API key {key}"
                if handler is None
                else f"API key {key} version {version} is not in [{handler.min_version},"
                f" {handler.max_version}]"
            )
            logger.warning("closing connection client=%s reason=%s", client, reason)
            return _CLOSE
        try:
            header, request = parse_request(frame)
        except MalformedRequestError as error:
            logger.warning("closing connection client=%s reason=%s", client, error)
            return _CLOSE
        ctx = RequestContext(
            api_key=key,
            api_version=version,
            correlation_id=correlation_id,
            client_id=header.client_id,
            client_host=host,
            broker=self._broker,
        )
        try:
            body = await handler.handle(ctx, request)
            if body is None:  # acks=0 produce: no response at all
                return None
            if isinstance(body, ResponseParts | bytes):  # encoded by the handler (Fetch, Produce)
                return body
            # Inside the try: a response the codec refuses (a None in a non-nullable field)
            # is a handler bug too, and must close this connection only.
            return encode_response(key, version, correlation_id, body)
        except Exception:
            logger.exception(
                "closing connection client=%s reason=handler of API key %d v%d failed",
                client,
                key,
                version,
            )
            return _CLOSE

    def _unsupported_api_versions(
        self, correlation_id: int, client: str, host: str, version: int
    ) -> bytes:
        """KIP-511: answer an ApiVersions of an unknown version with v0 and error 35."""
        logger.info(
            "ApiVersions v%d is newer than this broker serves; answering v0 client=%s",
            version,
            client,
        )
        ctx = RequestContext(
            api_key=API_VERSIONS_KEY,
            api_version=0,
            correlation_id=correlation_id,
            client_id=None,
            client_host=host,
            broker=self._broker,
        )
        body = api_versions_response(
            ctx, response_module(API_VERSIONS_KEY, 0), ErrorCode.unsupported_version
        )
        return encode_response(API_VERSIONS_KEY, 0, correlation_id, body)


_CLOSE = object()
