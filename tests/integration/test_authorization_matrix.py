"""Every API the broker serves, asked by a principal without the ACL it needs, answers Kafka's
authorization error and changes nothing (KafkaApis 3.9's checks).

On PLAINTEXT every client is User:ANONYMOUS, so the two clients are told apart by host: the
ACLs allow everything to User:ANONYMOUS from 127.0.0.1 (the "admin", which sets up and then
checks that nothing changed) and nothing to it from 127.0.0.2 (the denied client; loopback
answers on every 127/8 address). The ACLs are written to the broker's single-node store
before it starts, as a ZooKeeper-mode operator would write them with the broker down.
"""

from __future__ import annotations

import datetime
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields, is_dataclass
from pathlib import Path
from typing import Any

import pytest

from storage_core.protocol.acl import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from storage_core.records import SimpleRecord, build_batch
from storage_core.security.authorizer.acl_authorizer import AclAuthorizer, AuthorizerConfig
from storage_core.server.handlers import build_registry
from storage_core.zk.acl_znodes import AclZkStore
from storage_core.zk.local_znode_tree import LocalZNodeTree
from tests.broker_process import BrokerProcess
from tests.integration.raw_wire import call, create_topic, request_classes
from tests.integration.txn_wire import await_coordinator, describe_transactions

ADMIN_HOST = "127.0.0.1"
DENIED_HOST = "127.0.0.2"
TOPIC = "t"
GROUP = "g"
TOPIC_AUTH = 29
GROUP_AUTH = 30
CLUSTER_AUTH = 31
TXN_AUTH = 53
NOT_CHECKED = frozenset({18, 17, 36})
"""ApiVersions and the SASL exchange: answered before and without any authorization."""
TIMEOUT = datetime.timedelta(seconds=10)


@dataclass(frozen=True, slots=True)
class Broker:
    port: int

    def call(self, host: str, api_key: int, version: int, **request: Any) -> Any:
        with socket.create_connection(
            ("127.0.0.1", self.port), timeout=10, source_address=(host, 0)
        ) as sock:
            return call(sock, api_key, version, **request)

    def admin(self, api_key: int, version: int, **request: Any) -> Any:
        return self.call(ADMIN_HOST, api_key, version, **request)


def _seed_acls(log_dir: Path) -> None:
    log_dir.mkdir(parents=True, exist_ok=True)
    session = LocalZNodeTree(log_dir).session()
    session.start()
    authorizer = AclAuthorizer(
        AclZkStore(session),
        AuthorizerConfig(super_users=frozenset(), allow_everyone_if_no_acl_found=False),
    )
    authorizer.start()
    every = [
        ResourcePattern(
            resource_type=ResourceType.CLUSTER,
            name="kafka-cluster",
            pattern_type=PatternType.LITERAL,
        ),
        ResourcePattern(
            resource_type=ResourceType.TOPIC, name="*", pattern_type=PatternType.LITERAL
        ),
        ResourcePattern(
            resource_type=ResourceType.GROUP, name="*", pattern_type=PatternType.LITERAL
        ),
        ResourcePattern(
            resource_type=ResourceType.TRANSACTIONAL_ID, name="*", pattern_type=PatternType.LITERAL
        ),
    ]
    results = authorizer.create_acls(
        [
            AclBinding(
                pattern=pattern,
                entry=AccessControlEntry(
                    principal="User:ANONYMOUS",
                    host=ADMIN_HOST,
                    operation=AclOperation.ALL,
                    permission_type=AclPermissionType.ALLOW,
                ),
            )
            for pattern in every
        ]
    )
    assert all(r.error is None for r in results)
    authorizer.close()
    session.stop()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    directory = tmp_path_factory.mktemp("authz")
    process = BrokerProcess(
        directory,
        overrides={
            "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
            "auto.create.topics.enable": "true",
        },
    )
    _seed_acls(process.log_dir)
    with process:
        b = Broker(process.port)
        create_topic(process.port, TOPIC)
        _produce(b, ADMIN_HOST, b"first")
        _commit(b, ADMIN_HOST, 1)
        yield b


