"""Transactions through kafka-python (2.2+, a client written apart from librdkafka) against one
broker process: a ``KafkaProducer(transactional_id=...)`` commits and aborts, read_committed
``KafkaConsumer``s (``isolation_level='read_committed'``) see only the committed records while
read_uncommitted ones see all, a consumer does not read past an open transaction, and a
consume-transform-produce loop commits its group's offsets with ``send_offsets_to_transaction``
(AddOffsetsToTxn, TxnOffsetCommit)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.structs import OffsetAndMetadata

from tests.broker_process import BrokerProcess

pytestmark = pytest.mark.timeout(180)

TOPIC, SOURCE, SINK, GROUP = "ledger", "source", "sink", "transformer"
TIMEOUT_S = 30


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    with BrokerProcess(
        tmp_path,
        overrides={
            "auto.create.topics.enable": "false",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
        },
    ) as process:
        admin = KafkaAdminClient(bootstrap_servers=process.bootstrap)
        try:
            admin.create_topics(
                [NewTopic(name, 2 if name == TOPIC else 1, 1) for name in (TOPIC, SOURCE, SINK)]
            )
        finally:
            admin.close()
        yield process


def transactional_producer(broker: BrokerProcess, transactional_id: str) -> KafkaProducer:
    producer = KafkaProducer(
        bootstrap_servers=broker.bootstrap,
        transactional_id=transactional_id,
        linger_ms=5,
        max_block_ms=TIMEOUT_S * 1000,
    )
    producer.init_transactions()
    return producer


def read_all(broker: BrokerProcess, topic: str, isolation_level: str) -> list[str]:
    """Every value of ``topic`` a consumer with ``isolation_level`` reads, up to the end offsets
    it is given (for read_committed: the last stable offsets)."""
    consumer = KafkaConsumer(
        bootstrap_servers=broker.bootstrap,
        isolation_level=isolation_level,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    try:
        partitions = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic)]
        consumer.assign(partitions)
        ends = consumer.end_offsets(partitions)
        values: list[str] = []
        deadline = time.monotonic() + TIMEOUT_S
        while any(consumer.position(tp) < ends[tp] for tp in partitions):
            assert time.monotonic() < deadline, f"{topic} not read up to {ends}: {values}"
            for records in consumer.poll(timeout_ms=500).values():
                values.extend(r.value.decode() for r in records)
        return sorted(values)
    finally:
        consumer.close()


def test_read_committed_sees_committed_transactions_only(broker: BrokerProcess) -> None:
    producer = transactional_producer(broker, f"ledger-{uuid.uuid4().hex[:6]}")
    try:
        producer.begin_transaction()
        for i in range(6):
            producer.send(TOPIC, value=f"committed-{i}".encode(), partition=i % 2)
        producer.commit_transaction()

        producer.begin_transaction()
        for i in range(4):
            producer.send(TOPIC, value=f"aborted-{i}".encode(), partition=i % 2)
        producer.flush()  # on the log before the abort decides them
        producer.abort_transaction()

        producer.begin_transaction()
        producer.send(TOPIC, value=b"committed-6", partition=0)
        producer.commit_transaction()
    finally:
        producer.close()

    committed = sorted([f"committed-{i}" for i in range(7)])
    assert read_all(broker, TOPIC, "read_committed") == committed
    assert read_all(broker, TOPIC, "read_uncommitted") == sorted(
        committed + [f"aborted-{i}" for i in range(4)]
    )


def test_read_committed_stops_at_an_open_transaction(broker: BrokerProcess) -> None:
    producer = transactional_producer(broker, f"open-{uuid.uuid4().hex[:6]}")
    try:
        producer.begin_transaction()
        producer.send(TOPIC, value=b"before", partition=0)
        producer.commit_transaction()
        producer.begin_transaction()
        producer.send(TOPIC, value=b"undecided", partition=0)
        producer.flush()

        # the open transaction's record is on the log, below the high watermark
        assert read_all(broker, TOPIC, "read_uncommitted") == ["before", "undecided"]
        assert read_all(broker, TOPIC, "read_committed") == ["before"]

        producer.commit_transaction()
    finally:
        producer.close()
    assert read_all(broker, TOPIC, "read_committed") == ["before", "undecided"]


def test_a_new_producer_of_the_id_aborts_the_open_transaction(broker: BrokerProcess) -> None:
    transactional_id = f"fenced-{uuid.uuid4().hex[:6]}"
    first = transactional_producer(broker, transactional_id)
    first.begin_transaction()
    first.send(TOPIC, value=b"from-the-zombie", partition=1)
    first.flush()
    try:
        second = transactional_producer(broker, transactional_id)  # bumps the epoch, aborts
        try:
            second.begin_transaction()
            second.send(TOPIC, value=b"from-the-successor", partition=1)
            second.commit_transaction()
        finally:
            second.close()
    finally:
        first.close(timeout=1)
    assert read_all(broker, TOPIC, "read_committed") == ["from-the-successor"]


def group_consumer(broker: BrokerProcess) -> KafkaConsumer:
    consumer = KafkaConsumer(
        SOURCE,
        bootstrap_servers=broker.bootstrap,
        group_id=GROUP,
        isolation_level="read_committed",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    return consumer


def take(consumer: KafkaConsumer, count: int) -> list[str]:
    values: list[str] = []
    deadline = time.monotonic() + TIMEOUT_S
    while len(values) < count and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=500, max_records=count - len(values)).values():
            values.extend(r.value.decode() for r in records)
    assert len(values) == count, values
    return values


def transform(
    consumer: KafkaConsumer, producer: KafkaProducer, count: int, *, commit: bool
) -> list[str]:
    """One transaction: ``count`` records in, their upper-cased copies out, the consumer's
    position as the group's offset."""
    values = take(consumer, count)
    producer.begin_transaction()
    for value in values:
        producer.send(SINK, value=value.upper().encode())
    source = TopicPartition(SOURCE, 0)
    # kafka-python 3 hands the group's member and generation (KIP-447); 2.2 the group id only
    group = consumer.group_metadata() if hasattr(consumer, "group_metadata") else GROUP
    producer.send_offsets_to_transaction(
        {source: OffsetAndMetadata(consumer.position(source), "", -1)}, group
    )
    if commit:
        producer.commit_transaction()
    else:
        producer.abort_transaction()
    return values


