"""Acknowledged records survive broker restarts: SIGTERM (clean) and SIGKILL (crash).

The broker runs with ``log.flush.interval.messages=1`` (topic ``flush.messages=1``, Kafka's
strictest durability setting: every append is fsynced before it is acknowledged). kafka-python
writes partition 0 and confluent-kafka (librdkafka) partition 1, both with ``acks=all``; every
acknowledged ``(partition, offset, value)`` is recorded in the delivery callback and must be
read back, equal, at that offset after the restart.

A restart keeps each partition's leader epoch (Metadata): leader epochs are the controller's,
and it elects only when a leader is lost, so the restarted broker leads again at the epoch it
was given (as a single Kafka broker does), and its ``leader-epoch-checkpoint`` keeps that
epoch as its last entry. Start times are printed, not asserted.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import Producer
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from tests.broker_process import BrokerProcess
from tests.integration import raw_wire

pytestmark = pytest.mark.timeout(180)

TOPIC = "durable"
PARTITIONS = (0, 1)  # 0: kafka-python, 1: confluent-kafka
ACKED_BEFORE_KILL_MIN = 300  # per producer


@dataclass(frozen=True, slots=True)
class Acked:
    partition: int
    offset: int
    value: bytes


class AckLog:
    """Acknowledged records, appended from producer callback threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.records: list[Acked] = []
        self.errors: list[str] = []

    def ack(self, partition: int, offset: int, value: bytes) -> None:
        with self._lock:
            self.records.append(Acked(partition, offset, value))

    def fail(self, error: object) -> None:
        with self._lock:
            self.errors.append(str(error))

    def count(self, partition: int) -> int:
        with self._lock:
            return sum(1 for r in self.records if r.partition == partition)


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    with BrokerProcess(tmp_path, overrides={"log.flush.interval.messages": "1"}) as process:
        raw_wire.create_topic(process.port, TOPIC, partitions=len(PARTITIONS))
        yield process


# ---------------------------------------------------------------------------- producers
def kafka_python_producer(broker: BrokerProcess) -> KafkaProducer:
    return KafkaProducer(
        bootstrap_servers=broker.bootstrap, acks="all", linger_ms=0, request_timeout_ms=5_000
    )


def confluent_producer(broker: BrokerProcess) -> Producer:
    return Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "acks": "all",
            "linger.ms": 0,
            "message.timeout.ms": 20_000,
        }
    )


def send_kafka_python(producer: KafkaProducer, acks: AckLog, value: bytes) -> None:
    future = producer.send(TOPIC, value=value, partition=0)
    future.add_callback(lambda meta, v=value: acks.ack(meta.partition, meta.offset, v))
    future.add_errback(acks.fail)


def send_confluent(producer: Producer, acks: AckLog, value: bytes) -> None:
    def delivered(error: object, message: object) -> None:
        if error is not None:
            acks.fail(error)
        else:
            acks.ack(message.partition(), message.offset(), message.value())  # type: ignore[attr-defined]

    producer.produce(TOPIC, value=value, partition=1, on_delivery=delivered)
    producer.poll(0)


def produce_batch(broker: BrokerProcess, acks: AckLog, tag: str, count: int) -> None:
    kp = kafka_python_producer(broker)
    cp = confluent_producer(broker)
    for i in range(count):
        send_kafka_python(kp, acks, f"{tag}-kp-{i}".encode())
        send_confluent(cp, acks, f"{tag}-ck-{i}".encode() * (1 + i % 5))
    kp.flush(30)
    kp.close(10)
    assert cp.flush(30) == 0
    assert acks.errors == []


