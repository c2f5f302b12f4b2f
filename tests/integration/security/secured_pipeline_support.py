"""A secured tiered-storage broker for the pipeline's tests: one SASL_SSL listener (TLS with
the test CA, SASL PLAIN for the brokers' own login and the administrator, SCRAM-SHA-512 for the
pipeline), Kafka's ACL authorizer with the brokers' principal as super user and no access
without an ACL, and the remote tier in a local directory.

    with secured_broker(tmp) as secured:
        secured.add_scram_user("pipeline", "...")          # storage-core user-scram
        secured.acls("--add", "--allow-principal", ...)     # storage-core acls
        secured.client_properties("pipeline", "...")        # a 0600 client.properties

Everything administrative goes through the project's own tools over the secured listener with
the administrator's ``--command-config``, as an operator would run them.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from embedded.ports import free_port
from jobs.common.pipeline_acls import PipelineAcl
from storage_core.client.client_properties import write_client_properties
from tests.broker_process import BrokerProcess
from tests.security_support import TestPki, ssl_listener_props

ADMIN = ("admin", "admin-secret-5f1c")
"""The brokers' own login and the administrator's (PLAIN, a super user)."""
MECHANISM = "SCRAM-SHA-512"
TOOL_TIMEOUT_S = 60


def secured_overrides(
    port: int, pki: TestPki, remote_dir: Path, *, chunk_bytes: int | None = None
) -> dict[str, str]:
    """The broker's settings; with ``chunk_bytes`` its remote tier is chunked (each copy
    writes its segment manifest, which restore_topic reads)."""
    broker_certificate = pki.issue("broker", "CN=localhost,OU=brokers,O=test")
    return {
        "listeners": f"SASL_SSL://127.0.0.1:{port}",
        "security.inter.broker.protocol": "SASL_SSL",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "sasl.enabled.mechanisms": f"PLAIN,{MECHANISM}",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": (
            "org.apache.kafka.common.security.plain.PlainLoginModule required"
            f' username="{ADMIN[0]}" password="{ADMIN[1]}" user_{ADMIN[0]}="{ADMIN[1]}";'
        ),
        **ssl_listener_props(pki, broker_certificate),
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": f"User:{ADMIN[0]}",
        "allow.everyone.if.no.acl.found": "false",
        "remote.log.storage.system.enable": "true",
        "remote.log.storage.manager.class.name": "LocalTieredStorage",
        "rsm.config.local.storage.dir": str(remote_dir),
        "rsm.config.local.fsync": "false",
        **({} if chunk_bytes is None else {"rsm.config.chunk.size": str(chunk_bytes)}),
        "remote.log.metadata.topic.num.partitions": "3",
        "remote.log.manager.task.interval.ms": "200",
        "log.retention.check.interval.ms": "200",
    }


@dataclass
class SecuredBroker:
    broker: BrokerProcess
    pki: TestPki
    remote_dir: Path
    directory: Path
    chunk_bytes: int | None = None

    @property
    def bootstrap(self) -> str:
        return self.broker.bootstrap

    @property
    def rsm_config(self) -> dict[str, str]:
        """The remote storage manager's settings as the jobs take them (``--rsm-config``)."""
        chunked = {} if self.chunk_bytes is None else {"chunk.size": str(self.chunk_bytes)}
        return {"local.storage.dir": str(self.remote_dir), **chunked}

    def client_properties(self, user: str, password: str, *, mechanism: str = MECHANISM) -> Path:
        """A 0600 client.properties for ``user`` (the form ``--command-config`` takes)."""
        path = self.directory / f"{user}-{mechanism.lower()}.properties"
        path.unlink(missing_ok=True)
        return write_client_properties(
            path,
            {
                "security.protocol": "SASL_SSL",
                "sasl.mechanism": mechanism,
                "sasl.username": user,
                "sasl.password": password,
                "ssl.truststore.type": "PEM",
                "ssl.truststore.location": str(self.pki.ca_pem),
            },
        )

    @property
    def admin_properties(self) -> Path:
        return self.client_properties(*ADMIN, mechanism="PLAIN")

    def confluent(self, user: str = ADMIN[0], password: str = ADMIN[1]) -> dict[str, str]:
        """confluent-kafka's settings for ``user`` (PLAIN for the administrator)."""
        return {
            "bootstrap.servers": self.bootstrap,
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "PLAIN" if user == ADMIN[0] else MECHANISM,
            "sasl.username": user,
            "sasl.password": password,
            "ssl.ca.location": str(self.pki.ca_pem),
        }

    def tool(self, command: str, *args: str) -> subprocess.CompletedProcess[str]:
        """``storage-core <command> --bootstrap-server ... --command-config <admin's>``."""
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "storage_core.cli",
                command,
                "--bootstrap-server",
                self.bootstrap,
                "--command-config",
                str(self.admin_properties),
                *args,
            ],
            capture_output=True,
            text=True,
            timeout=TOOL_TIMEOUT_S,
            check=False,
        )
        if result.returncode != 0:
            raise AssertionError(
                f"storage-core {command} {' '.join(args)} exited {result.returncode}:"
                f"\n{result.stdout}{result.stderr}"
            )
        return result

    def add_scram_user(self, user: str, password: str) -> None:
        password_file = self.directory / f"{user}.password"
        password_file.write_text(password + "\n")
        password_file.chmod(0o600)
        try:
            self.tool(
                "user-scram",
                "--add",
                user,
                "--mechanism",
                MECHANISM,
                "--password-file",
                str(password_file),
            )
        finally:
            password_file.unlink()

    def grant(self, principal: str, acls: tuple[PipelineAcl, ...]) -> None:
        """Each ACL through ``storage-core acls --add``."""
        for acl in acls:
            self.tool("acls", "--add", "--allow-principal", principal, *acl.acls_arguments())

    def revoke(self, principal: str, acl: PipelineAcl) -> None:
        self.tool(
            "acls", "--remove", "--force", "--allow-principal", principal, *acl.acls_arguments()
        )


@contextmanager
def secured_broker(
    directory: Path, *, log_level: str = "INFO", chunk_bytes: int | None = None
) -> Iterator[SecuredBroker]:
    pki = TestPki(directory)
    remote_dir = directory / "remote-tier"
    port = free_port()
    broker = BrokerProcess(
        directory / "broker",
        port=port,
        overrides=secured_overrides(port, pki, remote_dir, chunk_bytes=chunk_bytes),
        log_level=log_level,
    )
    with broker:
        yield SecuredBroker(
            broker=broker,
            pki=pki,
            remote_dir=remote_dir,
            directory=directory,
            chunk_bytes=chunk_bytes,
        )
