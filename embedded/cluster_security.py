"""``ClusterSecurity``: what secures the embedded cluster, under ``<dir>/security`` (0700).

    ZooKeeper   requires SASL (DIGEST-MD5, ``enforce.auth``); the brokers log in as ``kafka``
                from the JAAS file ``KAFKA_OPTS`` names, and set Kafka's znode ACLs
                (``zookeeper.set.acl=true``)
    CLIENT      each broker's client listener: SASL_SSL, SCRAM-SHA-512
    INTERNAL    the inter-broker listener: SSL with client certificates (``ssl.client.auth=
                required``); a certificate's CN is its principal (``User:broker-1``)
    authorizer  Kafka's AclAuthorizer; the brokers and ``admin`` are super users, anyone else
                needs an ACL

Users (SCRAM-SHA-512, created through AlterUserScramCredentials over the INTERNAL listener
with the ``admin`` certificate, which needs no SCRAM credential to exist first):

    admin       super user: creates topics, users and ACLs, reads the cluster's state
    pipeline    the tiering pipeline (the Airflow connection's Login): its least ACLs
                (jobs/common/pipeline_acls.py, restore_topic's included; Delete on the demo's
                topic only), created with
                ``storage-core acls``
    demo        the demo's producer and consumer: ``--producer`` and ``--consumer`` on its topic
    stranger    authenticates, has no ACL: every topic is closed to it

    <dir>/security/certs/            the CA (ca.pem), broker-<id> and admin key stores
    <dir>/security/passwords.json    generated on first use, kept for the next run (0600)
    <dir>/security/broker-zookeeper.jaas    the brokers' ZooKeeper login (0600)
    <dir>/security/<user>.properties        each user's client settings (0600), for
                                            --command-config and STORAGE_CORE_CLIENT_CONFIG

Secrets stay in these files and in memory: no command line, log line or summary holds one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import secrets
import shlex
from pathlib import Path
from typing import Any

from embedded.certificates import CertificateAuthority, ssl_principal_mapping_rules
from embedded.zookeeper import write_private_file
from jobs.common.pipeline_acls import (
    DELETE_TOPICS,
    LEADER_ELECTION_ACLS,
    PIPELINE_ACLS,
    RESTORE_DRILL_ACLS,
    RESTORE_OFFSETS_ACLS,
    RESTORE_TOPIC_ACLS,
)
from storage_core.client.client_properties import write_client_properties
from storage_core.client.connection import ConnectionConfig
from storage_core.security.client_transport import ClientSecurityConfig
from storage_core.zk.zk_acls import ZkSaslLogin

CLIENT_LISTENER = "CLIENT"
INTERNAL_LISTENER = "INTERNAL"
SASL_MECHANISM = "SCRAM-SHA-512"
SCRAM_ITERATIONS = 4096
ZOOKEEPER_USER = "kafka"
ADMIN = "admin"
PIPELINE = "pipeline"
DEMO_CLIENT = "demo"
DEMO_GROUP = "demo-readers"  # the demo's consumer group, whose offsets the bucket keeps
STRANGER = "stranger"
USERS = (ADMIN, PIPELINE, DEMO_CLIENT, STRANGER)


def pipeline_acl_arguments(topic: str) -> list[list[str]]:
    """``storage-core acls`` arguments of the pipeline's least ACLs (jobs/common/pipeline_acls:
    what the scheduled DAGs need, Alter on the cluster for preferred_leader_election, Create,
    AlterConfigs and Read for restore_topic, whose target is named at trigger time, the restore
    drill's on its restore-drill- scratch topics) and
    Delete on ``topic`` only, for partition_deletion."""
    on_demand = (
        *LEADER_ELECTION_ACLS,
        *RESTORE_TOPIC_ACLS,
        *RESTORE_OFFSETS_ACLS,
        *RESTORE_DRILL_ACLS,
    )
    acls = [acl.acls_arguments() for acl in (*PIPELINE_ACLS, *on_demand)]
    delete = dataclasses.replace(DELETE_TOPICS, name=topic)
    return [*acls, delete.acls_arguments()]


class SecuritySetupError(RuntimeError):
    """A user or an ACL could not be created; the message names the command's log."""


