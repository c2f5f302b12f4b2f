"""read_committed consume as a ratio of read_uncommitted over the same log, in the same run.

One broker process on loopback, one topic of one partition. The log: ``--transactions``
transactions of ``--records-per-transaction`` records (``--value-bytes`` each, one batch per
transaction), ``--aborted-percent`` of them aborted, spread evenly; ``--producers`` producers
keep a transaction open each at once, so aborted records interleave with committed ones and
the LSO trails the HW while they are open, as with concurrent transactional producers::

    offsets  P0 data | P1 data | P2 data | P3 data | P0 COMMIT | P1 ABORT | P2 COMMIT | ...

``--writer wire`` (the default) writes it as a transactional producer and its coordinator
would: an idempotent InitProducerId, transactional Produce and WriteTxnMarkers over raw
sockets (the ``Wire`` of ``tests/integration/test_transaction_markers.py``), one batch per
transaction, the same log in every run; without a coordinator, on a broker that does not
verify transactions (``transaction.partition.verification.enable=false``). ``--writer
confluent`` uses confluent-kafka transactional producers and the broker's transaction
coordinator (the log then has the batches librdkafka makes). Only the consuming is timed.

A confluent-kafka consumer (librdkafka's default fetch sizes, ``fetch.wait.max.ms`` 10 so
that the EOF's empty fetch at the end costs no long poll) then reads the whole log from
offset 0 to its end (the partition EOF at the LSO, which is the LEO once every transaction
is decided), with ``isolation.level`` ``read_uncommitted`` and ``read_committed`` alternating
round by round (which one goes first alternates too), after one unmeasured warm-up read of
each. Each figure is the median of ``--rounds``; records/s counts the log's offsets read
through (delivered, skipped as aborted, and markers), so both isolation levels are measured
over the same work and the ratio is the inverse ratio of their times. The issue's aim:
read_committed >= 0.9 of read_uncommitted. Every read is checked: read_committed delivers
exactly the committed records, read_uncommitted every data record.

    python benchmarks/read_committed.py [--transactions 10000] [--records-per-transaction 100]
        [--aborted-percent 10] [--producers 4] [--value-bytes 100] [--rounds 5]
        [--segment-mib 16] [--writer wire|confluent] [--short]
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka import TopicPartition as CTopicPartition
from kio.schema.errors import ErrorCode

from benchmarks.process_cpu import process_times
from tests.broker_process import BrokerProcess
from tests.integration import raw_wire
from tests.integration.test_transaction_markers import NO_VERIFICATION, Wire

TOPIC = "read-committed"
ISOLATIONS = ("read_uncommitted", "read_committed")
CONSUME_BATCH = 1000
# consume() waits this long for a batch to fill: the end of the log's last batch waits it
CONSUME_TIMEOUT_S = 0.02
FETCH_WAIT_MAX_MS = 10
FETCH_QUEUE_BACKOFF_MS = 10
TIMEOUT_S = 300.0
AIM = 0.9
COMMITTED, ABORTED = b"c", b"a"  # the first byte of each value says which it is
BROKER_SETTINGS = {
    "auto.create.topics.enable": "false",
    # one broker: the coordinator's __transaction_state fits it (Kafka's defaults need three)
    "transaction.state.log.num.partitions": "4",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
}
SHORT = {"transactions": 200, "rounds": 2, "segment_mib": 1}
LIMITS = {  # (min, max) of each option
    "transactions": (1, 1_000_000),
    "records_per_transaction": (1, 10_000),
    "aborted_percent": (0, 100),
    "producers": (1, 100),
    "value_bytes": (1, 1_000_000),
    "rounds": (1, 100),
    "segment_mib": (1, 1024),
}


@dataclass(frozen=True, slots=True, kw_only=True)
class WrittenLog:
    """What ``write_log`` wrote: the end offset (exclusive) and the data records by kind."""

    end_offset: int
    committed_records: int
    aborted_records: int
    aborted_transactions: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Read:
    """One read of the whole log: its time and what the consumer delivered."""

    seconds: float
    delivered: int
    delivered_aborted: int
    broker_cpu_s: float  # user + system of the broker process during the read


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--transactions", type=int, default=10_000)
    parser.add_argument("--records-per-transaction", type=int, default=100)
    parser.add_argument("--aborted-percent", type=int, default=10)
    parser.add_argument("--producers", type=int, default=4, help="transactions open at once")
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--segment-mib", type=int, default=16, help="the topic's segment.bytes")
    parser.add_argument(
        "--short",
        action="store_true",
        help=f"the test suite's run: {SHORT['transactions']} transactions, {SHORT['rounds']}"
        f" rounds, {SHORT['segment_mib']} MiB segments",
    )
    parser.add_argument(
        "--writer",
        choices=sorted(WRITERS),
        default="wire",
        help="wire: raw transactional Produce and WriteTxnMarkers; confluent: confluent-kafka"
        " transactional producers and the broker's transaction coordinator",
    )
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.short:
        for name, value in SHORT.items():
            setattr(args, name, value)
    for name, (low, high) in LIMITS.items():
        if not low <= getattr(args, name) <= high:
            parser.error(f"--{name.replace('_', '-')} must be {low} to {high}")
    return args


def is_aborted(index: int, aborted_percent: int) -> bool:
    """Whether transaction ``index`` aborts: ``aborted_percent`` of them, spread evenly."""
    return (index + 1) * aborted_percent // 100 > index * aborted_percent // 100


class TxnWriter(Protocol):
    """Writes transactions to the topic's partition 0, ``producers`` of them open at once
    (``slot`` names the producer)."""

    def produce(self, slot: int, values: list[bytes]) -> None: ...

    def end(self, slot: int, *, commit: bool) -> None: ...

    def close(self) -> None: ...


class WireWriter:
    """Transactions as a transactional producer and its coordinator send them: an idempotent
    InitProducerId, transactional Produce and WriteTxnMarkers over raw sockets."""

    def __init__(self, broker: BrokerProcess, producers: int) -> None:
        self._wire = Wire(broker.port, TOPIC)
        self._producers = [self._wire.producer_id() for _ in range(producers)]

    def produce(self, slot: int, values: list[bytes]) -> None:
        self._wire.produce(self._producers[slot], *values, transactional=True)

    def end(self, slot: int, *, commit: bool) -> None:
        error = self._wire.end(self._producers[slot], commit=commit)
        if error != ErrorCode.none:
            raise SystemExit(f"WriteTxnMarkers answered {error}")

    def close(self) -> None:
        self._wire.close()


class ConfluentWriter:
    """confluent-kafka transactional producers and the broker's transaction coordinator."""

    def __init__(self, broker: BrokerProcess, producers: int) -> None:
        self._failures: list[str] = []
        self._producers = [
            Producer(
                {
                    "bootstrap.servers": broker.bootstrap,
                    "transactional.id": f"bench-{slot}",
                    "linger.ms": 5,
                }
            )
            for slot in range(producers)
        ]
        for producer in self._producers:
            producer.init_transactions(TIMEOUT_S)

    def _delivered(self, error: KafkaError | None, _message: object) -> None:
        if error is not None:
            self._failures.append(str(error))

    def produce(self, slot: int, values: list[bytes]) -> None:
        producer = self._producers[slot]
        producer.begin_transaction()
        for value in values:
            producer.produce(TOPIC, value, partition=0, on_delivery=self._delivered)

    def end(self, slot: int, *, commit: bool) -> None:
        producer = self._producers[slot]
        if commit:
            producer.commit_transaction(TIMEOUT_S)
        else:
            producer.flush(TIMEOUT_S)  # every record in the log, as the check counts them
            producer.abort_transaction(TIMEOUT_S)
        if self._failures:
            raise SystemExit(f"a transactional record was not delivered: {self._failures[0]}")

    def close(self) -> None:
        for producer in self._producers:
            producer.flush(TIMEOUT_S)