# ---------------------------------------------------------------------------- reading back
def read_partition(broker: BrokerProcess, partition: int) -> dict[int, bytes]:
    consumer = KafkaConsumer(
        bootstrap_servers=broker.bootstrap, enable_auto_commit=False, consumer_timeout_ms=5_000
    )
    tp = TopicPartition(TOPIC, partition)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    end = consumer.end_offsets([tp])[tp]
    found: dict[int, bytes] = {}
    deadline = time.monotonic() + 30
    while consumer.position(tp) < end and time.monotonic() < deadline:
        for messages in consumer.poll(timeout_ms=500).values():
            for message in messages:
                found[message.offset] = message.value
    consumer.close()
    assert len(found) == end, f"read {len(found)} of {end} records of {tp}"
    return found


def assert_every_acked_record_is_there(broker: BrokerProcess, acks: AckLog) -> None:
    stored = {p: read_partition(broker, p) for p in PARTITIONS}
    assert acks.records
    missing = [a for a in acks.records if stored[a.partition].get(a.offset) != a.value]
    assert missing == [], f"{len(missing)} acknowledged records lost or changed: {missing[:5]}"
    for partition in PARTITIONS:
        offsets = sorted(a.offset for a in acks.records if a.partition == partition)
        assert len(offsets) == len(set(offsets)), "two acknowledgements for one offset"


# ---------------------------------------------------------------------------- epochs
def leader_epochs(broker: BrokerProcess) -> dict[int, int]:
    module = raw_wire.request_classes(3, 12)
    with raw_wire.connect(broker.port) as sock:
        body = raw_wire.call(
            sock,
            3,
            12,
            topics=(module.MetadataRequestTopic(name=TOPIC, topic_id=None),),
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )
    return {p.partition_index: p.leader_epoch for p in body.topics[0].partitions}


def checkpoint_entries(broker: BrokerProcess, partition: int) -> list[tuple[int, int]]:
    path = broker.log_dir / f"{TOPIC}-{partition}" / "leader-epoch-checkpoint"
    lines = path.read_text().splitlines()
    assert lines[0] == "0", "checkpoint version"
    entries = [tuple(int(x) for x in line.split()) for line in lines[2:]]
    assert len(entries) == int(lines[1])
    return entries  # type: ignore[return-value]


def log_end_offsets(broker: BrokerProcess) -> dict[int, int]:
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap)
    tps = [TopicPartition(TOPIC, p) for p in PARTITIONS]
    ends = consumer.end_offsets(tps)
    consumer.close()
    return {tp.partition: offset for tp, offset in ends.items()}


def assert_same_epoch(broker: BrokerProcess, before: dict[int, int]) -> dict[int, int]:
    after = leader_epochs(broker)
    ends = log_end_offsets(broker)
    for partition in PARTITIONS:
        assert after[partition] == before[partition], (partition, before, after)
        entries = checkpoint_entries(broker, partition)
        assert entries[-1][0] == after[partition], entries
        assert entries[-1][1] <= ends[partition], (entries, ends)
        assert [e for e, _ in entries] == sorted({e for e, _ in entries}), entries
    return after


# ---------------------------------------------------------------------------- restarts
def start_timed(broker: BrokerProcess) -> tuple[float, str]:
    """Start the broker; seconds from process start to listening, and that start's output."""
    offset = broker.output_path.stat().st_size if broker.output_path.exists() else 0
    started = time.monotonic()
    broker.start()
    elapsed_s = time.monotonic() - started
    time.sleep(0.1)
    return elapsed_s, broker.output_path.read_bytes()[offset:].decode(errors="replace")


def test_clean_restart_keeps_every_acknowledged_record(broker: BrokerProcess) -> None:
    acks = AckLog()
    produce_batch(broker, acks, "before", 400)
    epochs = leader_epochs(broker)

    assert broker.stop() == 0
    assert (broker.log_dir / ".kafka_cleanshutdown").exists(), "no clean-shutdown marker"
    elapsed_s, output = start_timed(broker)
    print(f"\nstart after SIGTERM: {elapsed_s:.2f}s to listening")

    assert "clean_shutdown=True" in output, output
    assert "Traceback" not in output
    for partition in PARTITIONS:
        assert f"loaded log partition={TOPIC}-{partition} " in output
    assert "recovered_segments=0 " in output
    assert not re.search(r"recovered_segments=[1-9]", output), "a clean restart recovered"
    assert not (broker.log_dir / ".kafka_cleanshutdown").exists(), "marker must go once running"
    epochs = assert_same_epoch(broker, epochs)
    assert_every_acked_record_is_there(broker, acks)

    produce_batch(broker, acks, "after", 50)  # the restarted broker takes writes at once
    assert_every_acked_record_is_there(broker, acks)