class ClusterSecurity:
    """The certificates, passwords and settings that secure the cluster of ``directory``.
    Not thread-safe: built once by the process that starts the cluster."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory.resolve() / "security"
        self.directory.mkdir(parents=True, exist_ok=True)
        os.chmod(self.directory, 0o700)
        self.ca = CertificateAuthority(self.directory / "certs")
        self.passwords = self._load_or_create_passwords()
        self.admin_certificate = self.ca.issue_client(ADMIN)
        self._client_security: dict[str, ClientSecurityConfig] = {}
        self.zookeeper_jaas = self.directory / "broker-zookeeper.jaas"
        write_private_file(self.zookeeper_jaas, self._zookeeper_client_jaas())

    @property
    def ca_pem(self) -> Path:
        return self.ca.ca_pem

    def password(self, user: str) -> str:
        return self.passwords[user]

    def _load_or_create_passwords(self) -> dict[str, str]:
        path = self.directory / "passwords.json"
        known: dict[str, str] = {}
        if path.exists():
            known = dict(json.loads(path.read_text()))
        wanted = (ZOOKEEPER_USER, *USERS)
        if all(known.get(u) for u in wanted):
            return known
        passwords = {u: known.get(u) or secrets.token_urlsafe(18) for u in wanted}
        write_private_file(path, json.dumps(passwords, indent=2) + "\n")
        return passwords

    def _zookeeper_client_jaas(self) -> str:
        password = self.passwords[ZOOKEEPER_USER].replace("\\", "\\\\").replace('"', '\\"')
        return (
            "Client {\n  org.apache.zookeeper.server.auth.DigestLoginModule required\n"
            f'  username="{ZOOKEEPER_USER}" password="{password}";\n}};\n'
        )

    # ZooKeeper

    def zookeeper_users(self) -> dict[str, str]:
        """The users the ZooKeeper server knows (its JAAS ``Server`` section)."""
        return {ZOOKEEPER_USER: self.passwords[ZOOKEEPER_USER]}

    def zookeeper_login(self) -> ZkSaslLogin:
        """This process's own ZooKeeper login (the brokers' identity)."""
        return ZkSaslLogin(username=ZOOKEEPER_USER, password=self.passwords[ZOOKEEPER_USER])

    # brokers

    def broker_environment(self) -> dict[str, str]:
        """A broker's ZooKeeper login, as Kafka's brokers get it: KAFKA_OPTS names the JAAS
        file (the password is in the file, not in the environment)."""
        return {"KAFKA_OPTS": f"-Djava.security.auth.login.config={self.zookeeper_jaas}"}

    def broker_settings(
        self, broker_id: int, *, client_port: int, internal_port: int, host: str = "127.0.0.1"
    ) -> dict[str, str]:
        keystore = self.ca.issue_broker(f"broker-{broker_id}").keystore_pem
        internal = f"listener.name.{INTERNAL_LISTENER.lower()}."
        return {
            "listeners": (
                f"{CLIENT_LISTENER}://{host}:{client_port},"
                f"{INTERNAL_LISTENER}://{host}:{internal_port}"
            ),
            "listener.security.protocol.map": (
                f"{CLIENT_LISTENER}:SASL_SSL,{INTERNAL_LISTENER}:SSL"
            ),
            "inter.broker.listener.name": INTERNAL_LISTENER,
            "sasl.enabled.mechanisms": SASL_MECHANISM,
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(keystore),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.ca_pem),
            f"{internal}ssl.client.auth": "required",
            "ssl.principal.mapping.rules": ssl_principal_mapping_rules(),
            "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
            "allow.everyone.if.no.acl.found": "false",
            "zookeeper.set.acl": "true",
        }

    def super_users(self, broker_ids: list[int]) -> str:
        return ";".join([*(f"User:broker-{b}" for b in broker_ids), f"User:{ADMIN}"])

    # clients

    def client_properties(self, user: str) -> dict[str, str]:
        """``user``'s settings for the CLIENT listener, with Kafka's client names."""
        return {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": SASL_MECHANISM,
            "sasl.username": user,
            "sasl.password": self.passwords[user],
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.ca_pem),
        }

    def admin_certificate_properties(self) -> dict[str, str]:
        """The admin's certificate for the INTERNAL listener (SSL, client authentication)."""
        return {
            "security.protocol": "SSL",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(self.admin_certificate.keystore_pem),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.ca_pem),
        }

    def client_config_path(self, user: str) -> Path:
        """``user``'s client.properties (0600), written on first use."""
        path = self.directory / f"{user}.properties"
        if not path.exists():
            write_client_properties(path, self.client_properties(user))
        return path

    def client_security(self, user: str = ADMIN) -> ClientSecurityConfig:
        """A ``storage_core`` client's security as ``user`` on the CLIENT listener."""
        if user not in self._client_security:
            self._client_security[user] = ClientSecurityConfig.from_properties(
                self.client_properties(user), where=f"the embedded cluster's {user}"
            )
        return self._client_security[user]

    def connection_config(self, user: str = ADMIN, **base: Any) -> ConnectionConfig:
        """A ``storage_core`` client's settings as ``user`` on the CLIENT listener."""
        return ConnectionConfig(security=self.client_security(user), **base)

    def admin_certificate_config(self, **base: Any) -> ConnectionConfig:
        """A ``storage_core`` client's settings as ``admin`` on the INTERNAL listener."""
        security = ClientSecurityConfig.from_properties(
            self.admin_certificate_properties(), where="the embedded cluster's admin certificate"
        )
        return ConnectionConfig(security=security, **base)

    def kafka_python(self, user: str) -> dict[str, Any]:
        """kafka-python's settings for ``user`` on the CLIENT listener."""
        return {
            "security_protocol": "SASL_SSL",
            "sasl_mechanism": SASL_MECHANISM,
            "sasl_plain_username": user,
            "sasl_plain_password": self.passwords[user],
            "ssl_cafile": str(self.ca_pem),
        }

    def connection_fields(self) -> dict[str, Any]:
        """The tiered-storage Airflow connection's security fields: the pipeline's Login and
        Password, and the extra's security settings (client_security.py)."""
        return {
            "login": PIPELINE,
            "password": self.passwords[PIPELINE],
            "extra": {
                "security_protocol": "SASL_SSL",
                "sasl_mechanism": SASL_MECHANISM,
                "ssl_ca_location": str(self.ca_pem),
            },
        }

    # users and ACLs

    def create_users(self, internal_bootstrap: str, log_path: Path) -> None:
        """Every user's SCRAM credential (``storage-core user-scram --add``), as the admin's
        certificate on the INTERNAL listener: no SCRAM user is needed for the first one."""
        admin_tls = self.directory / "admin-certificate.properties"
        if not admin_tls.exists():
            write_client_properties(admin_tls, self.admin_certificate_properties())
        commands = []
        for user in USERS:
            password_file = self.directory / f"{user}.password"
            write_private_file(password_file, self.passwords[user] + "\n")
            commands.append(
                [
                    "user-scram",
                    "--bootstrap-server",
                    internal_bootstrap,
                    "--command-config",
                    str(admin_tls),
                    "--add",
                    user,
                    "--mechanism",
                    SASL_MECHANISM,
                    "--iterations",
                    str(SCRAM_ITERATIONS),
                    "--password-file",
                    str(password_file),
                ]
            )
        try:
            run_tools(commands, log_path)
        finally:
            for user in USERS:
                (self.directory / f"{user}.password").unlink(missing_ok=True)

    def acl_commands(self, bootstrap: str, *, topic: str) -> list[list[str]]:
        """``storage-core acls --add`` for the pipeline (least ACLs, Delete on ``topic``) and
        the demo's producer and consumer on ``topic`` (and its group ``DEMO_GROUP``), as the
        admin."""
        admin = str(self.client_config_path(ADMIN))
        common = ["acls", "--bootstrap-server", bootstrap, "--command-config", admin, "--add"]
        commands = [
            [*common, "--allow-principal", f"User:{PIPELINE}", *acl]
            for acl in pipeline_acl_arguments(topic)
        ]
        commands.append(
            [*common, "--allow-principal", f"User:{DEMO_CLIENT}", "--producer", "--topic", topic]
        )
        commands.append(
            [
                *common,
                "--allow-principal",
                f"User:{DEMO_CLIENT}",
                "--operation",
                "Read",
                "--topic",
                topic,
            ]
        )
        commands.append(
            [
                *common,
                "--allow-principal",
                f"User:{DEMO_CLIENT}",
                "--operation",
                "Read",
                "--group",
                DEMO_GROUP,
            ]
        )
        return commands

    def secrets(self) -> dict[str, str]:
        """Every password of the cluster, by user (for checks that none leaked)."""
        return dict(self.passwords)


def run_tools(commands: list[list[str]], log_path: Path) -> None:
    """``storage-core <command>`` for each of ``commands``, one after the other in this process
    (the command's own code: its parser, its client, its output, appended to ``log_path``);
    SecuritySetupError naming the log when one fails."""
    from storage_core.cli import main as storage_core  # noqa: PLC0415 (its tools load lazily)

    log_path.parent.mkdir(parents=True, exist_ok=True)
    failed = []
    root = logging.getLogger()
    handlers = list(root.handlers)
    with log_path.open("a", encoding="utf-8") as log:
        for command in commands:
            log.write(f"$ {shlex.join(['storage-core', *command])}\n")
            log.flush()
            with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
                code = storage_core(command)
            if code != 0:
                failed.append(f"storage-core {command[0]} ... exited {code}")
        # the command's logging.basicConfig wrote to the redirected stderr: the log file
        for handler in [h for h in root.handlers if h not in handlers]:
            root.removeHandler(handler)
    if failed:
        raise SecuritySetupError(f"{'; '.join(failed)}: see {log_path}")
