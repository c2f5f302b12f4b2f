"""The demo's data: produced and read back with kafka-python, a real Kafka client.

Every record says where it belongs: its value starts with ``<topic>/<partition>/<index>`` and
carries a pseudo-random payload (incompressible, so segments fill with real bytes) derived
from the same three, so a reader can check any record it gets, wherever the broker served it
from (a local segment or the remote tier), without keeping a copy of what was written.
"""

from __future__ import annotations

import collections
import logging
import random
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kafka import KafkaConsumer, KafkaProducer, TopicPartition

PAYLOAD_BYTES = 480
POLL_TIMEOUT_MS = 1000
IDLE_POLLS_MAX = 30
PRODUCE_ACK_TIMEOUT_S = 60.0
# A background producer's batches fail after this (kafka-python's delivery.timeout.ms), before
# its caller stops waiting: a stall then ends with the client's own error, not a bare timeout.
BACKGROUND_DELIVERY_TIMEOUT_MS = 60_000
BACKGROUND_FLUSH_TIMEOUT_S = BACKGROUND_DELIVERY_TIMEOUT_MS / 1000 + 10
CLIENT_WARNINGS_KEPT = 12


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
    first_index: int = 0,
    progress: Callable[[int], None] | None = None,
    security: Mapping[str, Any] | None = None,
) -> int:
    """Write ``records_per_partition`` records to each partition (acks=all), indexes from
    ``first_index`` on; returns the number acknowledged. The partition's offsets are the
    record indexes: one producer, idempotent, in order, on partitions holding exactly
    ``first_index`` records. ``security``: kafka-python's security settings (the
    cluster's ``kafka_python(user)``)."""
    producer = KafkaProducer(
        bootstrap_servers=bootstrap_server,
        acks="all",
        linger_ms=20,
        batch_size=64 * 1024,
        compression_type=None,
        **(security or {}),
    )
    try:
        futures = []
        for index in range(first_index, first_index + records_per_partition):
            for partition in range(partitions):
                value = record_value(topic, partition, index)
                futures.append(producer.send(topic, value=value, partition=partition))
            if progress is not None and index % 1000 == 999:
                progress((index + 1 - first_index) * partitions)
        producer.flush()
        for future in futures:
            future.get(timeout=30)
    finally:
        producer.close()
    return len(futures)


class BackgroundProducer:
    """A producer that goes on while the cluster changes: ``records_per_partition`` more
    records to each partition (indexes from ``first_index``), in rounds of ``round_records``
    per partition, each round acknowledged (acks=all) before the next. ``acknowledged`` counts
    the records acknowledged per partition so far; ``join`` re-raises what stopped it, with
    the client's last warnings (its batches expire after ``BACKGROUND_DELIVERY_TIMEOUT_MS``,
    so a stall ends with kafka-python's own error)."""

    def __init__(
        self,
        bootstrap_server: str,
        topic: str,
        *,
        partitions: int,
        first_index: int,
        records_per_partition: int,
        round_records: int = 50,
        pause_s: float = 0.05,
        security: Mapping[str, Any] | None = None,
        bootstrap_timeout_ms: int = 30_000,
    ) -> None:
        self.bootstrap_server = bootstrap_server
        self.security = dict(security or {})
        self.bootstrap_timeout_ms = bootstrap_timeout_ms
        self.topic = topic
        self.partitions = partitions
        self.first_index = first_index
        self.records_per_partition = records_per_partition
        self.round_records = round_records
        self.pause_s = pause_s
        self.acknowledged = 0
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="background-producer", daemon=True)
        self._client_warnings = _RecentClientWarnings(CLIENT_WARNINGS_KEPT)

    def start(self) -> BackgroundProducer:
        logging.getLogger("kafka").addHandler(self._client_warnings)
        self._thread.start()
        return self

    def _run(self) -> None:
        producer: KafkaProducer | None = None
        try:
            producer = KafkaProducer(
                bootstrap_servers=self.bootstrap_server,
                acks="all",
                linger_ms=5,
                compression_type=None,
                reconnect_backoff_max_ms=1000,
                delivery_timeout_ms=BACKGROUND_DELIVERY_TIMEOUT_MS,
                bootstrap_timeout_ms=self.bootstrap_timeout_ms,
                **self.security,
            )
            while self.acknowledged < self.records_per_partition and not self._stop.is_set():
                first = self.first_index + self.acknowledged
                count = min(self.round_records, self.records_per_partition - self.acknowledged)
                futures = [
                    producer.send(
                        self.topic,
                        value=record_value(self.topic, partition, index),
                        partition=partition,
                    )
                    for index in range(first, first + count)
                    for partition in range(self.partitions)
                ]
                producer.flush(timeout=BACKGROUND_FLUSH_TIMEOUT_S)
                for future in futures:
                    future.get(timeout=PRODUCE_ACK_TIMEOUT_S)
                self.acknowledged += count
                self._stop.wait(self.pause_s)
        except BaseException as error:  # re-raised by join
            self.error = error
        finally:
            if producer is not None:
                producer.close(timeout=10)

    def done(self) -> bool:
        return not self._thread.is_alive()

    def join(self, timeout_s: float) -> int:
        """Wait until every record is acknowledged; the count per partition. Raises what
        stopped the producer, or ``ProduceStalledError`` after ``timeout_s``."""
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            self._stop.set()
            self._thread.join(PRODUCE_ACK_TIMEOUT_S)
            raise ProduceStalledError(
                f"{self.topic}: {self.acknowledged} of {self.records_per_partition} records per"
                f" partition acknowledged after {timeout_s:.0f} s{self._client_said()}"
            )
        if self.error is not None:
            raise ProduceStalledError(
                f"{self.topic}: producing stopped after {self.acknowledged} records per"
                f" partition: {self.error!r}{self._client_said()}"
            ) from self.error
        return self.acknowledged

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(PRODUCE_ACK_TIMEOUT_S)
        logging.getLogger("kafka").removeHandler(self._client_warnings)

    def _client_said(self) -> str:
        lines = list(self._client_warnings.lines)
        if not lines:
            return " (the client logged no warning)"
        return "; the client's last warnings:\n  " + "\n  ".join(lines)


class _RecentClientWarnings(logging.Handler):
    """kafka-python's last warnings and errors (its retries, expired batches, lost
    connections), for the message of a producer that stalled."""

    def __init__(self, kept: int) -> None:
        super().__init__(logging.WARNING)
        self.setFormatter(logging.Formatter("%(asctime)s %(threadName)s %(name)s: %(message)s"))
        self.lines: collections.deque[str] = collections.deque(maxlen=kept)

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


class ProduceStalledError(RuntimeError):
    """The background producer did not get every record acknowledged."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ReadBack:
    """What a reader of one partition got from ``first_offset`` (inclusive) to
    ``end_offset`` (exclusive)."""

    partition: int
    first_offset: int
    end_offset: int
    records: int
    mismatches: int


def read_back(
    bootstrap_server: str,
    topic: str,
    partition: int,
    *,
    end_offset: int,
    security: Mapping[str, Any] | None = None,
) -> ReadBack:
    """Consume one partition from its earliest offset up to ``end_offset`` (exclusive) and
    check every record against what the producer wrote at that offset."""
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap_server,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=500,
        **(security or {}),
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
