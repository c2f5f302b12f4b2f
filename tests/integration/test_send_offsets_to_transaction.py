"""A consume-transform-produce loop with confluent-kafka (librdkafka) against one broker
process: the consumer's offsets go into the producer's transaction
(``send_offsets_to_transaction``: AddOffsetsToTxn, TxnOffsetCommit v3 with the consumer's
group metadata), so they become the group's committed offsets exactly when its output
becomes visible, and an aborted attempt leaves both the output and the offsets as they were.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.broker_process import BrokerProcess

pytestmark = pytest.mark.timeout(180)

SOURCE, SINK, GROUP = "source", "sink", "transformer"
TIMEOUT_S = 30


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    with BrokerProcess(tmp_path, overrides={"auto.create.topics.enable": "false"}) as process:
        admin = AdminClient({"bootstrap.servers": process.bootstrap})
        for future in admin.create_topics([NewTopic(SOURCE, 1, 1), NewTopic(SINK, 1, 1)]).values():
            future.result(TIMEOUT_S)
        source = Producer({"bootstrap.servers": process.bootstrap})
        for i in range(10):
            source.produce(SOURCE, value=f"in-{i}".encode())
        assert source.flush(TIMEOUT_S) == 0
        yield process


def group_consumer(broker: BrokerProcess) -> Consumer:
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": GROUP,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    consumer.subscribe([SOURCE])
    return consumer


def take(consumer: Consumer, count: int) -> list[str]:
    values: list[str] = []
    deadline = time.monotonic() + TIMEOUT_S
    while len(values) < count and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and not message.error():
            values.append(message.value().decode())
    assert len(values) == count, values
    return values


def committed(broker: BrokerProcess) -> int:
    """The group's committed offset of source-0, asked with require_stable as librdkafka does
    (it waits while the offset is pending in a transaction)."""
    reader = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": GROUP})
    try:
        (tp,) = reader.committed([TopicPartition(SOURCE, 0)], timeout=TIMEOUT_S)
        return int(tp.offset)
    finally:
        reader.close()


def sink_values(broker: BrokerProcess) -> list[str]:
    reader = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": f"sink-reader-{time.monotonic_ns()}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": "read_committed",
        }
    )
    reader.subscribe([SINK])
    values: list[str] = []
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while time.monotonic() < deadline:
            message = reader.poll(0.5)
            if message is None:
                continue
            if message.error():
                if message.error().code() == -191:  # _PARTITION_EOF: all read
                    return values
                continue
            values.append(message.value().decode())
    finally:
        reader.close()
    raise AssertionError(f"the end of {SINK} was not reached; read {values}")


def transform(consumer: Consumer, producer: Producer, count: int, *, commit: bool) -> list[str]:
    """One transaction: ``count`` records in, their upper-cased copies out, and the
    consumer's position as the group's offsets."""
    values = take(consumer, count)
    producer.begin_transaction()
    for value in values:
        producer.produce(SINK, value=value.upper().encode())
    producer.send_offsets_to_transaction(
        consumer.position(consumer.assignment()),
        consumer.consumer_group_metadata(),
        TIMEOUT_S,
    )
    if commit:
        producer.commit_transaction(TIMEOUT_S)
    else:
        producer.abort_transaction(TIMEOUT_S)
    return values


def test_offsets_commit_with_the_output_and_roll_back_with_an_abort(
    broker: BrokerProcess,
) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "eos-1"})
    producer.init_transactions(TIMEOUT_S)
    consumer = group_consumer(broker)
    try:
        assert transform(consumer, producer, 4, commit=True) == [f"in-{i}" for i in range(4)]
        assert committed(broker) == 4
        assert sink_values(broker) == [f"IN-{i}" for i in range(4)]

        # An aborted attempt: neither its output nor its offsets count.
        transform(consumer, producer, 3, commit=False)
        assert committed(broker) == 4
        assert sink_values(broker) == [f"IN-{i}" for i in range(4)]
    finally:
        consumer.close()

    # A new member of the group resumes where the last committed transaction left off.
    consumer = group_consumer(broker)
    try:
        assert transform(consumer, producer, 6, commit=True) == [f"in-{i}" for i in range(4, 10)]
        assert committed(broker) == 10
        assert sink_values(broker) == [f"IN-{i}" for i in range(10)]
    finally:
        consumer.close()
        producer.flush(TIMEOUT_S)
