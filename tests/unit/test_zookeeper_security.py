"""The broker's ZooKeeper login (KAFKA_OPTS' JAAS file) and the ACLs of zookeeper.set.acl."""

from __future__ import annotations

from pathlib import Path

import pytest
from kazoo.security import CREATOR_ALL_ACL, OPEN_ACL_UNSAFE, READ_ACL_UNSAFE

from storage_core.errors import InvalidConfigError
from storage_core.security.zookeeper_login import login_from_jaas_file, zookeeper_sasl_login
from storage_core.server.cluster_membership import metadata_store_client
from storage_core.server.kafka_config import KafkaConfig
from storage_core.zk.zk_acls import ZkSaslLogin, default_acls

JAAS = """
// the broker's login to ZooKeeper
KafkaServer {
  org.apache.kafka.common.security.plain.PlainLoginModule required username="a" password="b";
};
Client {
  org.apache.zookeeper.server.auth.DigestLoginModule required
  username="kafka" password="zk \\"secret\\"";
};
"""


def _jaas_file(tmp_path: Path, text: str = JAAS) -> Path:
    path = tmp_path / "broker.jaas"
    path.write_text(text)
    return path


def test_the_client_section_of_the_jaas_file_in_kafka_opts_is_the_login(tmp_path: Path) -> None:
    jaas = _jaas_file(tmp_path)
    opts = f"-Xmx1g -Djava.security.auth.login.config={jaas}"
    login = zookeeper_sasl_login({"KAFKA_OPTS": opts})
    assert login == ZkSaslLogin("kafka", 'zk "secret"')
    assert "secret" not in repr(login)


def test_a_named_section_and_the_switch_off_are_honoured(tmp_path: Path) -> None:
    jaas = _jaas_file(tmp_path, JAAS.replace("Client {", "ZkBroker {"))
    base = f"-Djava.security.auth.login.config={jaas}"
    assert zookeeper_sasl_login({"KAFKA_OPTS": base}) is None  # no Client section
    named = zookeeper_sasl_login({"KAFKA_OPTS": f"{base} -Dzookeeper.sasl.clientconfig=ZkBroker"})
    assert named is not None and named.username == "kafka"
    off = f"{base} -Dzookeeper.sasl.clientconfig=ZkBroker -Dzookeeper.sasl.client=false"
    assert zookeeper_sasl_login({"KAFKA_OPTS": off}) is None
    assert zookeeper_sasl_login({}) is None


def test_kerberos_and_unreadable_files_are_refused_naming_them(tmp_path: Path) -> None:
    kerberos = "Client { com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true; };"
    with pytest.raises(InvalidConfigError, match=r"Krb5LoginModule.*DigestLoginModule"):
        login_from_jaas_file(kerberos, section="Client", where="f.jaas")
    missing = tmp_path / "missing.jaas"
    with pytest.raises(InvalidConfigError, match=f"cannot read the JAAS file {missing}"):
        zookeeper_sasl_login({"KAFKA_OPTS": f"-Djava.security.auth.login.config={missing}"})


def test_secure_acls_are_kafkas_default_acls() -> None:
    assert default_acls("/brokers/topics/t", secure=False) == list(OPEN_ACL_UNSAFE)
    creator_and_readers = list(CREATOR_ALL_ACL) + list(READ_ACL_UNSAFE)
    assert default_acls("/brokers/topics/t", secure=True) == creator_and_readers
    assert default_acls("/config/topics/t", secure=True) == creator_and_readers
    # SCRAM credentials and broker configs: no one but the creator may even read them
    assert default_acls("/config/users/alice", secure=True) == list(CREATOR_ALL_ACL)
    assert default_acls("/config/users", secure=True) == list(CREATOR_ALL_ACL)
    assert default_acls("/config/brokers/1", secure=True) == list(CREATOR_ALL_ACL)
    assert default_acls("/config/usersx", secure=True) == creator_and_readers


def _config(tmp_path: Path, **props: str) -> KafkaConfig:
    return KafkaConfig.from_props({"broker.id": "1", "log.dirs": str(tmp_path / "logs"), **props})


def test_zookeeper_set_acl_without_a_login_refuses_to_start(tmp_path: Path) -> None:
    config = _config(tmp_path, **{"zookeeper.connect": "127.0.0.1:1", "zookeeper.set.acl": "true"})
    with pytest.raises(
        InvalidConfigError, match=r"zookeeper\.set\.acl=true, but no ZooKeeper SASL"
    ):
        metadata_store_client(config, tmp_path, environ={})
    single_node = _config(tmp_path, **{"zookeeper.set.acl": "true"})
    with pytest.raises(
        InvalidConfigError, match=r"zookeeper\.set\.acl=true needs zookeeper\.connect"
    ):
        metadata_store_client(single_node, tmp_path, environ={})
