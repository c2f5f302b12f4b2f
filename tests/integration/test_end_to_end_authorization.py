"""Kafka's EndToEndAuthorizationTest cases on PLAINTEXT, with real clients (confluent-kafka,
kafka-python): produce and consume via assign and subscribe, with literal, prefixed and
wildcard ACLs; no produce with only DESCRIBE; no consume without READ; no group ACL.

Every client here is User:ANONYMOUS (PLAINTEXT), so each case works on its own topic and
group and grants User:ANONYMOUS exactly the ACLs the case names. The broker has no super
users; User:ANONYMOUS may manage ACLs and create topics (ALTER, DESCRIBE and CREATE on the
cluster, written to the broker's store before it starts).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from kafka import KafkaConsumer

from storage_core.protocol import acl as model
from storage_core.security.authorizer.acl_authorizer import AclAuthorizer, AuthorizerConfig
from storage_core.zk.acl_znodes import AclZkStore
from storage_core.zk.local_znode_tree import LocalZNodeTree
from tests.broker_process import BrokerProcess

TIMEOUT_S = 20
ANONYMOUS = "User:ANONYMOUS"


def _seed(log_dir: Path) -> None:
    log_dir.mkdir(parents=True, exist_ok=True)
    session = LocalZNodeTree(log_dir).session()
    session.start()
    authorizer = AclAuthorizer(
        AclZkStore(session),
        AuthorizerConfig(super_users=frozenset(), allow_everyone_if_no_acl_found=False),
    )
    authorizer.start()
    cluster = model.ResourcePattern(
        resource_type=model.ResourceType.CLUSTER,
        name=model.CLUSTER_NAME,
        pattern_type=model.PatternType.LITERAL,
    )
    results = authorizer.create_acls(
        [
            model.AclBinding(
                pattern=cluster,
                entry=model.AccessControlEntry(
                    principal=ANONYMOUS,
                    host="*",
                    operation=op,
                    permission_type=model.AclPermissionType.ALLOW,
                ),
            )
            for op in (
                model.AclOperation.ALTER,
                model.AclOperation.DESCRIBE,
                model.AclOperation.CREATE,
            )
        ]
    )
    assert all(r.error is None for r in results)
    authorizer.close()
    session.stop()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(
        tmp_path_factory.mktemp("e2e-authz"),
        overrides={"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer"},
    )
    _seed(process.log_dir)
    with process:
        yield process


_ADMINS: dict[str, AdminClient] = {}


def _admin(broker: BrokerProcess) -> AdminClient:
    """One admin client per broker, kept alive: a dropped client fails its pending futures."""
    return _ADMINS.setdefault(
        broker.bootstrap, AdminClient({"bootstrap.servers": broker.bootstrap})
    )


def _grant(
    broker: BrokerProcess,
    resource_type: ResourceType,
    name: str,
    operations: tuple[AclOperation, ...],
    pattern: ResourcePatternType = ResourcePatternType.LITERAL,
) -> None:
    bindings = [
        AclBinding(resource_type, name, pattern, ANONYMOUS, "*", op, AclPermissionType.ALLOW)
        for op in operations
    ]
    for future in _admin(broker).create_acls(bindings, request_timeout=TIMEOUT_S).values():
        future.result(timeout=TIMEOUT_S)


def _topic(broker: BrokerProcess, prefix: str = "e2e-") -> str:
    name = f"{prefix}{uuid.uuid4().hex[:8]}"
    [future] = _admin(broker).create_topics([NewTopic(name, 1, 1)]).values()
    future.result(timeout=TIMEOUT_S)
    return name


def _produce(broker: BrokerProcess, topic: str, count: int = 3) -> list[KafkaError | None]:
    errors: list[KafkaError | None] = []
    producer = Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "enable.idempotence": False,
            "message.timeout.ms": 10_000,
        }
    )
    for i in range(count):
        producer.produce(topic, f"m{i}".encode(), on_delivery=lambda err, _m: errors.append(err))
    producer.flush(TIMEOUT_S)
    return errors


def _consume_assign(broker: BrokerProcess, topic: str, group: str, count: int) -> list[bytes]:
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        values: list[bytes] = []
        for _ in range(100):
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error() is not None:
                raise RuntimeError(msg.error())
            values.append(msg.value())
            if len(values) == count:
                break
        consumer.commit(asynchronous=False)
        return values
    finally:
        consumer.close()


def _first_error(broker: BrokerProcess, topic: str, group: str, *, subscribe: bool) -> int:
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        if subscribe:
            consumer.subscribe([topic])
        else:
            consumer.assign([TopicPartition(topic, 0, 0)])
        for _ in range(100):
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is not None:
                return int(msg.error().code())
        raise AssertionError("no error reached the consumer")
    finally:
        consumer.close()


READ_WRITE = (AclOperation.WRITE, AclOperation.READ)


def test_produce_consume_via_assign(broker: BrokerProcess) -> None:
    topic, group = _topic(broker), f"g-{uuid.uuid4().hex[:8]}"
    _grant(broker, ResourceType.TOPIC, topic, READ_WRITE)
    _grant(broker, ResourceType.GROUP, group, (AclOperation.READ,))
    assert _produce(broker, topic) == [None, None, None]
    assert _consume_assign(broker, topic, group, 3) == [b"m0", b"m1", b"m2"]


def test_produce_consume_via_subscribe_with_kafka_python(broker: BrokerProcess) -> None:
    topic, group = _topic(broker), f"g-{uuid.uuid4().hex[:8]}"
    _grant(broker, ResourceType.TOPIC, topic, READ_WRITE)
    _grant(broker, ResourceType.GROUP, group, (AclOperation.READ,))
    assert _produce(broker, topic) == [None, None, None]
    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=broker.bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        consumer_timeout_ms=15_000,
    )
    try:
        values = [m.value for _i, m in zip(range(3), consumer, strict=False)]
    finally:
        consumer.close()
    assert values == [b"m0", b"m1", b"m2"]


def test_produce_consume_with_prefixed_acls(broker: BrokerProcess) -> None:
    prefix = f"pfx{uuid.uuid4().hex[:6]}-"
    group = f"{prefix}group"
    _grant(broker, ResourceType.TOPIC, prefix, READ_WRITE, ResourcePatternType.PREFIXED)
    _grant(broker, ResourceType.GROUP, prefix, (AclOperation.READ,), ResourcePatternType.PREFIXED)
    topic = _topic(broker, prefix)
    assert _produce(broker, topic) == [None, None, None]
    assert _consume_assign(broker, topic, group, 3) == [b"m0", b"m1", b"m2"]


def test_no_produce_with_only_describe_acl(broker: BrokerProcess) -> None:
    topic = _topic(broker)
    _grant(broker, ResourceType.TOPIC, topic, (AclOperation.DESCRIBE,))
    errors = _produce(broker, topic, count=1)
    assert [e.code() if e else None for e in errors] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]


def test_no_consume_with_describe_acl_via_assign(broker: BrokerProcess) -> None:
    topic, group = _topic(broker), f"g-{uuid.uuid4().hex[:8]}"
    _grant(broker, ResourceType.TOPIC, topic, (AclOperation.WRITE,))  # implies DESCRIBE
    _grant(broker, ResourceType.GROUP, group, (AclOperation.READ,))
    assert _produce(broker, topic, count=1) == [None]
    code = _first_error(broker, topic, group, subscribe=False)
    assert code == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_no_group_acl(broker: BrokerProcess) -> None:
    topic, group = _topic(broker), f"g-{uuid.uuid4().hex[:8]}"
    _grant(broker, ResourceType.TOPIC, topic, READ_WRITE)
    assert _produce(broker, topic, count=1) == [None]
    code = _first_error(broker, topic, group, subscribe=True)
    assert code == KafkaError.GROUP_AUTHORIZATION_FAILED


def test_produce_consume_with_wildcard_acls(broker: BrokerProcess) -> None:
    """Last: the wildcard opens every topic; removed at the end."""
    topic, group = _topic(broker), f"g-{uuid.uuid4().hex[:8]}"
    assert _produce(broker, topic, count=1)[0] is not None  # nothing granted yet
    _grant(broker, ResourceType.TOPIC, "*", READ_WRITE)
    _grant(broker, ResourceType.GROUP, "*", (AclOperation.READ,))
    try:
        assert _produce(broker, topic) == [None, None, None]
        assert _consume_assign(broker, topic, group, 3) == [b"m0", b"m1", b"m2"]
    finally:
        for name, rtype in (("*", ResourceType.TOPIC), ("*", ResourceType.GROUP)):
            wildcard = AclBindingFilter(
                rtype,
                name,
                ResourcePatternType.LITERAL,
                None,
                None,
                AclOperation.ANY,
                AclPermissionType.ANY,
            )
            for future in _admin(broker).delete_acls([wildcard]).values():
                future.result(timeout=TIMEOUT_S)
