"""Broker properties: Kafka's names, defaults, file syntax, overrides and clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from storage_core.errors import InvalidConfigError
from storage_core.java_properties import parse_properties
from storage_core.server.kafka_config import EndPoint, KafkaConfig


def test_properties_syntax_follows_java_properties() -> None:
    text = "# comment\n! also a comment\nbroker.id=3\nlog.dirs : /a,/b\nlong.value=one\\\n  two\n\n"
    assert parse_properties(text) == {
        "broker.id": "3",
        "log.dirs": "/a,/b",
        "long.value": "onetwo",
    }


def test_defaults_are_kafkas(tmp_path: Path) -> None:
    config = KafkaConfig.from_props({"log.dirs": str(tmp_path)})
    assert config.broker_id == 0
    assert config.get_int("num.partitions") == 1
    assert config.get_int("message.max.bytes") == 1048588
    assert config.get_int("socket.request.max.bytes") == 104857600
    assert config.get_bool("auto.create.topics.enable") is True
    assert [str(e) for e in config.listeners()] == ["PLAINTEXT://127.0.0.1:9092"]
    assert config.log_config().segment_bytes == 1024**3
    assert config.log_config().retention_ms == 7 * 24 * 3600 * 1000
    assert {
        name: config.get_int(name)
        for name in (
            "num.replica.fetchers",
            "replica.fetch.max.bytes",
            "replica.fetch.wait.max.ms",
            "replica.fetch.min.bytes",
            "replica.fetch.backoff.ms",
            "replica.fetch.response.max.bytes",
            "replica.socket.timeout.ms",
        )
    } == {
        "num.replica.fetchers": 1,
        "replica.fetch.max.bytes": 1048576,
        "replica.fetch.wait.max.ms": 500,
        "replica.fetch.min.bytes": 1,
        "replica.fetch.backoff.ms": 1000,
        "replica.fetch.response.max.bytes": 10485760,
        "replica.socket.timeout.ms": 30000,
    }


def test_file_then_overrides(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_text(
        f"broker.id=7\nlog.dirs={tmp_path}/logs\nlog.segment.bytes=1048576\n"
        "log.retention.hours=1\nlisteners=PLAINTEXT://127.0.0.1:0\n"
    )
    config = KafkaConfig.load(path, {"log.retention.ms": "5000", "num.partitions": "4"})
    assert config.broker_id == 7
    assert config.log_dirs() == [tmp_path / "logs"]
    assert config.get_int("num.partitions") == 4
    assert config.log_config().segment_bytes == 1048576
    assert config.log_config().retention_ms == 5000  # the most precise unit wins, as in Kafka


@pytest.mark.parametrize(
    ("props", "named"),
    [
        ({"num.partitions": "many"}, "num.partitions"),
        ({"auto.create.topics.enable": "yes"}, "auto.create.topics.enable"),
        ({"log.segment.bytes": "10"}, "segment.bytes"),
        ({"listeners": "127.0.0.1:9092"}, "listener"),
        ({"listeners": "SSL://127.0.0.1:9093"}, "inter.broker.listener.name must be a listener"),
        ({"message.max.bytes": str(2**40)}, "message.max.bytes"),
        ({"num.replica.fetchers": "0"}, "num.replica.fetchers"),
        ({"replica.fetch.backoff.ms": "-1"}, "replica.fetch.backoff.ms"),
        ({"replica.socket.timeout.ms": "100"}, "replica.socket.timeout.ms"),
    ],
)
def test_bad_values_are_refused_naming_the_key(
    tmp_path: Path, props: dict[str, str], named: str
) -> None:
    with pytest.raises(InvalidConfigError, match=named):
        KafkaConfig.from_props({"log.dirs": str(tmp_path), **props})


def test_errors_name_the_file(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_text("num.partitions=x\n")
    with pytest.raises(InvalidConfigError, match=str(path)):
        KafkaConfig.load(path)
    with pytest.raises(InvalidConfigError, match="cannot read"):
        KafkaConfig.load(tmp_path / "missing.properties")


def test_endpoint_parsing() -> None:
    assert EndPoint.parse("PLAINTEXT://:9092") == EndPoint(
        listener_name="PLAINTEXT", host="", port=9092
    )
    assert EndPoint.parse("plaintext://localhost:0").port == 0
