"""The longest legal topic name (249 characters) can be deleted and created again.

Deleting a partition renames its directory to ``<topic>-<p>.<uuid>-delete`` first; with a
249-character topic that name would exceed the 255-byte file-name limit, so the topic part
is shortened as Kafka's ``LocalLog.logDeleteDirName`` does. Driven by real clients against a
real broker process: confluent-kafka's AdminClient creates and deletes, kafka-python
produces and consumes.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from tests.broker_process import BrokerProcess

pytestmark = pytest.mark.timeout(180)

TOPIC = "long-" + "n" * 244  # 249 characters, the most Kafka allows
PARTITIONS = 2


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    with BrokerProcess(tmp_path) as process:
        yield process


def admin(broker: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def create(broker: BrokerProcess) -> None:
    client = admin(broker)  # kept alive until its futures are done
    client.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(timeout=30)


def produce(broker: BrokerProcess, tag: str, count: int) -> dict[int, list[bytes]]:
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all", linger_ms=0)
    sent: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    for i in range(count):
        partition = i % PARTITIONS
        value = f"{tag}-{i}".encode()
        producer.send(TOPIC, value=value, partition=partition).get(timeout=20)
        sent[partition].append(value)
    producer.close(10)
    return sent


def consume(broker: BrokerProcess) -> dict[int, list[bytes]]:
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None)
    tps = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
    consumer.assign(tps)
    consumer.seek_to_beginning(*tps)
    ends = consumer.end_offsets(tps)
    found: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    deadline = time.monotonic() + 30
    while any(consumer.position(tp) < ends[tp] for tp in tps) and time.monotonic() < deadline:
        for tp, messages in consumer.poll(timeout_ms=500).items():
            found[tp.partition].extend(m.value for m in messages)
    consumer.close()
    return found


def test_longest_topic_name_is_deleted_and_created_again(broker: BrokerProcess) -> None:
    assert len(TOPIC) == 249
    create(broker)
    produce(broker, "first", 10)

    # Before the fix: the rename failed with [Errno 36] File name too long, and the topic
    # was left half-deleted.
    client = admin(broker)
    client.delete_topics([TOPIC])[TOPIC].result(timeout=30)
    listed = client.list_topics(timeout=10).topics
    assert TOPIC not in listed
    leftovers = [p.name for p in broker.log_dir.iterdir() if p.is_dir()]
    assert not [n for n in leftovers if n.startswith("long-")], leftovers

    create(broker)
    second = produce(broker, "second", 6)
    assert consume(broker) == second, "the re-created topic holds only its own records"

    broker.restart()  # nothing is left offline or half-deleted across a restart
    assert consume(broker) == second
    assert "partition taken offline" not in broker.output()
