"""Topic metadata: creation rules as Kafka's, persistence across restarts, epochs."""

from __future__ import annotations

from pathlib import Path

import pytest

from storage_core.controller.topic_store import TOPIC_METADATA_FILE, TopicStore
from storage_core.errors import (
    CorruptCheckpointError,
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    InvalidTopicError,
    TopicExistsError,
    UnknownTopicOrPartitionError,
)
from storage_core.log.log_config import LogConfig

DEFAULT = LogConfig()


def _store(tmp_path: Path) -> TopicStore:
    return TopicStore(tmp_path, broker_ids=(0,))


def test_create_persists_ids_partitions_and_configs(tmp_path: Path) -> None:
    store = _store(tmp_path)
    created = store.create_topic("orders", 3, 1, {"retention.ms": "60000"}, DEFAULT)
    assert [p.partition for p in created.partitions] == [0, 1, 2]
    assert all(p.leader == 0 and p.replicas == (0,) and p.isr == (0,) for p in created.partitions)
    reopened = _store(tmp_path)
    again = reopened.get("orders")
    assert again == created
    assert reopened.get_by_id(created.topic_id) == created


@pytest.mark.parametrize(
    ("name", "partitions", "factor", "configs", "error"),
    [
        ("bad/name", 1, 1, {}, InvalidTopicError),
        ("..", 1, 1, {}, InvalidTopicError),
        ("x" * 250, 1, 1, {}, InvalidTopicError),
        ("ok", 0, 1, {}, InvalidPartitionsError),
        ("ok", 1, 0, {}, InvalidReplicationFactorError),
        ("ok", 1, 2, {}, InvalidReplicationFactorError),
        ("ok", 1, 1, {"retention.ms": "soon"}, InvalidConfigError),
        ("ok", 1, 1, {"no.such.config": "1"}, InvalidConfigError),
    ],
)
def test_invalid_topics_are_refused_and_nothing_is_written(
    tmp_path: Path,
    name: str,
    partitions: int,
    factor: int,
    configs: dict[str, str],
    error: type[Exception],
) -> None:
    store = _store(tmp_path)
    with pytest.raises(error):
        store.create_topic(name, partitions, factor, configs, DEFAULT)
    assert store.topics() == {}
    assert not (tmp_path / TOPIC_METADATA_FILE).exists()


def test_duplicates_and_dot_underscore_collisions(tmp_path: Path) -> None:
    store = _store(tmp_path)
    store.create_topic("a.b", 1, 1, {}, DEFAULT)
    with pytest.raises(TopicExistsError):
        store.create_topic("a.b", 1, 1, {}, DEFAULT)
    with pytest.raises(InvalidTopicError, match="collides"):
        store.create_topic("a_b", 1, 1, {}, DEFAULT)


def test_partitions_only_grow_and_configs_change_incrementally(tmp_path: Path) -> None:
    store = _store(tmp_path)
    store.create_topic("t", 2, 1, {"segment.bytes": "1048576"}, DEFAULT)
    with pytest.raises(InvalidPartitionsError):
        store.create_partitions("t", 2, validate_only=False)
    assert len(store.create_partitions("t", 5, validate_only=True).partitions) == 5
    assert len(store.get("t").partitions) == 2  # type: ignore[union-attr]
    store.create_partitions("t", 5, validate_only=False)
    store.alter_configs(
        "t", {"retention.ms": "1000"}, ("segment.bytes",), DEFAULT, validate_only=False
    )
    with pytest.raises(InvalidConfigError, match=r"retention\.ms"):
        store.alter_configs("t", {"retention.ms": "x"}, (), DEFAULT, validate_only=False)
    reopened = _store(tmp_path).get("t")
    assert reopened is not None
    assert len(reopened.partitions) == 5
    assert dict(reopened.configs) == {"retention.ms": "1000"}


def test_delete_and_unknown(tmp_path: Path) -> None:
    store = _store(tmp_path)
    store.create_topic("t", 1, 1, {}, DEFAULT)
    store.delete_topic("t")
    assert _store(tmp_path).get("t") is None
    with pytest.raises(UnknownTopicOrPartitionError):
        store.delete_topic("t")


def test_leader_epochs_grow_on_each_start(tmp_path: Path) -> None:
    store = _store(tmp_path)
    store.create_topic("t", 2, 1, {}, DEFAULT)
    store.bump_leader_epochs(0)
    store.bump_leader_epochs(0)
    assert [p.leader_epoch for p in _store(tmp_path).get("t").partitions] == [2, 2]  # type: ignore[union-attr]


def test_a_damaged_file_is_a_named_error(tmp_path: Path) -> None:
    (tmp_path / TOPIC_METADATA_FILE).write_text("{not json")
    with pytest.raises(CorruptCheckpointError, match=TOPIC_METADATA_FILE):
        _store(tmp_path)