WRITERS: dict[str, Callable[[BrokerProcess, int], TxnWriter]] = {
    "wire": WireWriter,
    "confluent": ConfluentWriter,
}


def write_log(broker: BrokerProcess, args: argparse.Namespace) -> WrittenLog:
    """The log of the module docstring, ``args.producers`` transactions open at a time."""
    writer = WRITERS[args.writer](broker, args.producers)
    padding = b"x" * (args.value_bytes - 1)
    committed = aborted = aborted_txns = 0
    try:
        for first in range(0, args.transactions, args.producers):
            group = list(range(first, min(first + args.producers, args.transactions)))
            for slot, index in enumerate(group):
                kind = ABORTED if is_aborted(index, args.aborted_percent) else COMMITTED
                writer.produce(slot, [kind + padding] * args.records_per_transaction)
            for slot, index in enumerate(group):
                abort = is_aborted(index, args.aborted_percent)
                writer.end(slot, commit=not abort)
                if abort:
                    aborted += args.records_per_transaction
                    aborted_txns += 1
                else:
                    committed += args.records_per_transaction
    finally:
        writer.close()
    return WrittenLog(
        end_offset=stable_end_offset(broker),
        committed_records=committed,
        aborted_records=aborted,
        aborted_transactions=aborted_txns,
    )


