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

``authenticate_sasl`` runs the SASL client (SaslHandshake v1, then SaslAuthenticate until the
mechanism completes: ``sasl_client_authenticator``) with the settings' ``sasl.mechanism`` (PLAIN,
SCRAM-SHA-256, SCRAM-SHA-512) and credentials: ``sasl.jaas.config``'s username and password
(a PlainLoginModule or ScramLoginModule), or ``sasl.username`` / ``sasl.password``. A SASL
protocol without them is refused when the config is built, naming what is missing.

Thread-safety: a ``ClientSecurityConfig`` (and its TLS context) is immutable and shared; a
socket belongs to its caller.
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field

from storage_core.errors import InvalidConfigError
from storage_core.security import sasl_client_authenticator
from storage_core.security.jaas_config import parse_jaas_config
from storage_core.security.kafka_principal import SecurityProtocol
from storage_core.security.ssl_factory import SslEngineConfig, SslMode, create_ssl_context

SASL_CLIENT_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


class TlsHandshakeError(ConnectionError):
    """The TLS handshake with a broker failed (untrusted certificate, wrong name, a peer
    that does not speak TLS); the message says which and what to check."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientSecurityConfig:
    """A client's ``security.protocol`` and its ``ssl.*`` (and later ``sasl.*``) settings."""

    security_protocol: SecurityProtocol = SecurityProtocol.PLAINTEXT
    settings: Mapping[str, str] = field(default_factory=dict, repr=False)
    """The client settings as Kafka names them (``ssl.truststore.location``...); they hold
    passwords, so they stay out of the repr."""
    where: str = "client"
    _context: ssl.SSLContext | None = field(default=None, compare=False, repr=False)
    _sasl: tuple[str, str, str] | None = field(default=None, compare=False, repr=False)
    """(mechanism, username, password) of a SASL protocol."""

    def __post_init__(self) -> None:
        if self.security_protocol.uses_sasl:
            object.__setattr__(self, "_sasl", _sasl_settings(self.settings, self.where))
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
    """The SASL exchange on a connected socket (SaslHandshake, SaslAuthenticate);
    ``SaslAuthenticationFailedError`` (a ``ConnectionError``) with the broker's reason."""
    if security._sasl is None:
        raise InvalidConfigError(
            f"{security.where}: security.protocol={security.security_protocol.name} uses no SASL"
        )
    mechanism, username, password = security._sasl
    peer = sock.getpeername()
    sasl_client_authenticator.authenticate_sasl(
        sock,
        mechanism=mechanism,
        username=username,
        password=password,
        client_id=security.settings.get("client.id"),
        where=f"broker {peer[0]}:{peer[1]}" if isinstance(peer, tuple) else "broker",
    )


def _sasl_settings(settings: Mapping[str, str], where: str) -> tuple[str, str, str]:
    """(mechanism, username, password) from ``sasl.mechanism`` and ``sasl.jaas.config`` (or
    ``sasl.username`` / ``sasl.password``); InvalidConfigError naming what is missing."""
    mechanism = (settings.get("sasl.mechanism") or "GSSAPI").strip().upper()
    if mechanism not in SASL_CLIENT_MECHANISMS:
        raise InvalidConfigError(
            f"{where}: sasl.mechanism={mechanism} is not supported; use one of"
            f" {', '.join(SASL_CLIENT_MECHANISMS)}"
        )
    jaas = (settings.get("sasl.jaas.config") or "").strip()
    if jaas:
        entry = parse_jaas_config(jaas, setting=f"{where}: sasl.jaas.config")
        if entry.username and entry.password:
            return mechanism, entry.username, entry.password
    username, password = settings.get("sasl.username"), settings.get("sasl.password")
    if username and password:
        return mechanism, username, password
    raise InvalidConfigError(
        f"{where}: SASL {mechanism} needs a username and a password: set sasl.jaas.config"
        f' (a login module with username="..." password="...") or sasl.username and'
        " sasl.password"
    )
