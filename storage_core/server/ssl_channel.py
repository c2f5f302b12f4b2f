"""The TLS side of a connection on an SSL or SASL_SSL listener: the handshake (Kafka's
``SslTransportLayer``), bounded in time and logged as Kafka logs a failed one, and the
principal of a verified client certificate (Kafka's ``DefaultKafkaPrincipalBuilder``)::

    SSL, a verified client certificate     User:<its DN after ssl.principal.mapping.rules>
    SSL without one                        User:ANONYMOUS
    SASL_SSL                               User:ANONYMOUS until SASL authenticates it

A DN that no mapping rule names closes the connection (logged). Sending over TLS is
``response_parts``' (no sendfile: file regions are copied in bounded chunks).
"""

from __future__ import annotations

import asyncio
import logging
import socket

from storage_core.security.kafka_principal import ANONYMOUS, USER_TYPE, KafkaPrincipal
from storage_core.security.ssl_principal_mapper import NoMatchingRuleError, distinguished_name
from storage_core.server.listeners import ListenerSecurity
from storage_core.server.socket_server_config import STREAM_BUFFER_BYTES

logger = logging.getLogger("storage_core.server.socket_server")  # the listener's lines, as before

TLS_HANDSHAKE_TIMEOUT_S = 10.0
"""A TLS client must finish its handshake within this; then it is closed (logged)."""


async def open_tls_streams(
    conn: socket.socket, listener: ListenerSecurity
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
    """The streams of an accepted connection once its TLS handshake is done (bounded by
    TLS_HANDSHAKE_TIMEOUT_S); None (logged, closed) when it fails."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=STREAM_BUFFER_BYTES, loop=loop)
    protocol = asyncio.StreamReaderProtocol(reader, loop=loop)
    try:
        peer = conn.getpeername()
    except OSError:
        conn.close()
        return None
    try:
        transport, _ = await loop.connect_accepted_socket(
            lambda: protocol,
            sock=conn,
            ssl=listener.ssl_context,
            ssl_handshake_timeout=TLS_HANDSHAKE_TIMEOUT_S,
        )
    except (OSError, TimeoutError) as error:
        # Kafka's line for a failed handshake ("Failed authentication with /host") with the
        # verification's words (certificate has expired), OpenSSL's reason, or asyncio's (a
        # handshake not done within TLS_HANDSHAKE_TIMEOUT_S)
        reason = getattr(error, "verify_message", None) or getattr(error, "reason", None)
        reason = reason or str(error) or type(error).__name__
        logger.info(
            "Failed authentication with client=%s listener=%s (SSL handshake failed) reason=%s",
            f"{peer[0]}:{peer[1]}",
            listener.listener_name,
            reason,
        )
        conn.close()
        return None
    return reader, asyncio.StreamWriter(transport, protocol, reader, loop)


def tls_principal(
    writer: asyncio.StreamWriter, listener: ListenerSecurity, client: str
) -> KafkaPrincipal | None:
    """The connection's principal (see the module docstring); None (logged) when no mapping
    rule names its certificate's DN."""
    ssl_object = writer.get_extra_info("ssl_object")
    certificate = ssl_object.getpeercert(binary_form=True) if ssl_object else None
    if certificate is None or listener.security_protocol.uses_sasl:
        return ANONYMOUS
    mapper = listener.principal_mapper
    dn = distinguished_name(certificate)
    try:
        name = mapper.get_name(dn) if mapper is not None else dn
    except NoMatchingRuleError as error:
        logger.info(
            "Failed authentication with client=%s listener=%s (Failed to map name for"
            " '%s' based on SSL principal mapping rules: %s)",
            client,
            listener.listener_name,
            dn,
            error,
        )
        return None
    principal = KafkaPrincipal(USER_TYPE, name)
    logger.debug(
        "authenticated client=%s listener=%s principal=%s",
        client,
        listener.listener_name,
        principal,
    )
    return principal
