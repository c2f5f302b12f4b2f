"""Kafka's standard topic configs through real admin clients, and the timestamp window on
produce.

Every topic config Kafka accepts is accepted with Kafka's types, defaults and validators, and
DescribeConfigs shows it; ``message.timestamp.before/after.max.ms`` refuse records whose
CreateTime lies outside the window with INVALID_TIMESTAMP (Kafka 3.6+), as a producer sees.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
    ResourceType,
)
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KTopicPartition
from kafka import errors as kafka_errors

from storage_core.server.protocol import encode_request
from tests.broker_process import BrokerProcess
from tests.integration import raw_wire

pytestmark = pytest.mark.timeout(120)

TIMEOUT_S = 15.0
LONG_MAX = str(2**63 - 1)
HOUR_MS = 3_600_000
INVALID_REQUEST = 42

# Kafka 3.9's defaults (LogConfig, ServerLogConfigs, CompressionType, QuotaConfig).
KAFKA_DEFAULTS = {
    "delete.retention.ms": "86400000",
    "min.compaction.lag.ms": "0",
    "max.compaction.lag.ms": LONG_MAX,
    "min.cleanable.dirty.ratio": "0.5",
    "message.timestamp.before.max.ms": LONG_MAX,
    "message.timestamp.after.max.ms": LONG_MAX,
    "compression.gzip.level": "-1",
    "compression.lz4.level": "9",
    "compression.zstd.level": "3",
    "leader.replication.throttled.replicas": "",
    "follower.replication.throttled.replicas": "",
}
STANDARD_VALUES = {
    "delete.retention.ms": "3600000",
    "min.compaction.lag.ms": "1000",
    "max.compaction.lag.ms": "7200000",
    "min.cleanable.dirty.ratio": "0.25",
    "message.timestamp.before.max.ms": "86400000",
    "message.timestamp.after.max.ms": "3600000",
    "compression.gzip.level": "6",
    "compression.lz4.level": "12",
    "compression.zstd.level": "-5",
    "leader.replication.throttled.replicas": "0:0,1:0",
    "follower.replication.throttled.replicas": "*",
}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    directory: Path = tmp_path_factory.mktemp("topic-configs-broker")
    with BrokerProcess(directory) as process:
        yield process


@pytest.fixture
def cadmin(broker: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def _create(cadmin: AdminClient, configs: dict[str, str]) -> str:
    name = f"configs-{uuid.uuid4().hex[:10]}"
    futures = cadmin.create_topics(
        [NewTopic(name, num_partitions=1, replication_factor=1, config=configs)],
        request_timeout=TIMEOUT_S,
    )
    futures[name].result(timeout=TIMEOUT_S)
    return name


def _describe(cadmin: AdminClient, topic: str) -> dict[str, ConfigEntry]:
    resource = ConfigResource(ResourceType.TOPIC, topic)
    entries: dict[str, ConfigEntry] = cadmin.describe_configs([resource])[resource].result(
        timeout=TIMEOUT_S
    )
    return entries


def _error_of_create(cadmin: AdminClient, configs: dict[str, str]) -> KafkaError:
    name = f"refused-{uuid.uuid4().hex[:10]}"
    future = cadmin.create_topics(
        [NewTopic(name, num_partitions=1, replication_factor=1, config=configs)],
        request_timeout=TIMEOUT_S,
    )[name]
    with pytest.raises(KafkaException) as raised:
        future.result(timeout=TIMEOUT_S)
    error: KafkaError = raised.value.args[0]
    return error


def test_kafkas_defaults_are_described(cadmin: AdminClient) -> None:
    described = _describe(cadmin, _create(cadmin, {}))

    assert {name: described[name].value or "" for name in KAFKA_DEFAULTS} == KAFKA_DEFAULTS
    assert all(
        described[name].source == ConfigSource.DEFAULT_CONFIG.value for name in KAFKA_DEFAULTS
    )


def test_standard_configs_are_accepted_at_creation_and_described(cadmin: AdminClient) -> None:
    described = _describe(cadmin, _create(cadmin, STANDARD_VALUES))

    assert {name: described[name].value for name in STANDARD_VALUES} == STANDARD_VALUES
    assert all(
        described[name].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
        for name in STANDARD_VALUES
    )


def test_standard_configs_change_incrementally(cadmin: AdminClient) -> None:
    topic = _create(cadmin, {})
    resource = ConfigResource(
        ResourceType.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry("delete.retention.ms", "5000", incremental_operation=AlterConfigOpType.SET),
            ConfigEntry(
                "leader.replication.throttled.replicas",
                "0:0",
                incremental_operation=AlterConfigOpType.APPEND,
            ),
        ],
    )
    cadmin.incremental_alter_configs([resource])[resource].result(timeout=TIMEOUT_S)

    described = _describe(cadmin, topic)
    assert described["delete.retention.ms"].value == "5000"
    assert described["leader.replication.throttled.replicas"].value == "0:0"


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("compression.gzip.level", "0"),
        ("compression.lz4.level", "18"),
        ("compression.zstd.level", "23"),
        ("min.cleanable.dirty.ratio", "1.5"),
        ("max.compaction.lag.ms", "0"),
        ("delete.retention.ms", "-1"),
        ("message.timestamp.before.max.ms", "-1"),
        ("leader.replication.throttled.replicas", "0-0"),
        ("segment.bytes", str(2**31)),
    ],
)
def test_kafkas_validators_refuse_bad_values(cadmin: AdminClient, name: str, value: str) -> None:
    error = _error_of_create(cadmin, {name: value})

    assert error.code() == KafkaError.INVALID_CONFIG
    assert name in error.str()


@pytest.mark.parametrize("version", ["0.10.0.0", "0.10.0-IV1", "2.8-IV1", "3.0-IV1", "2.8.0"])
def test_message_format_version_takes_kafkas_version_strings(
    cadmin: AdminClient, version: str
) -> None:
    """The deprecated setting (a no-op from 3.0) takes what Kafka's MetadataVersion reads,
    four-part and -IVn forms included; it refused 0.10.0.0 as not a Kafka version."""
    topic = _create(cadmin, {"message.format.version": version})
    assert _describe(cadmin, topic)["message.format.version"].value == version

    error = _error_of_create(cadmin, {"message.format.version": "0.10.3"})
    assert error.code() == KafkaError.INVALID_CONFIG
    assert "Version 0.10.3 is not a valid version" in error.str()


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated:DeprecationWarning")
def test_an_empty_cleanup_policy_is_accepted_everywhere_and_described_empty(
    cadmin: AdminClient,
) -> None:
    """Kafka's cleanup.policy is a LIST whose validator takes the empty list (no deletion by
    retention, no compaction): CreateTopics, AlterConfigs and IncrementalAlterConfigs take it
    and DescribeConfigs shows ''. IncrementalAlterConfigs refused it ("Invalid value ''")."""
    created = _create(cadmin, {"cleanup.policy": ""})
    assert _describe(cadmin, created)["cleanup.policy"].value in ("", None)

    incremental = _create(cadmin, {})
    resource = ConfigResource(
        ResourceType.TOPIC,
        incremental,
        incremental_configs=[
            ConfigEntry("cleanup.policy", "", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    cadmin.incremental_alter_configs([resource])[resource].result(timeout=TIMEOUT_S)
    described = _describe(cadmin, incremental)["cleanup.policy"]
    assert (described.value or "", described.source) == (
        "",
        ConfigSource.DYNAMIC_TOPIC_CONFIG.value,
    )

    subtracted = ConfigResource(
        ResourceType.TOPIC,
        _create(cadmin, {"cleanup.policy": "delete"}),
        incremental_configs=[
            ConfigEntry(
                "cleanup.policy", "delete", incremental_operation=AlterConfigOpType.SUBTRACT
            )
        ],
    )
    cadmin.incremental_alter_configs([subtracted])[subtracted].result(timeout=TIMEOUT_S)
    assert (_describe(cadmin, subtracted.name)["cleanup.policy"].value or "") == ""

    altered = ConfigResource(
        ResourceType.TOPIC, _create(cadmin, {}), set_config={"cleanup.policy": ""}
    )
    cadmin.alter_configs([altered])[altered].result(timeout=TIMEOUT_S)
    assert (_describe(cadmin, altered.name)["cleanup.policy"].value or "") == ""

    error = _error_of_create(cadmin, {"cleanup.policy": "delete,"})
    assert error.code() == KafkaError.INVALID_CONFIG


def test_a_key_twice_in_one_resource_is_refused_as_kafka_3_2_and_later_do(
    broker: BrokerProcess, cadmin: AdminClient
) -> None:
    """AlterConfigs and IncrementalAlterConfigs with one key twice in a resource are
    INVALID_REQUEST 'Error due to duplicate config keys' and change nothing, as Kafka 3.2+
    (ConfigAdminManager) answers. Kafka 3.1 applied the last value of a legacy AlterConfigs,
    which librdkafka's test 0092 expects: a deliberate difference (README)."""
    topic = _create(cadmin, {"retention.ms": "1000000"})
    legacy = raw_wire.request_classes(33, 1)
    incremental = raw_wire.request_classes(44, 1)
    requests = {
        33: legacy.AlterConfigsRequest(
            resources=(
                legacy.AlterConfigsResource(
                    resource_type=2,
                    resource_name=topic,
                    configs=(
                        legacy.AlterableConfig(name="retention.ms", value="2000000"),
                        legacy.AlterableConfig(name="retention.ms", value="3000000"),
                    ),
                ),
            ),
            validate_only=False,
        ),
        44: incremental.IncrementalAlterConfigsRequest(
            resources=(
                incremental.AlterConfigsResource(
                    resource_type=2,
                    resource_name=topic,
                    configs=(
                        incremental.AlterableConfig(
                            name="retention.ms", config_operation=0, value="2000000"
                        ),
                        incremental.AlterableConfig(
                            name="retention.ms", config_operation=0, value="3000000"
                        ),
                    ),
                ),
            ),
            validate_only=False,
        ),
    }
    with raw_wire.connect(broker.port) as sock:
        for api_key, request in requests.items():
            sock.sendall(encode_request(api_key, 1, 5, "dup", request))
            _correlation_id, body = raw_wire.read_response(sock, api_key, 1)
            (answer,) = body.responses
            assert (answer.error_code.value, answer.error_message) == (
                INVALID_REQUEST,
                "Error due to duplicate config keys",
            ), api_key
    assert _describe(cadmin, topic)["retention.ms"].value == "1000000"


