"""CreateTopics through raw frames of every advertised version and through real admin clients.

Each request answers one result per topic, in order, and each topic is created whole or not
at all: the topic exists afterwards (metadata, configs as DescribeConfigs shows them) exactly
when its result says so.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    ConfigResource,
    NewPartitions,
    NewTopic,
    ResourceType,
)
from kafka import KafkaAdminClient
from kafka.admin import NewTopic as KNewTopic

from tests.broker_process import BrokerProcess
from tests.integration import raw_wire

pytestmark = pytest.mark.timeout(120)

TIMEOUT_S = 15.0
CREATE_TOPICS = 19
VERSIONS = range(2, 8)  # what the broker advertises (kio has no v0/v1 schemas)
NONE, INVALID_CONFIG = 0, 40
DYNAMIC_TOPIC_CONFIG = 1


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    directory: Path = tmp_path_factory.mktemp("create-topics-broker")
    with BrokerProcess(directory) as process:
        yield process


@pytest.fixture
def cadmin(broker: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def _creatable(
    version: int,
    name: str,
    *,
    partitions: int = 2,
    factor: int = 1,
    configs: dict[str, str] | None = None,
    assignments: dict[int, list[int]] | None = None,
) -> Any:
    m = raw_wire.request_classes(CREATE_TOPICS, version)
    return m.CreatableTopic(
        name=name,
        num_partitions=partitions,
        replication_factor=factor,
        assignments=tuple(
            m.CreatableReplicaAssignment(partition_index=p, broker_ids=tuple(brokers))
            for p, brokers in (assignments or {}).items()
        ),
        configs=tuple(m.CreatableTopicConfig(name=k, value=v) for k, v in (configs or {}).items()),
    )


def _create(broker: BrokerProcess, version: int, *topics: Any, validate_only: bool = False) -> Any:
    with raw_wire.connect(broker.port) as sock:
        return raw_wire.call(
            sock,
            CREATE_TOPICS,
            version,
            topics=topics,
            timeout=dt.timedelta(seconds=10),
            validate_only=validate_only,
        )


def _described(cadmin: AdminClient, topic: str) -> dict[str, Any]:
    resource = ConfigResource(ResourceType.TOPIC, topic)
    entries: dict[str, Any] = cadmin.describe_configs([resource])[resource].result(
        timeout=TIMEOUT_S
    )
    return entries


def _partitions(cadmin: AdminClient, topic: str) -> dict[int, list[int]]:
    metadata = cadmin.list_topics(topic=topic, timeout=TIMEOUT_S)
    described = metadata.topics[topic]
    if described.error is not None:
        raise AssertionError(f"{topic}: {described.error}")
    return {p: list(described.partitions[p].replicas) for p in sorted(described.partitions)}


def _exists(cadmin: AdminClient, topic: str) -> bool:
    return topic in cadmin.list_topics(timeout=TIMEOUT_S).topics


# ------------------------------------------------------------------ every version
@pytest.mark.parametrize("with_configs", [False, True], ids=["no-configs", "configs"])
@pytest.mark.parametrize("version", VERSIONS)
def test_every_version_answers_and_creates_every_topic(
    broker: BrokerProcess, cadmin: AdminClient, version: int, with_configs: bool
) -> None:
    configs = {"retention.ms": "3600000", "cleanup.policy": "delete"} if with_configs else {}
    names = [_name(f"v{version}") for _ in range(3)]
    answer = _create(broker, version, *(_creatable(version, n, configs=configs) for n in names))

    assert [(t.name, t.error_code.value) for t in answer.topics] == [(n, NONE) for n in names]
    for name in names:
        assert _partitions(cadmin, name) == {0: [0], 1: [0]}
        described = _described(cadmin, name)
        expected = "3600000" if with_configs else str(7 * 24 * 3600 * 1000)
        assert described["retention.ms"].value == expected
    if version >= 5:  # v5+ answers the new topic's effective configs with their sources
        (first, *_rest) = answer.topics
        assert (first.num_partitions, first.replication_factor) == (2, 1)
        configs_by_name = {c.name: c for c in first.configs}
        assert configs_by_name["retention.ms"].value == described["retention.ms"].value
        if with_configs:
            assert configs_by_name["retention.ms"].config_source == DYNAMIC_TOPIC_CONFIG


@pytest.mark.parametrize("version", VERSIONS)
def test_a_bad_topic_fails_alone_and_leaves_nothing(
    broker: BrokerProcess, cadmin: AdminClient, version: int
) -> None:
    good_before, bad, good_after = _name("good"), _name("bad"), _name("good")
    answer = _create(
        broker,
        version,
        _creatable(version, good_before, configs={"retention.ms": "60000"}),
        _creatable(version, bad, configs={"retention.ms": "60000", "segment.bytes": "nope"}),
        _creatable(version, good_after, configs={"retention.ms": "60000"}),
    )

    assert [(t.name, t.error_code.value) for t in answer.topics] == [
        (good_before, NONE),
        (bad, INVALID_CONFIG),
        (good_after, NONE),
    ]
    assert "segment.bytes" in answer.topics[1].error_message
    assert _exists(cadmin, good_before)
    assert _exists(cadmin, good_after)
    assert not _exists(cadmin, bad)


@pytest.mark.parametrize("version", VERSIONS)
def test_validate_only_answers_every_topic_and_creates_none(
    broker: BrokerProcess, cadmin: AdminClient, version: int
) -> None:
    names = [_name("dry") for _ in range(2)]
    answer = _create(
        broker,
        version,
        *(_creatable(version, n, configs={"retention.ms": "60000"}) for n in names),
        validate_only=True,
    )

    assert [(t.name, t.error_code.value) for t in answer.topics] == [(n, NONE) for n in names]
    assert not any(_exists(cadmin, n) for n in names)


# ------------------------------------------------------------------ real admin clients
def test_confluent_admin_creates_several_topics_with_configs(cadmin: AdminClient) -> None:
    names = [_name("confluent") for _ in range(3)]
    futures = cadmin.create_topics(
        [
            NewTopic(n, num_partitions=3, replication_factor=1, config={"retention.ms": "120000"})
            for n in names
        ],
        request_timeout=TIMEOUT_S,
    )

    for name in names:
        futures[name].result(timeout=TIMEOUT_S)
        assert len(_partitions(cadmin, name)) == 3
        assert _described(cadmin, name)["retention.ms"].value == "120000"


def test_confluent_admin_reports_the_one_bad_topic(cadmin: AdminClient) -> None:
    good, bad = _name("confluent"), _name("confluent")
    futures = cadmin.create_topics(
        [
            NewTopic(good, num_partitions=1, replication_factor=1, config={"retention.ms": "1"}),
            NewTopic(bad, num_partitions=1, replication_factor=1, config={"retention.ms": "x"}),
        ],
        request_timeout=TIMEOUT_S,
    )

    futures[good].result(timeout=TIMEOUT_S)
    with pytest.raises(KafkaException) as raised:
        futures[bad].result(timeout=TIMEOUT_S)
    error: KafkaError = raised.value.args[0]
    assert error.code() == KafkaError.INVALID_CONFIG
    assert _exists(cadmin, good)
    assert not _exists(cadmin, bad)


# ------------------------------------------------------------------ manual replica assignments
INVALID_REQUEST, INVALID_REPLICA_ASSIGNMENT = 42, 39


def test_confluent_admin_creates_a_topic_from_a_replica_assignment(cadmin: AdminClient) -> None:
    name = _name("assigned")
    futures = cadmin.create_topics(
        [NewTopic(name, num_partitions=3, replica_assignment=[[0], [0], [0]])],
        request_timeout=TIMEOUT_S,
    )

    futures[name].result(timeout=TIMEOUT_S)
    assert _partitions(cadmin, name) == {0: [0], 1: [0], 2: [0]}


def test_kafka_python_creates_a_topic_from_a_replica_assignment(
    broker: BrokerProcess, cadmin: AdminClient
) -> None:
    name = _name("assigned")
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10_000)
    try:
        admin.create_topics([KNewTopic(name, -1, -1, replica_assignments={0: [0], 1: [0]})])
    finally:
        admin.close()
    assert _partitions(cadmin, name) == {0: [0], 1: [0]}


@pytest.mark.parametrize("version", VERSIONS)
def test_bad_replica_assignments_are_refused_with_kafkas_errors(
    broker: BrokerProcess, cadmin: AdminClient, version: int
) -> None:
    cases = {
        _name("unknown-broker"): (
            {0: [0], 1: [7]},
            -1,
            INVALID_REPLICA_ASSIGNMENT,
            "The manual partition assignment includes broker 7, but no such broker is registered.",
        ),
        _name("twice"): (
            {0: [0, 0]},
            -1,
            INVALID_REPLICA_ASSIGNMENT,
            "The manual partition assignment includes the broker 0 more than once.",
        ),
        _name("gap"): (
            {0: [0], 2: [0]},
            -1,
            INVALID_REPLICA_ASSIGNMENT,
            "partitions should be a consecutive 0-based integer sequence",
        ),
        _name("empty"): (
            {0: []},
            -1,
            INVALID_REPLICA_ASSIGNMENT,
            "The manual partition assignment includes an empty replica list.",
        ),
        _name("counted"): (
            {0: [0]},
            1,
            INVALID_REQUEST,
            "A manual partition assignment was specified, but numPartitions was not set to -1.",
        ),
    }
    answer = _create(
        broker,
        version,
        *(
            _creatable(version, name, partitions=partitions, factor=-1, assignments=assignment)
            for name, (assignment, partitions, _code, _message) in cases.items()
        ),
    )

    assert [(t.name, t.error_code.value, t.error_message) for t in answer.topics] == [
        (name, code, message) for name, (_a, _p, code, message) in cases.items()
    ]
    assert not any(_exists(cadmin, name) for name in cases)


def test_create_partitions_follows_a_replica_assignment(cadmin: AdminClient) -> None:
    name = _name("grown")
    cadmin.create_topics([NewTopic(name, num_partitions=1, replication_factor=1)])[name].result(
        timeout=TIMEOUT_S
    )

    cadmin.create_partitions([NewPartitions(name, 3, replica_assignment=[[0], [0]])])[name].result(
        timeout=TIMEOUT_S
    )
    unknown = cadmin.create_partitions([NewPartitions(name, 4, replica_assignment=[[5]])])[name]

    with pytest.raises(KafkaException) as raised:
        unknown.result(timeout=TIMEOUT_S)
    error: KafkaError = raised.value.args[0]
    assert error.code() == KafkaError.INVALID_REPLICA_ASSIGNMENT
    assert "includes broker 5, but no such broker is registered" in error.str()
    assert _partitions(cadmin, name) == {0: [0], 1: [0], 2: [0]}


# ------------------------------------------------------------------ names
INVALID_TOPIC_EXCEPTION, TOPIC_ALREADY_EXISTS = 17, 36


@pytest.mark.parametrize("version", VERSIONS)
def test_internal_topics_cannot_be_created_by_clients(
    broker: BrokerProcess, cadmin: AdminClient, version: int
) -> None:
    internal = ["__remote_log_metadata", "__transaction_state", "__cluster_metadata"]
    answer = _create(broker, version, *(_creatable(version, n, partitions=1) for n in internal))

    assert [(t.name, t.error_code.value, t.error_message) for t in answer.topics] == [
        (n, INVALID_REQUEST, f"Creation of internal topic {n} is prohibited.") for n in internal
    ]
    assert not any(_exists(cadmin, n) for n in internal)


def test_consumer_offsets_cannot_be_created_by_confluent_admin(cadmin: AdminClient) -> None:
    future = cadmin.create_topics(
        [NewTopic("__consumer_offsets", num_partitions=1, replication_factor=1)],
        request_timeout=TIMEOUT_S,
    )["__consumer_offsets"]

    with pytest.raises(KafkaException) as raised:
        future.result(timeout=TIMEOUT_S)
    error: KafkaError = raised.value.args[0]
    assert error.code() == KafkaError.INVALID_REQUEST
    assert "Creation of internal topic __consumer_offsets is prohibited." in error.str()


def test_names_colliding_by_dot_and_underscore_are_refused(
    broker: BrokerProcess, cadmin: AdminClient
) -> None:
    base = _name("collide").replace("-", "")
    dotted, underscored = f"{base}.events", f"{base}_events"
    first = _create(broker, 7, _creatable(7, dotted))
    again = _create(broker, 7, _creatable(7, dotted), _creatable(7, underscored))

    assert first.topics[0].error_code.value == NONE
    assert [(t.name, t.error_code.value, t.error_message) for t in again.topics] == [
        (dotted, TOPIC_ALREADY_EXISTS, f"Topic '{dotted}' already exists."),
        (
            underscored,
            INVALID_TOPIC_EXCEPTION,
            f"Topic '{underscored}' collides with existing topic: {dotted}",
        ),
    ]
    assert not _exists(cadmin, underscored)
