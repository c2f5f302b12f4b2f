"""How the jobs authenticate to a secured cluster: the security fields of the tiered-storage
connection, and the client settings file the jobs read them from.

Connection fields (Airflow's own fields for the secret, never the extra, which the UI shows)::

    login                   the SASL username (the pipeline's principal, ``User:<login>``)
    password                its password
    extra.security_protocol PLAINTEXT (default), SSL, SASL_PLAINTEXT or SASL_SSL
    extra.sasl_mechanism    PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (a SASL protocol needs one)
    extra.ssl_ca_location   the PEM file of the CA that signed the brokers' certificates
                            (SSL, SASL_SSL; the system's trust store when left out)

A job receives them as a Kafka client.properties file readable only by the worker's user,
created for the job's run in a private temporary directory, named by the environment variable
``STORAGE_CORE_CLIENT_CONFIG`` and removed when the job ends: the password is never on a
command line, in a log line or a summary.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CLIENT_CONFIG_ENV = "STORAGE_CORE_CLIENT_CONFIG"
PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
# Extra keys that would put a secret where the UI shows it.
_SECRET_EXTRA_KEYS = ("password", "sasl_password", "sasl.password", "sasl.jaas.config", "jaas")


class ClientSecurityError(ValueError):
    """The connection's security fields are incomplete or inconsistent; the message names the
    field, never its value."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientSecurity:
    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    ssl_ca_location: str | None = None

    def __post_init__(self) -> None:
        if self.security_protocol not in PROTOCOLS:
            raise ClientSecurityError(
                f"connection extra 'security_protocol' is {self.security_protocol!r}: expected"
                f" one of {', '.join(PROTOCOLS)}"
            )
        if self.uses_sasl:
            if self.sasl_mechanism not in SASL_MECHANISMS:
                raise ClientSecurityError(
                    f"security_protocol {self.security_protocol} needs extra 'sasl_mechanism',"
                    f" one of {', '.join(SASL_MECHANISMS)} (got {self.sasl_mechanism!r})"
                )
            if not self.username or not self.password:
                raise ClientSecurityError(
                    f"security_protocol {self.security_protocol} needs the connection's Login"
                    " (the SASL username) and Password fields"
                )
        if self.ssl_ca_location and not self.uses_tls:
            raise ClientSecurityError(
                f"extra 'ssl_ca_location' is set but security_protocol {self.security_protocol}"
                " uses no TLS: use SSL or SASL_SSL, or remove it"
            )

    @property
    def uses_sasl(self) -> bool:
        return self.security_protocol.startswith("SASL_")

    @property
    def uses_tls(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    @property
    def is_plaintext(self) -> bool:
        return self.security_protocol == "PLAINTEXT"

    def client_properties(self) -> dict[str, str]:
        """The settings as Kafka's clients name them."""
        props = {"security.protocol": self.security_protocol}
        if self.uses_sasl:
            props["sasl.mechanism"] = str(self.sasl_mechanism)
            props["sasl.username"] = str(self.username)
            props["sasl.password"] = str(self.password)
        if self.ssl_ca_location:
            props["ssl.truststore.type"] = "PEM"
            props["ssl.truststore.location"] = self.ssl_ca_location
        return props

    @classmethod
    def from_connection(
        cls, *, login: str | None, password: str | None, extra: Mapping[str, Any]
    ) -> ClientSecurity:
        for key in extra:
            if key.lower() in _SECRET_EXTRA_KEYS:
                raise ClientSecurityError(
                    f"connection extra holds {key!r}: put the password in the connection's"
                    " Password field (the extra is shown in the UI and not encrypted the same"
                    " way)"
                )
        protocol = str(extra.get("security_protocol") or "PLAINTEXT").strip().upper()
        mechanism = extra.get("sasl_mechanism")
        ca = extra.get("ssl_ca_location")
        return cls(
            security_protocol=protocol,
            sasl_mechanism=str(mechanism).strip().upper() if mechanism else None,
            username=login or None,
            password=password or None,
            ssl_ca_location=str(ca) if ca else None,
        )


@contextmanager
def client_config_environment(security: ClientSecurity) -> Iterator[dict[str, str]]:
    """The environment a job needs to connect as ``security`` says: nothing for PLAINTEXT,
    else ``STORAGE_CORE_CLIENT_CONFIG`` naming a 0600 file in a 0700 directory, removed when
    the block ends."""
    if security.is_plaintext:
        yield {}
        return
    # a task process: keep hypothesis (imported by kio's phantom types where it is installed)
    # out of it before storage_core loads, or trio's HypothesisWarning lands in the task log,
    # as deletion.without_test_libraries does; a process that has imported it keeps it
    sys.modules.setdefault("hypothesis", None)  # type: ignore[arg-type] # None: import fails
    from storage_core.client.client_properties import write_client_properties

    directory = Path(tempfile.mkdtemp(prefix="storage-core-client-"))  # 0700
    try:
        path = write_client_properties(
            directory / "client.properties", security.client_properties()
        )
        yield {CLIENT_CONFIG_ENV: str(path)}
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def connection_config(security: ClientSecurity) -> Any:
    """A ``storage_core`` ``ConnectionConfig`` for a client in this process."""
    from storage_core.client.connection import ConnectionConfig
    from storage_core.security.client_transport import ClientSecurityConfig

    return ConnectionConfig(
        security=ClientSecurityConfig.from_properties(
            security.client_properties(), where="the tiered-storage connection"
        )
    )
