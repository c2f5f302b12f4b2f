"""Three brokers secured as a production cluster would be: clients on a SASL_SSL listener
(PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) or on an SSL listener with client certificates, the
brokers replicating over their own SSL listener with client certificates, and the ACL
authorizer with the administrator and the brokers as super users. kafka-python, confluent-kafka
(producer, consumer group, AdminClient with its ACL and SCRAM calls) and aiokafka, unchanged,
produce to a topic of three replicas with acks=all and read it back, each with the principal
it authenticated as and only the ACLs granted to it."""

from __future__ import annotations

import asyncio
import json
import os
import ssl
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.helpers import create_ssl_context
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from kafka import KafkaConsumer as KpConsumer
from kafka import KafkaProducer as KpProducer
from kafka import TopicPartition as KpTopicPartition
from kio.schema.errors import ErrorCode

from embedded.ports import free_port
from embedded.zookeeper import ZooKeeperEnsemble
from storage_core.client import KafkaCluster
from storage_core.client.connection import ConnectionConfig
from storage_core.security.client_transport import ClientSecurityConfig
from tests.broker_process import BrokerProcess
from tests.cluster_support import BROKER_IDS, eventually, require_java, three_brokers
from tests.integration.security.test_kafkajs import SCRIPT as KAFKAJS_SCRIPT
from tests.security_support import Issued, TestPki, ssl_listener_props

require_java()
pytestmark = pytest.mark.timeout(300)

TIMEOUT_S = 30
ADMIN = ("admin", "admin-secret")
CAROL = ("carol", "carol-secret")  # a PLAIN user of the client listener's JAAS config
ALICE = ("alice", "alice-secret")  # a SCRAM user, created through AlterUserScramCredentials
RECORDS = 20


@dataclass
class Cluster:
    brokers: dict[int, BrokerProcess]
    client_ports: dict[int, int]
    mtls_ports: dict[int, int]
    pki: TestPki

    def bootstrap(self, ports: dict[int, int]) -> str:
        return ",".join(f"127.0.0.1:{port}" for port in ports.values())


def _broker_dn(broker_id: int) -> str:
    return f"CN=broker-{broker_id},OU=brokers,O=test"


@pytest.fixture(scope="module")
def cluster(
    zookeeper: ZooKeeperEnsemble, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    directory = tmp_path_factory.mktemp("secured-cluster")
    pki = TestPki(directory)
    client_ports = {b: free_port() for b in BROKER_IDS}
    mtls_ports = {b: free_port() for b in BROKER_IDS}
    per_broker: dict[int, dict[str, str]] = {}
    for broker_id in BROKER_IDS:
        certificate = pki.issue(f"broker-{broker_id}", _broker_dn(broker_id))
        per_broker[broker_id] = {
            "listeners": (
                f"CLIENT://127.0.0.1:{client_ports[broker_id]},"
                f"MTLS://127.0.0.1:{mtls_ports[broker_id]},"
                f"REPLICATION://127.0.0.1:{free_port()}"
            ),
            **ssl_listener_props(pki, certificate),
        }
    plain_jaas = (
        "org.apache.kafka.common.security.plain.PlainLoginModule required"
        f' user_{ADMIN[0]}="{ADMIN[1]}" user_{CAROL[0]}="{CAROL[1]}";'
    )
    overrides = {
        "listener.security.protocol.map": "CLIENT:SASL_SSL,MTLS:SSL,REPLICATION:SSL",
        "inter.broker.listener.name": "REPLICATION",
        "listener.name.replication.ssl.client.auth": "required",
        "listener.name.mtls.ssl.client.auth": "required",
        "listener.name.client.sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.client.plain.sasl.jaas.config": plain_jaas,
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": ";".join(
            [f"User:{ADMIN[0]}", *(f"User:{_broker_dn(b)}" for b in BROKER_IDS)]
        ),
        "offsets.topic.replication.factor": "3",
        "replica.fetch.wait.max.ms": "100",
    }
    with three_brokers(zookeeper, directory, overrides, per_broker=per_broker) as (started, _):
        yield Cluster(started, client_ports, mtls_ports, pki)