def _produce(b: Broker, host: str, value: bytes) -> Any:
    m = request_classes(0, 9)
    batch = build_batch([SimpleRecord(key=None, value=value, timestamp=1_700_000_000_000)])
    return b.call(
        host,
        0,
        9,
        transactional_id=None,
        acks=1,
        timeout=TIMEOUT,
        topic_data=(
            m.TopicProduceData(
                name=TOPIC, partition_data=(m.PartitionProduceData(index=0, records=batch),)
            ),
        ),
    )


def _commit(b: Broker, host: str, offset: int) -> Any:
    m = request_classes(8, 8)
    return b.call(
        host,
        8,
        8,
        group_id=GROUP,
        generation_id_or_member_epoch=-1,
        member_id="",
        group_instance_id=None,
        topics=(
            m.OffsetCommitRequestTopic(
                name=TOPIC,
                partitions=(
                    m.OffsetCommitRequestPartition(
                        partition_index=0,
                        committed_offset=offset,
                        committed_leader_epoch=-1,
                        committed_metadata="",
                    ),
                ),
            ),
        ),
    )


def _end_offsets(b: Broker) -> tuple[int, int]:
    """(log start offset, log end offset) of t-0, as the admin sees them."""
    m = request_classes(2, 7)

    def offset(timestamp: int) -> int:
        body = b.admin(
            2,
            7,
            replica_id=-1,
            isolation_level=0,
            topics=(
                m.ListOffsetsTopic(
                    name=TOPIC,
                    partitions=(
                        m.ListOffsetsPartition(
                            partition_index=0, current_leader_epoch=-1, timestamp=timestamp
                        ),
                    ),
                ),
            ),
        )
        return int(body.topics[0].partitions[0].offset)

    return offset(-2), offset(-1)


def _committed(b: Broker) -> int:
    m = request_classes(9, 8)
    body = b.admin(
        9,
        8,
        groups=(
            m.OffsetFetchRequestGroup(
                group_id=GROUP,
                topics=(m.OffsetFetchRequestTopics(name=TOPIC, partition_indexes=(0,)),),
            ),
        ),
        require_stable=False,
    )
    return int(body.groups[0].topics[0].partitions[0].committed_offset)


