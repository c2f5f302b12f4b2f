"""``meta.properties`` of a log dir: Kafka's format read and written, and the start-up checks
that refuse another broker's or another cluster's directory without touching it."""

from __future__ import annotations

from pathlib import Path

import pytest

from storage_core.errors import InvalidConfigError
from storage_core.log.meta_properties import (
    META_PROPERTIES_FILE,
    CorruptMetaPropertiesError,
    InconsistentBrokerIdError,
    InconsistentClusterIdError,
    ZkMetaProperties,
    ensure_meta_properties,
    read_meta_properties,
)

CLUSTER = "1pvcGcUZQh6bRUrV1oJqeA"
OTHER_CLUSTER = "Q1y3b2Z0SEWvV2Bk9p4kNw"

# As Kafka 3.x writes it in ZooKeeper mode (Properties.store: a header, then the keys).
KAFKA_WRITTEN = f"""#
#Tue Nov 24 19:45:52 UTC 2026
cluster.id={CLUSTER}
version=0
broker.id=3
"""


def test_a_file_kafka_wrote_is_read(tmp_path: Path) -> None:
    (tmp_path / META_PROPERTIES_FILE).write_text(KAFKA_WRITTEN)
    assert read_meta_properties(tmp_path) == ZkMetaProperties(broker_id=3, cluster_id=CLUSTER)


def test_a_kraft_file_names_its_node_id(tmp_path: Path) -> None:
    (tmp_path / META_PROPERTIES_FILE).write_text(
        f"node.id=5\ndirectory.id=abc\nversion=1\ncluster.id={CLUSTER}\n"
    )
    assert read_meta_properties(tmp_path) == ZkMetaProperties(broker_id=5, cluster_id=CLUSTER)


def test_no_file_reads_as_none(tmp_path: Path) -> None:
    assert read_meta_properties(tmp_path) is None


@pytest.mark.parametrize(
    "text", ["version=7\nbroker.id=1\n", "version=0\n", "version=0\nbroker.id=x\n", ""]
)
def test_an_unreadable_file_is_named(tmp_path: Path, text: str) -> None:
    (tmp_path / META_PROPERTIES_FILE).write_text(text)
    with pytest.raises(CorruptMetaPropertiesError, match=r"meta\.properties"):
        read_meta_properties(tmp_path)


def test_written_file_round_trips_in_kafka_layout(tmp_path: Path) -> None:
    ensure_meta_properties([tmp_path / "a"], broker_id=2, cluster_id=CLUSTER)
    text = (tmp_path / "a" / META_PROPERTIES_FILE).read_text()
    lines = text.splitlines()
    assert lines[0] == "#" and lines[1].startswith("#")
    assert lines[2:] == [f"cluster.id={CLUSTER}", "version=0", "broker.id=2"]
    assert read_meta_properties(tmp_path / "a") == ZkMetaProperties(broker_id=2, cluster_id=CLUSTER)
    assert not list((tmp_path / "a").glob("*.tmp"))


def test_a_file_without_cluster_id_gets_it(tmp_path: Path) -> None:
    (tmp_path / META_PROPERTIES_FILE).write_text("version=0\nbroker.id=2\n")
    ensure_meta_properties([tmp_path], broker_id=2, cluster_id=CLUSTER)
    assert read_meta_properties(tmp_path) == ZkMetaProperties(broker_id=2, cluster_id=CLUSTER)


def test_another_broker_id_is_refused_and_no_dir_is_touched(tmp_path: Path) -> None:
    fresh, stored = tmp_path / "fresh", tmp_path / "stored"
    stored.mkdir()
    (stored / META_PROPERTIES_FILE).write_text(KAFKA_WRITTEN)
    with pytest.raises(InconsistentBrokerIdError) as refused:
        ensure_meta_properties([fresh, stored], broker_id=4, cluster_id=CLUSTER)
    message = str(refused.value)
    assert "Configured broker.id 4 doesn't match stored broker.id 3 in meta.properties" in message
    assert str(stored) in message and "\n" not in message
    assert isinstance(refused.value, InvalidConfigError)
    assert (stored / META_PROPERTIES_FILE).read_text() == KAFKA_WRITTEN
    assert not fresh.exists()  # checked before anything is written


def test_another_cluster_is_refused_first(tmp_path: Path) -> None:
    (tmp_path / META_PROPERTIES_FILE).write_text(KAFKA_WRITTEN)
    with pytest.raises(InconsistentClusterIdError) as refused:
        ensure_meta_properties([tmp_path], broker_id=4, cluster_id=OTHER_CLUSTER)
    message = str(refused.value)
    assert f"The Cluster ID {OTHER_CLUSTER} doesn't match stored clusterId {CLUSTER}" in message
    assert str(tmp_path) in message
    assert (tmp_path / META_PROPERTIES_FILE).read_text() == KAFKA_WRITTEN


def test_escaped_values_round_trip(tmp_path: Path) -> None:
    odd = "a:b=c#d\\e"
    ensure_meta_properties([tmp_path], broker_id=1, cluster_id=odd)
    assert read_meta_properties(tmp_path) == ZkMetaProperties(broker_id=1, cluster_id=odd)
