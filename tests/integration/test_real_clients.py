"""Real Kafka clients against a real broker process over loopback.

kafka-python and confluent-kafka (librdkafka) produce with every compression codec, acks 0/1/all,
keys, headers and 1 MiB records; kafka-python, confluent-kafka and aiokafka consume from
earliest, latest, an offset and a timestamp. Every consumed record must equal what was
produced, in order, at the offset the producer was told.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import TopicPartition as ATopicPartition
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CTopicPartition
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KTopicPartition
from kafka.admin import NewTopic

from tests.broker_process import BrokerProcess

pytestmark = pytest.mark.timeout(180)

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
ONE_MIB = 1024 * 1024


@dataclass(frozen=True)
class Sent:
    partition: int
    offset: int
    key: bytes | None
    value: bytes
    headers: tuple[tuple[str, bytes], ...]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    directory: Path = tmp_path_factory.mktemp("broker")
    with BrokerProcess(
        directory,
        overrides={"message.max.bytes": str(2 * ONE_MIB), "socket.request.max.bytes": "8388608"},
    ) as process:
        yield process


def _create(broker: BrokerProcess, name: str, partitions: int = 1) -> None:
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        admin.create_topics([NewTopic(name, partitions, 1)])
    finally:
        admin.close()


Headers = tuple[tuple[str, bytes], ...]


def _records(tag: str, count: int) -> list[tuple[bytes | None, bytes, Headers]]:
    out = []
    for i in range(count):
        key = None if i % 5 == 4 else f"{tag}-key-{i}".encode()
        headers = (("h", f"{i}".encode()), ("tag", tag.encode())) if i % 3 == 0 else ()
        out.append((key, f"{tag}-value-{i}-".encode() * (1 + i % 7), headers))
    return out


def _produce_kafka_python(
    broker: BrokerProcess, topic: str, codec: str, acks: int | str, count: int
) -> list[Sent]:
    producer = KafkaProducer(
        bootstrap_servers=broker.bootstrap,
        acks=acks,
        compression_type=None if codec == "none" else codec,
        linger_ms=5,
        max_request_size=2 * ONE_MIB,
    )
    futures = []
    records = _records(f"kp-{codec}-{acks}", count)
    for key, value, headers in records:
        futures.append(producer.send(topic, key=key, value=value, headers=list(headers)))
    producer.flush()
    sent = []
    for (key, value, headers), future in zip(records, futures, strict=True):
        metadata = future.get(timeout=30)
        sent.append(Sent(metadata.partition, metadata.offset, key, value, headers))
    producer.close()
    return sent


def _produce_confluent(
    broker: BrokerProcess, topic: str, codec: str, acks: str, count: int, value_size: int = 0
) -> list[Sent]:
    producer = Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "acks": acks,
            "compression.type": codec,
            "linger.ms": 5,
            "message.max.bytes": 2 * ONE_MIB,
        }
    )
    delivered: list[Sent] = []
    errors: list[str] = []

    def on_delivery(headers, error, message) -> None:  # type: ignore[no-untyped-def]
        # Delivery reports carry no headers: take them from what was sent.
        if error is not None:
            errors.append(str(error))
            return
        delivered.append(
            Sent(message.partition(), message.offset(), message.key(), message.value(), headers)
        )

    for key, short_value, headers in _records(f"ck-{codec}-{acks}", count):
        value = short_value
        if value_size:
            value = (short_value * (value_size // len(short_value) + 1))[:value_size]
        producer.produce(
            topic,
            key=key,
            value=value,
            headers=list(headers),
            on_delivery=functools.partial(on_delivery, headers),
        )
        producer.poll(0)
    assert producer.flush(30) == 0
    assert errors == []
    return delivered


def _consume_kafka_python(
    broker: BrokerProcess, topic: str, partition: int, start: int, count: int
) -> list[Sent]:
    consumer = KafkaConsumer(
        bootstrap_servers=broker.bootstrap,
        group_id=None,
        enable_auto_commit=False,
        fetch_max_bytes=8 * ONE_MIB,
        max_partition_fetch_bytes=4 * ONE_MIB,
    )
    tp = KTopicPartition(topic, partition)
    consumer.assign([tp])
    consumer.seek(tp, start)
    got: list[Sent] = []
    deadline = time.monotonic() + 30
    while len(got) < count and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=500).values():
            for r in records:
                got.append(
                    Sent(r.partition, r.offset, r.key, r.value, tuple((k, v) for k, v in r.headers))
                )
    consumer.close()
    return got[:count]


def _consume_confluent(
    broker: BrokerProcess, topic: str, partition: int, start: int, count: int
) -> list[Sent]:
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": f"reader-{topic}-{start}",
            "enable.auto.commit": False,
            "fetch.max.bytes": 8 * ONE_MIB,
            "max.partition.fetch.bytes": 4 * ONE_MIB,
        }
    )
    consumer.assign([CTopicPartition(topic, partition, start)])
    got: list[Sent] = []
    deadline = time.monotonic() + 30
    while len(got) < count and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is None:
            continue
        assert message.error() is None, message.error()
        got.append(
            Sent(
                message.partition(),
                message.offset(),
                message.key(),
                message.value(),
                tuple(message.headers() or ()),
            )
        )
    consumer.close()
    return got


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("acks", [1, "all"])
def test_kafka_python_produces_and_both_clients_read_it_back(
    broker: BrokerProcess, codec: str, acks: int | str
) -> None:
    topic = f"kp-{codec}-{acks}"
    _create(broker, topic)
    sent = _produce_kafka_python(broker, topic, codec, acks, 300)
    assert [s.offset for s in sent] == list(range(300))
    assert _consume_kafka_python(broker, topic, 0, 0, 300) == sent
    assert _consume_confluent(broker, topic, 0, 0, 300) == sent


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("acks", ["0", "1", "all"])
def test_confluent_produces_and_both_clients_read_it_back(
    broker: BrokerProcess, codec: str, acks: str
) -> None:
    topic = f"ck-{codec}-{acks}"
    _create(broker, topic)
    sent = _produce_confluent(broker, topic, codec, acks, 300)
    assert len(sent) == 300
    expected_values = [s.value for s in sent]
    from_kafka_python = _consume_kafka_python(broker, topic, 0, 0, 300)
    assert [r.value for r in from_kafka_python] == expected_values
    assert [r.offset for r in from_kafka_python] == list(range(300))
    if acks != "0":  # with acks=0 the producer never learns the offsets
        assert from_kafka_python == sent
    assert _consume_confluent(broker, topic, 0, 0, 300) == from_kafka_python


def test_one_mib_records_round_trip(broker: BrokerProcess) -> None:
    topic = "big-records"
    _create(broker, topic)
    sent = _produce_confluent(broker, topic, "none", "all", 6, value_size=ONE_MIB)
    assert all(len(s.value) == ONE_MIB for s in sent)
    assert _consume_kafka_python(broker, topic, 0, 0, 6) == sent
    assert _consume_confluent(broker, topic, 0, 0, 6) == sent


def test_consume_from_latest_offset_and_timestamp(broker: BrokerProcess) -> None:
    topic = "positions"
    _create(broker, topic, partitions=2)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all")
    base_ms = int(time.time() * 1000) - 100_000
    for i in range(100):
        producer.send(topic, value=f"early-{i}".encode(), partition=i % 2, timestamp_ms=base_ms + i)
    producer.flush()

    # latest: a consumer positioned at the end sees only what is produced afterwards
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None)
    tp0 = KTopicPartition(topic, 0)
    consumer.assign([tp0])
    consumer.seek_to_end(tp0)
    assert consumer.position(tp0) == 50
    producer.send(topic, value=b"late", partition=0, timestamp_ms=base_ms + 1000).get(10)
    got = []
    deadline = time.monotonic() + 20
    while not got and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=500).values():
            got.extend(records)
    assert [(r.offset, r.value) for r in got] == [(50, b"late")]

    # an offset
    consumer.seek(tp0, 10)
    first = next(iter(consumer.poll(timeout_ms=5000).values()))[0]
    assert (first.offset, first.value) == (10, b"early-20")

    # a timestamp: partition 1 holds odd i with timestamp base+i; the first at/after base+51
    offsets = consumer.offsets_for_times(
        {KTopicPartition(topic, 1): base_ms + 51, KTopicPartition(topic, 0): base_ms + 10_000}
    )
    found = offsets[KTopicPartition(topic, 1)]
    assert (found.offset, found.timestamp) == (25, base_ms + 51)
    assert offsets[KTopicPartition(topic, 0)] is None  # nothing that late below the HW
    assert consumer.beginning_offsets([tp0]) == {tp0: 0}
    assert consumer.end_offsets([tp0]) == {tp0: 51}
    consumer.close()
    producer.close()

    confluent = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "times"})
    [by_time] = confluent.offsets_for_times([CTopicPartition(topic, 1, base_ms + 51)], timeout=10)
    assert by_time.offset == 25
    low, high = confluent.get_watermark_offsets(CTopicPartition(topic, 0), timeout=10)
    assert (low, high) == (0, 51)
    confluent.close()


def test_aiokafka_consumes_what_was_produced(broker: BrokerProcess) -> None:
    topic = "aio"
    _create(broker, topic)
    sent = _produce_confluent(broker, topic, "lz4", "all", 200)

    async def consume() -> list[Sent]:
        consumer = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False)
        await consumer.start()
        try:
            tp = ATopicPartition(topic, 0)
            consumer.assign([tp])
            consumer.seek(tp, 0)
            got: list[Sent] = []
            while len(got) < 200:
                batch = await consumer.getmany(tp, timeout_ms=1000)
                for r in batch.get(tp, []):
                    got.append(Sent(r.partition, r.offset, r.key, r.value, tuple(r.headers)))
            return got
        finally:
            await consumer.stop()

    async def produce_one() -> int:
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, acks="all")
        await producer.start()
        try:
            metadata = await producer.send_and_wait(topic, b"from-aiokafka", key=b"a")
            return int(metadata.offset)
        finally:
            await producer.stop()

    assert asyncio.run(asyncio.wait_for(consume(), 60)) == sent
    assert asyncio.run(asyncio.wait_for(produce_one(), 60)) == 200
    [last] = _consume_kafka_python(broker, topic, 0, 200, 1)
    assert (last.key, last.value) == (b"a", b"from-aiokafka")