def _sasl_ssl(cluster: Cluster, mechanism: str, login: tuple[str, str]) -> dict[str, Any]:
    return {
        "bootstrap.servers": cluster.bootstrap(cluster.client_ports),
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": str(cluster.pki.ca_pem),
        "sasl.mechanism": mechanism,
        "sasl.username": login[0],
        "sasl.password": login[1],
    }


_ADMINS: dict[int, AdminClient] = {}


def _admin(cluster: Cluster) -> AdminClient:
    """One administrator's client per cluster, kept: a dropped AdminClient cancels its
    futures."""
    if id(cluster) not in _ADMINS:
        _ADMINS[id(cluster)] = AdminClient(_sasl_ssl(cluster, "PLAIN", ADMIN))
    return _ADMINS[id(cluster)]


def _wait(futures: dict[Any, Any]) -> None:
    for future in futures.values():
        future.result(timeout=TIMEOUT_S)


def _grant_producer_and_consumer(cluster: Cluster, principal: str, topic: str, group: str) -> None:
    def acl(resource: ResourceType, name: str, operation: AclOperation) -> AclBinding:
        return AclBinding(
            resource,
            name,
            ResourcePatternType.LITERAL,
            principal,
            "*",
            operation,
            AclPermissionType.ALLOW,
        )

    _wait(
        _admin(cluster).create_acls(
            [
                acl(ResourceType.TOPIC, topic, AclOperation.WRITE),
                acl(ResourceType.TOPIC, topic, AclOperation.READ),
                acl(ResourceType.GROUP, group, AclOperation.READ),
            ]
        )
    )


def _await_describe_everywhere(
    cluster: Cluster, ports: dict[int, int], client: dict[str, str], topic: str
) -> None:
    """Until every broker lets ``client``'s principal describe ``topic``: ACLs reach the
    brokers through ZooKeeper notifications, a moment after CreateAcls returns (as in
    Kafka)."""
    config = ConnectionConfig(
        security=ClientSecurityConfig.from_properties(
            {"ssl.truststore.type": "PEM", "ssl.truststore.location": str(cluster.pki.ca_pem)}
            | client
        )
    )
    for port in ports.values():
        with KafkaCluster(f"127.0.0.1:{port}", config=config) as one:
            eventually(
                lambda one=one: (
                    one.refresh_metadata([topic]).topic(topic).error  # type: ignore[misc]
                    == ErrorCode.none
                ),
                timeout_s=TIMEOUT_S,
                what=f"broker at port {port} lets the principal describe {topic}",
            )


def _new_topic(cluster: Cluster) -> str:
    topic = f"secured-{uuid.uuid4().hex[:8]}"
    _wait(
        _admin(cluster).create_topics([NewTopic(topic, 1, 3, config={"min.insync.replicas": "2"})])
    )
    return topic


