"""The broker's listeners and their security, read as Kafka's ``KafkaConfig`` reads them.

    listeners=CLIENT://:9092,REPLICATION://127.0.0.1:9093
    advertised.listeners=CLIENT://kafka.example:9092,REPLICATION://127.0.0.1:9093
                                           (default: listeners)
    listener.security.protocol.map=CLIENT:SSL,REPLICATION:SSL
                                           (default: PLAINTEXT, SSL, SASL_PLAINTEXT and
                                            SASL_SSL map to themselves; a set map replaces it)
    inter.broker.listener.name=REPLICATION (or security.inter.broker.protocol=SSL, whose
                                            listener is the one of that name; not both)
    listener.name.client.ssl.client.auth=required    (a listener's own value of any setting;
                                            the plain setting is the fallback)

Kafka's checks and messages: a listener name without a protocol ("No security protocol
defined for listener X"), two listeners of one name or (``listeners`` only, port 0 aside) one
port, advertised names not among the listeners, an inter-broker listener not advertised, or
both inter-broker settings.

Thread-safety: values; built once at start.
"""

from __future__ import annotations

import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass

from storage_core.errors import InvalidConfigError
from storage_core.security.client_transport import ClientSecurityConfig
from storage_core.security.kafka_principal import SecurityProtocol
from storage_core.security.ssl_factory import SslEngineConfig, SslMode, create_ssl_context
from storage_core.security.ssl_principal_mapper import SslPrincipalMapper
from storage_core.server.sasl_config import SaslListenerConfig, inter_broker_credentials

DEFAULT_LISTENER_SECURITY_PROTOCOL_MAP = {p.name: p for p in SecurityProtocol}
_LISTENER = re.compile(r"^\s*([A-Za-z0-9_.\-]+)://(\[[^\]]*\]|[^:\[\]]*):(-?\d+)\s*$")


@dataclass(frozen=True, slots=True, kw_only=True)
class EndPoint:
    """One listener: ``NAME://host:port`` (an empty host means all interfaces)."""

    listener_name: str
    host: str
    port: int
    security_protocol: SecurityProtocol = SecurityProtocol.PLAINTEXT

    @staticmethod
    def parse(text: str, protocol_map: Mapping[str, SecurityProtocol] | None = None) -> EndPoint:
        match = _LISTENER.match(text)
        if match is None:
            raise InvalidConfigError(
                f"Invalid listener {text!r}: expected NAME://host:port, e.g."
                " PLAINTEXT://127.0.0.1:9092"
            )
        name = match.group(1).upper()
        port = int(match.group(3))
        if not 0 <= port <= 65535:
            raise InvalidConfigError(f"Invalid listener {text!r}: port out of range")
        protocols = DEFAULT_LISTENER_SECURITY_PROTOCOL_MAP if protocol_map is None else protocol_map
        protocol = protocols.get(name)
        if protocol is None:
            raise InvalidConfigError(
                f"Error creating broker listeners from {text.strip()!r}: No security protocol"
                f" defined for listener {name}; map it in listener.security.protocol.map"
                f" (e.g. {name}:SSL)"
            )
        return EndPoint(
            listener_name=name,
            host=match.group(2).strip("[]"),
            port=port,
            security_protocol=protocol,
        )

    def __str__(self) -> str:
        return f"{self.listener_name}://{self.host}:{self.port}"


def listener_security_protocol_map(props: Mapping[str, str]) -> dict[str, SecurityProtocol]:
    """``listener.security.protocol.map`` (``NAME:PROTOCOL,...``), or Kafka's default."""
    text = props.get("listener.security.protocol.map", "").strip()
    if not text:
        return dict(DEFAULT_LISTENER_SECURITY_PROTOCOL_MAP)
    mapping: dict[str, SecurityProtocol] = {}
    for entry in (e.strip() for e in text.split(",") if e.strip()):
        name, sep, protocol = entry.partition(":")
        if not sep or not name.strip():
            raise InvalidConfigError(
                f"Invalid value {text!r} for configuration listener.security.protocol.map:"
                " expected NAME:PROTOCOL,... e.g. INTERNAL:SSL,EXTERNAL:SASL_SSL"
            )
        try:
            mapping[name.strip().upper()] = SecurityProtocol.for_name(protocol)
        except ValueError as error:
            raise InvalidConfigError(
                f"Invalid value {text!r} for configuration listener.security.protocol.map: {error}"
            ) from None
    return mapping


def parse_endpoints(
    text: str,
    protocol_map: Mapping[str, SecurityProtocol],
    *,
    require_distinct_ports: bool,
) -> list[EndPoint]:
    endpoints = [EndPoint.parse(p, protocol_map) for p in text.split(",") if p.strip()]
    names = [e.listener_name for e in endpoints]
    if len(set(names)) != len(names):
        raise InvalidConfigError(f"Each listener must have a different name, listeners: {text}")
    if require_distinct_ports:
        ports = [e.port for e in endpoints if e.port != 0]
        if len(set(ports)) != len(ports):
            raise InvalidConfigError(f"Each listener must have a different port, listeners: {text}")
    return endpoints


