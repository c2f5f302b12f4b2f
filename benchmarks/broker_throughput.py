"""Produce and consume throughput of a broker process against the log and raw file I/O.

A real broker process (``storage-core broker``) on loopback, one partition per topic, 1 KiB
records, no compression, batches of 64 KiB and 1 MiB. Two kinds of client, so that the figures
say something about the broker and not only about a Python client library:

  produce confluent-kafka  Producer (acks=1 and acks=all), from the first ``produce`` to the
                           end of ``flush``; ``batch.size`` caps batches at the wanted size
                           and ``linger.ms`` lets them fill
  produce lean             pre-built batches (build_batch) in pre-encoded Produce requests
                           over one raw socket, ``IN_FLIGHT`` requests outstanding
                           (``lean_client.produce``)
  append                   Log.append_as_leader of batches of the same size and bytes, in a
                           directory beside the broker's log dir (same disk), no network;
                           every record is validated on the way (as on the produce path)
  validate records         log_validator.validate_records alone over the same batches: the
                           share of an append (and of a produce) spent walking the records
  consume confluent-kafka  Consumer from offset 0 until every record produced with acks=1 has
                           arrived, ``consume(num_messages=...)`` in batches of up to
                           ``CONSUME_BATCH`` (the fastest way to use it from Python)
  consume lean             raw-socket Fetch requests, one at a time, ``max_bytes`` 1 MiB and
                           64 MiB; batch headers checked, records never decoded
                           (``lean_client.fetch``)
  raw read                 os.pread of that partition's segment files, 1 MiB chunks
  loopback ceiling         the same segment files sent with os.sendfile over a loopback socket
                           to recv_into in another process: no broker, no protocol; what any
                           consumer on this machine could reach at best

MiB/s counts log bytes (batch headers included: what sits in the segment files), so both sides
of a ratio move the same bytes. Ratios are produce/append and consume/raw read; the aim is
>= 0.5 for both. Each figure is the best of ``--rounds``; nothing is fsynced and ``os.sync``
runs (untimed) before every measurement so that none pays for another's writeback. Client and
broker share the machine's CPUs.

    python benchmarks/broker_throughput.py [--total-mib 256] [--rounds 1] [--dir bench-data]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shlex
import shutil
import socket
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka import TopicPartition as CTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from benchmarks import lean_client
from storage_core.log.log import Log
from storage_core.log.log_config import LogConfig
from storage_core.log.log_validator import validate_records
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
IN_FLIGHT = 5  # Kafka's default max.in.flight.requests.per.connection
CONSUME_BATCH = 100_000
LEAN_FETCH_BYTES = (1024 * 1024, FETCH_BYTES)


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


def record_validation(batch_bytes: int, total_records: int) -> tuple[float, int, int]:
    """Seconds, bytes and records to validate the batches ``direct_append`` writes."""
    per_batch = records_per_batch(batch_bytes)
    batch = build_batch(
        [SimpleRecord(value=os.urandom(RECORD_BYTES), timestamp=1_700_000_000_000)] * per_batch
    )
    count = max(1, total_records // per_batch)
    start = time.perf_counter()
    for _ in range(count):
        validate_records(batch, 0, log_append_time=False)
    return time.perf_counter() - start, count * len(batch), count * per_batch


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


def _receive_all(port: int, ready: multiprocessing.synchronize.Event) -> None:
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 * 1024 * 1024)
        ready.set()
        view = memoryview(bytearray(8 * 1024 * 1024))
        while sock.recv_into(view):
            pass


def loopback_ceiling(partition_dir: Path) -> tuple[float, int]:
    """Seconds and bytes to sendfile every segment file over loopback to recv_into in
    another process (connection set up before the clock starts, ends when all is sent and
    the receiver has seen the end)."""
    paths = sorted(partition_dir.glob("*.log"))
    with socket.create_server(("127.0.0.1", 0)) as server:
        ready = multiprocessing.Event()
        receiver = multiprocessing.Process(
            target=_receive_all, args=(server.getsockname()[1], ready)
        )
        receiver.start()
        connection, _ = server.accept()
        ready.wait(30)
        os.sync()
        start = time.perf_counter()
        total = 0
        with connection:
            for path in paths:
                fd = os.open(path, os.O_RDONLY)
                try:
                    size = os.fstat(fd).st_size
                    position = 0
                    while position < size:
                        position += os.sendfile(connection.fileno(), fd, position, size - position)
                finally:
                    os.close(fd)
                total += size
            connection.shutdown(socket.SHUT_WR)
            receiver.join(TIMEOUT_S)
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
            wanted = min(CONSUME_BATCH, total_records - received)
            for message in consumer.consume(num_messages=wanted, timeout=1.0):
                if message.error() is not None:
                    raise KafkaException(message.error())
                received += 1
        return time.perf_counter() - start
    finally:
        consumer.close()


def lean_produce(port: int, topic: str, acks: str, batch_bytes: int, total_records: int) -> float:
    """Seconds to send ``total_records // records_per_batch`` pre-encoded Produce requests."""
    per_batch = records_per_batch(batch_bytes)
    batch = build_batch(
        [SimpleRecord(value=os.urandom(RECORD_BYTES), timestamp=1_700_000_000_000)] * per_batch
    )
    frame = lean_client.produce_frame(topic, batch, acks=-1 if acks == "all" else int(acks))
    os.sync()
    start = time.perf_counter()
    lean_client.produce(port, frame, total_records // per_batch, in_flight=IN_FLIGHT)
    return time.perf_counter() - start


def lean_fetch(port: int, topic: str, total_records: int, max_bytes: int) -> float:
    buffer = lean_client.fetch_buffer(max_bytes)
    os.sync()
    start = time.perf_counter()
    totals = lean_client.fetch(port, topic, total_records, max_bytes=max_bytes, buffer=buffer)
    elapsed = time.perf_counter() - start
    if totals.records != total_records:
        raise SystemExit(f"{topic}: fetched {totals.records} of {total_records} records")
    return elapsed


# ---------------------------------------------------------------------- the run
def mib_s(size: int, seconds: float) -> float:
    return round(size / (1024 * 1024) / seconds, 1)


Row = dict[str, object]


def _row(
    case: str,
    batch_bytes: int,
    acks: str,
    size: int,
    records: int,
    seconds: float,
    baseline: str,
    baseline_size: int,
    baseline_seconds: float,
) -> Row:
    return {
        "case": case,
        "batch_bytes": batch_bytes,
        "acks": acks,
        "mib_s": mib_s(size, seconds),
        "records_s": round(records / seconds),
        "baseline": baseline,
        "baseline_mib_s": mib_s(baseline_size, baseline_seconds),
        "ratio": round(mib_s(size, seconds) / mib_s(baseline_size, baseline_seconds), 3),
    }


def run(work_dir: Path, total_mib: int, rounds: int) -> list[Row]:
    total_records = total_mib * 1024 * 1024 // RECORD_BYTES
    broker_dir = work_dir / "broker"
    overrides = {
        "message.max.bytes": str(MESSAGE_MAX_BYTES),
        "socket.request.max.bytes": str(4 * MESSAGE_MAX_BYTES),
    }
    rows: list[Row] = []
    with BrokerProcess(broker_dir, overrides=overrides) as broker:
        for batch_bytes in BATCH_SIZES:
            best_append = float("inf")
            append_bytes = 0
            for r in range(rounds):
                directory = work_dir / f"append-{batch_bytes}-{r}-0"
                elapsed, append_bytes = direct_append(directory, batch_bytes, total_records)
                shutil.rmtree(directory)
                best_append = min(best_append, elapsed)
            best_validation = float("inf")
            validation_bytes = validation_records = 0
            for _ in range(rounds):
                elapsed, validation_bytes, validation_records = record_validation(
                    batch_bytes, total_records
                )
                best_validation = min(best_validation, elapsed)
            rows.append(
                _row(
                    "validate records",
                    batch_bytes,
                    "-",
                    validation_bytes,
                    validation_records,
                    best_validation,
                    "append",
                    append_bytes,
                    best_append,
                )
            )
            lean_records = (
                total_records // records_per_batch(batch_bytes) * (records_per_batch(batch_bytes))
            )
            consume_topic = ""
            consume_stats = (0, 0, 0)
            for acks in ACKS:
                for client, wanted, produce_with in (
                    ("confluent-kafka", total_records, produce),
                    (f"lean, {IN_FLIGHT} in flight", lean_records, None),
                ):
                    best = float("inf")
                    stats = (0, 0, 0)
                    for r in range(rounds):
                        topic = f"bench-{batch_bytes}-acks{acks}-{client.split(',')[0]}-{r}"
                        create_topic(broker.bootstrap, topic)
                        if produce_with is None:
                            elapsed = lean_produce(
                                broker.port, topic, acks, batch_bytes, total_records
                            )
                        else:
                            elapsed = produce_with(
                                broker.bootstrap, topic, acks, batch_bytes, total_records
                            )
                        best = min(best, elapsed)
                        stats = batch_stats(broker.log_dir / f"{topic}-0")
                        if stats[1] != wanted:
                            raise SystemExit(f"{topic}: {stats[1]} records in the log")
                        if acks == "1" and produce_with is not None:
                            consume_topic, consume_stats = topic, stats
                    batches, records, log_bytes = stats
                    row = _row(
                        f"produce {client}",
                        batch_bytes,
                        acks,
                        log_bytes,
                        records,
                        best,
                        "append",
                        append_bytes,
                        best_append,
                    )
                    row["avg_batch_bytes"] = log_bytes // max(batches, 1)
                    rows.append(row)
            # Every consumer reads the log that confluent-kafka produced with acks=1.
            partition_dir = broker.log_dir / f"{consume_topic}-0"
            _batches, records, log_bytes = consume_stats
            best_raw = best_loopback = float("inf")
            raw_bytes = loopback_bytes = 0
            consumers: dict[str, float] = {}
            for _ in range(rounds):
                raw_elapsed, raw_bytes = raw_read(partition_dir)
                best_raw = min(best_raw, raw_elapsed)
                loop_elapsed, loopback_bytes = loopback_ceiling(partition_dir)
                best_loopback = min(best_loopback, loop_elapsed)
                timings = {
                    "consume confluent-kafka": consume(broker.bootstrap, consume_topic, records)
                }
                for max_bytes in LEAN_FETCH_BYTES:
                    timings[f"consume lean, max_bytes {max_bytes // (1024 * 1024)} MiB"] = (
                        lean_fetch(broker.port, consume_topic, records, max_bytes)
                    )
                for case, elapsed in timings.items():
                    consumers[case] = min(consumers.get(case, float("inf")), elapsed)
            for case, elapsed in consumers.items():
                rows.append(
                    _row(
                        case,
                        batch_bytes,
                        "-",
                        log_bytes,
                        records,
                        elapsed,
                        "raw read",
                        raw_bytes,
                        best_raw,
                    )
                )
            rows.append(
                _row(
                    "loopback ceiling (no broker)",
                    batch_bytes,
                    "-",
                    loopback_bytes,
                    records,
                    best_loopback,
                    "raw read",
                    raw_bytes,
                    best_raw,
                )
            )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--total-mib", type=int, default=256, help="record bytes per case")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--dir", type=Path, default=Path("bench-data"))
    args = parser.parse_args()
    command = shlex.join([Path(sys.executable).name, *sys.argv])
    print(f"$ {command}", flush=True)
    shutil.rmtree(args.dir, ignore_errors=True)
    args.dir.mkdir(parents=True)
    try:
        rows = run(args.dir.resolve(), args.total_mib, args.rounds)
    finally:
        shutil.rmtree(args.dir, ignore_errors=True)
    print(
        f"{'case':<34} {'batch':>8} {'acks':>4} {'MiB/s':>8} {'rec/s':>9}"
        f"   {'baseline':<9} {'MiB/s':>8} {'ratio':>6}"
    )
    for r in rows:
        print(
            f"{r['case']:<34} {r['batch_bytes']:>8} {r['acks']:>4} {r['mib_s']:>8}"
            f" {r['records_s']:>9}   {r['baseline']:<9} {r['baseline_mib_s']:>8} {r['ratio']:>6}"
        )
    print(json.dumps({"benchmark": "broker_throughput", "command": command, "results": rows}))


if __name__ == "__main__":
    main()