def _confluent_round_trip(config: dict[str, Any], topic: str, group: str) -> list[bytes]:
    producer = Producer({**config, "acks": "all"})
    for i in range(RECORDS):
        producer.produce(topic, f"confluent-{i}".encode())
    assert producer.flush(TIMEOUT_S) == 0
    consumer = Consumer({**config, "group.id": group, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    values: list[bytes] = []
    try:
        while len(values) < RECORDS:
            message = consumer.poll(TIMEOUT_S)
            assert message is not None, f"only {len(values)} records within {TIMEOUT_S} s"
            assert message.error() is None, message.error()
            values.append(message.value())
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return values


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_sasl_ssl_clients_produce_and_consume_with_their_own_acls(
    cluster: Cluster, mechanism: str
) -> None:
    login = CAROL if mechanism == "PLAIN" else ALICE
    admin = _admin(cluster)
    if mechanism != "PLAIN":
        _wait(
            admin.alter_user_scram_credentials(
                [
                    UserScramCredentialUpsertion(
                        ALICE[0], ScramCredentialInfo(m, 8192), ALICE[1].encode()
                    )
                    for m in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512)
                ]
            )
        )
        described = admin.describe_user_scram_credentials([ALICE[0]])[ALICE[0]].result(
            timeout=TIMEOUT_S
        )
        assert {info.mechanism for info in described.scram_credential_infos} == {
            ScramMechanism.SCRAM_SHA_256,
            ScramMechanism.SCRAM_SHA_512,
        }
    topic = _new_topic(cluster)
    group = f"group-{topic}"
    principal = f"User:{login[0]}"
    config = _sasl_ssl(cluster, mechanism, login)

    # authenticated, but no ACL yet: denied
    denied = Producer({**config, "acks": "all", "message.timeout.ms": 5000})
    errors: list[KafkaError] = []
    denied.produce(topic, b"x", on_delivery=lambda error, _m: errors.append(error))
    denied.flush(TIMEOUT_S)
    assert [e.code() for e in errors] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]

    _grant_producer_and_consumer(cluster, principal, topic, group)
    listed = admin.describe_acls(
        AclBindingFilter(
            ResourceType.TOPIC,
            topic,
            ResourcePatternType.LITERAL,
            principal,
            None,
            AclOperation.ANY,
            AclPermissionType.ANY,
        )
    ).result(timeout=TIMEOUT_S)
    assert {b.operation for b in listed} == {AclOperation.WRITE, AclOperation.READ}

    _await_describe_everywhere(
        cluster,
        cluster.client_ports,
        {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": mechanism,
            "sasl.username": login[0],
            "sasl.password": login[1],
        },
        topic,
    )
    values = _confluent_round_trip(config, topic, group)
    assert values == [f"confluent-{i}".encode() for i in range(RECORDS)]

    context = ssl.create_default_context(cafile=str(cluster.pki.ca_pem))
    python_config: dict[str, Any] = {
        "bootstrap_servers": cluster.bootstrap(cluster.client_ports),
        "security_protocol": "SASL_SSL",
        "ssl_context": context,
        "sasl_mechanism": mechanism,
        "sasl_plain_username": login[0],
        "sasl_plain_password": login[1],
    }
    producer = KpProducer(acks="all", **python_config)
    producer.send(topic, b"kafka-python").get(timeout=TIMEOUT_S)
    producer.close()
    consumer = KpConsumer(consumer_timeout_ms=10_000, **python_config)
    partition = KpTopicPartition(topic, 0)
    consumer.assign([partition])
    consumer.seek(partition, RECORDS)
    assert next(iter(consumer)).value == b"kafka-python"
    consumer.close()

    async def aiokafka_round_trip() -> bytes:
        aio_config: dict[str, Any] = {
            **python_config,
            "ssl_context": create_ssl_context(cafile=str(cluster.pki.ca_pem)),
        }
        aio_producer = AIOKafkaProducer(acks="all", **aio_config)
        await aio_producer.start()
        try:
            await aio_producer.send_and_wait(topic, b"aiokafka")
        finally:
            await aio_producer.stop()
        aio_consumer = AIOKafkaConsumer(**aio_config)
        await aio_consumer.start()
        try:
            tp = KpTopicPartition(topic, 0)
            aio_consumer.assign([tp])
            aio_consumer.seek(tp, RECORDS + 1)
            record = await asyncio.wait_for(aio_consumer.getone(), TIMEOUT_S)
            return bytes(record.value)
        finally:
            await aio_consumer.stop()

    assert asyncio.run(aiokafka_round_trip()) == b"aiokafka"

    deleted = admin.delete_acls(
        [
            AclBindingFilter(
                ResourceType.ANY,
                None,
                ResourcePatternType.ANY,
                principal,
                None,
                AclOperation.ANY,
                AclPermissionType.ANY,
            )
        ]
    )
    _wait(deleted)


