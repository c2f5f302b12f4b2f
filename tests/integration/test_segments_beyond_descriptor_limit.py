"""A real broker process holding more local segments than its open-file limit allows.

Each produced message fills a segment (segment.bytes=1024), so the broker rolls once per
message, as a broker does with a copy backlog while the object store is down. Its
RLIMIT_NOFILE is lowered (resource.prlimit) to what it holds at the start plus a few
dozen. The broker keeps taking produce requests (every message delivered, none failed),
serves fetches from offset 0 (every old segment opened again on demand), and its
descriptors stay near what it held at the start: they follow the segments in use
(log.segment.open.files.max), not the segments on disk. Before the LRU the broker failed every
roll at the limit ("Too many open files") and dropped the producer's connections.
"""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.broker_process import BrokerProcess

pytestmark = pytest.mark.timeout(240)

TOPIC = "backlog"
SPARE_DESCRIPTORS = 40
OPEN_FILES_MAX = 8
SEGMENTS_PER_LIMIT = 2  # segments on disk: this many times the descriptor limit
VALUE_BYTES = 900  # with the batch overhead, one message fills a 1024-byte segment
# Descriptors the broker may hold above its start: the idle files the LRU keeps, plus a few
# for requests in flight, a checkpoint being written and the consumer's connections.
DESCRIPTORS_ABOVE_START_MAX = OPEN_FILES_MAX + 12


def open_descriptors(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def value(i: int) -> bytes:
    return f"{i:08d}".encode() + b"x" * (VALUE_BYTES - 8)


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    overrides = {
        "log.segment.open.files.max": str(OPEN_FILES_MAX),
        "auto.create.topics.enable": "false",
    }
    with BrokerProcess(tmp_path, overrides=overrides) as process:
        yield process


def test_broker_beyond_its_descriptor_limit_keeps_serving_produce_and_old_offsets(
    broker: BrokerProcess,
) -> None:
    assert broker.process is not None
    pid = broker.process.pid
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 1, config={"segment.bytes": "1024"})])[TOPIC].result(30)
    producer = Producer(
        {"bootstrap.servers": broker.bootstrap, "linger.ms": 0, "message.timeout.ms": 20_000}
    )
    producer.produce(TOPIC, value(0))  # connect and load the partition before measuring
    assert producer.flush(20) == 0
    start_descriptors = open_descriptors(pid)
    limit = start_descriptors + SPARE_DESCRIPTORS
    resource.prlimit(pid, resource.RLIMIT_NOFILE, (limit, limit))
    messages = SEGMENTS_PER_LIMIT * limit
    failures: list[str] = []
    most_descriptors = 0

    def delivered(error: KafkaError | None, _message: Message) -> None:
        if error is not None:
            failures.append(str(error))

    for i in range(1, messages):
        producer.produce(TOPIC, value(i), on_delivery=delivered)
        # One message per request: one roll per message.
        if producer.flush(20) > 0:
            failures.append(f"message {i} not delivered within 20 s")
        if failures:
            break
        if i % 10 == 0:
            most_descriptors = max(most_descriptors, open_descriptors(pid))
    assert broker.process.poll() is None, broker.output()[-3000:]
    assert failures == [], f"{len(failures)} messages failed, first {failures[:3]}"
    segments = len(list((broker.log_dir / f"{TOPIC}-0").glob("*.log")))
    assert segments > limit, f"only {segments} segments for a limit of {limit} descriptors"

    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "old-offsets",
            "enable.auto.commit": False,
            "max.partition.fetch.bytes": 16 * 1024,
        }
    )
    consumer.assign([TopicPartition(TOPIC, 0, 0)])
    values: list[bytes] = []
    deadline = time.monotonic() + 90
    try:
        while len(values) < messages and time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is None:
                continue
            assert message.error() is None, message.error()
            values.append(message.value() or b"")
            if len(values) % 50 == 0:
                most_descriptors = max(most_descriptors, open_descriptors(pid))
    finally:
        consumer.close()
    assert values == [value(i) for i in range(messages)]
    assert broker.process.poll() is None, broker.output()[-3000:]
    assert most_descriptors <= start_descriptors + DESCRIPTORS_ABOVE_START_MAX, (
        f"{most_descriptors} descriptors at most, {start_descriptors} at the start,"
        f" {segments} segments on disk"
    )
    assert "Too many open files" not in broker.output()
