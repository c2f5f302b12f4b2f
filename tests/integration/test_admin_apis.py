"""Admin APIs through real admin clients (kafka-python and confluent-kafka/librdkafka).

CreatePartitions, DeleteRecords, DescribeConfigs, IncrementalAlterConfigs, AlterConfigs,
DescribeCluster and DescribeLogDirs against one broker process, each checked by what a user
would see next: partition counts in metadata and producible partitions, the earliest offset
a consumer gets, configs with their sources, retention acting at once, configs surviving a
restart, and Kafka's errors.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka.admin import AIOKafkaAdminClient, RecordsToDelete
from aiokafka.admin import NewPartitions as ANewPartitions
from aiokafka.admin.config_resource import ConfigResource as AConfigResource
from aiokafka.admin.config_resource import ConfigResourceType as AConfigResourceType
from aiokafka.structs import TopicPartition as ATopicPartition
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka import TopicPartition as CTopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    OffsetSpec,
    ResourceType,
)
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KTopicPartition
from kafka import errors as kafka_errors
from kafka.admin import ConfigResource as KConfigResource
from kafka.admin import NewPartitions as KNewPartitions
from kafka.admin import NewTopic

from tests.broker_process import BrokerProcess
from tests.integration import raw_wire

pytestmark = pytest.mark.timeout(120)

STATIC_SEGMENT_BYTES = 8 * 1024 * 1024  # set in server.properties: a STATIC_BROKER_CONFIG
TIMEOUT_S = 15.0


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    directory: Path = tmp_path_factory.mktemp("admin-broker")
    with BrokerProcess(
        directory,
        overrides={
            "log.segment.bytes": str(STATIC_SEGMENT_BYTES),
            "log.retention.check.interval.ms": "200",
        },
    ) as process:
        yield process


@pytest.fixture
def admin(broker: BrokerProcess) -> Iterator[KafkaAdminClient]:
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10_000)
    yield client
    client.close()


@pytest.fixture
def cadmin(broker: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def _topic(
    admin: KafkaAdminClient, partitions: int = 1, configs: dict[str, str] | None = None
) -> str:
    name = f"admin-{uuid.uuid4().hex[:10]}"
    admin.create_topics([NewTopic(name, partitions, 1, topic_configs=configs or {})])
    return name


def _produce(broker: BrokerProcess, topic: str, count: int, **send: object) -> list[int]:
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=0)
    futures = [producer.send(topic, value=b"v%d" % i, **send) for i in range(count)]  # type: ignore[arg-type]
    offsets = [f.get(timeout=TIMEOUT_S).offset for f in futures]
    producer.close()
    return offsets


def _consume_first_offset(broker: BrokerProcess, topic: str, partition: int = 0) -> int:
    consumer = KafkaConsumer(
        bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest", enable_auto_commit=False
    )
    tp = KTopicPartition(topic, partition)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                if records:
                    return int(records[0].offset)
        raise AssertionError(f"nothing consumed from {topic}-{partition}")
    finally:
        consumer.close()


def _earliest(cadmin: AdminClient, topic: str, partition: int = 0) -> int:
    tp = CTopicPartition(topic, partition)
    result = cadmin.list_offsets({tp: OffsetSpec.earliest()})[tp].result(timeout=TIMEOUT_S)
    return int(result.offset)


def _partition_count(admin: KafkaAdminClient, topic: str) -> int:
    (described,) = admin.describe_topics([topic])
    return len(described["partitions"])


def _kafka_error(future: object) -> KafkaError:
    with pytest.raises(KafkaException) as raised:
        future.result(timeout=TIMEOUT_S)  # type: ignore[attr-defined]
    error: KafkaError = raised.value.args[0]
    return error


# ------------------------------------------------------------------ CreatePartitions
def test_create_partitions_with_kafka_python(
    broker: BrokerProcess, admin: KafkaAdminClient
) -> None:
    topic = _topic(admin)
    admin.create_partitions({topic: KNewPartitions(3)}, validate_only=True)
    assert _partition_count(admin, topic) == 1

    admin.create_partitions({topic: KNewPartitions(3)})

    assert _partition_count(admin, topic) == 3
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
    metadata = producer.send(topic, value=b"to the new partition", partition=2).get(TIMEOUT_S)
    producer.close()
    assert (metadata.partition, metadata.offset) == (2, 0)
    with pytest.raises(kafka_errors.InvalidPartitionsError):
        admin.create_partitions({topic: KNewPartitions(2)})
    with pytest.raises(kafka_errors.UnknownTopicOrPartitionError):
        admin.create_partitions({f"missing-{uuid.uuid4().hex}": KNewPartitions(2)})


def test_create_partitions_with_confluent(
    broker: BrokerProcess, admin: KafkaAdminClient, cadmin: AdminClient
) -> None:
    topic = _topic(admin, partitions=2)
    futures = cadmin.create_partitions([NewPartitions(topic, 5)])
    futures[topic].result(timeout=TIMEOUT_S)

    assert len(cadmin.list_topics(topic, timeout=TIMEOUT_S).topics[topic].partitions) == 5
    offsets = _produce(broker, topic, 1, partition=4)
    assert offsets == [0]
    same = cadmin.create_partitions([NewPartitions(topic, 5)])[topic]
    assert _kafka_error(same).code() == KafkaError.INVALID_PARTITIONS
    missing = f"missing-{uuid.uuid4().hex}"
    unknown = cadmin.create_partitions([NewPartitions(missing, 3)])[missing]
    assert _kafka_error(unknown).code() == KafkaError.UNKNOWN_TOPIC_OR_PART


# ------------------------------------------------------------------ DeleteRecords
def test_delete_records_with_kafka_python(
    broker: BrokerProcess, admin: KafkaAdminClient, cadmin: AdminClient
) -> None:
    topic = _topic(admin)
    _produce(broker, topic, 10)
    tp = KTopicPartition(topic, 0)

    result = admin.delete_records({tp: 4})

    assert result[tp]["low_watermark"] == 4
    assert _earliest(cadmin, topic) == 4
    assert _consume_first_offset(broker, topic) == 4
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap)
    assert consumer.beginning_offsets([tp]) == {tp: 4}
    consumer.close()
    assert admin.delete_records({tp: 2})[tp]["low_watermark"] == 4  # never moves back
    with pytest.raises(kafka_errors.OffsetOutOfRangeError):
        admin.delete_records({tp: 11})
    assert admin.delete_records({tp: -1})[tp]["low_watermark"] == 10  # -1: the high watermark


def test_delete_records_with_confluent(
    broker: BrokerProcess, admin: KafkaAdminClient, cadmin: AdminClient
) -> None:
    topic = _topic(admin)
    _produce(broker, topic, 8)

    futures = cadmin.delete_records([CTopicPartition(topic, 0, 5)])
    (future,) = futures.values()
    deleted = future.result(timeout=TIMEOUT_S)

    assert deleted.low_watermark == 5
    assert _earliest(cadmin, topic) == 5
    assert _consume_first_offset(broker, topic) == 5
    (beyond,) = cadmin.delete_records([CTopicPartition(topic, 0, 100)]).values()
    assert _kafka_error(beyond).code() == KafkaError.OFFSET_OUT_OF_RANGE
    (unknown,) = cadmin.delete_records([CTopicPartition(topic, 7, 1)]).values()
    # librdkafka finds no leader for a partition missing from the metadata and does not ask.
    assert _kafka_error(unknown).code() == KafkaError._NOENT


def test_delete_records_refused_on_a_compacted_topic(
    broker: BrokerProcess, admin: KafkaAdminClient
) -> None:
    topic = _topic(admin, configs={"cleanup.policy": "compact"})
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
    producer.send(topic, key=b"k", value=b"v").get(TIMEOUT_S)
    producer.close()
    with pytest.raises(kafka_errors.PolicyViolationError):
        admin.delete_records({KTopicPartition(topic, 0): 1})


# ------------------------------------------------------------------ DescribeConfigs
def test_describe_configs_with_kafka_python_shows_sources(admin: KafkaAdminClient) -> None:
    topic = _topic(admin, configs={"retention.ms": "3600000"})

    described = admin.describe_configs(
        [KConfigResource("TOPIC", topic)], include_synonyms=True, config_filter="all"
    )

    configs = described["topic"][topic]
    assert configs["retention.ms"]["value"] == "3600000"
    assert configs["retention.ms"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"
    assert configs["retention.ms"]["read_only"] is False
    assert [s["source"] for s in configs["retention.ms"]["synonyms"]] == [
        "DYNAMIC_TOPIC_CONFIG",
        "DEFAULT_CONFIG",
    ]
    assert configs["segment.bytes"]["value"] == str(STATIC_SEGMENT_BYTES)
    assert configs["segment.bytes"]["config_source"] == "STATIC_BROKER_CONFIG"
    assert configs["segment.bytes"]["synonyms"][0] == {
        "name": "log.segment.bytes",
        "value": str(STATIC_SEGMENT_BYTES),
        "source": "STATIC_BROKER_CONFIG",
    }
    assert configs["cleanup.policy"]["config_source"] == "DEFAULT_CONFIG"
    assert configs["cleanup.policy"]["config_type"] == "LIST"
    assert configs["retention.ms"]["config_type"] == "LONG"
    modified = admin.describe_configs([KConfigResource("TOPIC", topic)])  # only overrides
    assert set(modified["topic"][topic]) == {"retention.ms"}
    filtered = admin.describe_configs(
        [KConfigResource("TOPIC", topic, ["min.insync.replicas"])], config_filter="all"
    )
    assert set(filtered["topic"][topic]) == {"min.insync.replicas"}


def test_describe_broker_configs_with_kafka_python(
    broker: BrokerProcess, admin: KafkaAdminClient
) -> None:
    described = admin.describe_configs([KConfigResource("BROKER", "0")], config_filter="all")

    configs = described["broker"]["0"]
    assert configs["log.segment.bytes"]["value"] == str(STATIC_SEGMENT_BYTES)
    assert configs["log.segment.bytes"]["config_source"] == "STATIC_BROKER_CONFIG"
    assert configs["log.dirs"]["value"] == str(broker.log_dir)
    assert configs["log.retention.ms"]["config_source"] == "DEFAULT_CONFIG"
    assert configs["log.retention.ms"]["value"] == str(7 * 24 * 3600 * 1000)
    assert configs["log.dirs"]["read_only"]  # Kafka cannot change it while running
    assert not configs["log.retention.ms"]["read_only"]  # a dynamic broker config in Kafka


def test_describe_configs_with_confluent(admin: KafkaAdminClient, cadmin: AdminClient) -> None:
    topic = _topic(admin, configs={"max.message.bytes": "2048"})
    resource = ConfigResource(ResourceType.TOPIC, topic)

    entries = cadmin.describe_configs([resource])[resource].result(timeout=TIMEOUT_S)

    assert entries["max.message.bytes"].value == "2048"
    assert entries["max.message.bytes"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert entries["segment.bytes"].source == ConfigSource.STATIC_BROKER_CONFIG.value
    assert entries["retention.bytes"].value == "-1"
    assert entries["retention.bytes"].source == ConfigSource.DEFAULT_CONFIG.value
    assert not entries["retention.bytes"].is_read_only
    missing = ConfigResource(ResourceType.TOPIC, f"missing-{uuid.uuid4().hex}")
    error = _kafka_error(cadmin.describe_configs([missing])[missing])
    assert error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART


# ------------------------------------------------------------------ (Incremental)AlterConfigs
def test_incremental_alter_configs_with_confluent(
    admin: KafkaAdminClient, cadmin: AdminClient
) -> None:
    topic = _topic(admin)

    def alter(*entries: ConfigEntry) -> object:
        resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=list(entries))
        return cadmin.incremental_alter_configs([resource])[resource]

    def describe() -> dict[str, ConfigEntry]:
        resource = ConfigResource(ResourceType.TOPIC, topic)
        entries: dict[str, ConfigEntry] = cadmin.describe_configs([resource])[resource].result(
            timeout=TIMEOUT_S
        )
        return entries

    alter(
        ConfigEntry("retention.ms", "120000", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND),
    ).result(timeout=TIMEOUT_S)  # type: ignore[attr-defined]
    configs = describe()
    assert configs["retention.ms"].value == "120000"
    assert configs["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert configs["cleanup.policy"].value == "delete,compact"

    alter(
        ConfigEntry("cleanup.policy", "delete", incremental_operation=AlterConfigOpType.SUBTRACT),
        ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE),
    ).result(timeout=TIMEOUT_S)  # type: ignore[attr-defined]
    configs = describe()
    assert configs["cleanup.policy"].value == "compact"
    assert configs["retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value

    bad = alter(ConfigEntry("retention.ms", "abc", incremental_operation=AlterConfigOpType.SET))
    error = _kafka_error(bad)
    assert error.code() == KafkaError.INVALID_CONFIG
    assert "retention.ms" in error.str()
    not_a_list = alter(
        ConfigEntry("retention.ms", "1", incremental_operation=AlterConfigOpType.APPEND)
    )
    assert _kafka_error(not_a_list).code() == KafkaError.INVALID_CONFIG
    unknown_key = alter(
        ConfigEntry("no.such.key", "1", incremental_operation=AlterConfigOpType.SET)
    )
    assert "no.such.key" in _kafka_error(unknown_key).str()
    assert describe()["retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value


def test_alter_configs_with_kafka_python_validate_only_and_legacy(
    admin: KafkaAdminClient,
) -> None:
    topic = _topic(admin, configs={"retention.bytes": "1000000"})

    result = admin.alter_configs(
        [KConfigResource("TOPIC", topic, {"retention.ms": "60000"})], validate_only=True
    )
    assert result == {"topic": {topic: "OK"}}
    assert (
        "retention.ms"
        not in admin.describe_configs([KConfigResource("TOPIC", topic)])["topic"][topic]
    )

    admin.alter_configs([KConfigResource("TOPIC", topic, {"retention.ms": "60000"})])
    modified = admin.describe_configs([KConfigResource("TOPIC", topic)])["topic"][topic]
    assert {k: v["value"] for k, v in modified.items()} == {
        "retention.bytes": "1000000",
        "retention.ms": "60000",
    }

    # Over the legacy AlterConfigs, kafka-python sends the other overrides along.
    admin.alter_configs(
        [KConfigResource("TOPIC", topic, {"segment.ms": "3600000"})], incremental=False
    )
    modified = admin.describe_configs([KConfigResource("TOPIC", topic)])["topic"][topic]
    assert {k: v["value"] for k, v in modified.items()} == {
        "retention.bytes": "1000000",
        "retention.ms": "60000",
        "segment.ms": "3600000",
    }

    rejected = admin.alter_configs([KConfigResource("TOPIC", topic, {"segment.ms": "soon"})])
    assert rejected["topic"][topic].startswith("[Error 40] InvalidConfigurationError")
    assert "segment.ms" in rejected["topic"][topic]


def test_changed_retention_applies_to_the_live_log_at_once(
    broker: BrokerProcess, admin: KafkaAdminClient, cadmin: AdminClient
) -> None:
    topic = _topic(admin, configs={"segment.bytes": "1024"})
    old_ms = int(time.time() * 1000) - 3_600_000
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
    for i in range(12):  # an hour old, one 500-byte batch each: several 1 KiB segments
        producer.send(topic, value=b"%03d" % i * 160, timestamp_ms=old_ms).get(TIMEOUT_S)
    producer.close()
    assert _earliest(cadmin, topic) == 0

    admin.alter_configs([KConfigResource("TOPIC", topic, {"retention.ms": "60000"})])

    deadline = time.monotonic() + TIMEOUT_S
    while _earliest(cadmin, topic) == 0 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _earliest(cadmin, topic) > 0


# ------------------------------------------------------------------ DescribeCluster
def test_describe_cluster_with_both_clients(
    broker: BrokerProcess, admin: KafkaAdminClient, cadmin: AdminClient
) -> None:
    described = admin.describe_cluster()
    result = cadmin.describe_cluster().result(timeout=TIMEOUT_S)

    assert described["controller_id"] == 0
    assert [(b["broker_id"], b["host"], b["port"]) for b in described["brokers"]] == [
        (0, "127.0.0.1", broker.port)
    ]
    metadata_cluster_id = cadmin.list_topics(timeout=TIMEOUT_S).cluster_id
    assert described["cluster_id"] == result.cluster_id == metadata_cluster_id
    assert result.controller.id == 0
    assert [(n.id, n.host, n.port) for n in result.nodes] == [(0, "127.0.0.1", broker.port)]


# ------------------------------------------------------------------ DescribeLogDirs
def test_describe_log_dirs_with_kafka_python(
    broker: BrokerProcess, admin: KafkaAdminClient
) -> None:
    topic = _topic(admin, partitions=2)
    _produce(broker, topic, 5, partition=1)

    (answer,) = admin.describe_log_dirs({topic: [0, 1]})

    assert answer["broker"] == 0
    (log_dir,) = answer["log_dirs"]
    assert log_dir["error_code"] == 0
    assert Path(log_dir["log_dir"]) == broker.log_dir.resolve()
    assert log_dir["total_bytes"] >= log_dir["usable_bytes"] > 0
    (described,) = log_dir["topics"]
    sizes = {p["partition_index"]: p["partition_size"] for p in described["partitions"]}
    assert sizes[0] == 0
    assert sizes[1] > 0
    assert all(p["offset_lag"] == 0 and not p["is_future_key"] for p in described["partitions"])


# ------------------------------------------------------------------ aiokafka (older versions)
def test_aiokafka_admin_client(broker: BrokerProcess, admin: KafkaAdminClient) -> None:
    topic = _topic(admin, configs={"retention.ms": "7200000"})
    _produce(broker, topic, 4)

    async def scenario() -> tuple[Any, Any, Any]:
        client = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
        await client.start()
        try:
            await client.create_partitions({topic: ANewPartitions(2)})
            described = await client.describe_configs(
                [AConfigResource(AConfigResourceType.TOPIC, topic)]
            )
            deleted = await client.delete_records({ATopicPartition(topic, 0): RecordsToDelete(3)})
            return described, deleted, await client.describe_cluster()
        finally:
            await client.close()

    described, deleted, cluster = asyncio.run(scenario())

    assert _partition_count(admin, topic) == 2
    ((_, _, _, _, entries),) = described[0].resources
    by_name = {e[0]: (e[1], e[3]) for e in entries}
    assert by_name["retention.ms"] == ("7200000", 1)  # DYNAMIC_TOPIC_CONFIG
    assert by_name["retention.bytes"] == ("-1", 5)  # DEFAULT_CONFIG
    assert deleted == {ATopicPartition(topic, 0): 3}
    assert cluster["controller_id"] == 0


# ------------------------------------------------------------------ every version, raw wire
NONE, INVALID_REQUEST, INVALID_CONFIG = 0, 42, 40
UNKNOWN_TOPIC, INVALID_REPLICA_ASSIGNMENT, MISMATCHED_ENDPOINT_TYPE = 3, 39, 114
TOPIC_RESOURCE, BROKER_RESOURCE = 2, 4


def _call(broker: BrokerProcess, api_key: int, version: int, **fields: object) -> Any:
    with raw_wire.connect(broker.port) as sock:
        return raw_wire.call(sock, api_key, version, **fields)


def _classes(api_key: int, version: int) -> Any:
    return raw_wire.request_classes(api_key, version)


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_create_partitions_every_version(
    broker: BrokerProcess, admin: KafkaAdminClient, version: int
) -> None:
    topic = _topic(admin)
    m = _classes(37, version)
    grow = m.CreatePartitionsTopic(name=topic, count=2, assignments=None)
    answer = _call(
        broker, 37, version, topics=(grow,), timeout=dt.timedelta(seconds=5), validate_only=False
    )
    assert [(r.name, r.error_code.value) for r in answer.results] == [(topic, NONE)]
    assert _partition_count(admin, topic) == 2

    twice = m.CreatePartitionsTopic(name=topic, count=3, assignments=None)
    wrong = m.CreatePartitionsTopic(
        name=topic, count=4, assignments=(m.CreatePartitionsAssignment(broker_ids=(0,)),)
    )
    answer = _call(
        broker,
        37,
        version,
        topics=(twice, twice),
        timeout=dt.timedelta(seconds=5),
        validate_only=False,
    )
    assert [r.error_code.value for r in answer.results] == [INVALID_REQUEST, INVALID_REQUEST]
    answer = _call(
        broker, 37, version, topics=(wrong,), timeout=dt.timedelta(seconds=5), validate_only=False
    )
    assert answer.results[0].error_code.value == INVALID_REPLICA_ASSIGNMENT
    assert _partition_count(admin, topic) == 2


@pytest.mark.parametrize("version", [0, 1, 2])
def test_delete_records_every_version(
    broker: BrokerProcess, admin: KafkaAdminClient, version: int
) -> None:
    topic = _topic(admin)
    _produce(broker, topic, 3)
    m = _classes(21, version)
    request_topic = m.DeleteRecordsTopic(
        name=topic,
        partitions=(
            m.DeleteRecordsPartition(partition_index=0, offset=2),
            m.DeleteRecordsPartition(partition_index=9, offset=0),
        ),
    )
    answer = _call(broker, 21, version, topics=(request_topic,), timeout=dt.timedelta(seconds=5))
    (result,) = answer.topics
    assert [
        (p.partition_index, p.low_watermark, p.error_code.value) for p in result.partitions
    ] == [
        (0, 2, NONE),
        (9, -1, UNKNOWN_TOPIC),
    ]


@pytest.mark.parametrize("version", [1, 2, 3, 4])
def test_describe_configs_every_version(
    broker: BrokerProcess, admin: KafkaAdminClient, version: int
) -> None:
    topic = _topic(admin, configs={"retention.ms": "1000"})
    m = _classes(32, version)
    resources = (
        m.DescribeConfigsResource(
            resource_type=TOPIC_RESOURCE, resource_name=topic, configuration_keys=("retention.ms",)
        ),
        m.DescribeConfigsResource(
            resource_type=BROKER_RESOURCE, resource_name="7", configuration_keys=None
        ),
        m.DescribeConfigsResource(
            resource_type=BROKER_RESOURCE, resource_name="", configuration_keys=None
        ),
        m.DescribeConfigsResource(
            resource_type=TOPIC_RESOURCE, resource_name="no-such", configuration_keys=None
        ),
    )
    answer = _call(
        broker, 32, version, resources=resources, include_synonyms=True, include_documentation=True
    )
    own, other_broker, default_broker, unknown = answer.results
    (config,) = own.configs
    assert (config.name, config.value, config.config_source, config.read_only) == (
        "retention.ms",
        "1000",
        1,
        False,
    )
    assert [(s.name, s.source) for s in config.synonyms] == [
        ("retention.ms", 1),
        ("log.retention.ms", 5),
    ]
    if version >= 3:
        assert config.config_type == 5  # LONG
        assert config.documentation and "retained" in config.documentation
    assert other_broker.error_code.value == INVALID_REQUEST
    assert "expected 0" in other_broker.error_message
    assert (default_broker.error_code.value, default_broker.configs) == (NONE, ())
    assert unknown.error_code.value == UNKNOWN_TOPIC


@pytest.mark.parametrize("version", [0, 1, 2])
def test_legacy_alter_configs_replaces_every_override(
    broker: BrokerProcess, admin: KafkaAdminClient, version: int
) -> None:
    topic = _topic(admin, configs={"retention.ms": "1000", "retention.bytes": "4096"})
    m = _classes(33, version)

    def resource(name: str, **configs: str | None) -> Any:
        return m.AlterConfigsResource(
            resource_type=TOPIC_RESOURCE,
            resource_name=name,
            configs=tuple(
                m.AlterableConfig(name=k.replace("_", "."), value=v) for k, v in configs.items()
            ),
        )

    answer = _call(
        broker, 33, version, resources=(resource(topic, segment_ms="60000"),), validate_only=False
    )
    assert [r.error_code.value for r in answer.responses] == [NONE]
    modified = admin.describe_configs([KConfigResource("TOPIC", topic)])["topic"][topic]
    assert {k: v["value"] for k, v in modified.items()} == {"segment.ms": "60000"}

    bad = _call(
        broker, 33, version, resources=(resource(topic, segment_ms="x"),), validate_only=False
    )
    assert bad.responses[0].error_code.value == INVALID_CONFIG
    assert "segment.ms" in bad.responses[0].error_message
    null = _call(
        broker, 33, version, resources=(resource(topic, segment_ms=None),), validate_only=False
    )
    assert null.responses[0].error_code.value == INVALID_REQUEST
    twice = _call(
        broker, 33, version, resources=(resource(topic), resource(topic)), validate_only=False
    )
    assert [r.error_code.value for r in twice.responses] == [INVALID_REQUEST, INVALID_REQUEST]
    missing = _call(broker, 33, version, resources=(resource("no-such"),), validate_only=False)
    assert missing.responses[0].error_code.value == UNKNOWN_TOPIC


@pytest.mark.parametrize("version", [0, 1])
def test_incremental_alter_configs_every_version(
    broker: BrokerProcess, admin: KafkaAdminClient, version: int
) -> None:
    topic = _topic(admin)
    m = _classes(44, version)

    def resource(resource_type: int, name: str, *ops: tuple[str, int, str | None]) -> Any:
        return m.AlterConfigsResource(
            resource_type=resource_type,
            resource_name=name,
            configs=tuple(
                m.AlterableConfig(name=n, config_operation=o, value=v) for n, o, v in ops
            ),
        )

    answer = _call(
        broker,
        44,
        version,
        resources=(
            resource(TOPIC_RESOURCE, topic, ("retention.ms", 0, "5000")),
            resource(TOPIC_RESOURCE, "no-such", ("retention.ms", 0, "5000")),
            resource(BROKER_RESOURCE, "0", ("log.dirs", 0, "/elsewhere")),
            resource(TOPIC_RESOURCE, topic + "x", ("a", 9, "1")),
        ),
        validate_only=False,
    )
    assert [r.error_code.value for r in answer.responses] == [
        NONE,
        UNKNOWN_TOPIC,
        INVALID_REQUEST,
        INVALID_REQUEST,
    ]
    assert answer.responses[2].error_message == (
        "Cannot update these configs dynamically: Set(log.dirs)"
    )
    modified = admin.describe_configs([KConfigResource("TOPIC", topic)])["topic"][topic]
    assert {k: v["value"] for k, v in modified.items()} == {"retention.ms": "5000"}
    dry = _call(
        broker,
        44,
        version,
        resources=(resource(TOPIC_RESOURCE, topic, ("retention.ms", 1, None)),),
        validate_only=True,
    )
    assert dry.responses[0].error_code.value == NONE
    modified = admin.describe_configs([KConfigResource("TOPIC", topic)])["topic"][topic]
    assert set(modified) == {"retention.ms"}


@pytest.mark.parametrize("version", [0, 1, 2])
def test_describe_cluster_every_version(broker: BrokerProcess, version: int) -> None:
    answer = _call(
        broker,
        60,
        version,
        include_cluster_authorized_operations=True,
        endpoint_type=1,
        include_fenced_brokers=True,
    )
    assert answer.error_code.value == NONE
    assert [(b.broker_id, b.host, b.port) for b in answer.brokers] == [
        (0, "127.0.0.1", broker.port)
    ]
    assert answer.controller_id == 0
    assert answer.cluster_authorized_operations > 0
    if version >= 1:
        controllers = _call(
            broker,
            60,
            version,
            include_cluster_authorized_operations=False,
            endpoint_type=2,
            include_fenced_brokers=False,
        )
        assert controllers.error_code.value == MISMATCHED_ENDPOINT_TYPE


@pytest.mark.parametrize("version", [1, 2, 3, 4, 5])
def test_describe_log_dirs_every_version(
    broker: BrokerProcess, admin: KafkaAdminClient, version: int
) -> None:
    topic = _topic(admin)
    _produce(broker, topic, 2)
    everything = _call(broker, 35, version, topics=None)
    (log_dir,) = everything.results
    assert topic in {t.name for t in log_dir.topics}
    m = _classes(35, version)
    only = _call(
        broker, 35, version, topics=(m.DescribableLogDirTopic(topic=topic, partitions=(0,)),)
    )
    (log_dir,) = only.results
    ((name, partitions),) = [(t.name, t.partitions) for t in log_dir.topics]
    assert name == topic
    assert [p.partition_index for p in partitions] == [0]
    assert partitions[0].partition_size > 0
    if version >= 4:
        assert log_dir.total_bytes >= log_dir.usable_bytes > 0


# ------------------------------------------------------------------ restart (last: restarts)
def test_altered_retention_survives_a_restart(
    broker: BrokerProcess, cadmin: AdminClient, admin: KafkaAdminClient
) -> None:
    topic = _topic(admin)
    resource = ConfigResource(
        ResourceType.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry("retention.ms", "86400000", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    cadmin.incremental_alter_configs([resource])[resource].result(timeout=TIMEOUT_S)
    _produce(broker, topic, 6)
    admin.delete_records({KTopicPartition(topic, 0): 3})
    admin.close()

    broker.restart()

    fresh = AdminClient({"bootstrap.servers": broker.bootstrap})
    lookup = ConfigResource(ResourceType.TOPIC, topic)
    entries = fresh.describe_configs([lookup])[lookup].result(timeout=TIMEOUT_S)
    assert entries["retention.ms"].value == "86400000"
    assert entries["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert _earliest(fresh, topic) == 3
