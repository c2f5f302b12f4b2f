"""Dynamic broker configs through confluent-kafka's AdminClient, on the BROKER resource.

Kafka's rules (DynamicBrokerConfig): its dynamic configs and names it does not know are
accepted, per broker or as the cluster-wide default, kept across restarts and shown by
DescribeConfigs with their dynamic source; configs that need a restart, unprefixed SSL
keystore settings, badly typed values and per-broker configs at the cluster default are
refused with INVALID_REQUEST and Kafka's message.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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
from kafka import KafkaProducer
from kafka import errors as kafka_errors

from tests.broker_process import BrokerProcess
from tests.integration import raw_wire

pytestmark = pytest.mark.timeout(120)

TIMEOUT_S = 15.0
RELOGIN = "sasl.kerberos.min.time.before.relogin"  # librdkafka's 0081-admin sets this one
BROKER_RESOURCE, SET = 4, 0
NONE, INVALID_REQUEST = 0, 42
HOUR_MS = 3_600_000


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    directory: Path = tmp_path_factory.mktemp("broker-configs")
    with BrokerProcess(directory) as process:
        yield process


_ADMINS: dict[int, AdminClient] = {}


def _admin(broker: BrokerProcess) -> AdminClient:
    """One client per broker port, kept alive: a dropped AdminClient cancels its futures."""
    if broker.port not in _ADMINS:
        _ADMINS[broker.port] = AdminClient({"bootstrap.servers": broker.bootstrap})
    return _ADMINS[broker.port]


def _set(*entries: tuple[str, str | None, AlterConfigOpType]) -> list[ConfigEntry]:
    return [ConfigEntry(n, v, incremental_operation=op) for n, v, op in entries]


def _incremental(broker: BrokerProcess, name: str, *entries: ConfigEntry) -> object:
    resource = ConfigResource(ResourceType.BROKER, name, incremental_configs=list(entries))
    return _admin(broker).incremental_alter_configs([resource])[resource]


def _describe(broker: BrokerProcess, name: str) -> dict[str, ConfigEntry]:
    resource = ConfigResource(ResourceType.BROKER, name)
    entries: dict[str, ConfigEntry] = (
        _admin(broker).describe_configs([resource])[resource].result(timeout=TIMEOUT_S)
    )
    return entries


def _error(future: object) -> KafkaError:
    with pytest.raises(KafkaException) as raised:
        future.result(timeout=TIMEOUT_S)  # type: ignore[attr-defined]
    error: KafkaError = raised.value.args[0]
    return error


def test_per_broker_dynamic_configs_are_kept_and_described(broker: BrokerProcess) -> None:
    _incremental(
        broker,
        "0",
        *_set(
            (RELOGIN, "58000", AlterConfigOpType.SET),
            ("log.cleaner.threads", "2", AlterConfigOpType.SET),
            ("my.custom.setting", "x", AlterConfigOpType.SET),  # Kafka keeps unknown names
            ("metric.reporters", "com.example.Reporter", AlterConfigOpType.APPEND),
        ),
    ).result(timeout=TIMEOUT_S)  # type: ignore[attr-defined]

    described = _describe(broker, "0")
    for name, value in [
        (RELOGIN, "58000"),
        ("log.cleaner.threads", "2"),
        ("my.custom.setting", "x"),
        ("metric.reporters", "com.example.Reporter"),
    ]:
        assert (described[name].value, described[name].source) == (
            value,
            ConfigSource.DYNAMIC_BROKER_CONFIG.value,
        )
        assert not described[name].is_read_only
    assert described["log.dirs"].is_read_only

    _incremental(broker, "0", *_set((RELOGIN, None, AlterConfigOpType.DELETE))).result(
        timeout=TIMEOUT_S  # type: ignore[attr-defined]
    )
    assert RELOGIN not in _describe(broker, "0")


def test_legacy_alter_configs_replaces_the_brokers_dynamic_configs(broker: BrokerProcess) -> None:
    admin = _admin(broker)
    first = ConfigResource(ResourceType.BROKER, "0", set_config={RELOGIN: "61000"})
    admin.alter_configs([first])[first].result(timeout=TIMEOUT_S)
    second = ConfigResource(ResourceType.BROKER, "0", set_config={"num.io.threads": "4"})
    admin.alter_configs([second])[second].result(timeout=TIMEOUT_S)

    described = _describe(broker, "0")
    assert described["num.io.threads"].value == "4"
    assert RELOGIN not in described


def _raw_incremental(broker: BrokerProcess, name: str, *ops: tuple[str, int, str]) -> Any:
    """IncrementalAlterConfigs v1 on a BROKER resource (confluent-kafka cannot name "")."""
    m = raw_wire.request_classes(44, 1)
    resource = m.AlterConfigsResource(
        resource_type=BROKER_RESOURCE,
        resource_name=name,
        configs=tuple(m.AlterableConfig(name=n, config_operation=o, value=v) for n, o, v in ops),
    )
    with raw_wire.connect(broker.port) as sock:
        answer = raw_wire.call(sock, 44, 1, resources=(resource,), validate_only=False)
    (response,) = answer.responses
    return response


def _raw_describe_default(broker: BrokerProcess) -> dict[str, tuple[str | None, int]]:
    m = raw_wire.request_classes(32, 4)
    resource = m.DescribeConfigsResource(
        resource_type=BROKER_RESOURCE, resource_name="", configuration_keys=None
    )
    with raw_wire.connect(broker.port) as sock:
        answer = raw_wire.call(
            sock,
            32,
            4,
            resources=(resource,),
            include_synonyms=False,
            include_documentation=False,
        )
    (result,) = answer.results
    return {c.name: (c.value, c.config_source) for c in result.configs}


def test_cluster_default_configs(broker: BrokerProcess) -> None:
    answer = _raw_incremental(broker, "", ("log.cleaner.backoff.ms", SET, "20000"))
    refused = _raw_incremental(broker, "", (RELOGIN, SET, "60000"))

    assert (answer.error_code.value, answer.error_message) == (NONE, None)
    assert _raw_describe_default(broker) == {
        "log.cleaner.backoff.ms": ("20000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
    }
    assert _describe(broker, "0")["log.cleaner.backoff.ms"].source == (
        ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value
    )
    assert (refused.error_code.value, refused.error_message) == (
        INVALID_REQUEST,
        "Cannot update these configs at default cluster level, broker id must be specified:"
        f" Set({RELOGIN})",
    )


@pytest.mark.parametrize(
    ("resource", "name", "value", "message"),
    [
        ("0", "log.dirs", "/elsewhere", "Cannot update these configs dynamically: Set(log.dirs)"),
        (
            "0",
            "log.retention.hours",
            "1",
            "Cannot update these configs dynamically: Set(log.retention.hours)",
        ),
        (
            "0",
            "ssl.keystore.location",
            "/etc/broker.jks",
            "These security configs can be dynamically updated only per-listener using the"
            " listener prefix: Set(ssl.keystore.location)",
        ),
        ("0", "num.io.threads", "many", "num.io.threads"),
        ("0", "log.retention.ms", "soon", "log.retention.ms"),
    ],
)
def test_changes_kafka_refuses_are_invalid_request(
    broker: BrokerProcess, resource: str, name: str, value: str, message: str
) -> None:
    def shown() -> str | None:
        entry = _describe(broker, resource).get(name)
        return None if entry is None else entry.value

    before = shown()
    error = _error(_incremental(broker, resource, *_set((name, value, AlterConfigOpType.SET))))

    assert error.code() == KafkaError.INVALID_REQUEST
    assert message in error.str()
    assert shown() == before


def test_dynamic_configs_survive_a_restart(tmp_path: Path) -> None:
    with BrokerProcess(tmp_path) as process:
        _incremental(process, "0", *_set((RELOGIN, "59000", AlterConfigOpType.SET))).result(
            timeout=TIMEOUT_S  # type: ignore[attr-defined]
        )
        process.stop()
        process.start()
        assert _describe(process, "0")[RELOGIN].value == "59000"


def test_dynamic_topic_defaults_apply_to_running_topics(broker: BrokerProcess) -> None:
    """A dynamic ``log.message.timestamp.before.max.ms`` acts on a topic without an override at
    once, and DescribeConfigs names where the topic's value comes from."""
    topic = f"dynamic-defaults-{uuid.uuid4().hex[:8]}"
    admin = _admin(broker)
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result(
        timeout=TIMEOUT_S
    )
    old_ms = int(time.time() * 1000) - 2 * HOUR_MS
    name = "log.message.timestamp.before.max.ms"

    _incremental(broker, "0", *_set((name, str(HOUR_MS), AlterConfigOpType.SET))).result(
        timeout=TIMEOUT_S  # type: ignore[attr-defined]
    )
    refused = _send(broker, topic, old_ms)
    resource = ConfigResource(ResourceType.TOPIC, topic)
    described = admin.describe_configs([resource])[resource].result(timeout=TIMEOUT_S)
    _incremental(broker, "0", *_set((name, None, AlterConfigOpType.DELETE))).result(
        timeout=TIMEOUT_S  # type: ignore[attr-defined]
    )

    assert isinstance(refused, kafka_errors.InvalidTimestampError)
    entry = described["message.timestamp.before.max.ms"]
    assert (entry.value, entry.source) == (str(HOUR_MS), ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    assert _send(broker, topic, old_ms) == 0  # the default is back: no window


def _send(broker: BrokerProcess, topic: str, timestamp_ms: int) -> object:
    """The record's offset, or the error its send failed with."""
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=0, retries=0)
    try:
        future = producer.send(topic, value=b"v", timestamp_ms=timestamp_ms)
        try:
            return int(future.get(timeout=TIMEOUT_S).offset)
        except kafka_errors.KafkaError as error:
            return error
    finally:
        producer.close()
