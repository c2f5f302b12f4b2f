"""Transactional produce as a ratio of idempotent produce, in the same run.

One broker process on loopback, one topic of ``--partitions`` partitions. Each round writes
``--records`` records of ``--value-bytes`` with confluent-kafka (acks=all, librdkafka's
default batching, ``linger.ms`` 5), once with an idempotent producer and once with a
transactional one committing every ``--records-per-transaction`` records (begin, produce,
commit: AddPartitionsToTxn, the markers of every partition written to, EndTxn's two
``__transaction_state`` records); which one goes first alternates round by round, after one
unmeasured warm-up of each. Each producer writes one record first, unmeasured (connections,
producer id, metadata); a run is then timed from the first produce to the last delivery
report (idempotent: ``flush``; transactional: the last ``commit_transaction``). Figures are
medians of ``--rounds``. Aim: transactional >= 0.8 of idempotent. Every round is checked: a
read_committed consumer finds every record of it.

A transactional run also splits each transaction's time into its three serial phases (the
medians over its transactions): ``produce`` (the ``produce()`` calls; the AddPartitionsToTxn
round trip overlaps them), ``flush`` (from the last ``produce()`` until every record is
acknowledged: the Produce round trips, which ``commit_transaction`` would wait for anyway)
and ``commit`` (``commit_transaction`` after that flush: EndTxn's round trip). An idempotent
producer overlaps the first two and has no third.

The client's ceiling: each round also runs both producers, the same way, against librdkafka's
mock cluster (``test.mock.num.brokers``: a broker inside the client process, on loopback,
that answers every request at once and stores records in memory). Its transactional /
idempotent ratio is what this client reaches when the broker costs nothing, so the aim is
out of any broker's reach where it is below 0.8; the broker's ratio is also printed as a
share of it. The mock cluster creates topics with ``MOCK_PARTITIONS`` partitions: the
ceiling is measured when ``--partitions`` is that many, so that the keys spread alike.

    python benchmarks/transactional_produce.py [--records 200000] [--records-per-transaction 1000]
        [--partitions 4] [--value-bytes 100] [--rounds 5] [--short]
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
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka import Consumer, Producer, TopicPartition

from benchmarks.process_cpu import measure
from tests.broker_process import BrokerProcess
from tests.integration import raw_wire

AIM = 0.8
MODES = ("idempotent", "transactional")
SHORT = {"records": 20_000, "rounds": 2}
BROKER_SETTINGS = {"auto.create.topics.enable": "false"}
TIMEOUT_S = 120


PHASES = ("produce", "flush", "commit")
MOCK_PARTITIONS = 4  # what librdkafka's mock cluster gives a topic it creates on first use


@dataclass(frozen=True, slots=True)
class Run:
    seconds: float
    broker_cpu_s: float
    topic: str
    # a transactional run: each phase's median ms per transaction (see the module docstring)
    phase_ms: dict[str, float] | None = None


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--records-per-transaction", type=int, default=1000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--short", action="store_true", help="the test suite's run")
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.short:
        for name, value in SHORT.items():
            setattr(args, name, value)
    if args.records < args.records_per_transaction or args.records_per_transaction < 1:
        parser.error("--records must be at least --records-per-transaction, which must be >= 1")
    return args


def client_config(broker: BrokerProcess | None, topic: str, mode: str) -> dict[str, Any]:
    """The producer's settings; ``broker`` None: librdkafka's in-process mock cluster, which
    answers every request at once (the client's ceiling, see the module docstring)."""
    config: dict[str, Any] = {
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 5,
    }
    if broker is None:
        config["test.mock.num.brokers"] = 1
    else:
        config["bootstrap.servers"] = broker.bootstrap
    if mode == "transactional":
        config["transactional.id"] = f"bench-{topic}"
    return config


def produce(broker: BrokerProcess | None, args: argparse.Namespace, mode: str) -> Run:
    """Write ``args.records`` to a fresh topic with one producer in ``mode``; timed. On the
    broker the topic is created first; the mock cluster creates it on the first record with
    ``MOCK_PARTITIONS`` partitions."""
    topic = f"{mode}-{uuid.uuid4().hex[:8]}"
    if broker is not None:
        raw_wire.create_topic(broker.port, topic, partitions=args.partitions)
    producer = Producer(client_config(broker, topic, mode))
    # connected, producer id taken, metadata known: one record before the clock starts
    if mode == "transactional":
        producer.init_transactions(TIMEOUT_S)
        producer.begin_transaction()
    producer.produce(topic, value=b"warm-up")
    if mode == "transactional":
        producer.commit_transaction(TIMEOUT_S)
    producer.flush(TIMEOUT_S)
    value = b"v" * args.value_bytes
    per_txn = args.records_per_transaction if mode == "transactional" else args.records
    pids = {} if broker is None else {"broker": _pid(broker)}
    phases: dict[str, list[float]] = {phase: [] for phase in PHASES}
    with measure(pids) as cpu:
        started = time.perf_counter()
        for first in range(0, args.records, per_txn):
            if mode == "transactional":
                producer.begin_transaction()
            began = time.perf_counter()
            for i in range(first, min(first + per_txn, args.records)):
                while True:
                    try:
                        producer.produce(topic, value=value, key=str(i).encode())
                        break
                    except BufferError:  # the local queue is full: let deliveries drain it
                        producer.poll(0.05)
                producer.poll(0)
            if mode == "transactional":
                produced = time.perf_counter()
                producer.flush(TIMEOUT_S)
                flushed = time.perf_counter()
                producer.commit_transaction(TIMEOUT_S)
                committed = time.perf_counter()
                for phase, ms in zip(
                    PHASES,
                    (produced - began, flushed - produced, committed - flushed),
                    strict=True,
                ):
                    phases[phase].append(ms * 1000)
        producer.flush(TIMEOUT_S)
        seconds = time.perf_counter() - started
    used = cpu.used.get("broker")
    phase_ms = (
        {phase: round(statistics.median(ms), 3) for phase, ms in phases.items()}
        if mode == "transactional"
        else None
    )
    broker_cpu_s = used.user_s + used.system_s if used is not None else 0.0
    return Run(seconds, broker_cpu_s, topic, phase_ms)


def _pid(broker: BrokerProcess) -> int:
    assert broker.process is not None
    return broker.process.pid


def count_committed(broker: BrokerProcess, topic: str, partitions: int, expected: int) -> int:
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": f"check-{topic}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 10,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    seen = 0
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while seen < expected and time.monotonic() < deadline:
            seen += sum(1 for m in consumer.consume(10_000, 0.5) if m.error() is None)
    finally:
        consumer.close()
    return seen


def run(args: argparse.Namespace, work_dir: Path) -> dict[str, Any]:
    broker = BrokerProcess(work_dir / "broker", overrides=BROKER_SETTINGS)
    runs: dict[str, list[Run]] = {mode: [] for mode in MODES}
    ceiling_runs: dict[str, list[Run]] = {mode: [] for mode in MODES}
    with_ceiling = args.partitions == MOCK_PARTITIONS
    errors: list[str] = []
    with broker:
        for mode in MODES:  # warm-up, not measured
            produce(broker, args, mode)
        for round_index in range(args.rounds):
            order = MODES if round_index % 2 == 0 else MODES[::-1]
            for mode in order:
                measured = produce(broker, args, mode)
                expected = args.records + 1  # and the warm-up record
                found = count_committed(broker, measured.topic, args.partitions, expected)
                if found != expected:
                    errors.append(f"{mode} round {round_index}: {found} of {expected} read")
                runs[mode].append(measured)
            if with_ceiling:
                for mode in order:
                    ceiling_runs[mode].append(produce(None, args, mode))
    seconds = {m: statistics.median(r.seconds for r in rs) for m, rs in runs.items()}
    ratio = seconds["idempotent"] / seconds["transactional"]
    ceiling = None
    if with_ceiling:
        ceiling_s = {m: statistics.median(r.seconds for r in rs) for m, rs in ceiling_runs.items()}
        ceiling_ratio = ceiling_s["idempotent"] / ceiling_s["transactional"]
        ceiling = {
            "records_per_s": {m: round(args.records / ceiling_s[m]) for m in MODES},
            "ratio": round(ceiling_ratio, 3),
            "broker_share_of_ceiling": round(ratio / ceiling_ratio, 3),
        }
    cpu_s = {m: statistics.median(r.broker_cpu_s for r in rs) for m, rs in runs.items()}
    transactional_phases = [r.phase_ms for r in runs["transactional"] if r.phase_ms]
    return {
        "setup": {
            "records": args.records,
            "records_per_transaction": args.records_per_transaction,
            "partitions": args.partitions,
            "value_bytes": args.value_bytes,
            "rounds": args.rounds,
        },
        "produce": {
            mode: {
                "median_s": round(seconds[mode], 3),
                "records_per_s": round(args.records / seconds[mode]),
                "runs_s": [round(r.seconds, 3) for r in rs],
                "broker_cpu_ms": round(cpu_s[mode] * 1000),
            }
            for mode, rs in runs.items()
        },
        "transaction_ms": {
            phase: round(statistics.median(p[phase] for p in transactional_phases), 3)
            for phase in PHASES
        },
        "idempotent_ms_per_transaction_size": round(
            seconds["idempotent"] * 1000 * args.records_per_transaction / args.records, 3
        ),
        "ratio": round(ratio, 3),
        "aim": AIM,
        "client_ceiling": ceiling,
        "errors": errors,
    }


def format_result(result: dict[str, Any]) -> str:
    setup = result["setup"]
    lines = [
        f"{setup['records']} records of {setup['value_bytes']} bytes on"
        f" {setup['partitions']} partitions, transactions of"
        f" {setup['records_per_transaction']}, median of {setup['rounds']} rounds",
        f"{'producer':<14} {'records/s':>10} {'median s':>9} {'broker CPU ms':>14}  runs s",
    ]
    for mode, figures in result["produce"].items():
        lines.append(
            f"{mode:<14} {figures['records_per_s']:>10} {figures['median_s']:>9}"
            f" {figures['broker_cpu_ms']:>14}  {figures['runs_s']}"
        )
    phases = result["transaction_ms"]
    lines.append(
        f"one transaction of {setup['records_per_transaction']}, ms (median): "
        + ", ".join(f"{phase} {ms}" for phase, ms in phases.items())
        + f"; in all {round(sum(phases.values()), 3)}, against"
        f" {result['idempotent_ms_per_transaction_size']} for as many idempotent records"
    )
    met = "met" if result["ratio"] >= result["aim"] else "NOT met"
    lines.append(f"transactional / idempotent: {result['ratio']} (aim >= {result['aim']}: {met})")
    ceiling = result["client_ceiling"]
    if ceiling is None:
        lines.append(
            f"client ceiling: not measured (the mock cluster's topics have {MOCK_PARTITIONS}"
            f" partitions, not {setup['partitions']})"
        )
    else:
        rates = ceiling["records_per_s"]
        lines.append(
            "client ceiling, the same producers against librdkafka's mock cluster:"
            f" idempotent {rates['idempotent']} records/s, transactional"
            f" {rates['transactional']}; transactional / idempotent {ceiling['ratio']}"
            f" (the broker reaches {ceiling['broker_share_of_ceiling']} of it)"
        )
    lines += [f"ERROR: {error}" for error in result["errors"]]
    return "\n".join(lines)


def main() -> None:
    args = parse_args()
    command = shlex.join([Path(sys.executable).name, *sys.argv])
    print(f"$ {command}", flush=True)
    work_dir = args.dir or Path(tempfile.mkdtemp(prefix="bench-txn-produce-"))
    shutil.rmtree(work_dir, ignore_errors=True)
    work_dir.mkdir(parents=True)
    try:
        result = run(args, work_dir.resolve())
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)
    print(format_result(result), flush=True)
    print(json.dumps({"benchmark": "transactional_produce", "command": command, **result}))
    if result["errors"]:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
