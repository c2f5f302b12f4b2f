"""A request the authorizer denies fails in the project's client with the ACL it needed named,
in the form `storage-core acls` takes it: what the pipeline's jobs show when their principal
lacks one ACL."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from storage_core.client import KafkaCluster
from storage_core.client.consumer import KafkaConsumer
from storage_core.client.errors import BrokerResponseError
from storage_core.client.producer import KafkaProducer
from storage_core.records.record import SimpleRecord
from tests.broker_process import BrokerProcess


@pytest.fixture
def authorizing_broker(tmp_path: Path) -> BrokerProcess:
    broker = BrokerProcess(
        tmp_path,
        overrides={
            "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
            # resources without ACLs stay open, so that the test can create its denials
            "allow.everyone.if.no.acl.found": "true",
        },
    )
    with broker:
        yield broker


def _acl(
    admin: AdminClient, topic: str, operation: AclOperation, permission: AclPermissionType
) -> None:
    binding = AclBinding(
        ResourceType.TOPIC,
        topic,
        ResourcePatternType.LITERAL,
        "User:ANONYMOUS",
        "*",
        operation,
        permission,
    )
    for future in admin.create_acls([binding]).values():
        future.result(timeout=30)


def test_a_denied_produce_and_fetch_name_the_acl_they_need(
    authorizing_broker: BrokerProcess,
) -> None:
    admin = AdminClient({"bootstrap.servers": authorizing_broker.bootstrap})
    admin.create_topics([NewTopic("ledger", 1, 1)])["ledger"].result(timeout=30)
    # As in Kafka, once a topic has ACLs a principal needs an ALLOW to describe it.
    _acl(admin, "ledger", AclOperation.DESCRIBE, AclPermissionType.ALLOW)
    _acl(admin, "ledger", AclOperation.WRITE, AclPermissionType.DENY)
    _acl(admin, "ledger", AclOperation.READ, AclPermissionType.DENY)
    with KafkaCluster(authorizing_broker.bootstrap) as cluster:
        with pytest.raises(BrokerResponseError) as produce:
            KafkaProducer(cluster, retries=0).send("ledger", 0, [SimpleRecord(value=b"x")])
        assert "TOPIC_AUTHORIZATION_FAILED" in str(produce.value)
        assert "--operation Write --topic" in str(produce.value)
        with pytest.raises(BrokerResponseError) as fetch:
            KafkaConsumer(cluster).fetch("ledger", 0, 0)
        assert "--operation Read --topic" in str(fetch.value)
