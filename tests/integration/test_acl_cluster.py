"""ACLs in a 3-broker cluster on a real ZooKeeper: an ACL created through one broker is
written as Kafka writes it (read back raw from ZooKeeper) and takes effect on the other
brokers within seconds, and so does its deletion.

The brokers run with ``allow.everyone.if.no.acl.found=true``, so that their own traffic (on
PLAINTEXT every connection is User:ANONYMOUS) needs no ACL; the topic under test gets ACLs for
User:ANONYMOUS from 127.0.0.1 only, and a client connecting from 127.0.0.2 is the one denied.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
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
from kazoo.client import KazooClient

from embedded.zookeeper import ZooKeeperEnsemble
from tests import cluster_support
from tests.broker_process import BrokerProcess
from tests.integration.raw_wire import call, create_topic, request_classes

TOPIC = "secret"
DENIED_HOST = "127.0.0.2"
TOPIC_AUTH = 29
PROPAGATION_S = 5.0

cluster_support.require_java()


@dataclass(frozen=True, slots=True)
class Cluster:
    brokers: dict[int, BrokerProcess]
    connect: str


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    zk: ZooKeeperEnsemble
    with (
        cluster_support.zookeeper_ensemble(tmp_path_factory.mktemp("zk")) as zk,
        cluster_support.three_brokers(
            zk,
            tmp_path_factory.mktemp("brokers"),
            {
                "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
                "allow.everyone.if.no.acl.found": "true",
            },
        ) as (brokers, connect),
    ):
        create_topic(brokers[1].port, TOPIC)
        # CreateTopics answers once the receiving broker knows the topic; the others learn
        # of it from the controller a moment later.
        for b_id, b in brokers.items():
            cluster_support.eventually(
                lambda b=b: _topic_error_from(b.port, "127.0.0.1") == 0,
                timeout_s=15,
                what=f"broker {b_id} knows {TOPIC}",
                poll_s=0.05,
            )
        yield Cluster(brokers, connect)


def _topic_error_from(port: int, host: str) -> int:
    with socket.create_connection(("127.0.0.1", port), timeout=10, source_address=(host, 0)) as s:
        body = call(
            s,
            3,
            12,
            topics=(_metadata_topic(),),
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )
    return int(body.topics[0].error_code.value)


def _metadata_topic() -> Any:
    return request_classes(3, 12).MetadataRequestTopic(topic_id=None, name=TOPIC)


def _eventually(check: Any, what: str) -> float:
    """Seconds until ``check()`` held (at most PROPAGATION_S)."""
    start = time.monotonic()
    cluster_support.eventually(check, timeout_s=PROPAGATION_S, what=what, poll_s=0.05)
    return time.monotonic() - start


def _binding(operation: AclOperation) -> AclBinding:
    return AclBinding(
        ResourceType.TOPIC,
        TOPIC,
        ResourcePatternType.LITERAL,
        "User:ANONYMOUS",
        "127.0.0.1",
        operation,
        AclPermissionType.ALLOW,
    )


def test_an_acl_made_through_one_broker_takes_effect_on_the_others(
    cluster: Cluster, tmp_path: Path
) -> None:
    brokers = cluster.brokers
    for b in brokers.values():  # no ACL on the topic yet: everyone may describe it
        assert _topic_error_from(b.port, DENIED_HOST) == 0
    admin = AdminClient({"bootstrap.servers": brokers[1].bootstrap})
    for future in admin.create_acls([_binding(AclOperation.ALL)], request_timeout=15).values():
        future.result(timeout=15)

    took = max(
        _eventually(
            lambda b=b: _topic_error_from(b.port, DENIED_HOST) == TOPIC_AUTH,
            f"broker {b_id} denies {DENIED_HOST}",
        )
        for b_id, b in brokers.items()
    )
    print(f"ACL creation took effect on every broker within {took:.2f} s")
    for b in brokers.values():  # the allowed host still describes it everywhere
        assert _topic_error_from(b.port, "127.0.0.1") == 0

    zk = KazooClient(hosts=cluster.connect)
    zk.start(timeout=10)
    try:
        data, _stat = zk.get(f"/kafka-acl/Topic/{TOPIC}")
        assert json.loads(data) == {
            "version": 1,
            "acls": [
                {
                    "principal": "User:ANONYMOUS",
                    "permissionType": "Allow",
                    "operation": "All",
                    "host": "127.0.0.1",
                }
            ],
        }
        changes = zk.get_children("/kafka-acl-changes")
        assert changes and all(c.startswith("acl_changes_") for c in changes)
        assert {zk.get(f"/kafka-acl-changes/{c}")[0] for c in changes} == {b"TOPIC:secret"}
    finally:
        zk.stop()
        zk.close()

    every = AclBindingFilter(
        ResourceType.TOPIC,
        TOPIC,
        ResourcePatternType.LITERAL,
        None,
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    other = AdminClient({"bootstrap.servers": brokers[3].bootstrap})
    for future in other.delete_acls([every], request_timeout=15).values():
        future.result(timeout=15)
    for b_id, b in brokers.items():
        _eventually(
            lambda b=b: _topic_error_from(b.port, DENIED_HOST) == 0,
            f"broker {b_id} allows {DENIED_HOST} again",
        )


def test_followers_replicate_through_the_authorizing_fetch_path(cluster: Cluster) -> None:
    """With an authorizer follower fetches leave the fast path and are checked for
    CLUSTER_ACTION (allowed here: no ACL on the cluster): an acks=all produce to a topic with
    three replicas completes only once both followers fetched it."""
    admin = AdminClient({"bootstrap.servers": cluster.brokers[1].bootstrap})
    [created] = admin.create_topics([NewTopic("replicated", 1, 3)]).values()
    created.result(timeout=15)
    delivered: list[Any] = []
    producer = Producer(
        {
            "bootstrap.servers": cluster.brokers[2].bootstrap,
            "acks": "all",
            "message.timeout.ms": 15_000,
        }
    )
    for i in range(5):
        producer.produce(
            "replicated", f"r{i}".encode(), on_delivery=lambda e, m: delivered.append(e)
        )
    producer.flush(20)
    assert delivered == [None] * 5
    isr = cluster_support.partition_states(cluster.brokers[1].bootstrap, "replicated")[0][2]
    assert sorted(isr) == [1, 2, 3]
