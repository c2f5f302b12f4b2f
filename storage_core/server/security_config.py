"""Refusal of security settings the broker cannot honour.

The broker serves PLAINTEXT, SSL, SASL_PLAINTEXT and SASL_SSL listeners (TLS and client
certificates: ``listeners.py``, ``security.ssl_factory``; SASL PLAIN, SCRAM-SHA-256 and
SCRAM-SHA-512: ``sasl_config``, ``sasl_server_authenticator``) and Kafka's ACL authorizer. A
``server.properties`` that asks for anything else would otherwise start a broker that ignores
it, so start-up stops with one line naming the first such setting:

- a SASL listener in use (``listeners``, ``advertised.listeners``; by its name or through
  ``listener.security.protocol.map``) whose mechanisms are not all served: Kafka's default
  ``sasl.enabled.mechanisms=GSSAPI``, OAUTHBEARER, or PLAIN without its users'
  ``listener.name.<l>.plain.sasl.jaas.config``; and a ``sasl.enabled.mechanisms`` naming
  GSSAPI or OAUTHBEARER anywhere;
- ``principal.builder.class``, and an ``authorizer.class.name`` other than
  ``kafka.security.authorizer.AclAuthorizer`` (which, with ``super.users`` and
  ``allow.everyone.if.no.acl.found``, is served);
- any ``sasl.*`` setting but ``sasl.enabled.mechanisms``,
  ``sasl.mechanism.inter.broker.protocol`` and ``sasl.server.max.receive.size`` (Kerberos,
  OAUTHBEARER, login and callback classes, a broker-wide ``sasl.jaas.config``), any
  ``delegation.token.*`` setting, and any per-listener SASL setting but the served ones
  (``listener.name.<l>.sasl.enabled.mechanisms``, ``listener.name.<l>.<mechanism>.sasl.jaas.
  config`` and ``listener.name.<l>[.<mechanism>].connections.max.reauth.ms`` for PLAIN and
  SCRAM);
- ``ssl.engine.factory.class`` and ``ssl.provider`` (Java's TLS plumbing: Python's ``ssl``
  is used), plain or per listener; ``ssl.keymanager.algorithm``,
  ``ssl.trustmanager.algorithm`` and ``ssl.secure.random.implementation`` other than Java's
  defaults, whose behaviour OpenSSL has (X.509 keys, PKIX path validation, the system's
  random source). A JKS key or trust store is refused when the TLS listener is built, naming
  the setting (``ssl_factory``).

Settings left empty (``authorizer.class.name=``) are Kafka's defaults and pass. Mappings of
listeners that are not in use (Kafka's sample ``SSL:SSL`` entries) pass too. A JAAS value is
never echoed: it holds passwords.
"""

from __future__ import annotations

from collections.abc import Mapping

from storage_core.errors import InvalidConfigError
from storage_core.server.sasl_config import (
    SERVED_LISTENER_SASL_SUFFIXES,
    SERVED_SASL_NAMES,
    UNSUPPORTED_MECHANISMS,
    SaslListenerConfig,
)

_SECURITY_NAMES = frozenset({"principal.builder.class"})
ACL_AUTHORIZER_CLASS = "kafka.security.authorizer.AclAuthorizer"
"""The one ``authorizer.class.name`` served (Kafka 3.9's ZooKeeper-mode authorizer; its
``kafka.security.auth.SimpleAclAuthorizer`` is gone since 3.0, and KRaft's StandardAuthorizer
needs KRaft): ``super.users`` and ``allow.everyone.if.no.acl.found`` configure it."""
_SECURITY_PREFIXES = ("sasl.", "delegation.token.", "ssl.engine.factory.class", "ssl.provider")
_LISTENER_SECURITY_PARTS = (
    ".sasl.",
    ".plain.",
    ".scram-sha-256.",
    ".scram-sha-512.",
    ".gssapi.",
    ".oauthbearer.",
    ".ssl.engine.factory.class",
    ".ssl.provider",
)
# Java's TLS algorithm settings: the values that name what OpenSSL does anyway.
_JAVA_TLS_DEFAULTS = {
    "ssl.keymanager.algorithm": frozenset({"SUNX509", "NEWSUNX509", "PKIX"}),
    "ssl.trustmanager.algorithm": frozenset({"PKIX", "SUNX509"}),
    "ssl.secure.random.implementation": frozenset(),
}
_KNOWN_PROTOCOLS = frozenset({"PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"})
_SASL_PROTOCOLS = frozenset({"SASL_PLAINTEXT", "SASL_SSL"})
_SECRET_SUFFIXES = ("jaas.config", "password", ".key", ".certificate.chain", ".certificates")
"""Settings whose values are never echoed into a message or a log line."""
MAX_SETTINGS_CHECKED = 10_000


