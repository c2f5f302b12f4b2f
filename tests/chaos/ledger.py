"""What the producers were told, and whether the log kept it: the ledger of acknowledged records
and its checker.

Values are ``p<producer>-<seq>`` (seq zero-padded): unique, and ordered per producer. Producer
``n`` writes seq ``s`` to partition ``s % partitions``, so each producer's records in a
partition form an increasing run of seqs. Every producer is a confluent-kafka idempotent
producer (``enable.idempotence=true``, ``acks=all``); its delivery callback records where each
record landed (an ``Ack``) or why it failed (a ``Failure``).

The checker is a pure function over the acks and what a consumer read from offset 0 to the
high watermark: every acknowledged record must be read exactly once, at the offset it was
acknowledged at; no value may be read twice; each producer's seqs must rise with the offset.
Records that failed or were never answered may be absent (or present once).
"""

from __future__ import annotations

import re
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer
from confluent_kafka import TopicPartition as CTopicPartition

MAX_RECORDS_PER_PRODUCER = 1_000_000
MAX_REPORTED = 20  # violations listed per kind; counts stay exact
_VALUE = re.compile(rb"^p(\d+)-(\d+)$")


def value_of(producer: int, seq: int) -> bytes:
    return b"p%d-%09d" % (producer, seq)


def parse_value(value: bytes | None) -> tuple[int, int] | None:
    """(producer, seq) of a ledger value; None for any other record."""
    match = _VALUE.match(value or b"")
    return None if match is None else (int(match[1]), int(match[2]))


@dataclass(frozen=True, slots=True, kw_only=True)
class Ack:
    producer: int
    seq: int
    partition: int
    offset: int
    produced_at: float  # time.monotonic() when produce() accepted the record
    acked_at: float  # time.monotonic() when the delivery callback said it was written


@dataclass(frozen=True, slots=True, kw_only=True)
class Failure:
    producer: int
    seq: int
    partition: int
    error: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Consumed:
    partition: int
    offset: int
    value: bytes | None


