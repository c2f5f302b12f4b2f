"""The asyncio listener that speaks the Kafka protocol (Kafka's ``SocketServer`` + ``KafkaApis``).

One task per connection reads a frame, serves it, writes the response, then reads the next:
requests of one connection are answered in order, as Kafka does by muting a channel until its
response is sent. One exception, invisible on the wire: an acks=-1 produce whose records are
appended defers its response until they are replicated, and the next produce is read
meanwhile (``response_pipeline``; responses still go out in request order). A frame that
cannot be served closes that connection only, with one log line that says who sent what and
why; every other connection keeps going.

- size < 0 or > ``socket.request.max.bytes``      -> close (the frame is not read)
- unknown API key, or an unsupported version       -> close, except ApiVersions, which answers
                                                      with v0 and UNSUPPORTED_VERSION (KIP-511)
- a body that does not decode or fill the frame    -> close
- the client closes in the middle of a frame       -> close (logged; a close between frames
                                                      is not)
- a handler that raises, or whose response does   -> close (logged with the traceback),
  not encode                                          once earlier responses are sent
- more connections than ``max.connections``, or    -> close at once (logged)
  than ``max.connections.per.ip`` from one address
- no byte either way for ``connections.max.idle.ms`` -> close (debug line); never while the
                                                      broker serves a request
- a frame not complete ``connections.max.idle.ms``  -> close (logged)
  after its first byte

Each frame reserves its declared size in the ``MemoryPool`` (``queued.max.request.bytes``)
before its body is read, and keeps it until its request is served; while the pool is full the
connection is not read from. See ``socket_server_config`` for why these bounds.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import socket
import struct
import time
from collections.abc import Callable, Mapping
from enum import Enum
from typing import Any, Final

from kio.schema.index import api_key_map

from storage_core.security.credential_cache import CredentialCache
from storage_core.server.acceptor import Acceptor
from storage_core.server.broker_services import BrokerServices
from storage_core.server.connection_quotas import ConnectionQuotas
from storage_core.server.handlers import ApiHandler
from storage_core.server.kafka_channel import ExpiryReason, KafkaChannel
from storage_core.server.listeners import ListenerSecurity
from storage_core.server.memory_pool import MemoryPool
from storage_core.server.protocol import (
    MalformedRequestError,
    encode_response,
    parse_request,
    peek_key_version_correlation,
)
from storage_core.server.request_context import RequestContext
from storage_core.server.response_parts import ResponseParts, send_response_parts, write_all
from storage_core.server.response_pipeline import DeferredResponse, Response, ResponsePipeline
from storage_core.server.sasl_server_authenticator import SaslServerAuthenticator
from storage_core.server.socket_server_config import STREAM_BUFFER_BYTES, SocketServerConfig
from storage_core.server.ssl_channel import open_tls_streams, tls_principal

logger = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")
IDLE_CHECK_INTERVAL_MS_MAX = 1_000


class SocketServer:
    """Accepts connections on one listener and serves their requests through the handler
    registry (``api_registry``, API key -> handler), each with a context carrying ``services``.

    Connections, bytes of requests in memory and time are bounded as ``SocketServerConfig``
    describes; one task (``_expire_idle_connections``) closes idle connections and frames
    past their deadline. Thread-safety: one event loop.
    """

    def __init__(
        self,
        services: BrokerServices,
        api_registry: Mapping[int, ApiHandler],
        *,
        config: SocketServerConfig,
        listener: ListenerSecurity | None = None,
        memory_pool: MemoryPool | None = None,
        quotas: ConnectionQuotas | None = None,
        credentials: CredentialCache | None = None,
    ) -> None:
        self._services = services
        self._credentials = credentials if credentials is not None else CredentialCache()
        """The SCRAM credentials a SASL listener authenticates against (the broker's)."""
        self._api_registry = api_registry
        self._config = config
        self.listener = listener or ListenerSecurity.plaintext()
        """The listener served: its name, protocol and TLS context (one server per listener)."""
        self._memory_pool = memory_pool or MemoryPool(
            size_bytes=config.queued_max_request_bytes,
            max_single_allocation_bytes=config.max_request_bytes,
        )
        self._acceptor = Acceptor(self._on_accepted)
        self._connections: set[asyncio.Task[None]] = set()
        self._channels: dict[asyncio.Task[None], KafkaChannel] = {}
        self._quotas = quotas or ConnectionQuotas()
        """Shared by the broker's listeners (its own when the server is alone)."""
        self._connections_per_host = self._quotas.per_host
        self._expiry_task: asyncio.Task[None] | None = None
        self.bound_port = -1

    @property
    def memory_pool(self) -> MemoryPool:
        return self._memory_pool

    async def start(self, host: str, port: int) -> int:
        await self.bind(host, port)
        self.start_processing()
        return self.bound_port

    async def bind(self, host: str, port: int) -> int:
        """Listen (clients may connect and wait) without serving yet; returns the port."""
        self.bound_port = await self._acceptor.bind(host, port)
        return self.bound_port

    def start_processing(self) -> None:
        """Serve: accept the waiting connections and every later one."""
        self._acceptor.start_accepting()
        if self._config.connections_max_idle_ms > 0:
            self._expiry_task = asyncio.create_task(
                self._expire_idle_connections(), name="idle-expiry"
            )

    async def stop(self) -> None:
        """Stop accepting, then close every connection (in-flight requests are cancelled)."""
        await self._acceptor.stop()
        if self._expiry_task is not None:
            self._expiry_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._expiry_task
        for task in list(self._connections):
            task.cancel()
        if self._connections:
            await asyncio.gather(*self._connections, return_exceptions=True)

    def _on_accepted(self, conn: socket.socket) -> None:
        task = asyncio.create_task(self._open(conn))
        self._connections.add(task)
        self._quotas.open += 1
        task.add_done_callback(self._connections.discard)
        task.add_done_callback(self._quotas.on_closed)

    async def _open(self, conn: socket.socket) -> None:
        if self.listener.ssl_context is not None:
            await self._open_tls(conn)
            return
        try:
            reader, writer = await asyncio.open_connection(sock=conn, limit=STREAM_BUFFER_BYTES)
        except OSError:
            conn.close()
            return
        await self._on_connection(reader, writer)

    async def _open_tls(self, conn: socket.socket) -> None:
        """The TLS handshake (``ssl_channel``), then the connection."""
        streams = await open_tls_streams(conn, self.listener)
        if streams is not None:
            await self._on_connection(*streams)

    async def _on_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        peer = writer.get_extra_info("peername")
        client = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        host = peer[0] if isinstance(peer, tuple) else str(peer)
        if self._quotas.open > self._config.max_connections:
            logger.warning("refusing connection client=%s reason=max.connections reached", client)
            writer.close()
            return
        if self._connections_per_host[host] >= self._config.max_connections_per_ip:
            logger.info(
                "Rejected connection from %s, address already has the configured maximum of"
                " %d connections (max.connections.per.ip) client=%s",
                host,
                self._config.max_connections_per_ip,
                client,
            )
            writer.close()
            return
        task = asyncio.current_task()
        channel = KafkaChannel(client=client, host=host)
        if self.listener.ssl_context is not None and not self._authenticate_tls(writer, channel):
            writer.transport.abort()
            return
        if task is not None:
            self._channels[task] = channel
        self._connections_per_host[host] += 1
        try:
            await self._serve(reader, writer, channel)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the client went away; nothing to answer
        except asyncio.CancelledError:
            # Expired or shutting down: drop what the client has not taken. close() would
            # wait for a client that reads nothing, and keep its descriptor open meanwhile.
            writer.transport.abort()
        finally:
            if task is not None:
                self._channels.pop(task, None)
            self._connections_per_host[host] -= 1
            if not self._connections_per_host[host]:
                del self._connections_per_host[host]
            writer.close()

    def _authenticate_tls(self, writer: asyncio.StreamWriter, channel: KafkaChannel) -> bool:
        """The connection's principal from its client certificate (``ssl_channel``); False
        when no mapping rule names it: the connection is closed."""
        principal = tls_principal(writer, self.listener, channel.client)
        if principal is None:
            return False
        channel.principal = principal
        return True

    async def _serve(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, channel: KafkaChannel
    ) -> None:
        pipeline = ResponsePipeline(
            send=lambda response: self._send(writer, response, channel),
            close=writer.transport.abort,
            client=channel.client,
            on_pending=channel.set_pending_responses,
        )
        try:
            await self._serve_frames(reader, writer, channel, pipeline)
        finally:
            pipeline.cancel()

    async def _serve_frames(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        channel: KafkaChannel,
        pipeline: ResponsePipeline,
    ) -> None:
        client = channel.client
        authenticator = self._new_authenticator(channel)
        while True:
            await pipeline.wait_for_room()
            size = await self._read_size(reader, channel)
            if size is None:
                await pipeline.drain()  # a client that only shut its sending side still reads
                return
            limit_bytes, limit_name = self._config.max_request_bytes, "socket.request.max.bytes"
            sasl_limit_bytes = authenticator.max_receive_size if authenticator else None
            if sasl_limit_bytes is not None:  # before and during the first authentication
                limit_bytes, limit_name = sasl_limit_bytes, "sasl.server.max.receive.size"
            if size <= 0 or size > limit_bytes:
                logger.warning(
                    "closing connection client=%s reason=frame of %d bytes is outside (0, %s=%d]",
                    client,
                    size,
                    limit_name,
                    limit_bytes,
                )
                await pipeline.drain()  # the earlier requests still get their answers
                return
            # Not a byte of the body is read before its whole size is reserved (back-pressure).
            await self._memory_pool.reserve(size)
            try:
                frame = await self._read_body(reader, size, channel)
                if frame is None:
                    return
                if authenticator is not None:
                    outcome = await self._authenticate(
                        authenticator, frame, writer, channel, pipeline
                    )
                    if outcome is _AuthOutcome.CLOSE:
                        return
                    if outcome is _AuthOutcome.TAKEN:
                        continue
                # Only a produce goes past a pending response (see response_pipeline).
                if pipeline.busy and _api_key(frame) != PRODUCE_KEY and not await pipeline.drain():
                    return
                channel.serving = True
                try:
                    response = await self._serve_frame(frame, channel)
                finally:
                    channel.serving = False
                    channel.touch()
                del frame
            finally:
                self._memory_pool.release(size)
            if response is _CLOSE:
                await pipeline.drain()
                return
            if isinstance(response, DeferredResponse) or pipeline.busy:
                pipeline.add(response)
            else:
                await self._send(writer, response, channel)

    def _new_authenticator(self, channel: KafkaChannel) -> SaslServerAuthenticator | None:
        """The SASL state machine of a connection of a SASL listener; None otherwise."""
        sasl = self.listener.sasl
        if sasl is None:
            return None

        async def answer_api_versions(frame: bytes) -> bytes | None:
            response = await self._serve_frame(frame, channel)
            return response if isinstance(response, bytes) else None

        return SaslServerAuthenticator(
            sasl,
            self._credentials,
            client=channel.client,
            answer_api_versions=answer_api_versions,
        )

    async def _authenticate(
        self,
        authenticator: SaslServerAuthenticator,
        frame: bytes,
        writer: asyncio.StreamWriter,
        channel: KafkaChannel,
        pipeline: ResponsePipeline,
    ) -> _AuthOutcome:
        """A frame of a SASL listener's connection: the authenticator takes it until the
        connection is authenticated, and a SaslHandshake that re-authenticates it (KIP-368);
        after the session expired any other request closes the connection (Kafka's
        ``expired-connections-killed-count``). Otherwise the frame goes to the API layer."""
        if authenticator.complete and not authenticator.maybe_begin_reauthentication(frame):
            if authenticator.session_expired():
                logger.info(
                    "closing connection client=%s listener=%s reason=the authenticated session"
                    " of %s expired (connections.max.reauth.ms=%d) and the client did not"
                    " re-authenticate",
                    channel.client,
                    self.listener.listener_name,
                    authenticator.principal,
                    authenticator.session_lifetime_ms,
                )
                await pipeline.drain()
                return _AuthOutcome.CLOSE
            return _AuthOutcome.SERVE
        if pipeline.busy and not await pipeline.drain():  # answers stay in request order
            return _AuthOutcome.CLOSE
        step = await authenticator.authenticate(frame)
        if step.delay_ms > 0:  # connection.failed.authentication.delay.ms
            await asyncio.sleep(step.delay_ms / 1000)
        if step.response is not None:
            await write_all(writer, step.response, channel.touch)
        if step.close:
            return _AuthOutcome.CLOSE
        if authenticator.complete and authenticator.principal is not None:
            channel.principal = authenticator.principal
        return _AuthOutcome.TAKEN

    async def _send(
        self, writer: asyncio.StreamWriter, response: Response, channel: KafkaChannel
    ) -> None:
        if isinstance(response, bytes):
            await write_all(writer, response, channel.touch)
        elif isinstance(response, ResponseParts):
            await send_response_parts(
                writer,
                response,
                self._services.replica_manager.run_io,
                channel.touch,
                zero_copy=self.listener.ssl_context is None,
            )

    @staticmethod
    async def _read_size(reader: asyncio.StreamReader, channel: KafkaChannel) -> int | None:
        """The next frame's size prefix; None when the client closed (logged if mid-prefix)."""
        head = b""
        while len(head) < _SIZE.size:
            chunk = await reader.read(_SIZE.size - len(head))
            if not chunk:
                if head:  # a clean close between frames is not worth a line
                    SocketServer._log_truncated(channel.client, len(head), _SIZE.size)
                return None
            channel.on_frame_bytes(len(chunk))
            head += chunk
        (size,) = _SIZE.unpack(head)
        channel.frame_size_bytes = int(size)
        return int(size)

    @staticmethod
    async def _read_body(
        reader: asyncio.StreamReader, size: int, channel: KafkaChannel
    ) -> bytes | None:
        """The frame's ``size`` bytes, read as they come: memory follows the bytes received,
        never the size the frame declares. None when the client closed (logged)."""
        body = io.BytesIO()  # getvalue() hands over its buffer without a copy
        received = 0
        while received < size:
            chunk = await reader.read(size - received)
            if not chunk:
                SocketServer._log_truncated(channel.client, received, size)
                return None
            channel.on_frame_bytes(len(chunk))
            if len(chunk) == size:
                channel.on_frame_read()
                return chunk
            body.write(chunk)
            received += len(chunk)
        channel.on_frame_read()
        return body.getvalue()

    async def _expire_idle_connections(self) -> None:
        max_idle_ms = self._config.connections_max_idle_ms
        interval_s = max(10, min(IDLE_CHECK_INTERVAL_MS_MAX, max_idle_ms // 4)) / 1000
        while True:
            await asyncio.sleep(interval_s)
            now_ns = time.monotonic_ns()
            for task, channel in list(self._channels.items()):
                reason = channel.expiry_reason(now_ns=now_ns, max_idle_ns=max_idle_ms * 1_000_000)
                if reason is None:
                    continue
                self._channels.pop(task, None)
                if reason is ExpiryReason.REQUEST_DEADLINE:
                    declared = (
                        f"a request of {channel.frame_size_bytes} bytes"
                        if channel.frame_size_bytes >= 0
                        else "a request's 4-byte size"
                    )
                    logger.warning(
                        "closing connection client=%s reason=%s was not received within"
                        " connections.max.idle.ms=%d (%d bytes came, size prefix included)",
                        channel.client,
                        declared,
                        max_idle_ms,
                        channel.frame_received_bytes,
                    )
                else:
                    logger.debug(
                        "closing idle connection client=%s idle_ms=%d connections.max.idle.ms=%d",
                        channel.client,
                        (now_ns - channel.last_active_ns) // 1_000_000,
                        max_idle_ms,
                    )
                task.cancel()

    @staticmethod
    def _log_truncated(client: str, received_bytes: int, expected_bytes: int) -> None:
        logger.warning(
            "closing connection client=%s reason=the client closed it after %d of %d bytes"
            " of a frame",
            client,
            received_bytes,
            expected_bytes,
        )

    async def _serve_frame(
        self, frame: bytes, channel: KafkaChannel
    ) -> Response | DeferredResponse | _Close:
        client, host = channel.client, channel.host
        try:
            key, version, correlation_id = peek_key_version_correlation(frame)
        except MalformedRequestError as error:
            logger.warning("closing connection client=%s reason=%s", client, error)
            return _CLOSE
        handler = self._api_registry.get(key)
        if handler is None or not handler.supports(version):
            answer = handler.answer_unsupported_version if handler is not None else None
            if answer is not None:
                return self._answer_unsupported_version(
                    answer,
                    key,
                    correlation_id=correlation_id,
                    client=client,
                    host=host,
                    version=version,
                )
            reason = (
                f"unknown API key {key}"
                if handler is None
                else f"API key {key} version {version} is not in [{handler.min_version},"
                f" {handler.max_version}]"
            )
            logger.warning("closing connection client=%s reason=%s", client, reason)
            return _CLOSE
        # A follower's fetch, the one request as frequent as produces under acks=all load,
        # skips the generic codec (its API's fast path, see follower_fetch); any other goes
        # the general way.
        fast_path = handler.fast_path
        # With an authorizer every fetch goes the general way, which checks the follower's
        # CLUSTER_ACTION against the connection's principal.
        fast = (
            fast_path.decode(frame)
            if fast_path is not None and self._services.authorizer is None
            else None
        )
        if fast is None:
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
                services=self._services,
                principal=channel.principal,
                listener_name=self.listener.listener_name,
                security_protocol=self.listener.security_protocol,
            )
        try:
            if fast_path is not None and fast is not None:
                return await fast_path.handle(self._services, fast)
            body = await handler.handle(ctx, request)
            if body is None:  # acks=0 produce: no response at all
                return None
            # Encoded by the handler (Fetch, Produce), or deferred (an acks=-1 Produce).
            if isinstance(body, ResponseParts | bytes | DeferredResponse):
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

    def _answer_unsupported_version(
        self,
        answer: Callable[[RequestContext], Any],
        key: int,
        *,
        correlation_id: int,
        client: str,
        host: str,
        version: int,
    ) -> bytes:
        """KIP-511: answer a request of a version this broker does not serve with v0 (the
        handler's answer: ApiVersions' carries error 35)."""
        logger.info(
            "%s v%d is newer than this broker serves; answering v0 client=%s",
            _api_name(key),
            version,
            client,
        )
        ctx = RequestContext(
            api_key=key,
            api_version=0,
            correlation_id=correlation_id,
            client_id=None,
            client_host=host,
            services=self._services,
            listener_name=self.listener.listener_name,
            security_protocol=self.listener.security_protocol,
        )
        body = answer(ctx)
        return encode_response(key, 0, correlation_id, body)


class _AuthOutcome(Enum):
    """What became of a frame of a SASL listener's connection (``_authenticate``)."""

    TAKEN = "the SASL exchange took it"
    SERVE = "the API layer serves it"
    CLOSE = "close the connection"


class _Close(Enum):
    """What ``_serve_frame`` returns for a frame that closes its connection."""

    CONNECTION = "close the connection"


_CLOSE: Final = _Close.CONNECTION
PRODUCE_KEY = 0


def _api_key(frame: bytes) -> int:
    """The API key of a frame (its first two bytes), before the frame is checked."""
    return int.from_bytes(frame[:2], "big", signed=True)


def _api_name(key: int) -> str:
    """The API's name as Kafka writes it (``ApiVersions``)."""
    return "".join(part.capitalize() for part in api_key_map[key].split("_"))
