"""A SASL listener's settings, read as Kafka reads them (``BrokerSecurityConfigs``,
``SocketServerConfigs``; a listener's own value ``listener.name.<listener>.<name>`` wins over the
broker's ``<name>``, and a mechanism's ``listener.name.<listener>.<mechanism>.<name>`` over both):

    sasl.enabled.mechanisms                   PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 (Kafka's
                                              default GSSAPI, like OAUTHBEARER, is refused)
    listener.name.<l>.plain.sasl.jaas.config  PlainLoginModule with user_<name>="<password>"
    listener.name.<l>.<m>.sasl.jaas.config    username/password of this broker's own
                                              connections (sasl.mechanism.inter.broker.protocol)
    connections.max.reauth.ms                 0 (no re-authentication; KIP-368)
    connection.failed.authentication.delay.ms 100
    sasl.server.max.receive.size              524288 (a frame before authentication)

The listener name in a prefix is lower case (``listener.name.sasl_plaintext.``). Errors name the
setting and what to do, never a JAAS value (it holds passwords).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from storage_core.errors import InvalidConfigError
from storage_core.security.jaas_config import (
    PLAIN_LOGIN_MODULE,
    SCRAM_LOGIN_MODULE,
    AppConfigurationEntry,
    parse_jaas_config,
)
from storage_core.security.plain.plain_sasl_server import PLAIN_MECHANISM
from storage_core.security.scram.scram_mechanism import MECHANISM_NAMES

SUPPORTED_MECHANISMS = (PLAIN_MECHANISM, *MECHANISM_NAMES)
UNSUPPORTED_MECHANISMS = ("GSSAPI", "OAUTHBEARER")
DEFAULT_ENABLED_MECHANISMS = "GSSAPI"  # Kafka's default, refused here: set the setting
DEFAULT_FAILED_AUTHENTICATION_DELAY_MS = 100
DEFAULT_MAX_RECEIVE_SIZE = 524288
DEFAULT_MECHANISM_INTER_BROKER = "GSSAPI"
MAX_REAUTH_MS = 2**63 - 1
SERVED_SASL_NAMES = frozenset(
    {
        "sasl.enabled.mechanisms",
        "sasl.mechanism.inter.broker.protocol",
        "sasl.server.max.receive.size",
    }
)
"""The broker-wide ``sasl.*`` settings honoured (others are refused at start)."""
SERVED_LISTENER_SASL_SUFFIXES = (
    ".sasl.enabled.mechanisms",
    ".sasl.server.max.receive.size",
    ".connections.max.reauth.ms",
    *(f".{m.lower()}.sasl.jaas.config" for m in SUPPORTED_MECHANISMS),
)
"""The ``listener.name.<l>...`` SASL settings honoured."""


def listener_prefix(listener_name: str) -> str:
    return f"listener.name.{listener_name.lower()}."


def _value(props: Mapping[str, str], listener_name: str, name: str) -> str | None:
    own = props.get(listener_prefix(listener_name) + name)
    if own is not None and own.strip():
        return own.strip()
    value = props.get(name)
    return value.strip() if value is not None and value.strip() else None


def _long(props: Mapping[str, str], key: str, text: str, low: int, high: int) -> int:
    try:
        number = int(text)
    except ValueError:
        raise InvalidConfigError(f"{key}={text} is not a number") from None
    if not low <= number <= high:
        raise InvalidConfigError(f"{key}={number} is outside [{low}, {high}]")
    return number


@dataclass(frozen=True, slots=True, kw_only=True)
class SaslListenerConfig:
    listener_name: str
    enabled_mechanisms: tuple[str, ...]
    plain_users: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}), repr=False)
    connections_max_reauth_ms: Mapping[str, int] = field(
        default_factory=lambda: MappingProxyType({})
    )
    """Per enabled mechanism; 0: sessions never expire."""
    failed_authentication_delay_ms: int = DEFAULT_FAILED_AUTHENTICATION_DELAY_MS
    max_receive_size: int = DEFAULT_MAX_RECEIVE_SIZE

    @staticmethod
    def from_props(props: Mapping[str, str], listener_name: str) -> SaslListenerConfig:
        prefix = listener_prefix(listener_name)
        text = _value(props, listener_name, "sasl.enabled.mechanisms")
        mechanisms = tuple(
            m.strip().upper() for m in (text or DEFAULT_ENABLED_MECHANISMS).split(",") if m.strip()
        )
        refused = [m for m in mechanisms if m not in SUPPORTED_MECHANISMS]
        if refused or not mechanisms:
            origin = (
                "sasl.enabled.mechanisms (Kafka's default)"
                if text is None
                else "sasl.enabled.mechanisms"
            )
            raise InvalidConfigError(
                f"listener {listener_name}: {origin}={','.join(mechanisms)} asks for"
                f" {', '.join(refused) or 'no mechanism'}, which this broker does not support;"
                f" set sasl.enabled.mechanisms (or {prefix}sasl.enabled.mechanisms) to some of"
                f" {', '.join(SUPPORTED_MECHANISMS)}"
            )
        plain_users: dict[str, str] = {}
        if PLAIN_MECHANISM in mechanisms:
            entry = mechanism_jaas_entry(props, listener_name, PLAIN_MECHANISM)
            if entry is None:
                raise InvalidConfigError(
                    f"listener {listener_name} enables PLAIN but {prefix}plain.sasl.jaas.config"
                    " is not set: set it to Kafka's PLAIN login module with this broker's"
                    ' username="..." password="..." and a user_<name>="<password>" entry per'
                    " user (see the README's SASL section)"
                )
            plain_users = entry.plain_users()
        reauth: dict[str, int] = {}
        for mechanism in mechanisms:
            key = f"{prefix}{mechanism.lower()}.connections.max.reauth.ms"
            own = props.get(key, "").strip()
            shared = _value(props, listener_name, "connections.max.reauth.ms")
            chosen = own or shared or "0"
            reauth[mechanism] = _long(
                props, key if own else "connections.max.reauth.ms", chosen, 0, MAX_REAUTH_MS
            )
        delay = _value(props, listener_name, "connection.failed.authentication.delay.ms")
        size = _value(props, listener_name, "sasl.server.max.receive.size")
        return SaslListenerConfig(
            listener_name=listener_name,
            enabled_mechanisms=mechanisms,
            plain_users=MappingProxyType(plain_users),
            connections_max_reauth_ms=MappingProxyType(reauth),
            failed_authentication_delay_ms=_long(
                props,
                "connection.failed.authentication.delay.ms",
                delay or str(DEFAULT_FAILED_AUTHENTICATION_DELAY_MS),
                0,
                2**31 - 1,
            ),
            max_receive_size=_long(
                props,
                "sasl.server.max.receive.size",
                size or str(DEFAULT_MAX_RECEIVE_SIZE),
                1,
                2**31 - 1,
            ),
        )


def mechanism_jaas_entry(
    props: Mapping[str, str], listener_name: str, mechanism: str
) -> AppConfigurationEntry | None:
    """The ``listener.name.<l>.<mechanism>.sasl.jaas.config`` login module, or None."""
    key = f"{listener_prefix(listener_name)}{mechanism.lower()}.sasl.jaas.config"
    text = props.get(key, "").strip()
    if not text:
        return None
    entry = parse_jaas_config(text, setting=key)
    expected = PLAIN_LOGIN_MODULE if mechanism == PLAIN_MECHANISM else SCRAM_LOGIN_MODULE
    if entry.login_module != expected:
        raise InvalidConfigError(f"{key} must use {expected} for {mechanism}")
    return entry


def inter_broker_credentials(props: Mapping[str, str], listener_name: str) -> tuple[str, str, str]:
    """(mechanism, username, password) of this broker's own connections to a SASL
    inter-broker listener: ``sasl.mechanism.inter.broker.protocol`` and the username and
    password of that mechanism's JAAS login module on the listener."""
    mechanism = (
        props.get("sasl.mechanism.inter.broker.protocol", "").strip().upper()
        or DEFAULT_MECHANISM_INTER_BROKER
    )
    if mechanism not in SUPPORTED_MECHANISMS:
        raise InvalidConfigError(
            f"sasl.mechanism.inter.broker.protocol={mechanism} is not supported; use one of"
            f" {', '.join(SUPPORTED_MECHANISMS)}"
        )
    entry = mechanism_jaas_entry(props, listener_name, mechanism)
    key = f"{listener_prefix(listener_name)}{mechanism.lower()}.sasl.jaas.config"
    if entry is None or not entry.username or not entry.password:
        raise InvalidConfigError(
            f"the inter-broker listener {listener_name} uses SASL {mechanism}: {key} must"
            ' name this broker\'s username="..." and password="..."'
        )
    return mechanism, entry.username, entry.password
