"""Topic metadata through the controller over the single-node store: creation rules as Kafka's,
persistence across restarts, leader epochs that a restart does not change, and a single
broker's old topic-metadata.json moved in with its epochs."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from storage_core.common import Uuid
from storage_core.controller.legacy_topic_metadata import (
    TOPIC_METADATA_FILE,
    migrate_legacy_topic_metadata,
)
from storage_core.errors import (
    CorruptCheckpointError,
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    InvalidTopicError,
    RequestTimedOutError,
    TopicExistsError,
    UnknownTopicOrPartitionError,
)
from storage_core.log.log_config import LogConfig
from storage_core.replication.zk_metadata_listener import ZkMetadataListener
from storage_core.server.topic_store import TopicStore
from storage_core.zk.kafka_zk_client import KafkaZkClient
from storage_core.zk.local_znode_tree import LocalZNodeTree
from tests.single_node_support import SingleNode

DEFAULT = LogConfig()


@pytest.fixture
def nodes(tmp_path: Path) -> Iterator[list[SingleNode]]:
    started: list[SingleNode] = []
    yield started
    for node in started:
        node.stop()


def _store(tmp_path: Path, nodes: list[SingleNode]) -> TopicStore:
    """A (re)started single broker over ``tmp_path``."""
    for node in nodes:
        node.stop()
    nodes.clear()
    node = SingleNode(tmp_path)
    nodes.append(node)
    return node.start()


def test_create_persists_ids_partitions_and_configs(
    tmp_path: Path, nodes: list[SingleNode]
) -> None:
    store = _store(tmp_path, nodes)
    created = store.create_topic("orders", 3, 1, {"retention.ms": "60000"}, DEFAULT)
    assert [p.partition for p in created.partitions] == [0, 1, 2]
    assert all(p.leader == 0 and p.replicas == (0,) and p.isr == (0,) for p in created.partitions)
    assert {p.leader_epoch for p in created.partitions} == {0}
    reopened = _store(tmp_path, nodes)
    again = reopened.get("orders")
    assert again == created  # same id, replicas, leaders and epochs after a restart
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
    nodes: list[SingleNode],
    name: str,
    partitions: int,
    factor: int,
    configs: dict[str, str],
    error: type[Exception],
) -> None:
    store = _store(tmp_path, nodes)
    with pytest.raises(error):
        store.create_topic(name, partitions, factor, configs, DEFAULT)
    assert store.topics() == {}
    assert nodes[0].zk.get_all_topics() == []


def test_duplicates_and_dot_underscore_collisions(tmp_path: Path, nodes: list[SingleNode]) -> None:
    store = _store(tmp_path, nodes)
    store.create_topic("a.b", 1, 1, {}, DEFAULT)
    with pytest.raises(TopicExistsError):
        store.create_topic("a.b", 1, 1, {}, DEFAULT)
    with pytest.raises(InvalidTopicError, match="collides"):
        store.create_topic("a_b", 1, 1, {}, DEFAULT)


def test_partitions_only_grow_and_configs_change_incrementally(
    tmp_path: Path, nodes: list[SingleNode]
) -> None:
    store = _store(tmp_path, nodes)
    store.create_topic("t", 2, 1, {"segment.bytes": "1048576"}, DEFAULT)
    with pytest.raises(InvalidPartitionsError):
        store.create_partitions("t", 2, validate_only=False)
    assert len(store.create_partitions("t", 5, validate_only=True).partitions) == 5
    assert len(store.get("t").partitions) == 2  # type: ignore[union-attr]
    grown = store.create_partitions("t", 5, validate_only=False)
    assert [p.leader for p in grown.partitions] == [0] * 5
    store.alter_configs(
        "t", {"retention.ms": "1000"}, ("segment.bytes",), DEFAULT, validate_only=False
    )
    with pytest.raises(InvalidConfigError, match=r"retention\.ms"):
        store.alter_configs("t", {"retention.ms": "x"}, (), DEFAULT, validate_only=False)
    reopened = _store(tmp_path, nodes).get("t")
    assert reopened is not None
    assert len(reopened.partitions) == 5
    assert dict(reopened.configs) == {"retention.ms": "1000"}


def test_delete_waits_for_the_replica_and_unknown_is_refused(
    tmp_path: Path, nodes: list[SingleNode]
) -> None:
    store = _store(tmp_path, nodes)
    created = store.create_topic("t", 1, 1, {}, DEFAULT)
    assert store.exists("t")
    assert not store.exists("other")
    store.delete_topic("t")
    # marked: no longer served, once this broker's metadata listener has seen the mark (the
    # controller wrote it; DeleteTopics itself waits until the topic is gone)
    deadline = time.monotonic() + 10
    while store.get("t") is not None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert store.get("t") is None
    assert not store.exists("t")  # nor produced to
    assert "t" in nodes[0].zk.get_all_topics()  # until broker 0 removed its replica
    nodes[0].zk.acknowledge_topic_deletion("t", 0)
    store.await_deleted("t", created.topic_id)
    assert _store(tmp_path, nodes).get("t") is None
    with pytest.raises(UnknownTopicOrPartitionError):
        store.delete_topic("t")


def test_a_single_brokers_old_metadata_moves_in_with_its_epochs(tmp_path: Path) -> None:
    topic_id = Uuid.random()
    (tmp_path / TOPIC_METADATA_FILE).write_text(
        json.dumps(
            {
                "version": 1,
                "cluster_id": "old-cluster",
                "topics": [
                    {
                        "name": "kept",
                        "topic_id": str(topic_id),
                        "internal": False,
                        "configs": {"retention.ms": "5"},
                        "partitions": [
                            {
                                "partition": 0,
                                "replicas": [0],
                                "isr": [0],
                                "leader": 0,
                                "leader_epoch": 7,
                            }
                        ],
                    }
                ],
            }
        )
    )
    node = SingleNode(tmp_path)
    try:
        assert migrate_legacy_topic_metadata(tmp_path, node.zk) == "old-cluster"
        store = node.start()
        kept = store.get("kept")
        assert kept is not None
        assert kept.topic_id == topic_id
        assert (kept.partitions[0].leader, kept.partitions[0].leader_epoch) == (0, 7)
        assert dict(kept.configs) == {"retention.ms": "5"}
    finally:
        node.stop()
    assert not (tmp_path / TOPIC_METADATA_FILE).exists()
    assert (tmp_path / f"{TOPIC_METADATA_FILE}.migrated").exists()


def test_a_damaged_old_file_is_a_named_error(tmp_path: Path) -> None:
    (tmp_path / TOPIC_METADATA_FILE).write_text("{not json")
    zk = KafkaZkClient.single_node(LocalZNodeTree(tmp_path)).start()
    with pytest.raises(CorruptCheckpointError, match=TOPIC_METADATA_FILE):
        migrate_legacy_topic_metadata(tmp_path, zk)
    assert (tmp_path / TOPIC_METADATA_FILE).read_text() == "{not json"


def test_a_timeout_of_zero_answers_at_once_and_a_short_one_times_out(
    tmp_path: Path, nodes: list[SingleNode]
) -> None:
    """Kafka's CreateTopics: the request's timeout bounds the wait for the new leaders (0:
    none); past it REQUEST_TIMED_OUT, while the creation goes on."""
    store = _store(tmp_path, nodes)
    node = nodes[0]
    node.listener.stop()  # this broker's metadata no longer follows the store
    created = store.create_topic("now", 2, 1, {}, DEFAULT, wait_s=0)
    assert [p.partition for p in created.partitions] == [0, 1]
    assert store.get("now") is None  # not in this broker's metadata, and not waited for
    with pytest.raises(RequestTimedOutError, match="being created all the same"):
        store.create_topic("later", 1, 1, {}, DEFAULT, wait_s=0.2)
    node.listener = ZkMetadataListener(0, node.zk, node.cache)
    node.listener.start()
    deadline = time.monotonic() + 10
    while not (store.get("now") and store.get("later")):
        assert time.monotonic() < deadline, "the topics never showed up"
        time.sleep(0.01)
    assert store.get("now").topic_id == created.topic_id  # type: ignore[union-attr]