def inter_broker_listener(
    props: Mapping[str, str], protocol_map: Mapping[str, SecurityProtocol]
) -> tuple[str, SecurityProtocol]:
    """The inter-broker listener's name and protocol (Kafka's
    ``getInterBrokerListenerNameAndSecurityProtocol``)."""
    name = props.get("inter.broker.listener.name", "").strip()
    if name:
        if props.get("security.inter.broker.protocol", "").strip():
            raise InvalidConfigError(
                "Only one of inter.broker.listener.name and security.inter.broker.protocol"
                " should be set."
            )
        listener = name.upper()
        protocol = protocol_map.get(listener)
        if protocol is None:
            raise InvalidConfigError(
                f"Listener with name {listener} defined in inter.broker.listener.name not found"
                " in listener.security.protocol.map."
            )
        return listener, protocol
    text = props.get("security.inter.broker.protocol", "").strip() or "PLAINTEXT"
    try:
        protocol = SecurityProtocol.for_name(text)
    except ValueError as error:
        raise InvalidConfigError(
            f"Invalid value {text!r} for configuration security.inter.broker.protocol: {error}"
        ) from None
    return protocol.name, protocol


def listener_prefix(listener_name: str) -> str:
    """``listener.name.<lower-cased name>.``, Kafka's ``ListenerName.configPrefix``."""
    return f"listener.name.{listener_name.lower()}."


def values_with_prefix_override(props: Mapping[str, str], prefix: str) -> dict[str, str]:
    """Every setting, those under ``prefix`` (stripped of it) winning over the plain ones
    (Kafka's ``AbstractConfig.valuesWithPrefixOverride``)."""
    values = {k: v for k, v in props.items() if not k.startswith("listener.name.")}
    for key, value in props.items():
        if key.startswith(prefix) and len(key) > len(prefix):
            values[key[len(prefix) :]] = value
    return values


@dataclass(frozen=True, slots=True, kw_only=True)
class ListenerSecurity:
    """What a connection through one listener gets: its listener's name and protocol, the TLS
    context of a TLS listener and the mapping of client certificates to principals."""

    listener_name: str
    security_protocol: SecurityProtocol
    ssl_context: ssl.SSLContext | None = None
    principal_mapper: SslPrincipalMapper | None = None
    sasl: SaslListenerConfig | None = None
    """A SASL listener's mechanisms and settings (``sasl_config``); None without SASL."""

    @staticmethod
    def plaintext(listener_name: str = "PLAINTEXT") -> ListenerSecurity:
        return ListenerSecurity(
            listener_name=listener_name, security_protocol=SecurityProtocol.PLAINTEXT
        )

    @staticmethod
    def for_endpoint(props: Mapping[str, str], endpoint: EndPoint) -> ListenerSecurity:
        """Build (and check: keys, certificates, rules) the security of ``endpoint``."""
        protocol = endpoint.security_protocol
        sasl = (
            SaslListenerConfig.from_props(props, endpoint.listener_name)
            if protocol.uses_sasl
            else None
        )
        if not protocol.uses_tls:
            return ListenerSecurity(
                listener_name=endpoint.listener_name, security_protocol=protocol, sasl=sasl
            )
        values = values_with_prefix_override(props, listener_prefix(endpoint.listener_name))
        where = f"listener {endpoint.listener_name} ({protocol.name})"
        context = create_ssl_context(SslEngineConfig(values=values, where=where), SslMode.SERVER)
        try:
            mapper = SslPrincipalMapper(values.get("ssl.principal.mapping.rules") or None)
        except InvalidConfigError as error:
            raise InvalidConfigError(f"{where}: ssl.principal.mapping.rules: {error}") from None
        return ListenerSecurity(
            listener_name=endpoint.listener_name,
            security_protocol=protocol,
            ssl_context=context,
            principal_mapper=mapper,
            sasl=sasl,
        )


def inter_broker_client_security(props: Mapping[str, str]) -> ClientSecurityConfig:
    """How this broker connects to its peers: the inter-broker listener's protocol with that
    listener's ``ssl.*`` settings (its key store is the client certificate, its trust store
    checks the peer), as Kafka's inter-broker channel builder does."""
    name, protocol = inter_broker_listener(props, listener_security_protocol_map(props))
    values = values_with_prefix_override(props, listener_prefix(name))
    settings = {k: v for k, v in values.items() if k.startswith("ssl.")}
    if protocol.uses_sasl:  # Kafka's brokers log in with the mechanism's JAAS username/password
        mechanism, username, password = inter_broker_credentials(props, name)
        settings.update(
            {"sasl.mechanism": mechanism, "sasl.username": username, "sasl.password": password}
        )
    return ClientSecurityConfig(
        security_protocol=protocol,
        settings=settings,
        where=f"inter-broker listener {name} ({protocol.name})",
    )
