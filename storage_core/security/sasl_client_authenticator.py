"""The client's side of SASL on a new connection (Kafka's ``SaslClientAuthenticator``), for the
broker's own connections to a SASL listener (``client_transport``) and the project's clients
and CLI:

    -> SaslHandshake v1 (mechanism)        <- error 0 (or 33 with the broker's list)
    -> SaslAuthenticate v1 (first token)   <- token, error 0 (or 58 with the broker's reason)
    -> SaslAuthenticate v1 ...             until the mechanism completes (SCRAM: 2 rounds)

Blocking, on a connected socket (TCP or TLS) before any other request; the first frames use
correlation ids from 0. Failures raise ``SaslAuthenticationFailedError`` with the broker's
message (never the password). Returns the SessionLifetimeMs the broker granted (0: none).
"""

from __future__ import annotations

import io
import socket
import struct
from functools import cache
from typing import Any

from kio.schema.request_header.v1.header import RequestHeader
from kio.serial import entity_reader, entity_writer

from storage_core.protocol.messages import build, request_schema, response_schema
from storage_core.security.plain.plain_sasl_client import PlainSaslClient
from storage_core.security.plain.plain_sasl_server import PLAIN_MECHANISM
from storage_core.security.sasl_errors import SaslError
from storage_core.security.scram.scram_mechanism import ScramMechanism
from storage_core.security.scram.scram_sasl_client import ScramSaslClient

SASL_HANDSHAKE_KEY = 17
SASL_AUTHENTICATE_KEY = 36
HANDSHAKE_VERSION = 1
AUTHENTICATE_VERSION = 1
MAX_RESPONSE_BYTES = 524288  # the broker's sasl.server.max.receive.size default
MAX_ROUNDS = 8  # SCRAM needs 2, PLAIN 1
_SIZE = struct.Struct(">i")


class SaslAuthenticationFailedError(ConnectionError):
    """The broker refused the SASL exchange (wrong credentials, a mechanism it does not
    enable); the message has the broker's reason and what to check."""


def sasl_client(mechanism: str, username: str, password: str) -> PlainSaslClient | ScramSaslClient:
    if mechanism == PLAIN_MECHANISM:
        return PlainSaslClient(username, password)
    scram = ScramMechanism.for_mechanism_name(mechanism)
    if scram is None:
        raise SaslAuthenticationFailedError(
            f"sasl.mechanism={mechanism} is not supported here; use PLAIN, SCRAM-SHA-256 or"
            " SCRAM-SHA-512"
        )
    return ScramSaslClient(scram, username, password)


def authenticate_sasl(
    sock: socket.socket,
    *,
    mechanism: str,
    username: str,
    password: str,
    client_id: str | None = None,
    where: str = "broker",
) -> int:
    """Authenticate ``sock`` as ``username``; returns SessionLifetimeMs."""
    client = sasl_client(mechanism, username, password)
    handshake = _exchange(
        sock, SASL_HANDSHAKE_KEY, HANDSHAKE_VERSION, 0, client_id, mechanism=mechanism
    )
    if int(handshake.error_code) != 0:
        raise SaslAuthenticationFailedError(
            f"{where} does not enable SASL mechanism {mechanism} (error"
            f" {int(handshake.error_code)}); it enables {', '.join(handshake.mechanisms) or 'none'}"
        )
    token = client.first()
    lifetime_ms = 0
    for round_number in range(1, MAX_ROUNDS + 1):
        response = _exchange(
            sock,
            SASL_AUTHENTICATE_KEY,
            AUTHENTICATE_VERSION,
            round_number,
            client_id,
            auth_bytes=token,
        )
        if int(response.error_code) != 0:
            raise SaslAuthenticationFailedError(
                f"{where} refused SASL {mechanism} authentication of user {username!r}:"
                f" {response.error_message} (check the username and password)"
            )
        lifetime_ms = int(response.session_lifetime.total_seconds() * 1000)
        try:
            token = client.evaluate(bytes(response.auth_bytes))
        except SaslError as error:
            raise SaslAuthenticationFailedError(
                f"{where}: SASL {mechanism} exchange failed: {error}"
            ) from None
        if client.is_complete:
            return lifetime_ms
    raise SaslAuthenticationFailedError(
        f"{where}: SASL {mechanism} did not complete in {MAX_ROUNDS} rounds"
    )


@cache
def _writer(schema: Any) -> Any:
    return entity_writer(schema)


@cache
def _reader(schema: Any) -> Any:
    return entity_reader(schema)


def _exchange(
    sock: socket.socket,
    api_key: int,
    version: int,
    correlation_id: int,
    client_id: str | None,
    **fields: Any,
) -> Any:
    buffer = io.BytesIO()
    header = RequestHeader(
        request_api_key=api_key,  # type: ignore[arg-type]
        request_api_version=version,  # type: ignore[arg-type]
        correlation_id=correlation_id,  # type: ignore[arg-type]
        client_id=client_id,
    )
    _writer(RequestHeader)(buffer, header)
    body = build(request_schema(api_key, version), **fields)
    _writer(body.__class__)(buffer, body)
    payload = buffer.getvalue()
    sock.sendall(_SIZE.pack(len(payload)) + payload)
    (size,) = _SIZE.unpack(_read_exactly(sock, _SIZE.size))
    if not 4 <= size <= MAX_RESPONSE_BYTES:
        raise SaslAuthenticationFailedError(
            f"a SASL response of {size} bytes: the peer does not speak the Kafka protocol here"
        )
    frame = _read_exactly(sock, size)
    (answered,) = _SIZE.unpack_from(frame)
    if answered != correlation_id:
        raise SaslAuthenticationFailedError(
            f"a SASL response to request {answered}, expected {correlation_id}"
        )
    response, _size = _reader(response_schema(api_key, version))(frame, _SIZE.size)
    return response


def _read_exactly(sock: socket.socket, size: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < size:
        chunk = sock.recv(size - len(chunks))
        if not chunk:
            raise SaslAuthenticationFailedError(
                "the broker closed the connection during SASL authentication (a request it"
                " does not expect before authentication, or a failed authentication)"
            )
        chunks += chunk
    return bytes(chunks)
