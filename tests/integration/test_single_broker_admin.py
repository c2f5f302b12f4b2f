"""ElectLeaders and DescribeTopicPartitions on a broker without ``zookeeper.connect`` (its own
single-node store runs the same controller): confluent-kafka's elections, and the project's
client reading DescribeTopicPartitions page by page."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from confluent_kafka import ElectionType
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import AdminClient
from kio.schema.errors import ErrorCode

from storage_core.client import topic_partitions
from storage_core.client.admin import KafkaAdminClient
from storage_core.client.cluster import KafkaCluster
from tests.broker_process import BrokerProcess
from tests.cluster_support import partition_states
from tests.integration import raw_wire

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    started = BrokerProcess(tmp_path_factory.mktemp("single")).start()
    try:
        raw_wire.create_topic(started.port, "five", 5)
        yield started
    finally:
        started.kill()


def test_elections_on_a_single_broker(broker: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    wanted = [CkTopicPartition("five", 0), CkTopicPartition("five", 7)]
    for election in (ElectionType.PREFERRED, ElectionType.UNCLEAN):
        results = admin.elect_leaders(election, wanted).result(30)
        codes = {tp.partition: None if e is None else e.code() for tp, e in results.items()}
        assert codes == {
            0: ErrorCode.election_not_needed,  # its only replica leads it
            7: ErrorCode.unknown_topic_or_partition,
        }
    # every partition: none needed an election, so none is listed
    assert admin.elect_leaders(ElectionType.PREFERRED, None).result(30) == {}


def test_client_reads_describe_topic_partitions_page_by_page(
    broker: BrokerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(topic_partitions, "PAGE_PARTITIONS", 2)
    with KafkaCluster(broker.bootstrap) as cluster:
        admin = KafkaAdminClient(cluster)
        (five,) = admin.describe_topic_partitions(["five"])
        everything = admin.describe_topic_partitions([])
    states = partition_states(broker.bootstrap, "five")
    assert [p.partition for p in five.partitions] == [0, 1, 2, 3, 4]
    assert {p.partition: (p.leader_id, p.leader_epoch, p.isr) for p in five.partitions} == states
    assert "five" in [t.name for t in everything]
    assert next(t for t in everything if t.name == "five") == five
