"""embedded/cluster_security.py without processes: what it writes is private and kept for the
next run, the brokers' settings are ones the broker reads without a warning, and each client's
settings are ones the clients accept."""

from __future__ import annotations

import logging
import stat
from pathlib import Path

import pytest

from embedded.cluster_security import (
    ADMIN,
    PIPELINE,
    USERS,
    ClusterSecurity,
    pipeline_acl_arguments,
)
from jobs.common.pipeline_acls import PIPELINE_ACLS
from storage_core.security.kafka_principal import SecurityProtocol
from storage_core.security.ssl_principal_mapper import SslPrincipalMapper
from storage_core.security.zookeeper_login import zookeeper_sasl_login
from storage_core.server.kafka_config import KafkaConfig


def test_secrets_are_private_and_kept_for_the_next_run(tmp_path: Path) -> None:
    first = ClusterSecurity(tmp_path)
    directory = tmp_path / "security"
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    for name in ("passwords.json", "broker-zookeeper.jaas", f"{PIPELINE}.properties"):
        path = directory / name
        if name.endswith(".properties"):
            path = first.client_config_path(PIPELINE)
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    again = ClusterSecurity(tmp_path)
    assert again.secrets() == first.secrets()
    assert len(set(first.secrets().values())) == len(USERS) + 1, "one password per user"
    assert again.ca_pem.read_bytes() == first.ca_pem.read_bytes()


def test_the_brokers_zookeeper_login_is_read_from_kafka_opts(tmp_path: Path) -> None:
    security = ClusterSecurity(tmp_path)
    login = zookeeper_sasl_login(security.broker_environment())
    assert login is not None
    assert (login.username, login.password) == ("kafka", security.password("kafka"))
    assert security.zookeeper_users() == {"kafka": security.password("kafka")}
    assert security.password("kafka") not in security.broker_environment()["KAFKA_OPTS"]


def test_broker_settings_are_read_without_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    security = ClusterSecurity(tmp_path)
    props = {
        "broker.id": "1",
        "log.dirs": str(tmp_path / "logs"),
        "zookeeper.connect": "127.0.0.1:2181",
        "super.users": security.super_users([1, 2, 3]),
        **security.broker_settings(1, client_port=9092, internal_port=9093),
    }
    with caplog.at_level(logging.WARNING, logger="storage_core.server.kafka_config"):
        config = KafkaConfig.from_props(props)
    assert not caplog.records, [r.getMessage() for r in caplog.records]
    protocols = {e.listener_name: e.security_protocol for e in config.listeners()}
    assert protocols == {"CLIENT": SecurityProtocol.SASL_SSL, "INTERNAL": SecurityProtocol.SSL}
    # the brokers' and the admin's certificates map to super users
    mapper = SslPrincipalMapper(props["ssl.principal.mapping.rules"])
    for dn in ("CN=broker-2,OU=brokers,O=storage-core", "CN=admin,OU=clients,O=storage-core"):
        assert f"User:{mapper.get_name(dn)}" in props["super.users"].split(";")


def test_client_settings_are_accepted_and_never_shown(tmp_path: Path) -> None:
    security = ClusterSecurity(tmp_path)
    for user in USERS:
        config = security.connection_config(user)
        assert config.security.security_protocol is SecurityProtocol.SASL_SSL
        assert security.password(user) not in repr(config)
    tls = security.admin_certificate_config()
    assert tls.security.security_protocol is SecurityProtocol.SSL
    fields = security.connection_fields()
    assert fields["login"] == PIPELINE and fields["password"] == security.password(PIPELINE)
    assert security.password(PIPELINE) not in str(fields["extra"])
    assert ADMIN in USERS


def test_the_pipelines_acls_are_its_least_and_delete_on_the_topic_only() -> None:
    arguments = pipeline_acl_arguments("events")
    assert [acl.acls_arguments() for acl in PIPELINE_ACLS] == arguments[: len(PIPELINE_ACLS)]
    assert ["--operation", "Delete", "--topic", "events"] in arguments
    # retention_nightly's consumer offsets backup, and the restore_topic DAG from the UI
    assert ["--operation", "Describe", "--group", "*"] in arguments
    assert ["--operation", "Create", "--topic", "*"] in arguments
    assert ["--operation", "Read", "--group", "*"] in arguments
    # Delete on topics: the demo's topic and the drill's scratch topics (a prefixed ACL) only
    deletes = [a for a in arguments if "Delete" in a and "--topic" in a]
    assert ["--operation", "Delete", "--topic", "events"] in deletes
    assert all("*" not in a for a in deletes), deletes
    assert any("restore-drill-" in a and "PREFIXED" in a for a in deletes), deletes