# ------------------------------------------------------------------ the timestamp window
def _send(broker: BrokerProcess, topic: str, *timestamps_ms: int) -> list[object]:
    """Each record's offset, or the exception its send failed with."""
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=0, retries=0)
    outcomes: list[object] = []
    try:
        for timestamp_ms in timestamps_ms:
            future = producer.send(topic, value=b"t%d" % timestamp_ms, timestamp_ms=timestamp_ms)
            try:
                outcomes.append(future.get(timeout=TIMEOUT_S).offset)
            except kafka_errors.KafkaError as error:
                outcomes.append(error)
    finally:
        producer.close()
    return outcomes


def _consumed_timestamps(broker: BrokerProcess, topic: str, expected: int) -> list[int]:
    consumer = KafkaConsumer(
        bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest", enable_auto_commit=False
    )
    consumer.assign([KTopicPartition(topic, 0)])
    seen: list[int] = []
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while len(seen) < expected and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=300).values():
                seen.extend(int(r.timestamp) for r in records)
    finally:
        consumer.close()
    return seen


def test_records_outside_the_timestamp_window_are_refused(
    broker: BrokerProcess, cadmin: AdminClient
) -> None:
    topic = _create(
        cadmin,
        {
            "message.timestamp.before.max.ms": str(HOUR_MS),
            "message.timestamp.after.max.ms": "60000",
        },
    )
    now_ms = int(time.time() * 1000)
    too_old, too_new, recent = now_ms - 2 * HOUR_MS, now_ms + 10 * 60_000, now_ms - 60_000

    outcomes = _send(broker, topic, too_old, recent, too_new)

    assert isinstance(outcomes[0], kafka_errors.InvalidTimestampError)
    assert outcomes[1] == 0
    assert isinstance(outcomes[2], kafka_errors.InvalidTimestampError)
    assert _consumed_timestamps(broker, topic, 1) == [recent]

    resource = ConfigResource(
        ResourceType.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry(
                "message.timestamp.before.max.ms",
                str(3 * HOUR_MS),
                incremental_operation=AlterConfigOpType.SET,
            )
        ],
    )
    cadmin.incremental_alter_configs([resource])[resource].result(timeout=TIMEOUT_S)
    assert _send(broker, topic, too_old) == [1]  # a wider window applies to the live log at once


def test_log_append_time_topics_ignore_the_window(
    broker: BrokerProcess, cadmin: AdminClient
) -> None:
    topic = _create(
        cadmin,
        {"message.timestamp.type": "LogAppendTime", "message.timestamp.before.max.ms": "1000"},
    )

    assert _send(broker, topic, int(time.time() * 1000) - 2 * HOUR_MS) == [0]
