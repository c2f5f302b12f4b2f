"""Topic-name rules (exactly Kafka's) and topic config parsing."""

from __future__ import annotations

import pytest

from storage_core.common import TopicPartition, Uuid, validate_topic_name
from storage_core.errors import InvalidConfigError, InvalidTopicError
from storage_core.log.log_config import LogConfig


@pytest.mark.parametrize("name", ["a", "events.v1", "A_b-C.9", "x" * 249, "__consumer_offsets"])
def test_legal_topic_names(name: str) -> None:
    validate_topic_name(name)


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("", "empty"),
        (".", r'"\."'),
        ("..", r'"\."'),
        ("x" * 250, "249"),
        ("../etc", "illegal"),
        ("a/b", "illegal"),
        ("a\\b", "illegal"),
        ("a b", "illegal"),
        ("a\x00b", "illegal"),
        ("é", "illegal"),
    ],
)
def test_illegal_topic_names_are_refused_with_the_rule(name: str, reason: str) -> None:
    with pytest.raises(InvalidTopicError, match=reason):
        validate_topic_name(name)


def test_partition_dir_names_round_trip_and_refuse_escapes() -> None:
    tp = TopicPartition("my-topic.v2", 13)
    assert tp.dir_name == "my-topic.v2-13"
    assert TopicPartition.parse_dir_name(tp.dir_name) == tp
    for bad in ("topic", "topic-x", "-1", "..-0", "a/b-0"):
        with pytest.raises(InvalidTopicError):
            TopicPartition.parse_dir_name(bad)


def test_uuid_text_form_is_kafkas_url_safe_base64() -> None:
    uuid = Uuid(0, 1)
    assert str(uuid) == "AAAAAAAAAAAAAAAAAAAAAQ"
    assert Uuid.from_string("AAAAAAAAAAAAAAAAAAAAAQ") == uuid
    random_id = Uuid.random()
    assert Uuid.from_string(str(random_id)) == random_id
    assert not str(random_id).startswith("-")
    with pytest.raises(ValueError):
        Uuid.from_string("short")


def test_broker_properties_map_to_topic_defaults() -> None:
    config = LogConfig.from_broker_props(
        {"log.segment.bytes": "1048576", "log.retention.hours": "1", "log.index.interval.bytes": 1}
    )
    assert config.segment_bytes == 1048576
    assert config.retention_ms == 3_600_000
    assert config.index_interval_bytes == 1
    assert (
        LogConfig.from_broker_props(
            {"log.retention.ms": "5", "log.retention.hours": "1"}
        ).retention_ms
        == 5
    )


def test_topic_overrides_are_validated() -> None:
    base = LogConfig()
    assert base.with_overrides({"retention.bytes": "100"}).retention_bytes == 100
    with pytest.raises(InvalidConfigError, match=r"segment\.bytes"):
        base.with_overrides({"segment.bytes": "1"})
    with pytest.raises(InvalidConfigError, match="not a number"):
        base.with_overrides({"retention.ms": "soon"})
    with pytest.raises(InvalidConfigError, match="Unknown topic config"):
        base.with_overrides({"retention.days": "1"})
    with pytest.raises(InvalidConfigError, match=r"cleanup\.policy"):
        base.with_overrides({"cleanup.policy": "forever"})
    assert (
        base.with_overrides(
            {"local.retention.ms": "-2", "retention.ms": "9"}
        ).effective_local_retention_ms
        == 9
    )
    assert LogConfig().with_overrides(LogConfig().to_props()) == LogConfig()


# Every form Kafka 3.9's MetadataVersion.fromVersionString reads (the validator of the
# deprecated message.format.version), and forms it refuses.
KAFKA_VERSION_STRINGS = [
    "0.8.0", "0.8.2", "0.9.0", "0.10.0", "0.10.0.0", "0.10.0.1", "0.10.0-IV0", "0.10.0-IV1",
    "0.10.1-IV2", "0.10.2", "0.11.0.3", "1.0", "1.0.1", "1.1-IV0", "2.0.0", "2.8", "2.8.2",
    "2.8-IV1", "3.0", "3.0-IV1", "3.3-IV3", "3.7-IV4", "3.9", "3.9-IV0", "4.0-IV1",
]  # fmt: skip
NOT_KAFKA_VERSION_STRINGS = [
    "", "garbage", "0.10", "0.10.3", "0.7.2", "2.8-IV2", "2.9", "3.0-IV", "4.0", "5.0",
    "2.8.", "v2.8", "2", "3.0-iv1", "0.10.0-IV2",
]  # fmt: skip


@pytest.mark.parametrize("version", KAFKA_VERSION_STRINGS)
def test_message_format_version_takes_every_kafka_version_string(version: str) -> None:
    config = LogConfig().with_overrides({"message.format.version": version})
    assert config.to_props()["message.format.version"] == version


@pytest.mark.parametrize("version", NOT_KAFKA_VERSION_STRINGS)
def test_message_format_version_refuses_what_kafka_refuses(version: str) -> None:
    with pytest.raises(InvalidConfigError, match=r"message\.format\.version.* not a valid version"):
        LogConfig().with_overrides({"message.format.version": version})


def test_an_empty_cleanup_policy_is_the_empty_list_as_in_kafka() -> None:
    for empty in ("", "  "):
        config = LogConfig().with_overrides({"cleanup.policy": empty})
        assert config.to_props()["cleanup.policy"] == ""
    for bad in ("delete,", ",compact", "delete,,compact", " , "):
        with pytest.raises(InvalidConfigError, match=r"cleanup\.policy"):
            LogConfig().with_overrides({"cleanup.policy": bad})
    both = LogConfig().with_overrides({"cleanup.policy": "compact, delete"})
    assert (both.cleanup_policy, both.is_compacted, both.is_delete) == (
        "compact,delete",
        True,
        True,
    )
