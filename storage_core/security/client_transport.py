"""The client side of a connection to a broker, as a Kafka client's ``security.protocol`` and
``ssl.*`` settings ask for it: one blocking socket, TLS-wrapped when the protocol says so.

Every connection the broker and its tools open goes through ``open_socket`` (the replica
fetchers, ``client.connection``'s ``KafkaConnection`` under the RLMM's producer and consumer
and the command-line tools), so that what a protocol needs is done in one place:

    PLAINTEXT        TCP
    SSL              TCP, then the TLS handshake (server certificate checked against the
                     trust store; its name too unless ssl.endpoint.identification.algorithm
                     is empty; the key store's certificate presented when the server asks)
    SASL_PLAINTEXT   TCP, then the SASL exchange (``authenticate_sasl``)
    SASL_SSL         TLS as SSL, then the SASL exchange

``authenticate_sasl`` is where the SASL client (SaslHandshake, SaslAuthenticate) runs; until
it exists a SASL protocol is refused when the config is built, naming it.

Thread-safety: a ``ClientSecurityConfig`` (and its TLS context) is immutable and shared; a
socket belongs to its caller.
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field

from storage_core.errors import InvalidConfigError
from storage_core.security.kafka_principal import SecurityProtocol
from storage_core.security.ssl_factory import SslEngineConfig, SslMode, create_ssl_context


class TlsHandshakeError(ConnectionError):
    """The TLS handshake with a broker failed (untrusted certificate, wrong name, a peer
    that does not speak TLS); the message says which and what to check."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientSecurityConfig:
    """A client's ``security.protocol`` and its ``ssl.*`` (and later ``sasl.*``) settings."""

    security_protocol: SecurityProtocol = SecurityProtocol.PLAINTEXT
    settings: Mapping[str, str] = field(default_factory=dict)
    """The client settings as Kafka names them (``ssl.truststore.location``...)."""
    where: str = "client"
    _context: ssl.SSLContext | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.security_protocol.uses_sasl:
            raise InvalidConfigError(
                f"{self.where}: security.protocol={self.security_protocol.name} needs a SASL"
                " client, which this build does not have yet; use PLAINTEXT or SSL"
            )
        if self.security_protocol.uses_tls:  # a bad setting is refused now, not at connect
            context = create_ssl_context(
                SslEngineConfig(values=dict(self.settings), where=self.where), SslMode.CLIENT
            )
            object.__setattr__(self, "_context", context)

    @staticmethod
    def from_properties(props: Mapping[str, str], *, where: str = "client") -> ClientSecurityConfig:
        """From client properties (``security.protocol=SSL``, ``ssl.*``)."""
        try:
            protocol = SecurityProtocol.for_name(props.get("security.protocol") or "PLAINTEXT")
        except ValueError as error:
            raise InvalidConfigError(f"{where}: security.protocol: {error}") from None
        return ClientSecurityConfig(
            security_protocol=protocol,
            settings={k: v for k, v in props.items() if k.startswith(("ssl.", "sasl."))},
            where=where,
        )

    def ssl_context(self) -> ssl.SSLContext:
        if self._context is None:
            raise InvalidConfigError(
                f"{self.where}: security.protocol={self.security_protocol.name} uses no TLS"
            )
        return self._context


PLAINTEXT_CLIENT = ClientSecurityConfig()


def open_socket(
    host: str, port: int, security: ClientSecurityConfig, *, timeout_s: float
) -> socket.socket:
    """A connected socket to ``host:port`` speaking ``security``'s protocol (TLS handshake
    done). ``OSError`` when the connection fails, ``TlsHandshakeError`` when TLS does."""
    sock = socket.create_connection((host, port), timeout=timeout_s)
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if security.security_protocol.uses_tls:
            sock = _wrap_tls(sock, host, port, security)
        if security.security_protocol.uses_sasl:
            authenticate_sasl(sock, security)
    except BaseException:
        sock.close()
        raise
    return sock


def _wrap_tls(
    sock: socket.socket, host: str, port: int, security: ClientSecurityConfig
) -> socket.socket:
    context = security.ssl_context()
    try:
        return context.wrap_socket(sock, server_hostname=host)
    except ssl.SSLCertVerificationError as error:
        raise TlsHandshakeError(
            f"TLS handshake with broker {host}:{port} failed: {error.verify_message}; check"
            " ssl.truststore.* (the CA that signed the broker's certificate) and, unless"
            " ssl.endpoint.identification.algorithm is empty, that the certificate names"
            f" {host}"
        ) from None
    except ssl.SSLError as error:
        raise TlsHandshakeError(
            f"TLS handshake with broker {host}:{port} failed: {error.reason or error}; is it"
            " a TLS listener (SSL or SASL_SSL), and does it accept this client's certificate?"
        ) from None
    except (ConnectionError, TimeoutError) as error:
        raise TlsHandshakeError(
            f"TLS handshake with broker {host}:{port} failed: {error}; is it a TLS listener"
            " (SSL or SASL_SSL)?"
        ) from None


def authenticate_sasl(sock: socket.socket, security: ClientSecurityConfig) -> None:
    """The SASL exchange on a connected socket (SaslHandshake, SaslAuthenticate): the seam
    for the SASL client; ``ClientSecurityConfig`` refuses SASL protocols until it exists."""
    raise InvalidConfigError(
        f"{security.where}: security.protocol={security.security_protocol.name} needs a SASL"
        " client, which this build does not have yet"
    )