def committed_offset(broker: BrokerProcess) -> int | None:
    reader = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=GROUP)
    try:
        offset: int | None = reader.committed(TopicPartition(SOURCE, 0))
        return offset
    finally:
        reader.close()


def test_send_offsets_to_transaction_commits_the_group_offset_with_the_output(
    broker: BrokerProcess,
) -> None:
    source = KafkaProducer(bootstrap_servers=broker.bootstrap)
    for i in range(10):
        source.send(SOURCE, value=f"in-{i}".encode())
    source.close()

    producer = transactional_producer(broker, f"eos-{uuid.uuid4().hex[:6]}")
    consumer = group_consumer(broker)
    try:
        assert transform(consumer, producer, 4, commit=True) == [f"in-{i}" for i in range(4)]
        assert committed_offset(broker) == 4
        assert read_all(broker, SINK, "read_committed") == [f"IN-{i}" for i in range(4)]

        # an aborted attempt: neither its output nor its offset counts
        transform(consumer, producer, 3, commit=False)
        assert committed_offset(broker) == 4
        assert read_all(broker, SINK, "read_committed") == [f"IN-{i}" for i in range(4)]
    finally:
        consumer.close()

    # a new member of the group resumes where the last committed transaction left off
    consumer = group_consumer(broker)
    try:
        assert transform(consumer, producer, 6, commit=True) == [f"in-{i}" for i in range(4, 10)]
        assert committed_offset(broker) == 10
        assert read_all(broker, SINK, "read_committed") == sorted(f"IN-{i}" for i in range(10))
    finally:
        consumer.close()
        producer.close()