def _mtls(cluster: Cluster, certificate: Issued) -> dict[str, Any]:
    return {
        "bootstrap.servers": cluster.bootstrap(cluster.mtls_ports),
        "security.protocol": "SSL",
        "ssl.ca.location": str(cluster.pki.ca_pem),
        "ssl.certificate.location": str(certificate.cert_file),
        "ssl.key.location": str(certificate.key_file),
    }


def test_client_certificates_are_principals_on_the_ssl_listener(cluster: Cluster) -> None:
    dave = cluster.pki.issue("dave", "CN=dave,O=test")
    eve = cluster.pki.issue("eve", "CN=eve,O=test")
    topic = _new_topic(cluster)
    group = f"group-{topic}"
    _grant_producer_and_consumer(cluster, "User:CN=dave,O=test", topic, group)
    _await_describe_everywhere(
        cluster,
        cluster.mtls_ports,
        {
            "security.protocol": "SSL",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(dave.pem_keystore),
        },
        topic,
    )
    values = _confluent_round_trip(_mtls(cluster, dave), topic, group)
    assert len(values) == RECORDS

    consumer = Consumer({**_mtls(cluster, eve), "group.id": group})
    consumer.subscribe([topic])
    try:
        message = consumer.poll(TIMEOUT_S)
        assert message is not None and message.error() is not None
        assert message.error().code() in (
            KafkaError.TOPIC_AUTHORIZATION_FAILED,
            KafkaError.GROUP_AUTHORIZATION_FAILED,
        )
    finally:
        consumer.close()
    with pytest.raises(KafkaException):
        # a certificate the cluster's CA did not sign is refused in the handshake
        stranger = TestPki(cluster.pki.directory / "other", ca_dn="CN=other-ca").issue(
            "mallory", "CN=mallory"
        )
        AdminClient(_mtls(cluster, stranger)).list_topics(timeout=5)


def test_kafkajs_produces_consumes_and_manages_acls_on_the_three_brokers(
    cluster: Cluster, kafkajs: Path
) -> None:
    """KafkaJS (its own SASL and TLS code) on the cluster: SCRAM-SHA-256 and PLAIN users with
    prefixed ACLs on their topics and groups, and its admin's ACL calls."""
    admin = _admin(cluster)
    _wait(
        admin.alter_user_scram_credentials(
            [
                UserScramCredentialUpsertion(
                    ALICE[0],
                    ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192),
                    ALICE[1].encode(),
                )
            ]
        )
    )
    for user in (ALICE[0], CAROL[0]):
        _wait(
            admin.create_acls(
                [
                    AclBinding(
                        resource,
                        name,
                        ResourcePatternType.PREFIXED,
                        f"User:{user}",
                        "*",
                        operation,
                        AclPermissionType.ALLOW,
                    )
                    for resource, name, operation in (
                        (ResourceType.TOPIC, "kafkajs-", AclOperation.WRITE),
                        (ResourceType.TOPIC, "kafkajs-", AclOperation.READ),
                        (ResourceType.GROUP, "g-kafkajs-", AclOperation.READ),
                    )
                ]
            )
        )
    suffix = uuid.uuid4().hex[:8]
    settings = {
        "bootstrap": f"127.0.0.1:{cluster.client_ports[1]}",
        "ca": str(cluster.pki.ca_pem),
        "admin": {"mechanism": "plain", "username": ADMIN[0], "password": ADMIN[1]},
        "logins": [
            {"mechanism": "scram-sha-256", "username": ALICE[0], "password": ALICE[1]},
            {"mechanism": "plain", "username": CAROL[0], "password": CAROL[1]},
        ],
        "suffix": suffix,
    }
    run = subprocess.run(
        ["node", str(KAFKAJS_SCRIPT), json.dumps(settings)],
        env={**os.environ, "NODE_PATH": str(kafkajs)},
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert run.returncode == 0, f"KafkaJS failed:\n{run.stderr[-3000:]}"
    result = json.loads(run.stdout)
    assert result["roundTrips"] == {
        "scram-sha-256": ["from scram-sha-256"],
        "plain": ["from plain"],
    }
    assert result["acls"]["created"] is True
    assert result["acls"]["after"] == []