def became_leader_at(output: str, partition: int) -> tuple[int, int]:
    """``(leader epoch, log end offset)`` from this start's "became leader" line."""
    match = re.search(
        rf"became leader partition={TOPIC}-{partition} leader_epoch=(\d+) log_end_offset=(\d+)",
        output,
    )
    assert match, output
    return int(match[1]), int(match[2])


def test_sigkill_during_produce_keeps_every_acknowledged_record(broker: BrokerProcess) -> None:
    """The producers keep running through the crash and the restart (they retry, as real
    applications do); every record acknowledged before or after the crash must be there."""
    acks = AckLog()
    produce_batch(broker, acks, "warmup", 20)
    epochs = leader_epochs(broker)
    stop = threading.Event()
    kp = kafka_python_producer(broker)
    cp = confluent_producer(broker)

    def kafka_python_loop() -> None:
        i = 0
        while not stop.is_set():
            send_kafka_python(kp, acks, f"loop-kp-{i}".encode())
            i += 1
            if i % 20 == 0:
                time.sleep(0.005)

    def confluent_loop() -> None:
        i = 0
        while not stop.is_set():
            try:
                send_confluent(cp, acks, f"loop-ck-{i}".encode())
            except BufferError:  # the local queue is full while the broker is down
                cp.poll(0.05)
                continue
            i += 1
            if i % 20 == 0:
                cp.poll(0.005)

    threads = [threading.Thread(target=kafka_python_loop), threading.Thread(target=confluent_loop)]
    for thread in threads:
        thread.start()
    try:
        deadline = time.monotonic() + 60
        while min(acks.count(p) for p in PARTITIONS) < ACKED_BEFORE_KILL_MIN:
            assert time.monotonic() < deadline, "producers too slow"
            time.sleep(0.02)
        broker.kill()  # mid-stream: requests are in flight
        acked_before_kill = list(acks.records)
        time.sleep(0.3)
        elapsed_s, output = start_timed(broker)
        time.sleep(1.0)  # the producers reconnect and go on
    finally:
        stop.set()
        for thread in threads:
            thread.join(10)
    kp.flush(30)
    kp.close(10)
    assert cp.flush(30) == 0
    print(
        f"\nstart after SIGKILL: {elapsed_s:.2f}s to listening; acked {len(acked_before_kill)}"
        f" before the kill, {len(acks.records)} in all; {len(acks.errors)} send errors"
    )
    assert "clean_shutdown=False" in output, output
    assert "Traceback" not in output
    assert len(acks.records) > len(acked_before_kill), "nothing acknowledged after the restart"

    after = leader_epochs(broker)
    for partition in PARTITIONS:
        epoch, end_at_start = became_leader_at(output, partition)
        assert epoch == after[partition] == epochs[partition]  # no epoch of its own
        acked_end = max(a.offset for a in acked_before_kill if a.partition == partition) + 1
        assert end_at_start >= acked_end, "the recovered log ends before an acknowledged record"
        # the epoch's entry is where it began, before the crash, not at the recovered end
        assert checkpoint_entries(broker, partition)[-1][0] == epoch
        assert checkpoint_entries(broker, partition)[-1][1] <= end_at_start
    assert_every_acked_record_is_there(broker, acks)

    # A second crash with no producer running: the same epoch again.
    broker.kill()
    start_timed(broker)
    assert_same_epoch(broker, after)
    assert_every_acked_record_is_there(broker, acks)
