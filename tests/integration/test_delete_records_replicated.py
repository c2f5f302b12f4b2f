"""DeleteRecords on a replicated partition answers once the followers moved their log start
offset too (Kafka's ``DelayedDeleteRecords``), on two broker processes and ZooKeeper.

Story: [1, 2], records 0..4. Broker 2 is paused (SIGSTOP: still registered, so still counted):
DeleteRecords(3) with a 1.5 s timeout answers REQUEST_TIMED_OUT (broker 1's log start did
move). Broker 2 resumes: the same request answers NONE with low watermark 3. Broker 1 shuts
down at once: broker 2, elected, starts its log at 3, so the deleted records stay deleted
(before, DeleteRecords answered at once and a follower still in its fetch wait became a
leader serving offsets 0..2 again).
"""

from __future__ import annotations

import datetime
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KTopicPartition
from kio.schema.errors import ErrorCode

from embedded.zookeeper import ZooKeeperEnsemble
from tests import cluster_support
from tests.broker_process import BrokerProcess
from tests.cluster_support import eventually, partition_leaders
from tests.integration import raw_wire
from tests.process_pause import pause
from tests.tiered_broker_support import EARLIEST, list_offset

cluster_support.require_java()

pytestmark = pytest.mark.timeout(90)

TOPIC = "delete-records-replicated"
DELETE_RECORDS_KEY, DELETE_RECORDS_VERSION = 21, 2


@pytest.fixture
def brokers(zookeeper: ZooKeeperEnsemble, tmp_path: Path) -> Iterator[dict[int, BrokerProcess]]:
    with cluster_support.brokers_in_cluster(
        zookeeper, tmp_path, (1, 2), {"auto.create.topics.enable": "false"}
    ) as (started, _connect):
        yield started


def delete_records(broker: BrokerProcess, offset: int, timeout_ms: int) -> tuple[ErrorCode, int]:
    """DeleteRecords v2 of partition 0 straight to ``broker``: (error, low watermark)."""
    module = raw_wire.request_classes(DELETE_RECORDS_KEY, DELETE_RECORDS_VERSION)
    with raw_wire.connect(broker.port, timeout_s=timeout_ms / 1000 + 10) as sock:
        body = raw_wire.call(
            sock,
            DELETE_RECORDS_KEY,
            DELETE_RECORDS_VERSION,
            topics=(
                module.DeleteRecordsTopic(
                    name=TOPIC,
                    partitions=(module.DeleteRecordsPartition(partition_index=0, offset=offset),),
                ),
            ),
            timeout=datetime.timedelta(milliseconds=timeout_ms),
        )
    (partition,) = body.topics[0].partitions
    return partition.error_code, int(partition.low_watermark)


def test_delete_records_waits_for_the_followers_log_start_offset(
    brokers: dict[int, BrokerProcess],
) -> None:
    leader, follower = brokers[1], brokers[2]
    servers = f"{leader.bootstrap},{follower.bootstrap}"
    admin = cluster_support.admin(brokers)
    from confluent_kafka.admin import NewTopic  # noqa: PLC0415

    admin.create_topics([NewTopic(TOPIC, num_partitions=1, replica_assignment=[[1, 2]])])[
        TOPIC
    ].result(30)
    eventually(lambda: partition_leaders(follower.bootstrap, TOPIC) == {0: (1, 0)})
    producer = KafkaProducer(bootstrap_servers=servers, acks="all", linger_ms=0)
    for i in range(5):
        assert producer.send(TOPIC, f"r{i}".encode(), partition=0).get(10).offset == i
    producer.close()

    assert follower.process is not None
    pause(follower.process.pid)
    try:
        assert delete_records(leader, 3, 1_500) == (ErrorCode.request_timed_out, 3)
    finally:
        follower.process.send_signal(signal.SIGCONT)
    assert delete_records(leader, 3, 10_000) == (ErrorCode.none, 3)

    leader.stop()  # controlled shutdown: broker 2 leads in epoch 1
    eventually(lambda: partition_leaders(follower.bootstrap, TOPIC) == {0: (2, 1)})
    assert list_offset(follower.bootstrap, TOPIC, EARLIEST) == (3, 0)
    consumer = KafkaConsumer(bootstrap_servers=follower.bootstrap, consumer_timeout_ms=3_000)
    try:
        tp = KTopicPartition(TOPIC, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        assert [m.offset for m in consumer] == [3, 4]
    finally:
        consumer.close()
