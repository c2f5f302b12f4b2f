"""ACLs for principals that TLS client certificates tell apart (EndToEndAuthorizationTest on
SSL): alice's certificate is granted a topic and a group and produces and consumes with
confluent-kafka; bob's certificate, on the same listener, gets TOPIC_AUTHORIZATION_FAILED and
the broker's audit line names him by his certificate's subject.

The broker's PLAINTEXT listener (inter-broker, and the admin here) is User:ANONYMOUS, a super
user; the MTLS listener requires a client certificate.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from embedded.ports import free_port
from tests.broker_process import BrokerProcess
from tests.security_support import Issued, TestPki, ssl_listener_props

pytestmark = pytest.mark.timeout(180)

ALICE_DN = "CN=alice,OU=eng,O=acme,C=US"
BOB_DN = "CN=bob,OU=eng,O=acme,C=US"


class AuthorizingTlsBroker:
    def __init__(self, directory: Path) -> None:
        self.pki = TestPki(directory)
        certificate = self.pki.issue("broker", "CN=localhost,OU=brokers,O=test")
        self.alice = self.pki.issue("alice", ALICE_DN)
        self.bob = self.pki.issue("bob", BOB_DN)
        self.plain_port, self.mtls_port = free_port(), free_port()
        self.process = BrokerProcess(
            directory / "broker",
            port=self.plain_port,
            overrides={
                "listeners": f"PLAINTEXT://127.0.0.1:{self.plain_port},"
                f"MTLS://127.0.0.1:{self.mtls_port}",
                "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,MTLS:SSL",
                "inter.broker.listener.name": "PLAINTEXT",
                "offsets.topic.replication.factor": "1",
                **ssl_listener_props(self.pki, certificate),
                "listener.name.mtls.ssl.client.auth": "required",
                "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
                "super.users": "User:ANONYMOUS",
            },
        )

    def client(self, who: Issued) -> dict[str, Any]:
        return {
            "bootstrap.servers": f"127.0.0.1:{self.mtls_port}",
            "security.protocol": "SSL",
            "ssl.ca.location": str(self.pki.ca_pem),
            "ssl.certificate.location": str(who.cert_file),
            "ssl.key.location": str(who.key_file),
        }

    def admin(self) -> AdminClient:
        return AdminClient({"bootstrap.servers": f"127.0.0.1:{self.plain_port}"})


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AuthorizingTlsBroker]:
    tls = AuthorizingTlsBroker(tmp_path_factory.mktemp("tls-authz"))
    tls.process.start()
    try:
        yield tls
    finally:
        tls.process.kill()


def test_certificates_are_principals_the_acls_tell_apart(broker: AuthorizingTlsBroker) -> None:
    topic, group = f"certs-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    admin = broker.admin()
    [created] = admin.create_topics([NewTopic(topic, 1, 1)]).values()
    created.result(timeout=20)
    alice = f"User:{ALICE_DN}"
    grants = [
        AclBinding(
            ResourceType.TOPIC,
            topic,
            ResourcePatternType.LITERAL,
            alice,
            "*",
            op,
            AclPermissionType.ALLOW,
        )
        for op in (AclOperation.WRITE, AclOperation.READ)
    ] + [
        AclBinding(
            ResourceType.GROUP,
            group,
            ResourcePatternType.LITERAL,
            alice,
            "*",
            AclOperation.READ,
            AclPermissionType.ALLOW,
        )
    ]
    for future in admin.create_acls(grants, request_timeout=20).values():
        future.result(timeout=20)

    delivered: list[Any] = []
    producer = Producer({**broker.client(broker.alice), "message.timeout.ms": 15_000})
    for i in range(3):
        producer.produce(topic, f"a{i}".encode(), on_delivery=lambda e, _m: delivered.append(e))
    producer.flush(20)
    assert delivered == [None, None, None]
    consumer = Consumer(
        {**broker.client(broker.alice), "group.id": group, "auto.offset.reset": "earliest"}
    )
    consumer.subscribe([topic])
    values: list[bytes] = []
    deadline = time.monotonic() + 30
    try:
        while len(values) < 3 and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                values.append(message.value())
    finally:
        consumer.close()
    assert values == [b"a0", b"a1", b"a2"]

    refused: list[Any] = []
    bob = Producer({**broker.client(broker.bob), "message.timeout.ms": 10_000})
    bob.produce(topic, b"b", on_delivery=lambda e, _m: refused.append(e))
    bob.flush(20)
    assert [e.code() for e in refused] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    # librdkafka asks Metadata first: bob may not even describe the topic
    audit = (
        f"Principal = User:{BOB_DN} is Denied Operation = Describe from host = 127.0.0.1 on"
        f" resource = Topic:LITERAL:{topic} for request = Metadata with resourceRefCount = 1"
    )
    assert audit in broker.process.output()