class Ledger:
    """Acks and failures of every producer. Thread-safe (delivery callbacks run on each
    producer's polling thread)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._acks: list[Ack] = []
        self._failures: list[Failure] = []

    def acked(self, ack: Ack) -> None:
        with self._lock:
            self._acks.append(ack)

    def failed(self, failure: Failure) -> None:
        with self._lock:
            self._failures.append(failure)

    def acks(self) -> list[Ack]:
        with self._lock:
            return list(self._acks)

    def failures(self) -> list[Failure]:
        with self._lock:
            return list(self._failures)


class LedgerProducer(threading.Thread):
    """One idempotent acks=all producer writing ``value_of(producer_id, seq)`` for seq 0, 1, ...
    until ``stop()``, one record every ``interval_s``."""

    def __init__(
        self,
        *,
        producer_id: int,
        bootstrap: str,
        topic: str,
        partitions: int,
        ledger: Ledger,
        interval_s: float = 0.005,
        message_timeout_ms: int = 60_000,
        acks: str = "all",
    ) -> None:
        super().__init__(name=f"ledger-producer-{producer_id}", daemon=True)
        self.producer_id = producer_id
        self.topic = topic
        self.partitions = partitions
        self.ledger = ledger
        self.interval_s = interval_s
        self.sent = 0
        self.fatal: str | None = None  # the error that made the producer unusable, if any
        self._stopping = threading.Event()
        self._producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "client.id": f"ledger-{producer_id}",
                "enable.idempotence": acks == "all",  # librdkafka: idempotence needs acks=all
                "acks": acks,
                "message.timeout.ms": message_timeout_ms,
                "queue.buffering.max.messages": 20_000,
                "linger.ms": 5,
                "reconnect.backoff.max.ms": 500,
                "topic.metadata.refresh.interval.ms": 1000,
            }
        )

    def run(self) -> None:
        seq = 0
        while not self._stopping.is_set() and seq < MAX_RECORDS_PER_PRODUCER:
            partition = seq % self.partitions
            try:
                self._producer.produce(
                    self.topic,
                    value_of(self.producer_id, seq),
                    partition=partition,
                    on_delivery=self._callback(seq, partition, time.monotonic()),
                )
            except BufferError:  # the queue is full while a partition has no leader
                self._producer.poll(0.1)
                continue
            except KafkaException as error:  # fatal (an idempotence failure): nothing more to send
                self.fatal = str(error)
                return
            seq += 1
            self.sent = seq
            self._producer.poll(0)
            time.sleep(self.interval_s)

    def _callback(self, seq: int, partition: int, produced_at: float) -> Any:
        def on_delivery(error: Any, message: Any) -> None:
            if error is not None:
                self.ledger.failed(
                    Failure(
                        producer=self.producer_id, seq=seq, partition=partition, error=str(error)
                    )
                )
                return
            self.ledger.acked(
                Ack(
                    producer=self.producer_id,
                    seq=seq,
                    partition=message.partition(),
                    offset=message.offset(),
                    produced_at=produced_at,
                    acked_at=time.monotonic(),
                )
            )

        return on_delivery

    def stop(self, flush_timeout_s: float = 30.0) -> int:
        """Stop producing, wait for the answers still due; returns how many are left unanswered."""
        self._stopping.set()
        self.join()
        return int(self._producer.flush(flush_timeout_s))


@dataclass(frozen=True, slots=True, kw_only=True)
class LedgerReport:
    acknowledged: int
    failed: int
    consumed: int
    lost: list[Ack] = field(default_factory=list)  # acked, not read (or read past the HW)
    moved: list[tuple[Ack, int]] = field(
        default_factory=list
    )  # acked at one offset, read at another
    duplicated: list[tuple[bytes, list[tuple[int, int]]]] = field(default_factory=list)
    reordered: list[tuple[int, int, int, int, int]] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)  # exact count of each kind

    @property
    def ok(self) -> bool:
        return not any(self.counts.values())

    def summary(self) -> str:
        head = (
            f"acknowledged={self.acknowledged} failed={self.failed} consumed={self.consumed}"
            f" lost={self.counts['lost']} moved={self.counts['moved']}"
            f" duplicated={self.counts['duplicated']} reordered={self.counts['reordered']}"
        )
        lines = [head]
        lines += [
            f"  lost p{a.producer}-{a.seq} acked at {a.partition}@{a.offset}" for a in self.lost
        ]
        lines += [
            f"  moved p{a.producer}-{a.seq} acked at {a.partition}@{a.offset}, read at {offset}"
            for a, offset in self.moved
        ]
        lines += [f"  duplicated {v.decode()} at {where}" for v, where in self.duplicated]
        lines += [
            f"  reordered producer {p} partition {part}: seq {seq} at offset {off} after seq {prev}"
            for p, part, seq, off, prev in self.reordered
        ]
        return "\n".join(lines)


def check(acks: Iterable[Ack], consumed: Sequence[Consumed], *, failed: int = 0) -> LedgerReport:
    """Every ack read exactly once where it was acked; no value twice; seqs rising per producer
    and partition. ``consumed`` is what was read from each partition's start to its HW."""
    acks = list(acks)
    where: dict[bytes, list[tuple[int, int]]] = defaultdict(list)
    for record in consumed:
        if record.value is not None and parse_value(record.value) is not None:
            where[record.value].append((record.partition, record.offset))
    lost: list[Ack] = []
    moved: list[tuple[Ack, int]] = []
    for ack in acks:
        found = where.get(value_of(ack.producer, ack.seq), [])
        if not found:
            lost.append(ack)
        elif (ack.partition, ack.offset) not in found:
            moved.append((ack, found[0][1]))
    duplicated = [(value, spots) for value, spots in where.items() if len(spots) > 1]
    reordered: list[tuple[int, int, int, int, int]] = []
    last_seq: dict[tuple[int, int], int] = {}
    for record in sorted(consumed, key=lambda r: (r.partition, r.offset)):
        parsed = parse_value(record.value)
        if parsed is None:
            continue
        producer, seq = parsed
        previous = last_seq.get((producer, record.partition))
        if previous is not None and seq < previous:
            reordered.append((producer, record.partition, seq, record.offset, previous))
        last_seq[(producer, record.partition)] = max(seq, previous if previous is not None else seq)
    counts = Counter(
        lost=len(lost), moved=len(moved), duplicated=len(duplicated), reordered=len(reordered)
    )
    return LedgerReport(
        acknowledged=len(acks),
        failed=failed,
        consumed=len(consumed),
        lost=sorted(lost, key=lambda a: (a.partition, a.offset))[:MAX_REPORTED],
        moved=moved[:MAX_REPORTED],
        duplicated=duplicated[:MAX_REPORTED],
        reordered=reordered[:MAX_REPORTED],
        counts=dict(counts),
    )


def read_partitions(
    bootstrap: str, topic: str, partitions: int, *, timeout_s: float = 60.0
) -> list[Consumed]:
    """Every record of every partition, from its log start to the high watermark the leader
    reports when the read begins (a confluent-kafka consumer, no group offsets committed)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": "ledger-checker",
            "group.id": "ledger-checker",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_uncommitted",
            "enable.partition.eof": False,
        }
    )
    try:
        marks = {
            p: consumer.get_watermark_offsets(CTopicPartition(topic, p), timeout=10)
            for p in range(partitions)
        }
        high = {p: mark[1] for p, mark in marks.items()}
        position = {p: mark[0] for p, mark in marks.items()}  # next offset to read
        consumer.assign([CTopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        records: list[Consumed] = []
        deadline = time.monotonic() + timeout_s
        while any(position[p] < high[p] for p in high):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{topic}: read up to {position}, not to the HW {high}")
            for message in consumer.consume(500, 0.5):
                if message.error() is not None:
                    continue
                partition, offset = int(message.partition() or 0), int(message.offset() or 0)
                position[partition] = max(position[partition], offset + 1)
                if offset < high[partition]:
                    records.append(
                        Consumed(partition=partition, offset=offset, value=message.value())
                    )
        return records
    finally:
        consumer.close()


def high_watermarks(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    """Each partition's high watermark as its leader reports it (ListOffsets latest)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "ledger-checker"})
    try:
        return {
            p: int(consumer.get_watermark_offsets(CTopicPartition(topic, p), timeout=10)[1])
            for p in range(partitions)
        }
    finally:
        consumer.close()


def failover_time_s(acks: Iterable[Ack], partition: int, since: float) -> float | None:
    """Seconds from ``since`` (a leader's SIGKILL, ``time.monotonic()``) until a record produced
    after it to ``partition`` was acknowledged; None if none was."""
    times = [a.acked_at for a in acks if a.partition == partition and a.produced_at >= since]
    return min(times) - since if times else None
