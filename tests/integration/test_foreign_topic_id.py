"""A log dir holding a partition of another topic id: broker 2's dir of ``orders-1`` is replaced
(while it is stopped) by the ``orders-1`` dir of another cluster's ``orders`` topic. As in
Kafka's ZooKeeper mode (``ReplicaManager.becomeLeaderOrFollower``: INCONSISTENT_TOPIC_ID), the
broker neither leads nor follows that partition, says so in one error line naming the dir and
both topic ids, and touches none of its files; Produce answers NOT_LEADER_OR_FOLLOWER, a Fetch
by topic id INCONSISTENT_TOPIC_ID, and every other partition is served."""

from __future__ import annotations

import base64
import datetime
import hashlib
import shutil
import uuid
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KpTopicPartition
from kafka.errors import NotLeaderForPartitionError
from kio.schema.errors import ErrorCode

from embedded.zookeeper import ZooKeeperEnsemble
from tests import cluster_consistency, cluster_support
from tests.broker_process import BrokerProcess
from tests.cluster_support import eventually
from tests.integration import raw_wire

cluster_support.require_java()

pytestmark = pytest.mark.timeout(180)

TOPIC = "orders"
SPARE = "spare"  # one partition, on broker 2 too
FOREIGN = 1  # the partition whose dir comes from the other cluster; broker 2 holds it


def digests(directory: Path) -> dict[str, str]:
    return {
        str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


def produce(bootstrap: str, partition: int, values: list[bytes], topic: str = TOPIC) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    for value in values:
        producer.send(topic, value=value, partition=partition).get(timeout=30)
    producer.close(10)


def consume(bootstrap: str, partition: int, count: int, topic: str = TOPIC) -> list[bytes]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, consumer_timeout_ms=10_000)
    tp = KpTopicPartition(topic, partition)
    consumer.assign([tp])
    consumer.seek(tp, 0)
    values = []
    for record in consumer:
        values.append(record.value)
        if len(values) == count:
            break
    consumer.close()
    return values


def fetch_by_id(port: int, topic_id: uuid.UUID) -> int:
    """Fetch v13 (topics by id) of the foreign partition: its error code."""
    module = raw_wire.request_classes(1, 13)
    with raw_wire.connect(port) as sock:
        body = raw_wire.call(
            sock,
            1,
            13,
            replica_id=-1,
            max_wait=datetime.timedelta(milliseconds=10),
            min_bytes=0,
            max_bytes=1 << 20,
            isolation_level=0,
            session_id=0,
            session_epoch=-1,
            topics=(
                module.FetchTopic(
                    topic_id=topic_id,
                    partitions=(
                        module.FetchPartition(
                            partition=FOREIGN,
                            current_leader_epoch=-1,
                            fetch_offset=0,
                            last_fetched_epoch=-1,
                            log_start_offset=-1,
                            partition_max_bytes=1 << 20,
                        ),
                    ),
                ),
            ),
            forgotten_topics_data=(),
            rack_id="",
        )
    return int(body.responses[0].partitions[0].error_code)


def foreign_partition_dir(zookeeper: ZooKeeperEnsemble, directory: Path) -> tuple[Path, str]:
    """``orders-1`` of another cluster's ``orders`` topic (one broker, its own chroot), with
    records of its own; returns the dir and that topic's id."""
    broker = BrokerProcess(
        directory,
        overrides={
            "broker.id": "1",
            "zookeeper.connect": f"{zookeeper.connect_string}/other-{uuid.uuid4().hex[:8]}",
            "offsets.topic.replication.factor": "1",
        },
    )
    with broker:
        client = AdminClient({"bootstrap.servers": broker.bootstrap})
        client.create_topics([NewTopic(TOPIC, num_partitions=3, replication_factor=1)])[
            TOPIC
        ].result(30)
        produce(broker.bootstrap, FOREIGN, [b"other-cluster-%d" % i for i in range(7)])
    ids = cluster_consistency.log_dir_topic_ids(broker.log_dir)
    other_id = ids[f"{TOPIC}-{FOREIGN}"]
    assert other_id is not None
    return broker.log_dir / f"{TOPIC}-{FOREIGN}", other_id


def test_partition_dir_of_another_topic_id_is_neither_served_nor_touched(
    zookeeper: ZooKeeperEnsemble, tmp_path: Path
) -> None:
    foreign_dir, foreign_id = foreign_partition_dir(zookeeper, tmp_path / "other")
    with cluster_support.three_brokers(zookeeper, tmp_path / "cluster") as (brokers, connect):
        client = cluster_support.admin(brokers)
        eventually(lambda: len(client.describe_cluster().result(10).nodes) == 3, what="3 brokers")
        created = client.create_topics(
            [
                NewTopic(TOPIC, num_partitions=3, replica_assignment=[[1], [2], [3]]),
                NewTopic(SPARE, num_partitions=1, replica_assignment=[[2]]),
            ]
        )
        for future in created.values():
            future.result(30)
        bootstrap = brokers[1].bootstrap
        eventually(
            lambda: all(
                lead > 0
                for topic in (TOPIC, SPARE)
                for lead, _ in cluster_support.partition_leaders(bootstrap, topic).values()
            ),
            what="a leader for every partition",
        )
        sent = {p: [b"ours-%d-%d" % (p, i) for i in range(5)] for p in range(3)}
        for partition, values in sent.items():
            produce(bootstrap, partition, values)
        cluster_id = cluster_consistency.read_zookeeper(connect).topics[TOPIC].topic_id
        assert cluster_id != foreign_id

        holder = brokers[2]
        assert holder.stop() == 0
        ours = holder.log_dir / f"{TOPIC}-{FOREIGN}"
        shutil.rmtree(ours)
        shutil.copytree(foreign_dir, ours)
        before = digests(ours)
        holder.start()

        error_line = eventually(
            lambda: next(
                (
                    line
                    for line in holder.output().splitlines()
                    if "ERROR" in line
                    and str(ours) in line
                    and cluster_id in line
                    and foreign_id in line
                ),
                None,
            ),
            what="an error line naming the dir and both topic ids",
        )
        print(f"\n{error_line}")

        # Produce: not led here (Kafka's answer for a partition it neither leads nor follows)
        producer = KafkaProducer(bootstrap_servers=holder.bootstrap, retries=0, acks=1)
        with pytest.raises(NotLeaderForPartitionError):
            producer.send(TOPIC, value=b"refused", partition=FOREIGN).get(timeout=30)
        producer.close(10)
        # Fetch by topic id: the log holds another topic id
        topic_uuid = uuid.UUID(bytes=base64.urlsafe_b64decode(cluster_id + "=="))
        assert fetch_by_id(holder.port, topic_uuid) == ErrorCode.inconsistent_topic_id

        # every other partition is served, on that broker and the others
        for partition in (0, 2):
            more = [b"after-%d" % partition]
            produce(bootstrap, partition, more)
            assert consume(bootstrap, partition, 6) == sent[partition] + more
        produce(holder.bootstrap, 0, [b"spare"], topic=SPARE)
        assert consume(holder.bootstrap, 0, 1, topic=SPARE) == [b"spare"]

        assert holder.stop() == 0
        assert digests(ours) == before, "the foreign partition dir was changed"
