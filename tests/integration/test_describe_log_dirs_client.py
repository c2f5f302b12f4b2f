"""``KafkaAdminClient.describe_log_dirs``: a broker with two log dirs described by our client
(DescribeLogDirs v4 and v1) as kafka-python's admin client describes it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kafka import KafkaAdminClient as KPAdminClient
from kafka import KafkaProducer
from kafka.admin import NewTopic

from storage_core.client.admin import KafkaAdminClient
from storage_core.client.cluster import KafkaCluster
from storage_core.client.connection import ConnectionConfig
from storage_core.client.errors import ClientError
from storage_core.common import TopicPartition
from tests.broker_process import BrokerProcess

TOPIC = "described"
PARTITIONS = 4


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    directory = tmp_path_factory.mktemp("describe-log-dirs")
    log_dirs = f"{directory / 'a'},{directory / 'b'}"
    with BrokerProcess(directory, overrides={"log.dirs": log_dirs}) as broker:
        kp_admin = KPAdminClient(bootstrap_servers=broker.bootstrap)
        kp_admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])
        kp_admin.close()
        producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all")
        for partition in range(PARTITIONS):
            producer.send(TOPIC, b"x", partition=partition).get(timeout=30)
        producer.close(10)
        yield broker


def kafka_python_view(broker: BrokerProcess) -> dict[str, set[TopicPartition]]:
    kp_admin = KPAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        (answer,) = kp_admin.describe_log_dirs({TOPIC: list(range(PARTITIONS))})
    finally:
        kp_admin.close()
    return {
        d["log_dir"]: {
            TopicPartition(t["name"], p["partition_index"])
            for t in d["topics"]
            for p in t["partitions"]
        }
        for d in answer["log_dirs"]
    }


@pytest.mark.parametrize("version", [4, 1])
def test_each_log_dir_with_its_partitions(broker: BrokerProcess, version: int) -> None:
    config = ConnectionConfig(allowed_api_versions={35: (version,)})
    with KafkaCluster(broker.bootstrap, config=config) as cluster:
        described = KafkaAdminClient(cluster).describe_log_dirs(0, {TOPIC: range(PARTITIONS)})
    ours = {d.log_dir: set(d.partitions) for d in described}
    assert ours == kafka_python_view(broker)
    expected_dirs = {str((broker.directory / name).resolve()) for name in ("a", "b")}
    assert set(ours) == expected_dirs
    # every partition is in exactly one of the two dirs, and both dirs hold some
    assert sorted(tp.partition for held in ours.values() for tp in held) == list(range(PARTITIONS))
    assert all(ours.values())
    assert {d.error.name for d in described} == {"none"}


def test_a_broker_absent_from_the_metadata_is_named(broker: BrokerProcess) -> None:
    with KafkaCluster(broker.bootstrap) as cluster, pytest.raises(ClientError, match="broker 7"):
        KafkaAdminClient(cluster).describe_log_dirs(7, {TOPIC: [0]})


def test_nothing_asked_means_every_partition(broker: BrokerProcess) -> None:
    with KafkaCluster(broker.bootstrap) as cluster:
        described = KafkaAdminClient(cluster).describe_log_dirs(0)
    held = {tp for d in described for tp in d.partitions}
    assert {TopicPartition(TOPIC, p) for p in range(PARTITIONS)} <= held
