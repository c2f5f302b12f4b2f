"""Produce and consume throughput of a broker process against the log and raw file I/O.

A real broker process (``storage-core broker``) on loopback, one partition per topic, 1 KiB
records, no compression, batches of 64 KiB and 1 MiB:

  produce  = confluent-kafka Producer (acks=1 and acks=all), from the first ``produce`` to
             the end of ``flush``; ``batch.size`` caps batches at the wanted size and
             ``linger.ms`` lets them fill
  append   = Log.append_as_leader of batches of the same size and bytes (build_batch), in a
             directory beside the broker's log dir (same disk), no network
  consume  = confluent-kafka Consumer from offset 0 until every record produced with acks=1
             has arrived (``fetch.max.bytes`` and ``max.partition.fetch.bytes`` large)
  raw read = os.pread of that partition's segment files in the broker's log dir, 1 MiB chunks

MiB/s counts log bytes (batch headers included: what sits in the segment files), so both sides
of a ratio move the same bytes. Ratios are produce/append and consume/raw read; the aim is
>= 0.5 for both. Each figure is the best of ``--rounds``; nothing is fsynced and ``os.sync``
runs (untimed) before every measurement so that none pays for another's writeback.

    python benchmarks/broker_throughput.py [--total-mib 256] [--rounds 1] [--dir bench-data]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka import TopicPartition as CTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from storage_core.log.log import Log
from storage_core.log.log_config import LogConfig
from storage_core.records import SimpleRecord, build_batch
from storage_core.records.file_records import FileRecords
from tests.broker_process import BrokerProcess

RECORD_BYTES = 1024
BATCH_SIZES = (64 * 1024, 1024 * 1024)
ACKS = ("1", "all")
READ_CHUNK_BYTES = 1024 * 1024
FETCH_BYTES = 64 * 1024 * 1024
MESSAGE_MAX_BYTES = 2 * 1024 * 1024
TIMEOUT_S = 300.0


def records_per_batch(batch_bytes: int) -> int:
    """Records of 1 KiB that fill a batch of ``batch_bytes`` (about 16 bytes of framing each)."""
    return max(1, (batch_bytes - 61) // (RECORD_BYTES + 16))


# ---------------------------------------------------------------------- baselines
def direct_append(directory: Path, batch_bytes: int, total_records: int) -> tuple[float, int]:
    """Seconds and log bytes to append ``total_records`` with Log.append_as_leader."""
    per_batch = records_per_batch(batch_bytes)
    payload = os.urandom(RECORD_BYTES)
    batch = build_batch([SimpleRecord(value=payload, timestamp=1_700_000_000_000)] * per_batch)
    batches = [batch] * max(1, total_records // per_batch)
    log = Log(directory, LogConfig())
    os.sync()
    start = time.perf_counter()
    for b in batches:
        log.append_as_leader(b, leader_epoch=0)
    elapsed = time.perf_counter() - start
    size = log.size_in_bytes
    log.close()
    return elapsed, size


def raw_read(partition_dir: Path) -> tuple[float, int]:
    """Seconds and bytes to read every segment file of a partition in 1 MiB chunks."""
    paths = sorted(partition_dir.glob("*.log"))
    os.sync()
    start = time.perf_counter()
    total = 0
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            position = 0
            while data := os.pread(fd, READ_CHUNK_BYTES, position):
                position += len(data)
        finally:
            os.close(fd)
        total += position
    return time.perf_counter() - start, total


def batch_stats(partition_dir: Path) -> tuple[int, int, int]:
    """(batches, records, log bytes) of a partition, from its segment files' batch headers."""
    batches = records = size = 0
    for path in sorted(partition_dir.glob("*.log")):
        with FileRecords.open(path, mutable=False) as file:
            for _position, header in file.batches():
                batches += 1
                records += header.last_offset - header.base_offset + 1
            size += file.size_in_bytes
    return batches, records, size


# ---------------------------------------------------------------------- clients
def create_topic(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        future.result(30)


def produce(bootstrap: str, topic: str, acks: str, batch_bytes: int, total_records: int) -> float:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": acks,
            "compression.type": "none",
            "batch.size": batch_bytes,
            "batch.num.messages": 1_000_000,
            "linger.ms": 50,
            "message.max.bytes": MESSAGE_MAX_BYTES,
            "queue.buffering.max.messages": 2_000_000,
            "queue.buffering.max.kbytes": 2_000_000,
            "enable.idempotence": False,
        }
    )
    failures: list[str] = []

    def on_delivery(error: object, _message: object) -> None:
        if error is not None:
            failures.append(str(error))

    producer.list_topics(topic, timeout=30)  # metadata before the clock starts
    payload = os.urandom(RECORD_BYTES)
    os.sync()
    start = time.perf_counter()
    for _ in range(total_records):
        while True:
            try:
                producer.produce(topic, payload, partition=0, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.01)
    if producer.flush(TIMEOUT_S) != 0:
        raise SystemExit(f"{topic}: records still unsent after {TIMEOUT_S}s")
    elapsed = time.perf_counter() - start
    if failures:
        raise SystemExit(f"{topic}: {len(failures)} records failed, first: {failures[0]}")
    return elapsed