def stable_end_offset(broker: BrokerProcess) -> int:
    """The LSO once it reaches the HW (a coordinator writes its last markers after answering
    the producer's EndTxn)."""
    wire = Wire(broker.port, TOPIC)
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while (stable := wire.latest(1)) != (high_watermark := wire.latest(0)):
            if time.monotonic() > deadline:
                raise SystemExit(
                    f"the LSO {stable} stays below the HW {high_watermark} after every"
                    f" transaction was decided ({TIMEOUT_S}s)"
                )
            time.sleep(0.05)
        return stable
    finally:
        wire.close()


def read_all(broker: BrokerProcess, isolation: str, end_offset: int) -> Read:
    """One consumer reads the partition from offset 0 to its EOF at ``end_offset``."""
    if broker.process is None:
        raise SystemExit("the broker process is not running")
    pid = broker.process.pid
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": f"bench-{isolation}-{time.monotonic_ns()}",
            "isolation.level": isolation,
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            # the EOF comes with the first empty fetch at the end: do not wait 500 ms for it
            "fetch.wait.max.ms": FETCH_WAIT_MAX_MS,
            # a full prefetch queue pauses fetching for this long (1 s by default)
            "fetch.queue.backoff.ms": FETCH_QUEUE_BACKOFF_MS,
        }
    )
    try:
        consumer.list_topics(TOPIC, timeout=30)
        delivered = delivered_aborted = 0
        cpu_before = process_times(pid)
        start = time.perf_counter()
        deadline = time.monotonic() + TIMEOUT_S
        consumer.assign([CTopicPartition(TOPIC, 0, 0)])
        while True:
            if time.monotonic() > deadline:
                raise SystemExit(f"{isolation}: {delivered} records delivered in {TIMEOUT_S}s")
            for message in consumer.consume(num_messages=CONSUME_BATCH, timeout=CONSUME_TIMEOUT_S):
                error = message.error()
                if error is None:
                    delivered += 1
                    delivered_aborted += (message.value() or b"")[:1] == ABORTED
                elif error.code() != KafkaError._PARTITION_EOF:
                    raise KafkaException(error)
                elif (message.offset() or 0) >= end_offset:
                    seconds = time.perf_counter() - start
                    cpu = process_times(pid) - cpu_before
                    return Read(
                        seconds=seconds,
                        broker_cpu_s=cpu.user_s + cpu.system_s,
                        delivered=delivered,
                        delivered_aborted=delivered_aborted,
                    )
    finally:
        consumer.close()


def check(isolation: str, read: Read, written: WrittenLog) -> list[str]:
    """What is wrong with ``read`` of ``written`` at ``isolation``, if anything."""
    if isolation == "read_committed":
        expected = (written.committed_records, 0)
    else:
        expected = (written.committed_records + written.aborted_records, written.aborted_records)
    if (read.delivered, read.delivered_aborted) == expected:
        return []
    return [
        f"{isolation} delivered {read.delivered} records ({read.delivered_aborted} aborted),"
        f" expected {expected[0]} ({expected[1]} aborted)"
    ]


