"""Three broker processes coordinated through a real ZooKeeper: one cluster with one controller,
partitions spread over the brokers, real clients producing to and consuming from every
partition through whichever broker leads it, the controller's broker SIGKILLed (another broker
takes over, the dead broker's partitions go offline), and the broker's return (its partitions
come back with higher leader epochs and every record)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import NewTopic
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KpTopicPartition

from embedded.zookeeper import ZooKeeperEnsemble
from tests import cluster_support
from tests.broker_process import BrokerProcess
from tests.cluster_support import (
    BROKER_IDS,
    SESSION_TIMEOUT_MS,
    admin,
    eventually,
)
from tests.integration import raw_wire

cluster_support.require_java()

pytestmark = pytest.mark.timeout(240)

TOPIC = "events"
PARTITIONS = 6


@pytest.fixture
def brokers(zookeeper: ZooKeeperEnsemble, tmp_path: Path) -> Iterator[dict[int, BrokerProcess]]:
    with cluster_support.three_brokers(zookeeper, tmp_path) as (started, _connect):
        yield started


def metadata(bootstrap: str) -> Any:
    return cluster_support.metadata(bootstrap, TOPIC)


def partition_leaders(bootstrap: str) -> dict[int, tuple[int, int]]:
    return cluster_support.partition_leaders(bootstrap, TOPIC)


def produce(bootstrap: str, prefix: str, per_partition: int) -> dict[int, list[bytes]]:
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    sent: dict[int, list[bytes]] = {}
    for partition in range(PARTITIONS):
        for i in range(per_partition):
            value = f"{prefix}-{partition}-{i}".encode()
            producer.send(TOPIC, value=value, partition=partition).get(timeout=30)
            sent.setdefault(partition, []).append(value)
    producer.close(10)
    return sent


def consume_kafka_python(bootstrap: str, partition: int, count: int) -> list[bytes]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, consumer_timeout_ms=15_000)
    tp = KpTopicPartition(TOPIC, partition)
    consumer.assign([tp])
    consumer.seek(tp, 0)
    values = []
    for record in consumer:
        values.append(record.value)
        if len(values) == count:
            break
    consumer.close()
    return values


def consume_confluent(bootstrap: str, partition: int, count: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:6]}"})
    consumer.assign([CkTopicPartition(TOPIC, partition, 0)])
    values: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(values) < count and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            values.append(message.value())
    consumer.close()
    return values


def test_three_brokers_are_one_cluster_through_a_controller_failover(
    brokers: dict[int, BrokerProcess],
) -> None:
    client = admin(brokers)
    cluster = eventually(
        lambda: (d := client.describe_cluster().result(10)) and len(d.nodes) == 3 and d,
        what="three brokers in DescribeCluster",
    )
    assert sorted(n.id for n in cluster.nodes) == list(BROKER_IDS)
    controller_id = cluster.controller.id
    assert controller_id in BROKER_IDS

    client.create_topics([NewTopic(TOPIC, num_partitions=PARTITIONS, replication_factor=1)])[
        TOPIC
    ].result(30)
    bootstrap = brokers[1].bootstrap
    leaders = eventually(
        lambda: (
            (m := partition_leaders(bootstrap)) and all(lead > 0 for lead, _ in m.values()) and m
        ),
        what="a leader for every partition",
    )
    # spread over the brokers like Kafka's placement: two partitions each
    per_broker = {b: sum(1 for lead, _ in leaders.values() if lead == b) for b in BROKER_IDS}
    assert per_broker == {1: 2, 2: 2, 3: 2}
    for broker_id, broker in brokers.items():  # every broker comes to answer the same picture
        eventually(
            lambda b=broker: partition_leaders(b.bootstrap) == leaders,
            what=f"broker {broker_id}'s Metadata to show those leaders",
        )

    sent = produce(bootstrap, "before", 10)
    for partition in range(PARTITIONS):
        assert consume_kafka_python(bootstrap, partition, 10) == sent[partition]
        assert consume_confluent(bootstrap, partition, 10) == sent[partition]

    # SIGKILL the controller's broker: another broker becomes controller
    victim = controller_id
    brokers[victim].kill()
    killed_at = time.monotonic()
    survivor = next(b for b in BROKER_IDS if b != victim)
    new_controller = eventually(
        lambda: (
            (c := metadata(brokers[survivor].bootstrap).controller_id) not in (victim, -1) and c
        ),
        timeout_s=SESSION_TIMEOUT_MS / 1000 + 20,
        what="a new controller",
    )
    failover_s = time.monotonic() - killed_at
    print(
        f"\ncontroller failover after SIGKILL of broker {victim}: {failover_s:.2f} s"
        f" (zookeeper.session.timeout.ms={SESSION_TIMEOUT_MS}); new controller {new_controller}"
    )
    assert failover_s < SESSION_TIMEOUT_MS / 1000 + 10

    dead = [p for p, (lead, _) in leaders.items() if lead == victim]
    offline = eventually(
        lambda: (
            (m := partition_leaders(brokers[survivor].bootstrap))
            and all(m[p] == (-1, leaders[p][1] + 1) for p in dead)
            and m
        ),
        what="the dead broker's partitions offline, one leader epoch on",
    )
    alive = [p for p in range(PARTITIONS) if p not in dead]
    for partition in alive:
        assert offline[partition] == leaders[partition]  # untouched

    # the broker returns: its partitions come back, led by it, at a higher epoch, whole
    brokers[victim].start()
    back = eventually(
        lambda: (
            (m := partition_leaders(brokers[survivor].bootstrap))
            and all(m[p][0] == victim for p in dead)
            and m
        ),
        what="the returned broker's partitions online",
    )
    for partition in dead:
        assert back[partition][1] == leaders[partition][1] + 2
        assert consume_kafka_python(brokers[survivor].bootstrap, partition, 10) == sent[partition]
    more = produce(brokers[survivor].bootstrap, "after", 5)
    for partition in range(PARTITIONS):
        assert consume_confluent(brokers[survivor].bootstrap, partition, 15) == (
            sent[partition] + more[partition]
        )


def test_sigterm_moves_leadership_away_before_the_broker_exits(
    brokers: dict[int, BrokerProcess],
) -> None:
    client = admin(brokers)
    eventually(lambda: len(client.describe_cluster().result(10).nodes) == 3, what="three brokers")
    client.create_topics([NewTopic(TOPIC, num_partitions=3, replication_factor=3)])[TOPIC].result(
        30
    )
    bootstrap = brokers[2].bootstrap
    before = eventually(
        lambda: (
            (m := partition_leaders(bootstrap)) and all(lead > 0 for lead, _ in m.values()) and m
        ),
        what="a leader for every partition",
    )
    leaving = 1
    led = [p for p, (lead, _) in before.items() if lead == leaving]
    assert led, before  # Kafka's placement gives every broker a preferred leadership

    assert brokers[leaving].stop() == 0  # SIGTERM: a clean, controlled shutdown
    output = brokers[leaving].output()
    assert "controlled shutdown complete broker_id=1" in output, output
    assert output.index("controlled shutdown complete") < output.index("broker shut down cleanly")

    # the stopped broker saw its leaderships move before it exited; another broker learns of
    # the controller's last writes through its own watches, a moment later
    def settled() -> list[Any]:
        (topic,) = metadata(bootstrap).topics
        partitions = list(topic.partitions)
        return partitions if all(leaving not in p.isr_nodes for p in partitions) else []

    for p in eventually(settled, timeout_s=10, what="the stopped broker out of every ISR"):
        assert p.leader_id in (2, 3), p  # none offline, none left on the stopped broker
        if p.partition_index in led:
            assert p.leader_epoch == before[p.partition_index][1] + 1, p
    # it stopped following when it asked to leave: no leader takes it back into an ISR
    assert "follower fetching stopped for controlled shutdown" in output, output


def test_a_broker_that_is_no_replica_answers_not_leader_as_kafka(
    brokers: dict[int, BrokerProcess],
) -> None:
    """Kafka's ``getPartitionOrError``: a partition the cluster has but this broker does not
    host is NOT_LEADER_OR_FOLLOWER (the client refreshes its metadata and goes to the leader);
    only a partition the cluster does not have is UNKNOWN_TOPIC_OR_PARTITION."""
    placed = NewTopic("placed", num_partitions=1, replica_assignment=[[1]])
    client = admin(brokers)
    [created] = client.create_topics([placed]).values()
    created.result(timeout=15)
    for b_id, b in brokers.items():
        eventually(
            lambda b=b: (
                cluster_support.partition_leaders(b.bootstrap, "placed").get(0, (-1,))[0] == 1
            ),
            what=f"broker {b_id} knows placed-0 is led by broker 1",
        )
    not_replica = brokers[2]
    assert list_offsets_error(not_replica.port, "placed", 0) == NOT_LEADER_OR_FOLLOWER
    assert offset_for_leader_epoch_error(not_replica.port, "placed", 0) == NOT_LEADER_OR_FOLLOWER
    assert list_offsets_error(not_replica.port, "placed", 5) == UNKNOWN_TOPIC_OR_PARTITION
    assert list_offsets_error(brokers[1].port, "placed", 0) == 0


NOT_LEADER_OR_FOLLOWER = 6
UNKNOWN_TOPIC_OR_PARTITION = 3


def list_offsets_error(port: int, topic: str, partition: int) -> int:
    m = raw_wire.request_classes(2, 7)
    with raw_wire.connect(port) as sock:
        body = raw_wire.call(
            sock,
            2,
            7,
            replica_id=-1,
            isolation_level=0,
            topics=(
                m.ListOffsetsTopic(
                    name=topic,
                    partitions=(
                        m.ListOffsetsPartition(
                            partition_index=partition, current_leader_epoch=-1, timestamp=-1
                        ),
                    ),
                ),
            ),
        )
    return int(body.topics[0].partitions[0].error_code.value)


def offset_for_leader_epoch_error(port: int, topic: str, partition: int) -> int:
    m = raw_wire.request_classes(23, 4)
    with raw_wire.connect(port) as sock:
        body = raw_wire.call(
            sock,
            23,
            4,
            replica_id=-1,
            topics=(
                m.OffsetForLeaderTopic(
                    topic=topic,
                    partitions=(
                        m.OffsetForLeaderPartition(
                            partition=partition, current_leader_epoch=-1, leader_epoch=0
                        ),
                    ),
                ),
            ),
        )
    return int(body.topics[0].partitions[0].error_code.value)
