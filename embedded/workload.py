"""The demo's data: produced and read back with kafka-python, a real Kafka client.

Every record says where it belongs: its value starts with ``<topic>/<partition>/<index>`` and
carries a pseudo-random payload (incompressible, so segments fill with real bytes) derived
from the same three, so a reader can check any record it gets, wherever the broker served it
from (a local segment or the remote tier), without keeping a copy of what was written.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from kafka import KafkaConsumer, KafkaProducer, TopicPartition

PAYLOAD_BYTES = 480
POLL_TIMEOUT_MS = 1000
IDLE_POLLS_MAX = 30


def record_value(topic: str, partition: int, index: int) -> bytes:
    head = f"{topic}/{partition}/{index:09d}/".encode()
    payload = random.Random(f"{topic}/{partition}/{index}").randbytes(PAYLOAD_BYTES)
    return head + payload


def produce(
    bootstrap_server: str,
    topic: str,
    *,
    partitions: int,
    records_per_partition: int,
    progress: Callable[[int], None] | None = None,
) -> int:
    """Write ``records_per_partition`` records to each partition (acks=all); returns the
    number acknowledged. The partition's offsets are the record indexes: one producer,
    idempotent, in order."""
    producer = KafkaProducer(
        bootstrap_servers=bootstrap_server,
        acks="all",
        linger_ms=20,
        batch_size=64 * 1024,
        compression_type=None,
    )
    try:
        futures = []
        for index in range(records_per_partition):
            for partition in range(partitions):
                value = record_value(topic, partition, index)
                futures.append(producer.send(topic, value=value, partition=partition))
            if progress is not None and index % 1000 == 999:
                progress((index + 1) * partitions)
        producer.flush()
        for future in futures:
            future.get(timeout=30)
    finally:
        producer.close()
    return len(futures)


@dataclass(frozen=True, slots=True, kw_only=True)
class ReadBack:
    """What a reader of one partition got from ``first_offset`` (inclusive) to
    ``end_offset`` (exclusive)."""

    partition: int
    first_offset: int
    end_offset: int
    records: int
    mismatches: int


def read_back(bootstrap_server: str, topic: str, partition: int, *, end_offset: int) -> ReadBack:
    """Consume one partition from its earliest offset up to ``end_offset`` (exclusive) and
    check every record against what the producer wrote at that offset."""
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap_server,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=500,
    )
    tp = TopicPartition(topic, partition)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    first_offset = consumer.position(tp)
    records = mismatches = idle_polls = 0
    try:
        while consumer.position(tp) < end_offset:
            batch = consumer.poll(timeout_ms=POLL_TIMEOUT_MS).get(tp, [])
            if not batch:
                idle_polls += 1
                if idle_polls > IDLE_POLLS_MAX:
                    raise ReadBackError(
                        f"{topic}-{partition}: no records for {IDLE_POLLS_MAX} polls at offset"
                        f" {consumer.position(tp)} (reading up to {end_offset})"
                    )
                continue
            idle_polls = 0
            for message in batch:
                if message.offset >= end_offset:
                    break
                records += 1
                if message.value != record_value(topic, partition, message.offset):
                    mismatches += 1
    finally:
        consumer.close()
    return ReadBack(
        partition=partition,
        first_offset=first_offset,
        end_offset=end_offset,
        records=records,
        mismatches=mismatches,
    )


class ReadBackError(RuntimeError):
    """Reading a partition back stalled before its end offset."""