def consume(bootstrap: str, topic: str, total_records: int) -> float:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{topic}",
            "enable.auto.commit": False,
            "fetch.max.bytes": FETCH_BYTES,
            "max.partition.fetch.bytes": FETCH_BYTES,
            "receive.message.max.bytes": FETCH_BYTES + 1024 * 1024,
            "queued.max.messages.kbytes": 2 * FETCH_BYTES // 1024,
        }
    )
    try:
        consumer.list_topics(topic, timeout=30)
        os.sync()
        start = time.perf_counter()
        consumer.assign([CTopicPartition(topic, 0, 0)])
        received = 0
        deadline = time.monotonic() + TIMEOUT_S
        while received < total_records:
            if time.monotonic() > deadline:
                raise SystemExit(f"{topic}: {received}/{total_records} records in {TIMEOUT_S}s")
            # Never ask for more than is left: consume() waits its whole timeout for a batch
            # it cannot fill.
            wanted = min(10_000, total_records - received)
            for message in consumer.consume(num_messages=wanted, timeout=1.0):
                if message.error() is not None:
                    raise KafkaException(message.error())
                received += 1
        return time.perf_counter() - start
    finally:
        consumer.close()


# ---------------------------------------------------------------------- the run
def mib_s(size: int, seconds: float) -> float:
    return round(size / (1024 * 1024) / seconds, 1)


def run(work_dir: Path, total_mib: int, rounds: int) -> list[dict[str, object]]:
    total_records = total_mib * 1024 * 1024 // RECORD_BYTES
    broker_dir = work_dir / "broker"
    overrides = {
        "message.max.bytes": str(MESSAGE_MAX_BYTES),
        "socket.request.max.bytes": str(4 * MESSAGE_MAX_BYTES),
    }
    results: list[dict[str, object]] = []
    with BrokerProcess(broker_dir, overrides=overrides) as broker:
        for batch_bytes in BATCH_SIZES:
            best_append = float("inf")
            append_bytes = 0
            for r in range(rounds):
                elapsed, append_bytes = direct_append(
                    work_dir / f"append-{batch_bytes}-{r}-0", batch_bytes, total_records
                )
                shutil.rmtree(work_dir / f"append-{batch_bytes}-{r}-0")
                best_append = min(best_append, elapsed)
            append_records = (
                total_records // records_per_batch(batch_bytes) * (records_per_batch(batch_bytes))
            )
            for acks in ACKS:
                best = float("inf")
                best_consume = best_raw = float("inf")
                stats = (0, 0, 0)
                raw_bytes = 0
                for r in range(rounds):
                    topic = f"bench-{batch_bytes}-acks{acks}-{r}"
                    create_topic(broker.bootstrap, topic)
                    best = min(
                        best, produce(broker.bootstrap, topic, acks, batch_bytes, total_records)
                    )
                    partition_dir = broker.log_dir / f"{topic}-0"
                    stats = batch_stats(partition_dir)
                    if stats[1] != total_records:
                        raise SystemExit(f"{topic}: {stats[1]} records in the log")
                    if acks == "1":
                        best_consume = min(
                            best_consume, consume(broker.bootstrap, topic, total_records)
                        )
                        raw_elapsed, raw_bytes = raw_read(partition_dir)
                        best_raw = min(best_raw, raw_elapsed)
                batches, records, log_bytes = stats
                row: dict[str, object] = {
                    "batch_bytes": batch_bytes,
                    "acks": acks,
                    "log_mib": round(log_bytes / (1024 * 1024), 1),
                    "avg_batch_bytes": log_bytes // max(batches, 1),
                    "produce_mib_s": mib_s(log_bytes, best),
                    "produce_records_s": round(records / best),
                    "append_mib_s": mib_s(append_bytes, best_append),
                    "append_records_s": round(append_records / best_append),
                    "produce_ratio": round(
                        mib_s(log_bytes, best) / mib_s(append_bytes, best_append), 3
                    ),
                }
                if acks == "1":
                    row.update(
                        consume_mib_s=mib_s(log_bytes, best_consume),
                        consume_records_s=round(records / best_consume),
                        raw_read_mib_s=mib_s(raw_bytes, best_raw),
                        consume_ratio=round(
                            mib_s(log_bytes, best_consume) / mib_s(raw_bytes, best_raw), 3
                        ),
                    )
                results.append(row)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--total-mib", type=int, default=256, help="record bytes per case")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--dir", type=Path, default=Path("bench-data"))
    args = parser.parse_args()
    shutil.rmtree(args.dir, ignore_errors=True)
    args.dir.mkdir(parents=True)
    try:
        results = run(args.dir.resolve(), args.total_mib, args.rounds)
    finally:
        shutil.rmtree(args.dir, ignore_errors=True)
    print(
        f"{'batch':>8} {'acks':>4} {'avg batch':>9} {'produce MiB/s':>13} {'rec/s':>8}"
        f" {'append MiB/s':>12} {'ratio':>6} {'consume MiB/s':>13} {'rec/s':>8}"
        f" {'raw read MiB/s':>14} {'ratio':>6}"
    )
    for r in results:
        print(
            f"{r['batch_bytes']:>8} {r['acks']:>4} {r['avg_batch_bytes']:>9}"
            f" {r['produce_mib_s']:>13} {r['produce_records_s']:>8} {r['append_mib_s']:>12}"
            f" {r['produce_ratio']:>6} {r.get('consume_mib_s', '-'):>13}"
            f" {r.get('consume_records_s', '-'):>8} {r.get('raw_read_mib_s', '-'):>14}"
            f" {r.get('consume_ratio', '-'):>6}"
        )
    print(json.dumps({"benchmark": "broker_throughput", "results": results}))


if __name__ == "__main__":
    main()
