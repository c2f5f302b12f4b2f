"""A tiny HTTP/1.x server for Prometheus scrapes: ``GET /metrics`` and nothing else.

One request per connection, answered then closed (``Connection: close``)::

    GET /metrics[?query] HTTP/1.x CRLF *(header CRLF) CRLF
        -> 200, Content-Type: text/plain; version=0.0.4; charset=utf-8 (HEAD: no body)
    any other path                       -> 404
    any other method                     -> 405 (Allow: GET, HEAD)
    a malformed request line             -> 400
    request head over MAX_REQUEST_BYTES  -> 431
    no complete head in REQUEST_TIMEOUT_S, or the peer closes -> closed without an answer

A request body is never read. Every refused request is one log line (peer, status, reason);
at most ``MAX_CONNECTIONS`` are served at once, others are closed at once.

Thread-safety: runs on the broker's asyncio loop; the registry is rendered there.
"""

from __future__ import annotations

import asyncio
import logging

from storage_core.errors import InvalidConfigError
from storage_core.metrics.prometheus import CONTENT_TYPE, render
from storage_core.metrics.registry import KafkaMetricsRegistry

logger = logging.getLogger(__name__)

METRICS_PATH = "/metrics"
MAX_REQUEST_BYTES = 8 * 1024
REQUEST_TIMEOUT_S = 10.0
MAX_CONNECTIONS = 64

_REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
}


class MetricsHttpServer:
    """Serves ``render(registry)`` on ``GET /metrics``. ``await start()``, ``await stop()``."""

    def __init__(self, registry: KafkaMetricsRegistry, *, host: str, port: int) -> None:
        if not 0 <= port <= 65535:
            raise InvalidConfigError(
                f"Invalid value {port} for configuration metrics.port: use 0-65535, or -1 to"
                " disable the metrics endpoint"
            )
        self.registry = registry
        self.host = host
        self.port = port
        self.bound_port = -1
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()

    async def start(self) -> int:
        self._server = await asyncio.start_server(
            self._on_connection,
            self.host or None,
            self.port,
            reuse_address=True,
            limit=MAX_REQUEST_BYTES,
        )
        self.bound_port = int(self._server.sockets[0].getsockname()[1])
        logger.info("metrics endpoint listening host=%s port=%d", self.host, self.bound_port)
        return self.bound_port

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        if self._connections:
            await asyncio.gather(*self._connections, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    async def _on_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        task = asyncio.current_task()
        peer = writer.get_extra_info("peername")
        if task is None or len(self._connections) >= MAX_CONNECTIONS:
            logger.warning("metrics connection refused peer=%s reason=too_many_connections", peer)
            writer.close()
            return
        self._connections.add(task)
        try:
            await self._serve(reader, writer, peer)
        except (ConnectionError, TimeoutError) as error:
            logger.info("metrics connection dropped peer=%s error=%r", peer, error)
        finally:
            self._connections.discard(task)
            writer.close()

    async def _serve(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, peer: object
    ) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), REQUEST_TIMEOUT_S)
        except asyncio.LimitOverrunError:
            await self._refuse(writer, peer, 431, f"request head over {MAX_REQUEST_BYTES} bytes")
            return
        except asyncio.IncompleteReadError as error:
            if error.partial:
                logger.info("metrics request cut short peer=%s bytes=%d", peer, len(error.partial))
            return
        request_line = head.split(b"\r\n", 1)[0]
        parts = request_line.split(b" ")
        if len(parts) != 3 or not parts[2].startswith(b"HTTP/1."):
            await self._refuse(writer, peer, 400, f"malformed request line {request_line[:80]!r}")
            return
        method, target = parts[0], parts[1].split(b"?", 1)[0]
        if method not in (b"GET", b"HEAD"):
            await self._refuse(writer, peer, 405, f"method {method[:16]!r}")
            return
        if target != METRICS_PATH.encode():
            await self._refuse(writer, peer, 404, f"path {target[:80]!r}")
            return
        try:
            body = render(self.registry).encode("utf-8")
        except Exception:
            logger.exception("metrics rendering failed peer=%s", peer)
            await self._respond(writer, 500, b"metrics rendering failed\n")
            return
        await self._respond(
            writer, 200, body, content_type=CONTENT_TYPE, send_body=method == b"GET"
        )

    async def _refuse(
        self, writer: asyncio.StreamWriter, peer: object, status: int, reason: str
    ) -> None:
        logger.info("metrics request refused peer=%s status=%d reason=%s", peer, status, reason)
        extra = "Allow: GET, HEAD\r\n" if status == 405 else ""
        await self._respond(writer, status, f"{_REASONS[status]}\n".encode(), extra_headers=extra)

    @staticmethod
    async def _respond(
        writer: asyncio.StreamWriter,
        status: int,
        body: bytes,
        *,
        content_type: str = "text/plain; charset=utf-8",
        extra_headers: str = "",
        send_body: bool = True,
    ) -> None:
        head = (
            f"HTTP/1.1 {status} {_REASONS[status]}\r\n"
            f"Content-Type: {content_type}\r\n"
            f"Content-Length: {len(body)}\r\n"
            f"{extra_headers}"
            "Connection: close\r\n\r\n"
        ).encode("ascii")
        writer.write(head + body if send_body else head)
        await asyncio.wait_for(writer.drain(), REQUEST_TIMEOUT_S)


async def maybe_start_metrics_server(
    registry: KafkaMetricsRegistry, *, host: str, port: int
) -> MetricsHttpServer | None:
    """Start the endpoint unless ``port`` is negative (``metrics.port=-1``: disabled)."""
    if port < 0:
        return None
    server = MetricsHttpServer(registry, host=host, port=port)
    await server.start()
    return server