class UnsupportedSecurityConfigError(InvalidConfigError):
    """A security setting the broker cannot honour; it refuses to start rather than run open."""


def refuse_unsupported_security(props: Mapping[str, str]) -> None:
    """Raise ``UnsupportedSecurityConfigError`` naming the first security setting found."""
    if len(props) > MAX_SETTINGS_CHECKED:
        raise InvalidConfigError(
            f"{len(props)} broker settings; at most {MAX_SETTINGS_CHECKED} are allowed"
        )
    protocol_map = _protocol_map(props.get("listener.security.protocol.map", ""))
    for key in ("listeners", "advertised.listeners"):
        for listener in (p.strip() for p in props.get(key, "").split(",") if p.strip()):
            name = listener.split("://", 1)[0].strip().upper()
            protocol = protocol_map.get(name, name if name in _KNOWN_PROTOCOLS else "PLAINTEXT")
            if protocol in _SASL_PROTOCOLS:
                try:
                    SaslListenerConfig.from_props(props, name)
                except InvalidConfigError as error:
                    via = "" if protocol == name else " (listener.security.protocol.map maps it)"
                    raise UnsupportedSecurityConfigError(
                        f"{key}={listener} uses security protocol {protocol}{via}: {error}"
                    ) from None
    authorizer = props.get("authorizer.class.name", "").strip()
    if authorizer and authorizer != ACL_AUTHORIZER_CLASS:
        raise UnsupportedSecurityConfigError(
            f"authorizer.class.name={authorizer} is not an authorizer this broker has: use"
            f" {ACL_AUTHORIZER_CLASS} (ACLs in ZooKeeper, managed with storage-core acls) or"
            " leave it empty for no authorization"
        )
    for name in sorted(props):
        value = props[name].strip()
        if not value:
            continue
        if name.endswith("sasl.enabled.mechanisms"):
            named = [m for m in value.upper().replace(" ", "").split(",") if m]
            refused = [m for m in named if m in UNSUPPORTED_MECHANISMS]
            if refused:
                raise UnsupportedSecurityConfigError(
                    f"{name}={value} names {', '.join(refused)}, which this broker does not"
                    " support: enable only PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512"
                )
        java_setting = next((j for j in _JAVA_TLS_DEFAULTS if name.endswith(j)), None)
        if java_setting is not None and value.upper() not in _JAVA_TLS_DEFAULTS[java_setting]:
            raise UnsupportedSecurityConfigError(
                f"{name}={value} selects a Java TLS implementation; this broker's TLS is"
                " OpenSSL's (X.509 key manager, PKIX trust, the system's random source):"
                " remove it, or give Java's default"
            )
        if name in SERVED_SASL_NAMES or (
            name.startswith("listener.name.") and name.endswith(SERVED_LISTENER_SASL_SUFFIXES)
        ):
            continue
        if (
            name in _SECURITY_NAMES
            or name.startswith(_SECURITY_PREFIXES)
            or (
                name.startswith("listener.name.")
                and any(p in name for p in _LISTENER_SECURITY_PARTS)
            )
        ):
            _refuse(name, value)


def _refuse(name: str, value: str) -> None:
    shown = "<hidden>" if name.endswith(_SECRET_SUFFIXES) else value
    raise UnsupportedSecurityConfigError(
        f"{name}={shown} asks for authentication, encryption or authorization that this"
        " broker does not support (GSSAPI, OAUTHBEARER, delegation tokens, custom classes);"
        " remove it (the broker would otherwise ignore it)"
    )


def _protocol_map(text: str) -> dict[str, str]:
    """``NAME:PROTOCOL,...`` -> {NAME: PROTOCOL}, both upper-case."""
    mapping: dict[str, str] = {}
    for entry in (e.strip() for e in text.split(",") if e.strip()):
        name, _sep, protocol = entry.partition(":")
        mapping[name.strip().upper()] = protocol.strip().upper()
    return mapping
