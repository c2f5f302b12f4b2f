"""Config sources, synonyms and incremental operations behind DescribeConfigs and
IncrementalAlterConfigs, checked against Kafka's documented behaviour."""

from __future__ import annotations

import pytest

from storage_core.common import Uuid
from storage_core.errors import InvalidConfigError
from storage_core.log.log_config import LogConfig
from storage_core.protocol.config_resource import AlterConfigOpType, ConfigSource
from storage_core.server.handlers.config_support import (
    InvalidRequestError,
    check_broker_resource,
    check_operations,
    describe_broker,
    describe_topic,
    incremental_changes,
)
from storage_core.server.topic_store import TopicInfo

SET, DELETE, APPEND, SUBTRACT = (int(op) for op in AlterConfigOpType)


def _topic(configs: dict[str, str]) -> TopicInfo:
    return TopicInfo(name="t", topic_id=Uuid.random(), partitions=(), configs=configs)


def test_topic_value_comes_from_the_most_precise_synonym() -> None:
    broker_props = {"log.retention.hours": "2", "log.segment.bytes": "4096"}
    default = LogConfig.from_broker_props(broker_props)

    rows = {
        r.name: r for r in describe_topic(_topic({"segment.bytes": "2048"}), default, broker_props)
    }

    retention = rows["retention.ms"]
    assert (retention.value, retention.source) == ("7200000", ConfigSource.STATIC_BROKER_CONFIG)
    assert [(s.name, s.value, s.source) for s in retention.synonyms] == [
        ("log.retention.hours", "2", ConfigSource.STATIC_BROKER_CONFIG),
        ("log.retention.ms", "604800000", ConfigSource.DEFAULT_CONFIG),
    ]
    segment = rows["segment.bytes"]
    assert (segment.value, segment.source) == ("2048", ConfigSource.DYNAMIC_TOPIC_CONFIG)
    assert [s.source for s in segment.synonyms] == [
        ConfigSource.DYNAMIC_TOPIC_CONFIG,
        ConfigSource.STATIC_BROKER_CONFIG,
        ConfigSource.DEFAULT_CONFIG,
    ]
    assert rows["preallocate"].source == ConfigSource.DEFAULT_CONFIG
    assert not any(r.read_only for r in rows.values())


def test_static_broker_configs_are_read_only_and_name_their_source() -> None:
    props = {"num.partitions": "3", "log.segment.bytes": "4096"}
    rows = {r.name: r for r in describe_broker(LogConfig.from_broker_props(props), props)}

    assert (rows["num.partitions"].value, rows["num.partitions"].source) == (
        "3",
        ConfigSource.STATIC_BROKER_CONFIG,
    )
    assert (rows["log.segment.bytes"].value, rows["log.segment.bytes"].source) == (
        "4096",
        ConfigSource.STATIC_BROKER_CONFIG,
    )
    assert rows["delete.topic.enable"].value == "true"
    assert rows["log.retention.ms"].source == ConfigSource.DEFAULT_CONFIG
    # Kafka's rule: only configs it cannot change while running are read-only.
    assert rows["num.partitions"].read_only
    assert rows["log.dirs"].read_only
    assert not rows["log.retention.ms"].read_only
    assert not rows["message.max.bytes"].read_only


def test_append_and_subtract_work_on_lists_in_order() -> None:
    current = {"cleanup.policy": "delete"}
    assert incremental_changes([("cleanup.policy", APPEND, "compact,delete")], current) == (
        {"cleanup.policy": "delete,compact"},
        (),
    )
    assert incremental_changes(
        [("cleanup.policy", SUBTRACT, "delete")], {"cleanup.policy": "delete,compact"}
    ) == ({"cleanup.policy": "compact"}, ())
    assert incremental_changes(
        [("retention.ms", SET, "5"), ("segment.ms", DELETE, None), ("flush.ms", SET, None)], {}
    ) == ({"retention.ms": "5"}, ("segment.ms", "flush.ms"))


def test_append_to_a_non_list_config_is_invalid_config() -> None:
    with pytest.raises(InvalidConfigError, match=r"Can't APPEND to key retention\.ms"):
        incremental_changes([("retention.ms", APPEND, "1")], {"retention.ms": "5"})


def test_unknown_operation_and_foreign_broker_id_are_invalid_requests() -> None:
    with pytest.raises(InvalidRequestError, match="Unknown operations type 7"):
        check_operations([("retention.ms", 7, "1")])
    check_broker_resource("", 0)
    check_broker_resource("0", 0)
    with pytest.raises(InvalidRequestError, match="expected 0"):
        check_broker_resource("1", 0)
    with pytest.raises(InvalidRequestError, match="must be an integer"):
        check_broker_resource("zero", 0)
