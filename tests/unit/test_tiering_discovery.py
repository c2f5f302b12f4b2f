"""Which partitions a tiering run works on (``plan_targets``): read from the leader's log
dirs, and each partition left out with its reason."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from storage_core.client.metadata import (
    NO_LEADER,
    BrokerNode,
    ClusterMetadata,
    PartitionMetadata,
    TopicMetadata,
)
from storage_core.common import TopicPartition, Uuid
from storage_core.errors import InvalidConfigError
from storage_core.log.log_config import LogConfig
from storage_core.log.meta_properties import ZkMetaProperties
from storage_core.tiered.operations import SkipReason, TargetDiscovery, plan_targets
from storage_core.tiered.operations.discovery import check_log_dir_owners

TIERED = LogConfig().with_overrides({"remote.storage.enable": "true"})
TOPIC_ID = Uuid.from_bytes(bytes(range(16)))


def partition(index: int, leader_id: int, leader_epoch: int = 3) -> PartitionMetadata:
    return PartitionMetadata(
        partition=index,
        leader_id=leader_id,
        leader_epoch=leader_epoch,
        replicas=(1, 2, 3),
        isr=(1, 2, 3),
        offline_replicas=(),
        error=ErrorCode.none,
    )


def cluster(*partitions: PartitionMetadata, topic: str = "orders") -> ClusterMetadata:
    return ClusterMetadata(
        cluster_id="c",
        controller_id=1,
        brokers=tuple(BrokerNode(node_id=n, host=f"host-{n}", port=9092) for n in (1, 2, 3)),
        topics=(
            TopicMetadata(
                name=topic,
                topic_id=TOPIC_ID,
                is_internal=False,
                partitions=partitions,
                error=ErrorCode.none,
            ),
        ),
    )


def dirs(broker_id: int, *indexes: int, topic: str = "orders") -> dict[TopicPartition, Path]:
    return {TopicPartition(topic, i): Path(f"/b{broker_id}/{topic}-{i}") for i in indexes}


def reasons(found: TargetDiscovery) -> dict[str, str]:
    return {str(s.topic_partition): s.reason for s in found.skipped}


def test_each_partition_is_read_from_its_leaders_log_dirs() -> None:
    found = plan_targets(
        cluster(partition(0, 1), partition(1, 2, leader_epoch=5), partition(2, 3)),
        {"orders": TIERED},
        {1: dirs(1, 0, 1, 2), 2: dirs(2, 0, 1, 2), 3: dirs(3, 0, 1, 2)},
        broker_ids=[1, 2, 3],
        topic=None,
    )
    assert [
        (str(t.topic_partition), t.leader_id, t.leader_host, t.leader_epoch, str(t.directory))
        for t in found.targets
    ] == [
        ("orders-0", 1, "host-1", 3, "/b1/orders-0"),
        ("orders-1", 2, "host-2", 5, "/b2/orders-1"),
        ("orders-2", 3, "host-3", 3, "/b3/orders-2"),
    ]
    assert found.skipped == ()


def test_a_cluster_map_reports_every_partition_left_out() -> None:
    found = plan_targets(
        cluster(partition(0, NO_LEADER), partition(1, 3), partition(2, 2)),
        {"orders": TIERED},
        {1: dirs(1), 2: dirs(2, 0)},  # broker 2 holds no directory of orders-2
        broker_ids=[1, 2],
        topic=None,
    )
    assert found.targets == ()
    assert reasons(found) == {
        "orders-0": "no leader (offline)",
        "orders-1": "leader is broker 3, whose log dirs are not given (given: brokers 1, 2)",
        "orders-2": "no directory of the partition in broker 2's log dirs",
    }


def test_the_single_broker_form_acts_on_what_it_leads_and_reports_what_it_follows() -> None:
    found = plan_targets(
        cluster(partition(0, 1), partition(1, 2), partition(2, 3), partition(3, NO_LEADER)),
        {"orders": TIERED},
        {1: dirs(1, 0, 1)},  # a replica of 0 (leads) and 1 (follows); not of 2 and 3
        broker_ids=[1],
        topic=None,
    )
    assert [str(t.topic_partition) for t in found.targets] == ["orders-0"]
    assert reasons(found) == {"orders-1": "leader is broker 2, not 1"}


def test_topics_unknown_or_not_tiered() -> None:
    metadata = cluster(partition(0, 1))
    found = plan_targets(
        metadata,
        {"orders": None},
        {1: {**dirs(1, 0), **dirs(1, 0, topic="gone")}},
        broker_ids=[1],
        topic=None,
    )
    # a leftover directory of a deleted topic is reported; a topic without remote storage
    # is not, unless the run names it
    assert found.targets == ()
    assert reasons(found) == {
        "gone-0": "topic unknown to the cluster (deleted, or no Describe ACL on it for this"
        " principal)"
    }
    named = plan_targets(
        metadata, {"orders": None}, {1: dirs(1, 0)}, broker_ids=[1], topic="orders"
    )
    assert reasons(named) == {"orders-0": "remote storage is not enabled for the topic"}


def test_a_directory_of_a_partition_the_topic_does_not_have() -> None:
    found = plan_targets(
        cluster(partition(0, 1)),
        {"orders": TIERED},
        {1: dirs(1, 0, 7)},
        broker_ids=[1],
        topic=None,
    )
    assert [str(t.topic_partition) for t in found.targets] == ["orders-0"]
    assert reasons(found) == {"orders-7": "partition unknown to the cluster"}


def test_a_partition_its_leader_holds_in_a_log_dir_the_map_lacks_is_left_out() -> None:
    # broker 1 holds orders-0 in /data/b, orders-1 in /data/a; the map gives only /b1 (= a)
    found = plan_targets(
        cluster(partition(0, 1), partition(1, 1), partition(2, 2)),
        {"orders": TIERED},
        {1: dirs(1, 1), 2: dirs(2, 2)},
        broker_ids=[1, 2],
        topic=None,
        reported_dirs={
            1: {TopicPartition("orders", 0): "/data/b", TopicPartition("orders", 1): "/data/a"}
        },  # broker 2 did not answer: planned from the map alone
    )
    assert [str(t.topic_partition) for t in found.targets] == ["orders-1", "orders-2"]
    assert [s.why for s in found.skipped] == [SkipReason.LOG_DIR_NOT_GIVEN]
    assert reasons(found) == {
        "orders-0": "broker 1 holds the partition in its log dir /data/b, which the map does"
        " not give (add it to broker 1's log dirs)"
    }


def owners(**by_broker: dict[str, ZkMetaProperties | None]) -> dict[int, dict[Path, Any]]:
    return {
        int(b.removeprefix("b")): {Path(d): m for d, m in log_dirs.items()}
        for b, log_dirs in by_broker.items()
    }


def test_mapped_log_dirs_that_name_their_broker_and_cluster_pass() -> None:
    check_log_dir_owners(
        owners(
            b1={"/b1": ZkMetaProperties(broker_id=1, cluster_id="c")},
            b2={"/b2a": None, "/b2b": ZkMetaProperties(broker_id=2, cluster_id=None)},
        ),
        cluster_id="c",
    )


def test_a_map_that_swaps_two_brokers_dirs_is_refused() -> None:
    with pytest.raises(InvalidConfigError) as refused:
        check_log_dir_owners(
            owners(
                b1={"/b2": ZkMetaProperties(broker_id=2, cluster_id="c")},
                b2={"/b1": ZkMetaProperties(broker_id=1, cluster_id="c")},
            ),
            cluster_id="c",
        )
    assert str(refused.value).startswith(
        "log dir /b2 is given as broker 1's, but its meta.properties names broker.id 2"
    )


def test_a_log_dir_of_another_cluster_is_refused() -> None:
    with pytest.raises(InvalidConfigError, match=r"log dir /b1 .* names cluster.id old, not c"):
        check_log_dir_owners(
            owners(b1={"/b1": ZkMetaProperties(broker_id=1, cluster_id="old")}), cluster_id="c"
        )