def run(args: argparse.Namespace, work_dir: Path) -> dict[str, Any]:
    """Write the log, read it ``args.rounds`` times at each isolation; the figures."""
    unverified = NO_VERIFICATION if args.writer == "wire" else {}  # no coordinator to ask
    broker = BrokerProcess(work_dir / "broker", overrides={**BROKER_SETTINGS, **unverified})
    reads: dict[str, list[Read]] = {isolation: [] for isolation in ISOLATIONS}
    errors: list[str] = []
    with broker:
        raw_wire.create_topic(
            broker.port, TOPIC, configs={"segment.bytes": str(args.segment_mib * 1024 * 1024)}
        )
        written = write_log(broker, args)
        for isolation in ISOLATIONS:  # warm-up, not measured
            errors += check(isolation, read_all(broker, isolation, written.end_offset), written)
        for round_index in range(args.rounds):
            order = ISOLATIONS if round_index % 2 == 0 else ISOLATIONS[::-1]
            for isolation in order:
                read = read_all(broker, isolation, written.end_offset)
                errors += check(isolation, read, written)
                reads[isolation].append(read)
        segments = len(list((broker.log_dir / f"{TOPIC}-0").glob("*.log")))
    seconds = {i: statistics.median(r.seconds for r in runs) for i, runs in reads.items()}
    cpu_s = {i: statistics.median(r.broker_cpu_s for r in runs) for i, runs in reads.items()}
    figures = {
        isolation: {
            "median_s": round(seconds[isolation], 3),
            "records_per_s": round(written.end_offset / seconds[isolation]),
            "delivered": runs[0].delivered,
            "delivered_per_s": round(runs[0].delivered / seconds[isolation]),
            "runs_s": [round(r.seconds, 3) for r in runs],
            "broker_cpu_ms": round(cpu_s[isolation] * 1000),
        }
        for isolation, runs in reads.items()
    }
    committed, uncommitted = "read_committed", "read_uncommitted"
    return {
        "log": {**asdict(written), "segments": segments, "writer": args.writer},
        "reads": figures,
        "ratio": round(seconds[uncommitted] / seconds[committed], 3),
        # the broker's CPU is counted in clock ticks (10 ms): meaningful in the full run only
        "broker_cpu_ratio": round(cpu_s[committed] / max(cpu_s[uncommitted], 0.01), 3),
        "aim": AIM,
        "errors": errors,
    }


def format_result(result: dict[str, Any]) -> str:
    log = result["log"]
    lines = [
        f"log ({log['writer']} writer): {log['end_offset']} offsets in {log['segments']}"
        " segment(s),"
        f" {log['committed_records']} committed and {log['aborted_records']} aborted records"
        f" ({log['aborted_transactions']} aborted transactions)",
        f"{'isolation':<17} {'records/s':>10} {'delivered/s':>12} {'delivered':>10}"
        f" {'median s':>9} {'broker CPU ms':>14}  runs s",
    ]
    for isolation, figures in result["reads"].items():
        lines.append(
            f"{isolation:<17} {figures['records_per_s']:>10} {figures['delivered_per_s']:>12}"
            f" {figures['delivered']:>10} {figures['median_s']:>9}"
            f" {figures['broker_cpu_ms']:>14}  {figures['runs_s']}"
        )
    met = "met" if result["ratio"] >= result["aim"] else "NOT met"
    lines.append(
        f"read_committed / read_uncommitted: {result['ratio']} (aim >= {result['aim']}: {met});"
        f" broker CPU {result['broker_cpu_ratio']} of read_uncommitted's"
    )
    lines += [f"ERROR: {error}" for error in result["errors"]]
    return "\n".join(lines)


def main() -> None:
    args = parse_args()
    command = shlex.join([Path(sys.executable).name, *sys.argv])
    print(f"$ {command}", flush=True)
    work_dir = args.dir or Path(tempfile.mkdtemp(prefix="bench-read-committed-"))
    shutil.rmtree(work_dir, ignore_errors=True)
    work_dir.mkdir(parents=True)
    try:
        result = run(args, work_dir.resolve())
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)
    print(format_result(result), flush=True)
    print(json.dumps({"benchmark": "read_committed", "command": command, **result}))
    if result["errors"]:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
