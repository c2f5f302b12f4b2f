"""A client's settings file, as Kafka's tools take it with ``--command-config`` and its clients
read ``client.properties``: Java properties with Kafka's client names::

    security.protocol=SASL_SSL
    sasl.mechanism=SCRAM-SHA-512
    sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\
        username="pipeline" password="...";
    ssl.truststore.type=PEM
    ssl.truststore.location=/etc/kafka/ca.pem

A file that holds a secret (a password, a JAAS config, an inline key) must be readable by its
owner only: one that others may read is refused, naming the setting and the fix, before
anything is sent. Errors never quote a value.
"""

from __future__ import annotations

import dataclasses
import os
import stat
from pathlib import Path

from storage_core.client.connection import ConnectionConfig
from storage_core.errors import InvalidConfigError
from storage_core.java_properties import escape_property, parse_properties
from storage_core.security.client_transport import ClientSecurityConfig

MAX_CLIENT_PROPERTIES_BYTES = 1024 * 1024
SECRET_SETTINGS = (
    "sasl.jaas.config",
    "sasl.password",
    "ssl.key.password",
    "ssl.keystore.password",
    "ssl.truststore.password",
    "ssl.keystore.key",
)


def load_client_properties(path: Path) -> dict[str, str]:
    """The settings of ``path``; InvalidConfigError when it cannot be read, is too large, or
    holds a secret while others may read it."""
    try:
        status = path.stat()
        mode = status.st_mode
        if status.st_size > MAX_CLIENT_PROPERTIES_BYTES:
            raise InvalidConfigError(
                f"client config {path} is larger than {MAX_CLIENT_PROPERTIES_BYTES} bytes"
            )
        props = parse_properties(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise InvalidConfigError(
            f"cannot read client config {path}: {error.strerror or error}"
        ) from None
    except UnicodeDecodeError:
        raise InvalidConfigError(f"client config {path} is not UTF-8 text") from None
    secrets = [name for name in SECRET_SETTINGS if props.get(name)]
    if secrets and mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise InvalidConfigError(
            f"client config {path} holds {secrets[0]} and other users may read it"
            f" (mode {stat.S_IMODE(mode):04o}): chmod 600 {path}"
        )
    return props


def connection_config_from_file(
    path: Path | None, *, base: ConnectionConfig | None = None
) -> ConnectionConfig:
    """``base`` (default settings when None) with the security settings of ``path``
    (PLAINTEXT when ``path`` is None)."""
    base = base or ConnectionConfig()
    if path is None:
        return base
    security = ClientSecurityConfig.from_properties(
        load_client_properties(path), where=f"client config {path}"
    )
    return dataclasses.replace(base, security=security)


def write_client_properties(path: Path, settings: dict[str, str]) -> Path:
    """Write ``settings`` to a new ``path`` readable by its owner only (0600 from creation,
    so no other user can open it in between); returns ``path``."""
    text = "".join(f"{escape_property(k)}={escape_property(v)}\n" for k, v in settings.items())
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(text)
    return path
