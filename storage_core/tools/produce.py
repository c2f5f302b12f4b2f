"""``storage-core produce``: lines from stdin, or generated records, to one partition.

Lines (without their line break) become record values; with ``--key-separator`` the text
before the first separator is the key. Generated records (``--count N --record-size B``)
have no key and a value of exactly B bytes that starts with the record's sequence number
(``0000000042 xxxx...``) so that a reader can check order and completeness. Records carry
the current time (CreateTime). Records are sent in chunks of at most ``CHUNK_RECORDS``
records or ``CHUNK_BYTES`` bytes, so memory stays bounded on long inputs.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from typing import BinaryIO, TextIO

from storage_core.client.cluster import KafkaCluster
from storage_core.client.connection import ConnectionConfig
from storage_core.client.producer import KafkaProducer, ProduceResult, parse_acks
from storage_core.records.compression import CompressionType
from storage_core.records.record import SimpleRecord

CHUNK_RECORDS = 10_000
CHUNK_BYTES = 4 * 1024 * 1024
MAX_RECORD_SIZE_BYTES = 64 * 1024 * 1024
PROGRESS_INTERVAL_S = 0.2
_SEQUENCE_DIGITS = 10


def generated_value(sequence: int, record_size: int) -> bytes:
    """``record_size`` bytes: the zero-padded sequence number, a space, then ``x``."""
    head = f"{sequence:0{_SEQUENCE_DIGITS}d} ".encode()
    return (head + b"x" * max(0, record_size - len(head)))[:record_size]


def generated_records(count: int, record_size: int) -> Iterator[SimpleRecord]:
    for sequence in range(count):
        yield SimpleRecord(value=generated_value(sequence, record_size), timestamp=_now_ms())


def line_records(lines: Iterable[bytes], key_separator: bytes | None) -> Iterator[SimpleRecord]:
    """One record per line; ``ValueError`` naming the line when its key separator is missing."""
    for number, raw in enumerate(lines, start=1):
        line = raw.rstrip(b"\n").removesuffix(b"\r")
        key: bytes | None = None
        value = line
        if key_separator is not None:
            key, sep, value = line.partition(key_separator)
            if not sep:
                raise ValueError(
                    f"line {number} has no key separator {key_separator.decode(errors='replace')!r}"
                )
        yield SimpleRecord(key=key, value=value, timestamp=_now_ms())


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _chunks(records: Iterable[SimpleRecord]) -> Iterator[list[SimpleRecord]]:
    chunk: list[SimpleRecord] = []
    size = 0
    for record in records:
        chunk.append(record)
        size += len(record.value or b"") + len(record.key or b"")
        if len(chunk) >= CHUNK_RECORDS or size >= CHUNK_BYTES:
            yield chunk
            chunk, size = [], 0
    if chunk:
        yield chunk


class ProgressLine:
    """A ``\\r``-rewritten status line on a terminal (at most every 0.2 s)."""

    def __init__(self, stream: TextIO, *, total: int | None, enabled: bool):
        self.stream = stream
        self.total = total
        self.enabled = enabled
        self.started = time.monotonic()
        self._shown_at = 0.0
        self._shown_done = -1

    def update(self, done: int, *, force: bool = False) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if not force and now - self._shown_at < PROGRESS_INTERVAL_S:
            return
        self._shown_at = now
        self._shown_done = done
        rate = done / max(now - self.started, 1e-9)
        if self.total:
            width = 30
            filled = width * done // self.total
            bar = "#" * filled + "." * (width - filled)
            text = f"[{bar}] {done}/{self.total} records {100 * done // self.total}%"
        else:
            text = f"{done} records"
        self.stream.write(f"\r{text} {rate:,.0f} rec/s")
        self.stream.flush()

    def finish(self, done: int) -> None:
        if self.enabled:
            if done != self._shown_done:
                self.update(done, force=True)
            self.stream.write("\n")
            self.stream.flush()


def run_produce(
    *,
    bootstrap_server: str,
    connection_config: ConnectionConfig | None = None,
    topic: str,
    partition: int,
    acks: str,
    compression: str,
    key_separator: str | None,
    count: int | None,
    record_size: int,
    progress: bool | None,
    stdin: BinaryIO,
    err: TextIO,
) -> int:
    """Produce and report ``Produced N records to topic-p (offsets a..b)`` on ``err``."""
    if partition < 0:
        raise ValueError(f"--partition must not be negative, got {partition}")
    if count is not None and count < 0:
        raise ValueError(f"--count must not be negative, got {count}")
    if not 0 <= record_size <= MAX_RECORD_SIZE_BYTES:
        raise ValueError(f"--record-size must be 0..{MAX_RECORD_SIZE_BYTES}, got {record_size}")
    if key_separator == "":
        raise ValueError("--key-separator must not be empty")
    acks_value = parse_acks(acks)
    codec = CompressionType.from_name(compression)
    records: Iterable[SimpleRecord]
    if count is not None:
        records = generated_records(count, record_size)
    else:
        records = line_records(stdin, None if key_separator is None else key_separator.encode())
    show = progress if progress is not None else err.isatty()
    bar = ProgressLine(err, total=count, enabled=show)
    results: list[ProduceResult] = []
    produced = 0
    with KafkaCluster(bootstrap_server, config=connection_config) as cluster:
        producer = KafkaProducer(cluster, acks=acks_value, compression=codec)
        for chunk in _chunks(records):
            results += producer.send(topic, partition, chunk)
            produced += len(chunk)
            bar.update(produced)
    bar.finish(produced)
    first = next((r.base_offset for r in results if r.base_offset >= 0), None)
    last = max(
        (r.base_offset + r.record_count - 1 for r in results if r.base_offset >= 0), default=None
    )
    where = f" (offsets {first}..{last})" if first is not None else ""
    print(f"Produced {produced} records to {topic}-{partition}{where}", file=err)
    return 0
