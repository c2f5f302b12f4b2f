"""A broker with zookeeper.set.acl on a ZooKeeper that requires SASL: the broker logs in with
the JAAS file of KAFKA_OPTS and its znodes keep every other ZooKeeper client from rewriting
the cluster's metadata."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from kazoo.security import ACL, Id, Permissions

from embedded.zookeeper import ZooKeeperEnsemble
from tests.broker_process import BrokerProcess
from tests.cluster_support import require_java

require_java()

BROKER_PASSWORD = 'broker "pw"'
USERS = {"kafka": BROKER_PASSWORD, "intruder": "intruder-pw"}
CHROOT = "/secured"


@pytest.fixture
def sasl_zookeeper(tmp_path: Path) -> Iterator[ZooKeeperEnsemble]:
    with ZooKeeperEnsemble(tmp_path / "zookeeper", sasl_users=USERS) as zk:
        yield zk


def _client(zk: ZooKeeperEnsemble, user: str | None) -> KazooClient:
    sasl = {"mechanism": "DIGEST-MD5", "username": user, "password": USERS[user]} if user else None
    client = KazooClient(hosts=zk.connect_string + CHROOT, sasl_options=sasl)
    client.start(timeout=10)
    return client


def test_a_broker_with_zookeeper_set_acl_owns_its_znodes(
    sasl_zookeeper: ZooKeeperEnsemble, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    jaas = tmp_path / "broker.jaas"
    jaas.write_text(
        "Client {\n  org.apache.zookeeper.server.auth.DigestLoginModule required\n"
        '  username="kafka" password="broker \\"pw\\"";\n};\n'
    )
    monkeypatch.setenv("KAFKA_OPTS", f"-Djava.security.auth.login.config={jaas}")
    broker = BrokerProcess(
        tmp_path / "broker",
        overrides={
            "broker.id": "1",
            "zookeeper.connect": sasl_zookeeper.connect_string + CHROOT,
            "zookeeper.set.acl": "true",
            "zookeeper.session.timeout.ms": "6000",
        },
    )
    with broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("orders", 1, 1)])["orders"].result(timeout=30)
        assert BROKER_PASSWORD not in broker.output()

        intruder = _client(sasl_zookeeper, "intruder")
        try:
            topic_path = "/brokers/topics/orders"
            acls, _ = intruder.get_acls(topic_path)
            assert acls == [
                ACL(Permissions.ALL, Id("sasl", "kafka")),
                ACL(Permissions.READ, Id("world", "anyone")),
            ]
            assert b'"partitions"' in intruder.get(topic_path)[0]  # readable, as in Kafka
            for write in (
                lambda: intruder.set(topic_path, b"{}"),
                lambda: intruder.delete(topic_path + "/partitions/0/state"),
                lambda: intruder.create("/admin/delete_topics/orders"),
                lambda: intruder.create("/brokers/topics/injected", b"{}"),
            ):
                with pytest.raises(NoAuthError):
                    write()
        finally:
            intruder.stop()
        # The topic is still there, served as before.
        metadata = admin.list_topics(timeout=10)
        assert metadata.topics["orders"].error is None
        assert "injected" not in metadata.topics


def test_a_broker_whose_zookeeper_login_is_wrong_exits_naming_zookeeper(
    sasl_zookeeper: ZooKeeperEnsemble, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    jaas = tmp_path / "broker.jaas"
    jaas.write_text(
        "Client { org.apache.zookeeper.server.auth.DigestLoginModule required"
        ' username="kafka" password="not-the-password"; };\n'
    )
    monkeypatch.setenv("KAFKA_OPTS", f"-Djava.security.auth.login.config={jaas}")
    broker = BrokerProcess(
        tmp_path / "broker",
        overrides={
            "broker.id": "1",
            "zookeeper.connect": sasl_zookeeper.connect_string,
            "zookeeper.set.acl": "true",
            "zookeeper.session.timeout.ms": "6000",
            "zookeeper.connection.timeout.ms": "6000",
        },
    )
    with pytest.raises(RuntimeError, match="exited with") as failure:
        broker.start(timeout_s=60)
    assert "ZooKeeper" in str(failure.value)
    assert "not-the-password" not in str(failure.value)
