"""Refusal of security settings the broker cannot honour yet.

The broker serves PLAINTEXT and SSL listeners (TLS, client certificates as principals:
``listeners.py``, ``security.ssl_factory``); it has no SASL authentication and no authorizer
yet. A ``server.properties`` that asks for them would otherwise start a broker open to every
client, so start-up stops with one line naming the first such setting:

- a listener in use (``listeners``, ``advertised.listeners``) whose security protocol uses
  SASL, by its name (``SASL_PLAINTEXT://``) or through ``listener.security.protocol.map``
  (``INTERNAL:SASL_SSL``), and ``security.inter.broker.protocol`` naming one;
- ``principal.builder.class``, and an ``authorizer.class.name`` other than
  ``kafka.security.authorizer.AclAuthorizer`` (which, with ``super.users`` and
  ``allow.everyone.if.no.acl.found``, is served);
- any ``sasl.*`` or ``delegation.token.*`` setting and any per-listener SASL setting
  (``listener.name.<listener>.sasl...``, ``.plain.``, ``.scram-sha-256.``...);
- ``ssl.engine.factory.class`` and ``ssl.provider`` (Java's TLS plumbing: Python's ``ssl``
  is used), plain or per listener. A JKS key or trust store is refused when the TLS listener
  is built, naming the setting (``ssl_factory``).

Settings left empty (``authorizer.class.name=``) are Kafka's defaults and pass. Mappings of
listeners that are not in use (Kafka's sample ``SSL:SSL`` entries) pass too.
"""

from __future__ import annotations

from collections.abc import Mapping

from storage_core.errors import InvalidConfigError

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
    ".ssl.engine.factory.class",
    ".ssl.provider",
)
_KNOWN_PROTOCOLS = frozenset({"PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"})
_SERVED_PROTOCOLS = frozenset({"PLAINTEXT", "SSL"})
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
            if protocol not in _SERVED_PROTOCOLS:
                via = "" if protocol == name else " (listener.security.protocol.map maps it)"
                raise UnsupportedSecurityConfigError(
                    f"{key}={listener} uses security protocol {protocol}{via}, but this broker"
                    " supports only PLAINTEXT and SSL (no SASL yet): use one of them"
                )
    authorizer = props.get("authorizer.class.name", "").strip()
    if authorizer and authorizer != ACL_AUTHORIZER_CLASS:
        raise UnsupportedSecurityConfigError(
            f"authorizer.class.name={authorizer} is not an authorizer this broker has: use"
            f" {ACL_AUTHORIZER_CLASS} (ACLs in ZooKeeper, managed with storage-core acls) or"
            " leave it empty for no authorization"
        )
    inter_broker = props.get("security.inter.broker.protocol", "").strip().upper()
    if inter_broker not in ("", *_SERVED_PROTOCOLS):
        _refuse("security.inter.broker.protocol", inter_broker)
    for name in sorted(props):
        value = props[name].strip()
        if not value:
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
        f"{name}={shown} asks for authentication, encryption or authorization, which this"
        " broker does not support yet; remove it (the broker would otherwise serve every"
        " client unauthenticated)"
    )


def _protocol_map(text: str) -> dict[str, str]:
    """``NAME:PROTOCOL,...`` -> {NAME: PROTOCOL}, both upper-case."""
    mapping: dict[str, str] = {}
    for entry in (e.strip() for e in text.split(",") if e.strip()):
        name, _sep, protocol = entry.partition(":")
        mapping[name.strip().upper()] = protocol.strip().upper()
    return mapping