def _topics(b: Broker) -> dict[str, int]:
    body = b.admin(
        3,
        12,
        topics=None,
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    return {t.name: len(t.partitions) for t in body.topics}


def _retention(b: Broker) -> str | None:
    m = request_classes(32, 4)
    body = b.admin(
        32,
        4,
        resources=(
            m.DescribeConfigsResource(
                resource_type=2, resource_name=TOPIC, configuration_keys=("retention.ms",)
            ),
        ),
        include_synonyms=False,
        include_documentation=False,
    )
    [config] = body.results[0].configs
    return str(config.value)


def _acl_count(b: Broker) -> int:
    body = b.admin(
        29,
        3,
        resource_type_filter=1,
        resource_name_filter=None,
        pattern_type_filter=1,
        principal_filter=None,
        host_filter=None,
        operation=1,
        permission_type=1,
    )
    return sum(len(r.acls) for r in body.resources)


def _state(b: Broker) -> tuple[Any, ...]:
    """Everything a denied request could have changed."""
    return (_end_offsets(b), _committed(b), _topics(b), _retention(b), _acl_count(b))


def error_codes(entity: Any) -> list[int]:
    """Every error code in a response, depth first."""
    found: list[int] = []
    if isinstance(entity, tuple):
        for item in entity:
            found += error_codes(item)
    elif is_dataclass(entity):
        for f in fields(entity):
            value = getattr(entity, f.name)
            if f.name == "error_code" or f.name.endswith("_error_code"):
                found.append(int(getattr(value, "value", value)))
            else:
                found += error_codes(value)
    return found


def _topic(m: Any, cls: str, **kw: Any) -> Any:
    return getattr(m, cls)(**kw)


Case = tuple[int, int, Callable[[Any], dict[str, Any]], int]
"""(api key, version, the request's fields from its module, the error expected)."""

CASES: list[Case] = [
    (
        0,
        9,
        lambda m: {
            "transactional_id": None,
            "acks": 1,
            "timeout": TIMEOUT,
            "topic_data": (
                m.TopicProduceData(
                    name=TOPIC,
                    partition_data=(
                        m.PartitionProduceData(
                            index=0,
                            records=build_batch(
                                [SimpleRecord(key=None, value=b"x", timestamp=1_700_000_000_000)]
                            ),
                        ),
                    ),
                ),
            ),
        },
        TOPIC_AUTH,
    ),
    (
        1,
        12,
        lambda m: {
            "replica_id": -1,
            "max_wait": datetime.timedelta(0),
            "min_bytes": 1,
            "max_bytes": 1 << 20,
            "isolation_level": 0,
            "session_id": 0,
            "session_epoch": -1,
            "topics": (
                m.FetchTopic(
                    topic=TOPIC,
                    partitions=(
                        m.FetchPartition(
                            partition=0,
                            current_leader_epoch=-1,
                            fetch_offset=0,
                            last_fetched_epoch=-1,
                            log_start_offset=-1,
                            partition_max_bytes=1 << 20,
                        ),
                    ),
                ),
            ),
            "forgotten_topics_data": (),
            "rack_id": "",
        },
        TOPIC_AUTH,
    ),
    (
        1,
        12,  # as a follower (replica id 0): CLUSTER_ACTION
        lambda m: {
            "replica_id": 0,
            "max_wait": datetime.timedelta(0),
            "min_bytes": 1,
            "max_bytes": 1 << 20,
            "isolation_level": 0,
            "session_id": 0,
            "session_epoch": -1,
            "topics": (
                m.FetchTopic(
                    topic=TOPIC,
                    partitions=(
                        m.FetchPartition(
                            partition=0,
                            current_leader_epoch=-1,
                            fetch_offset=0,
                            last_fetched_epoch=-1,
                            log_start_offset=-1,
                            partition_max_bytes=1 << 20,
                        ),
                    ),
                ),
            ),
            "forgotten_topics_data": (),
            "rack_id": "",
        },
        TOPIC_AUTH,
    ),
    (
        2,
        7,
        lambda m: {
            "replica_id": -1,
            "isolation_level": 0,
            "topics": (
                m.ListOffsetsTopic(
                    name=TOPIC,
                    partitions=(
                        m.ListOffsetsPartition(
                            partition_index=0, current_leader_epoch=-1, timestamp=-1
                        ),
                    ),
                ),
            ),
        },
        TOPIC_AUTH,
    ),
    (
        3,
        12,
        lambda m: {
            "topics": (m.MetadataRequestTopic(topic_id=None, name=TOPIC),),
            "allow_auto_topic_creation": True,
            "include_topic_authorized_operations": True,
        },
        TOPIC_AUTH,
    ),
    (
        8,
        8,
        lambda m: {
            "group_id": GROUP,
            "generation_id_or_member_epoch": -1,
            "member_id": "",
            "group_instance_id": None,
            "topics": (
                m.OffsetCommitRequestTopic(
                    name=TOPIC,
                    partitions=(
                        m.OffsetCommitRequestPartition(
                            partition_index=0,
                            committed_offset=0,
                            committed_leader_epoch=-1,
                            committed_metadata="",
                        ),
                    ),
                ),
            ),
        },
        GROUP_AUTH,
    ),
    (
        9,
        8,
        lambda m: {
            "groups": (
                m.OffsetFetchRequestGroup(
                    group_id=GROUP,
                    topics=(m.OffsetFetchRequestTopics(name=TOPIC, partition_indexes=(0,)),),
                ),
            ),
            "require_stable": False,
        },
        GROUP_AUTH,
    ),
    (10, 4, lambda m: {"key_type": 0, "coordinator_keys": (GROUP,)}, GROUP_AUTH),
    (10, 4, lambda m: {"key_type": 1, "coordinator_keys": ("txn",)}, TXN_AUTH),
    (
        11,
        9,
        lambda m: {
            "group_id": "new-group",
            "session_timeout": datetime.timedelta(seconds=10),
            "rebalance_timeout": datetime.timedelta(seconds=10),
            "member_id": "",
            "group_instance_id": None,
            "protocol_type": "consumer",
            "protocols": (m.JoinGroupRequestProtocol(name="range", metadata=b""),),
            "reason": None,
        },
        GROUP_AUTH,
    ),
    (
        12,
        4,
        lambda m: {
            "group_id": GROUP,
            "generation_id": 1,
            "member_id": "m",
            "group_instance_id": None,
        },
        GROUP_AUTH,
    ),
    (
        13,
        5,
        lambda m: {
            "group_id": GROUP,
            "members": (m.MemberIdentity(member_id="m", group_instance_id=None, reason=None),),
        },
        GROUP_AUTH,
    ),
    (
        14,
        5,
        lambda m: {
            "group_id": GROUP,
            "generation_id": 1,
            "member_id": "m",
            "group_instance_id": None,
            "protocol_type": "consumer",
            "protocol_name": "range",
            "assignments": (),
        },
        GROUP_AUTH,
    ),
    (15, 5, lambda m: {"groups": (GROUP,), "include_authorized_operations": True}, GROUP_AUTH),
    (
        19,
        7,
        lambda m: {
            "topics": (
                m.CreatableTopic(
                    name="created-by-denied",
                    num_partitions=1,
                    replication_factor=1,
                    assignments=(),
                    configs=(),
                ),
            ),
            "timeout": TIMEOUT,
            "validate_only": False,
        },
        TOPIC_AUTH,
    ),
    (
        20,
        6,
        lambda m: {"topics": (m.DeleteTopicState(name=TOPIC, topic_id=None),), "timeout": TIMEOUT},
        TOPIC_AUTH,
    ),
    (
        21,
        2,
        lambda m: {
            "topics": (
                m.DeleteRecordsTopic(
                    name=TOPIC, partitions=(m.DeleteRecordsPartition(partition_index=0, offset=-1),)
                ),
            ),
            "timeout": TIMEOUT,
        },
        TOPIC_AUTH,
    ),
    (
        22,
        4,
        lambda m: {
            "transactional_id": None,
            "transaction_timeout": datetime.timedelta(seconds=60),
            "producer_id": -1,
            "producer_epoch": -1,
        },
        CLUSTER_AUTH,
    ),
    (
        22,
        4,
        lambda m: {
            "transactional_id": "txn",
            "transaction_timeout": datetime.timedelta(seconds=60),
            "producer_id": -1,
            "producer_epoch": -1,
        },
        TXN_AUTH,
    ),
    (
        24,
        3,
        lambda m: {
            "v3_and_below_transactional_id": "txn",
            "v3_and_below_producer_id": 1,
            "v3_and_below_producer_epoch": 0,
            "v3_and_below_topics": (m.AddPartitionsToTxnTopic(name=TOPIC, partitions=(0,)),),
        },
        TXN_AUTH,
    ),
    (
        24,
        4,
        lambda m: {
            "transactions": (
                m.AddPartitionsToTxnTransaction(
                    transactional_id="txn",
                    producer_id=1,
                    producer_epoch=0,
                    verify_only=True,
                    topics=(m.AddPartitionsToTxnTopic(name=TOPIC, partitions=(0,)),),
                ),
            ),
        },
        CLUSTER_AUTH,
    ),
    (
        25,
        3,
        lambda m: {
            "transactional_id": "txn",
            "producer_id": 1,
            "producer_epoch": 0,
            "group_id": GROUP,
        },
        TXN_AUTH,
    ),
    (
        26,
        3,
        lambda m: {
            "transactional_id": "txn",
            "producer_id": 1,
            "producer_epoch": 0,
            "committed": True,
        },
        TXN_AUTH,
    ),
    (
        23,
        4,
        lambda m: {
            "replica_id": -1,
            "topics": (
                m.OffsetForLeaderTopic(
                    topic=TOPIC,
                    partitions=(
                        m.OffsetForLeaderPartition(
                            partition=0, current_leader_epoch=-1, leader_epoch=0
                        ),
                    ),
                ),
            ),
        },
        TOPIC_AUTH,
    ),
    (
        29,
        3,
        lambda m: {
            "resource_type_filter": 1,
            "resource_name_filter": None,
            "pattern_type_filter": 1,
            "principal_filter": None,
            "host_filter": None,
            "operation": 1,
            "permission_type": 1,
        },
        CLUSTER_AUTH,
    ),
    (
        30,
        3,
        lambda m: {
            "creations": (
                m.AclCreation(
                    resource_type=2,
                    resource_name=TOPIC,
                    resource_pattern_type=3,
                    principal="User:ANONYMOUS",
                    host="*",
                    operation=2,
                    permission_type=3,
                ),
            )
        },
        CLUSTER_AUTH,
    ),
    (
        31,
        3,
        lambda m: {
            "filters": (
                m.DeleteAclsFilter(
                    resource_type_filter=1,
                    resource_name_filter=None,
                    pattern_type_filter=1,
                    principal_filter=None,
                    host_filter=None,
                    operation=1,
                    permission_type=1,
                ),
            )
        },
        CLUSTER_AUTH,
    ),
    (
        32,
        4,
        lambda m: {
            "resources": (
                m.DescribeConfigsResource(
                    resource_type=2, resource_name=TOPIC, configuration_keys=None
                ),
            ),
            "include_synonyms": False,
            "include_documentation": False,
        },
        TOPIC_AUTH,
    ),
    (
        32,
        4,
        lambda m: {
            "resources": (
                m.DescribeConfigsResource(
                    resource_type=4, resource_name="0", configuration_keys=None
                ),
            ),
            "include_synonyms": False,
            "include_documentation": False,
        },
        CLUSTER_AUTH,
    ),
    (
        33,
        2,
        lambda m: {
            "resources": (
                m.AlterConfigsResource(
                    resource_type=2,
                    resource_name=TOPIC,
                    configs=(m.AlterableConfig(name="retention.ms", value="1000"),),
                ),
            ),
            "validate_only": False,
        },
        TOPIC_AUTH,
    ),
    (35, 4, lambda m: {"topics": None}, CLUSTER_AUTH),
    (
        37,
        3,
        lambda m: {
            "topics": (m.CreatePartitionsTopic(name=TOPIC, count=3, assignments=None),),
            "timeout": TIMEOUT,
            "validate_only": False,
        },
        TOPIC_AUTH,
    ),
    (42, 2, lambda m: {"groups_names": (GROUP,)}, GROUP_AUTH),
    (
        43,
        2,
        lambda m: {
            "election_type": 0,
            "topic_partitions": (m.TopicPartitions(topic=TOPIC, partitions=(0,)),),
            "timeout": TIMEOUT,
        },
        CLUSTER_AUTH,
    ),
    (
        44,
        1,
        lambda m: {
            "resources": (
                m.AlterConfigsResource(
                    resource_type=2,
                    resource_name=TOPIC,
                    configs=(
                        m.AlterableConfig(name="retention.ms", config_operation=0, value="1000"),
                    ),
                ),
            ),
            "validate_only": False,
        },
        TOPIC_AUTH,
    ),
    (
        45,
        0,
        lambda m: {
            "timeout": TIMEOUT,
            "topics": (
                m.ReassignableTopic(
                    name=TOPIC,
                    partitions=(m.ReassignablePartition(partition_index=0, replicas=(0,)),),
                ),
            ),
        },
        CLUSTER_AUTH,
    ),
    (46, 0, lambda m: {"timeout": TIMEOUT, "topics": None}, CLUSTER_AUTH),
    (
        47,
        0,
        lambda m: {
            "group_id": GROUP,
            "topics": (
                m.OffsetDeleteRequestTopic(
                    name=TOPIC, partitions=(m.OffsetDeleteRequestPartition(partition_index=0),)
                ),
            ),
        },
        GROUP_AUTH,
    ),
    (
        28,
        3,
        lambda m: {
            "transactional_id": "txn",
            "group_id": GROUP,
            "producer_id": 1,
            "producer_epoch": 0,
            "generation_id": -1,
            "member_id": "",
            "group_instance_id": None,
            "topics": (
                m.TxnOffsetCommitRequestTopic(
                    name=TOPIC,
                    partitions=(
                        m.TxnOffsetCommitRequestPartition(
                            partition_index=0,
                            committed_offset=7,
                            committed_leader_epoch=-1,
                            committed_metadata="",
                        ),
                    ),
                ),
            ),
        },
        TXN_AUTH,
    ),
    (50, 0, lambda m: {"users": None}, CLUSTER_AUTH),
    (
        51,
        0,
        lambda m: {
            "deletions": (m.ScramCredentialDeletion(name="alice", mechanism=1),),
            "upsertions": (),
        },
        CLUSTER_AUTH,
    ),
    (
        27,
        1,
        lambda m: {
            "markers": (
                m.WritableTxnMarker(
                    producer_id=1,
                    producer_epoch=0,
                    transaction_result=False,
                    topics=(m.WritableTxnMarkerTopic(name=TOPIC, partition_indexes=(0,)),),
                    coordinator_epoch=0,
                ),
            )
        },
        CLUSTER_AUTH,
    ),
    (
        61,
        0,
        lambda m: {"topics": (m.TopicRequest(name=TOPIC, partition_indexes=(0,)),)},
        TOPIC_AUTH,
    ),
    (
        75,
        0,
        lambda m: {
            "topics": (m.TopicRequest(name=TOPIC),),
            "response_partition_limit": 100,
            "cursor": None,
        },
        TOPIC_AUTH,
    ),
]


def test_every_served_api_has_a_case() -> None:
    served = set(build_registry())
    covered = {key for key, *_rest in CASES} | {16, 60, 65, 66}  # tests below
    assert served - covered - NOT_CHECKED == set()


@pytest.mark.parametrize(
    ("api_key", "version", "fields_of", "expected"),
    CASES,
    ids=[f"{c[0]}-v{c[1]}-{c[3]}" for c in CASES],
)
def test_denied_principal_gets_kafkas_error_and_changes_nothing(
    broker: Broker,
    api_key: int,
    version: int,
    fields_of: Callable[[Any], dict[str, Any]],
    expected: int,
) -> None:
    before = _state(broker)
    body = broker.call(
        DENIED_HOST, api_key, version, **fields_of(request_classes(api_key, version))
    )
    codes = [c for c in error_codes(body) if c != 0]
    assert codes, f"no error in {body}"
    assert set(codes) == {expected}, body
    assert _state(broker) == before


def test_the_admin_host_is_allowed(broker: Broker) -> None:
    """The matrix's control: the same requests from 127.0.0.1 are not refused."""
    assert error_codes(_produce(broker, ADMIN_HOST, b"second")) == [0]
    assert _end_offsets(broker)[1] >= 2


def test_metadata_for_all_topics_hides_what_cannot_be_described(broker: Broker) -> None:
    body = broker.call(
        DENIED_HOST,
        3,
        12,
        topics=None,
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    assert body.topics == ()
    assert TOPIC in _topics(broker)


def test_list_groups_lists_only_describable_groups(broker: Broker) -> None:
    denied = broker.call(DENIED_HOST, 16, 4, states_filter=())
    allowed = broker.admin(16, 4, states_filter=())
    assert denied.groups == ()
    assert [g.group_id for g in allowed.groups] == [GROUP]


def test_list_transactions_lists_only_describable_transactional_ids(broker: Broker) -> None:
    with socket.create_connection(
        ("127.0.0.1", broker.port), timeout=10, source_address=(ADMIN_HOST, 0)
    ) as sock:
        await_coordinator(sock, "listed-txn")
    init = broker.admin(
        22,
        4,
        transactional_id="listed-txn",
        transaction_timeout=datetime.timedelta(seconds=60),
        producer_id=-1,
        producer_epoch=-1,
    )
    assert init.error_code == 0, init
    denied = broker.call(DENIED_HOST, 66, 1, state_filters=(), producer_id_filters=())
    allowed = broker.admin(66, 1, state_filters=(), producer_id_filters=())
    assert denied.error_code == 0 and denied.transaction_states == ()
    assert [(t.transactional_id, t.transaction_state) for t in allowed.transaction_states] == [
        ("listed-txn", "Empty")
    ]


def test_describe_transactions_needs_describe_on_the_transactional_id(broker: Broker) -> None:
    with socket.create_connection(
        ("127.0.0.1", broker.port), timeout=10, source_address=(DENIED_HOST, 0)
    ) as sock:
        (denied,) = describe_transactions(sock, ("txn",))
    assert denied.error_code == TXN_AUTH


def test_describe_cluster_reports_no_operations_without_describe(broker: Broker) -> None:
    denied = broker.call(
        DENIED_HOST, 60, 1, include_cluster_authorized_operations=True, endpoint_type=1
    )
    allowed = broker.admin(60, 1, include_cluster_authorized_operations=True, endpoint_type=1)
    assert denied.cluster_authorized_operations == 0
    cluster_ops = {5, 7, 8, 9, 10, 11, 12}
    assert allowed.cluster_authorized_operations == sum(1 << op for op in cluster_ops)


def test_authorized_operations_are_the_principals(broker: Broker) -> None:
    """Metadata's topic_authorized_operations: every topic operation for the admin host (ALL on
    every topic), and the topic is not even described to the denied one."""
    m = request_classes(3, 12)
    request = {
        "topics": (m.MetadataRequestTopic(topic_id=None, name=TOPIC),),
        "allow_auto_topic_creation": False,
        "include_topic_authorized_operations": True,
    }
    [allowed] = broker.admin(3, 12, **request).topics
    [denied] = broker.call(DENIED_HOST, 3, 12, **request).topics
    topic_ops = {3, 4, 5, 6, 7, 8, 10, 11}  # READ ... ALTER_CONFIGS, as AclEntry lists them
    assert allowed.topic_authorized_operations == sum(1 << op for op in topic_ops)
    assert int(denied.error_code.value) == TOPIC_AUTH
    groups = broker.admin(15, 5, groups=(GROUP,), include_authorized_operations=True).groups
    group_ops = {3, 6, 8}  # READ, DELETE, DESCRIBE
    assert groups[0].authorized_operations == sum(1 << op for op in group_ops)


def test_denials_are_audited_once_a_minute_in_kafkas_words(tmp_path: Path) -> None:
    """A fresh broker without ACLs: the same denied Produce three times is one audit line, in
    the broker's log, as Kafka's authorizer logger writes it."""
    process = BrokerProcess(
        tmp_path, overrides={"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer"}
    )
    with process:
        b = Broker(process.port)
        for _ in range(3):
            codes = error_codes(_produce(b, DENIED_HOST, b"x"))
            assert codes == [TOPIC_AUTH]
        output = process.output()
    line = (
        "Principal = User:ANONYMOUS is Denied Operation = Write from host = 127.0.0.2 on"
        " resource = Topic:LITERAL:t for request = Produce with resourceRefCount = 1"
    )
    assert output.count(line) == 1, output[-3000:]
    [logged] = [row for row in output.splitlines() if line in row]
    assert "kafka.authorizer.logger" in logged
