"""The SASL login of a broker's ZooKeeper session, configured as Kafka's brokers are: a JAAS
file named by the JVM option ``-Djava.security.auth.login.config`` in ``KAFKA_OPTS``, whose
``Client`` section (or the one ``-Dzookeeper.sasl.clientconfig`` names) holds ZooKeeper's
DIGEST-MD5 login module::

    KAFKA_OPTS="-Djava.security.auth.login.config=/etc/kafka/zookeeper-client.jaas"

    Client {
      org.apache.zookeeper.server.auth.DigestLoginModule required
      username="kafka" password="kafka-secret";
    };

``-Dzookeeper.sasl.client=false`` turns the login off, as it does for ZooKeeper's Java client.
Other login modules (Kerberos) are refused, naming the module. Errors name the file and the
section, never a password.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from pathlib import Path

from storage_core.errors import InvalidConfigError
from storage_core.security.jaas_config import parse_jaas_entries
from storage_core.zk.zk_acls import ZkSaslLogin

DIGEST_LOGIN_MODULE = "org.apache.zookeeper.server.auth.DigestLoginModule"
LOGIN_CONFIG_PROPERTY = "java.security.auth.login.config"
CLIENT_SECTION_PROPERTY = "zookeeper.sasl.clientconfig"
SASL_CLIENT_PROPERTY = "zookeeper.sasl.client"
DEFAULT_CLIENT_SECTION = "Client"
MAX_JAAS_FILE_BYTES = 1024 * 1024
_SECTION = re.compile(r"([A-Za-z0-9_.-]+)\s*\{(.*?)\}\s*;", re.DOTALL)


def jvm_system_properties(kafka_opts: str) -> dict[str, str]:
    """The ``-Dname=value`` options of a ``KAFKA_OPTS`` string."""
    properties: dict[str, str] = {}
    for option in shlex.split(kafka_opts):
        if option.startswith("-D"):
            name, _, value = option[2:].partition("=")
            properties[name] = value
    return properties


def zookeeper_sasl_login(environ: Mapping[str, str]) -> ZkSaslLogin | None:
    """The broker's ZooKeeper SASL login from ``KAFKA_OPTS``, None when none is configured."""
    properties = jvm_system_properties(environ.get("KAFKA_OPTS", ""))
    location = properties.get(LOGIN_CONFIG_PROPERTY, "")
    if not location or properties.get(SASL_CLIENT_PROPERTY, "true").lower() == "false":
        return None
    section = properties.get(CLIENT_SECTION_PROPERTY) or DEFAULT_CLIENT_SECTION
    path = Path(location)
    try:
        if path.stat().st_size > MAX_JAAS_FILE_BYTES:
            raise InvalidConfigError(f"JAAS file {path} is larger than {MAX_JAAS_FILE_BYTES} bytes")
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise InvalidConfigError(
            f"cannot read the JAAS file {path} (-D{LOGIN_CONFIG_PROPERTY} in KAFKA_OPTS):"
            f" {getattr(error, 'strerror', None) or type(error).__name__}"
        ) from None
    return login_from_jaas_file(text, section=section, where=str(path))


def login_from_jaas_file(text: str, *, section: str, where: str) -> ZkSaslLogin | None:
    """The DIGEST-MD5 login of ``section`` in a JAAS file's text; None if it has no such
    section (ZooKeeper's client then connects without SASL, as Java's does)."""
    bodies = {name: body for name, body in _SECTION.findall(_without_comments(text))}
    if section not in bodies:
        return None
    setting = f"section {section} of JAAS file {where}"
    entries = parse_jaas_entries(bodies[section], setting=setting)
    if len(entries) != 1:
        raise InvalidConfigError(f"{setting} must hold one login module, found {len(entries)}")
    entry = entries[0]
    if entry.login_module != DIGEST_LOGIN_MODULE:
        raise InvalidConfigError(
            f"{setting} uses {entry.login_module}, which this broker does not support for"
            f" ZooKeeper: use {DIGEST_LOGIN_MODULE} (SASL DIGEST-MD5)"
        )
    if not entry.username or entry.password is None:
        raise InvalidConfigError(f"{setting} must set username and password")
    return ZkSaslLogin(entry.username, entry.password)


def _without_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.DOTALL)
    return re.sub(r"(?m)^\s*(//|#).*$", " ", text)
