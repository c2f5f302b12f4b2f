"""CreateAcls, DescribeAcls and DeleteAcls against a real broker process, through
confluent-kafka's and kafka-python's admin clients; SECURITY_DISABLED without an authorizer;
the ACL znodes as Kafka writes them, read back from the broker's store."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)
from kafka.admin import (
    ACL,
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    KafkaAdminClient,
    ResourcePattern,
    ResourcePatternFilter,
)
from kafka.admin import ACLResourcePatternType as PatternType
from kafka.admin import ResourceType as KpResourceType

from tests.broker_process import BrokerProcess

AUTHORIZER = {"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer"}
TIMEOUT_S = 15


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[BrokerProcess]:
    """An authorizing broker whose PLAINTEXT clients (User:ANONYMOUS) are super users."""
    with BrokerProcess(tmp_path, overrides={**AUTHORIZER, "super.users": "User:ANONYMOUS"}) as b:
        yield b


def admin(broker: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def binding(
    name: str,
    principal: str = "User:alice",
    operation: AclOperation = AclOperation.READ,
    pattern: ResourcePatternType = ResourcePatternType.LITERAL,
    permission: AclPermissionType = AclPermissionType.ALLOW,
) -> AclBinding:
    return AclBinding(ResourceType.TOPIC, name, pattern, principal, "*", operation, permission)


def test_confluent_admin_creates_describes_and_deletes_acls(secured: BrokerProcess) -> None:
    client = admin(secured)
    wanted = [
        binding("orders"),
        binding("orders", operation=AclOperation.WRITE, permission=AclPermissionType.DENY),
        binding("pay-", principal="User:bob", pattern=ResourcePatternType.PREFIXED),
    ]
    for future in client.create_acls(wanted, request_timeout=TIMEOUT_S).values():
        assert future.result(timeout=TIMEOUT_S) is None

    every = AclBindingFilter(
        ResourceType.ANY,
        None,
        ResourcePatternType.ANY,
        None,
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    described = client.describe_acls(every, request_timeout=TIMEOUT_S).result(timeout=TIMEOUT_S)
    assert sorted(map(str, described)) == sorted(map(str, wanted))

    matching = AclBindingFilter(
        ResourceType.TOPIC,
        "pay-now",
        ResourcePatternType.MATCH,
        None,
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    [deleted] = client.delete_acls([matching], request_timeout=TIMEOUT_S).values()
    assert [str(b) for b in deleted.result(timeout=TIMEOUT_S)] == [str(wanted[2])]
    described = client.describe_acls(every, request_timeout=TIMEOUT_S).result(timeout=TIMEOUT_S)
    assert sorted(map(str, described)) == sorted(map(str, wanted[:2]))


def test_acl_znodes_are_kafkas(secured: BrokerProcess) -> None:
    client = admin(secured)
    for future in client.create_acls(
        [binding("orders"), binding("pay-", pattern=ResourcePatternType.PREFIXED)],
        request_timeout=TIMEOUT_S,
    ).values():
        future.result(timeout=TIMEOUT_S)
    secured.stop()
    store = json.loads((secured.log_dir / "metadata-store.json").read_text())

    def data(path: str) -> object:
        return json.loads(base64.b64decode(store["nodes"][path]["data"]))

    entry = {"principal": "User:alice", "permissionType": "Allow", "operation": "Read", "host": "*"}
    assert data("/kafka-acl/Topic/orders") == {"version": 1, "acls": [entry]}
    assert data("/kafka-acl-extended/prefixed/Topic/pay-") == {"version": 1, "acls": [entry]}


def test_invalid_creations_are_refused_one_by_one(secured: BrokerProcess) -> None:
    client = admin(secured)
    futures = client.create_acls(
        [
            binding("ok"),
            AclBinding(
                ResourceType.BROKER,  # Kafka's CLUSTER (id 4)
                "not-the-cluster",
                ResourcePatternType.LITERAL,
                "User:alice",
                "*",
                AclOperation.ALTER,
                AclPermissionType.ALLOW,
            ),
            binding("a/b"),
        ],
        request_timeout=TIMEOUT_S,
    )
    results = {}
    for acl, future in futures.items():
        try:
            future.result(timeout=TIMEOUT_S)
            results[acl.name] = None
        except KafkaException as exc:
            results[acl.name] = exc.args[0].code()
    assert results == {
        "ok": None,
        "not-the-cluster": KafkaError.INVALID_REQUEST,
        "a/b": KafkaError.INVALID_REQUEST,
    }


def test_without_an_authorizer_acl_apis_are_security_disabled(tmp_path: Path) -> None:
    with BrokerProcess(tmp_path) as broker:
        client = admin(broker)
        [future] = client.create_acls([binding("t")], request_timeout=TIMEOUT_S).values()
        with pytest.raises(KafkaException) as raised:
            future.result(timeout=TIMEOUT_S)
        assert raised.value.args[0].code() == KafkaError.SECURITY_DISABLED


def test_kafka_python_admin_acls(secured: BrokerProcess) -> None:
    client = KafkaAdminClient(bootstrap_servers=secured.bootstrap, request_timeout_ms=15000)
    try:
        acl = ACL(
            principal="User:carol",
            host="*",
            operation=ACLOperation.WRITE,
            permission_type=ACLPermissionType.ALLOW,
            resource_pattern=ResourcePattern(KpResourceType.GROUP, "g1", PatternType.LITERAL),
        )
        created = client.create_acls([acl])
        assert created["failed"] == [] and len(created["succeeded"]) == 1
        acl_filter = ACLFilter(
            principal="User:carol",
            host=None,
            operation=ACLOperation.ANY,
            permission_type=ACLPermissionType.ANY,
            resource_pattern=ResourcePatternFilter(KpResourceType.ANY, None, PatternType.ANY),
        )
        found, error = client.describe_acls(acl_filter)
        assert error.errno == 0
        assert [(a.principal, a.resource_pattern.resource_name) for a in found] == [
            ("User:carol", "g1")
        ]
        [(_filter, deleted, _error)] = client.delete_acls([acl_filter])
        assert [d.resource_pattern.resource_name for d in deleted] == ["g1"]
        found, _error = client.describe_acls(acl_filter)
        assert found == []
    finally:
        client.close()
