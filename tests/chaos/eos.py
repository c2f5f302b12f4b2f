"""The exactly-once nemesis: three brokers on ZooKeeper (``__transaction_state`` and
``__consumer_offsets`` with RF 3 and min ISR 2, Kafka's defaults), an input and an output topic
(RF 3, min.insync.replicas 2), and a consume-transform-produce loop in its own process
(``tests.chaos.eos_loop``: read_committed consumer in a group, transactional producer,
``send_offsets_to_transaction``). The input is filled first, keyed, a sequence per key. Each
round a seeded nemesis SIGKILLs one of

    kill-txn-coordinator     the broker coordinating the loop's transactional id
                             (FindCoordinator key type 1, asked on the wire)
    kill-input-leader        the leader of an input partition
    kill-output-leader       the leader of an output partition
    kill-group-coordinator   the leader of the group's __consumer_offsets partition
    kill-loop                the loop's process

then starts it again (a broker on the same directories, the loop as a new run with the same
transactional id, fencing the killed one), waits for full ISRs and for the loop to commit a
transaction again. A loop that exits on its own (a fatal error, or its watchdog: a librdkafka
call blocked past its timeout, see ``eos_loop.HUNG_AFTER_S``) is started again at once. Once
the loop has consumed the whole input, a read_committed consumer must find every input record
in the output exactly once, in order per key, and nothing of the aborted attempts, which a
read_uncommitted read counts (``tests.chaos.eos_check``).

    python -m tests.chaos.eos --rounds 10 --seed 7 [--dir DIR]     (make eos)

Prints counts (records, transactions committed and aborted, loop runs, kills by kind) and
exits 0 when the run held, 1 otherwise (the report says where).
"""

from __future__ import annotations

import argparse
import enum
import random
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import IsolationLevel, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from embedded.zookeeper import ZooKeeperEnsemble
from tests.chaos.cluster import RelayedCluster
from tests.chaos.eos_check import EosReport, check, read_topic
from tests.chaos.eos_process import LoopProcess
from tests.chaos.ledger import high_watermarks
from tests.chaos.nemesis import KILL_HOLD_S, Event, Nemesis
from tests.cluster_support import eventually, zookeeper_ensemble
from tests.integration.raw_wire import call, connect

INPUT, OUTPUT = "eos-input", "eos-output"
PARTITIONS = 3
KEYS = 12
GROUP = "eos-transformer"
TRANSACTIONAL_ID = "eos-transformer-0"
INTERNAL_PARTITIONS = 5  # of __transaction_state and __consumer_offsets (RF 3, min ISR 2)
RECORDS_PER_ROUND = 200
HEAL_TIMEOUT_S = 90.0
PROGRESS_TIMEOUT_S = 90.0
FINISH_TIMEOUT_S = 300.0
OVERRIDES = {
    "offsets.topic.replication.factor": "3",
    "offsets.topic.num.partitions": str(INTERNAL_PARTITIONS),
    "transaction.state.log.num.partitions": str(INTERNAL_PARTITIONS),
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "2000",
}


# librdkafka logs each connection a killed broker closed; the report has what matters
QUIET = {"log.connection.close": False}


class Kind(enum.Enum):
    TXN_COORDINATOR = "kill-txn-coordinator"
    INPUT_LEADER = "kill-input-leader"
    OUTPUT_LEADER = "kill-output-leader"
    GROUP_COORDINATOR = "kill-group-coordinator"
    LOOP = "kill-loop"


@dataclass(frozen=True, slots=True, kw_only=True)
class Fault:
    round: int
    kind: Kind
    partition: int  # for the leader kinds
    hold_s: float


def plan(seed: int, rounds: int, kinds: tuple[Kind, ...] = tuple(Kind)) -> list[Fault]:
    """Pure: the same seed gives the same schedule; each block of ``len(kinds)`` rounds holds
    every kind once, in a seeded order."""
    rng = random.Random(seed)
    order: list[Kind] = []
    while len(order) < rounds:
        order += rng.sample(kinds, len(kinds))
    return [
        Fault(round=n, kind=kind, partition=rng.randrange(PARTITIONS), hold_s=KILL_HOLD_S)
        for n, kind in enumerate(order[:rounds])
    ]


@dataclass(frozen=True, slots=True, kw_only=True)
class RoundResult:
    fault: Fault
    target: str  # "broker 2", "loop run 3", or "none" (the loop had finished)
    healed_s: float | None  # from the restart until full ISRs (None: not in time)
    progress_s: float | None  # from the kill until the loop committed again (None: stuck, or
    # it finished the input without another commit)
    finished_before: bool  # the loop had consumed the whole input already
    finished_after: bool  # it did so in this round

    @property
    def ok(self) -> bool:
        return self.healed_s is not None and (
            self.finished_before or self.progress_s is not None or self.finished_after
        )

    def describe(self) -> str:
        healed = "NOT healed" if self.healed_s is None else f"healed in {self.healed_s:.1f} s"
        if self.finished_before:
            progress = "the loop had finished"
        elif self.progress_s is None:
            progress = f"NO transaction committed within {PROGRESS_TIMEOUT_S:.0f} s of the heal"
        else:
            progress = f"the loop committed {self.progress_s:.1f} s after the kill"
        return (
            f"round {self.fault.round}: {self.fault.kind.value} {self.target}; {healed};"
            f" {progress} -> {'ok' if self.ok else 'FAILED'}"
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class EosRunReport:
    seed: int
    rounds: list[RoundResult]
    events: list[Event]
    check: EosReport | None = None
    loop_runs: int = 0
    loop_exits: dict[str, int] = field(default_factory=dict)
    loop_outcomes: dict[str, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        checked = self.check is not None and self.check.ok
        return checked and not self.errors and all(r.ok for r in self.rounds)

    @property
    def kills(self) -> Counter[str]:
        return Counter(r.fault.kind.value for r in self.rounds if r.target != "none")

    def summary(self) -> str:
        lines = [
            f"seed {self.seed}, {len(self.rounds)} rounds: {'PASSED' if self.ok else 'FAILED'}"
        ]
        lines += [r.describe() for r in self.rounds]
        lines.append("kills: " + ", ".join(f"{k} {n}" for k, n in sorted(self.kills.items())))
        exits = ", ".join(f"{k} {n}" for k, n in sorted(self.loop_exits.items()))
        lines.append(f"loop: {self.loop_runs} runs ({self.loop_runs - 1} restarts); ended: {exits}")
        lines.append(
            "loop's own count: "
            + ", ".join(f"{k} {n}" for k, n in sorted(self.loop_outcomes.items()))
        )
        if self.check is not None:
            lines.append(self.check.summary())
        lines += [f"error: {e}" for e in self.errors]
        lines.append("nemesis log:")
        lines += [f"  {e}" for e in self.events]
        return "\n".join(lines)


def find_coordinator(cluster: RelayedCluster, key: str, key_type: int) -> int:
    """The coordinator's broker id for a group (key type 0) or transactional id (1), asked
    of a running broker on its own port."""

    def ask() -> int:
        for broker_id in sorted(cluster.alive()):
            with connect(cluster.brokers[broker_id].port) as sock:
                answer = call(sock, 10, 3, key=key, key_type=key_type)
            if answer.error_code == 0 and answer.node_id >= 0:
                return int(answer.node_id)
        return 0

    return eventually(ask, timeout_s=HEAL_TIMEOUT_S, what=f"the coordinator of {key}")


def run(
    zookeeper: ZooKeeperEnsemble,
    directory: Path,
    *,
    rounds: int,
    seed: int,
    records: int | None = None,
    kinds: tuple[Kind, ...] = tuple(Kind),
    offsets_apart: bool = False,
    client_debug: str = "",
    echo: Callable[[str], None] = print,
) -> EosRunReport:
    """``offsets_apart`` is for checking the harness itself: the loop commits its offsets after
    each transaction instead of in it, so a kill of the loop in between duplicates a batch,
    which the run must report."""
    with RelayedCluster(zookeeper, directory, overrides=OVERRIDES) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap, **QUIET})
        topics = [
            NewTopic(name, PARTITIONS, 3, config={"min.insync.replicas": "2"})
            for name in (INPUT, OUTPUT)
        ]
        for future in admin.create_topics(topics).values():
            future.result(30)
        for topic in (INPUT, OUTPUT):
            cluster.wait_healthy(topic, PARTITIONS, timeout_s=HEAL_TIMEOUT_S)
        expected = _fill_input(cluster.bootstrap, records or RECORDS_PER_ROUND * max(rounds, 2))
        end = [high_watermarks(cluster.bootstrap, INPUT, PARTITIONS)[p] for p in range(PARTITIONS)]
        echo(
            f"cluster up ({cluster.bootstrap}); {sum(expected.values())} input records; seed {seed}"
        )
        nemesis = Nemesis(cluster, INPUT, echo=echo)
        apart = ["--offsets-apart", "--pace-ms=500"] if offsets_apart else []
        loop_args = (
            f"--input={INPUT}",
            f"--output={OUTPUT}",
            f"--group={GROUP}",
            f"--transactional-id={TRANSACTIONAL_ID}",
            f"--debug={client_debug}",
            *apart,
        )
        loop = LoopProcess(directory, cluster.bootstrap, end, nemesis.log, loop_args)
        loop.start()
        results: list[RoundResult] = []
        errors: list[str] = []
        report_check = None
        try:
            eventually(
                lambda: loop.committed_since(0.0) is not None,
                timeout_s=PROGRESS_TIMEOUT_S,
                what="a first transaction",
            )
            for fault in plan(seed, rounds, kinds):
                result = _round(cluster, nemesis, loop, fault)
                results.append(result)
                echo(result.describe())
                if result.healed_s is None:
                    errors.append(f"round {fault.round}: the cluster did not heal; stopped there")
                    break
            if not loop.finished.wait(FINISH_TIMEOUT_S):
                errors.append(f"the loop did not finish the input within {FINISH_TIMEOUT_S:.0f} s")
            report_check = _check(admin, cluster.bootstrap, expected, loop)
        except Exception as error:  # a run that could not finish is reported, not hidden
            errors.append(f"{type(error).__name__}: {error}")
        finally:
            loop.stop()
        outcomes = loop.outcomes()
        return EosRunReport(
            seed=seed,
            rounds=results,
            events=list(nemesis.events),
            check=report_check,
            loop_runs=loop.runs,
            loop_exits=dict(loop.exits),
            loop_outcomes={
                "committed": sum(o.committed for o in outcomes),
                "aborted": sum(not o.committed for o in outcomes),
            },
            errors=errors,
        )


def _wait_healthy(cluster: RelayedCluster) -> float:
    """Every broker registered, every partition of the four topics led with its full ISR."""
    began = time.monotonic()
    for topic, partitions in (
        (INPUT, PARTITIONS),
        (OUTPUT, PARTITIONS),
        ("__transaction_state", INTERNAL_PARTITIONS),
        ("__consumer_offsets", INTERNAL_PARTITIONS),
    ):
        left = HEAL_TIMEOUT_S - (time.monotonic() - began)
        if topic.startswith("__"):  # created on first use
            eventually(
                lambda topic=topic: cluster.zk.get_topic_assignment(topic) is not None,
                timeout_s=max(left, 1.0),
                what=f"{topic} created",
            )
        cluster.wait_healthy(topic, partitions, timeout_s=max(left, 1.0))
    return time.monotonic() - began


def _fill_input(bootstrap: str, records: int) -> dict[str, int]:
    """``records`` keyed records, key ``k<n>`` with seqs 0, 1, ... as values; returns the count
    per key."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, **QUIET})
    counts: Counter[str] = Counter()
    failures: list[object] = []
    for n in range(records):
        key = f"k{n % KEYS:02d}"
        producer.produce(
            INPUT,
            key=key,
            value=str(counts[key]).encode(),
            on_delivery=lambda error, _m: failures.append(error) if error is not None else None,
        )
        counts[key] += 1
        producer.poll(0)
    if producer.flush(60) != 0 or failures:
        raise RuntimeError(f"the input was not written: {failures[:5]}")
    return dict(counts)


def _round(
    cluster: RelayedCluster, nemesis: Nemesis, loop: LoopProcess, fault: Fault
) -> RoundResult:
    finished_before = loop.finished.is_set()
    killed_at = time.time()
    if fault.kind is Kind.LOOP:
        killed = loop.kill()
        target = f"loop run {loop.runs}" if killed else "none"
        nemesis.log(fault.round, "SIGKILL" if killed else "skip", target)
        time.sleep(fault.hold_s)
        if killed:
            loop.start()
            nemesis.log(fault.round, "started", f"loop run {loop.runs}")
    else:
        broker, why = _target(cluster, fault)
        target = f"broker {broker}"
        cluster.kill(broker)
        nemesis.log(fault.round, "SIGKILL", f"{target} ({why})")
        time.sleep(fault.hold_s)
        cluster.start_broker(broker)
        nemesis.log(fault.round, "started", target)
    healed_s: float | None = None
    try:
        healed_s = _wait_healthy(cluster)
        nemesis.log(fault.round, "healthy", f"every ISR full after {healed_s:.1f} s")
    except AssertionError as error:
        nemesis.log(fault.round, "unhealed", str(error))
    progress_s: float | None = None
    if not finished_before and healed_s is not None:
        try:
            eventually(
                lambda: loop.finished.is_set() or loop.committed_since(killed_at) is not None,
                timeout_s=PROGRESS_TIMEOUT_S,
                what="a transaction committed by the loop",
            )
            progress_s = loop.committed_since(killed_at)
        except AssertionError as error:
            nemesis.log(fault.round, "stuck", str(error))
    return RoundResult(
        fault=fault,
        target=target,
        healed_s=healed_s,
        progress_s=progress_s,
        finished_before=finished_before,
        finished_after=loop.finished.is_set(),
    )


def _target(cluster: RelayedCluster, fault: Fault) -> tuple[int, str]:
    if fault.kind is Kind.TXN_COORDINATOR:
        return find_coordinator(cluster, TRANSACTIONAL_ID, 1), "transaction coordinator"
    if fault.kind is Kind.GROUP_COORDINATOR:
        return find_coordinator(cluster, GROUP, 0), "group coordinator"
    topic = INPUT if fault.kind is Kind.INPUT_LEADER else OUTPUT
    state = cluster.partition_state(topic, fault.partition)
    if state is None or state.leader < 0:
        raise RuntimeError(f"{topic}-{fault.partition} has no leader to kill")
    return state.leader, f"leader of {topic}-{fault.partition}"


def _check(
    admin: AdminClient, bootstrap: str, expected: dict[str, int], loop: LoopProcess
) -> EosReport:
    """Once every output partition's LSO reached its HW (no transaction left open), read the
    output both ways and check it."""
    partitions = [TopicPartition(OUTPUT, p) for p in range(PARTITIONS)]

    def ends(level: IsolationLevel) -> dict[int, int]:
        futures = admin.list_offsets(
            {tp: OffsetSpec.latest() for tp in partitions}, isolation_level=level
        )
        return {tp.partition: int(f.result(10).offset) for tp, f in futures.items()}

    lso = eventually(
        lambda: (
            (e := ends(IsolationLevel.READ_COMMITTED)) == ends(IsolationLevel.READ_UNCOMMITTED)
            and e
        ),
        timeout_s=HEAL_TIMEOUT_S,
        what=f"{OUTPUT}: every LSO at its HW (no transaction left open)",
    )
    committed = read_topic(bootstrap, OUTPUT, lso, isolation="read_committed")
    uncommitted = read_topic(bootstrap, OUTPUT, lso, isolation="read_uncommitted")
    return check(expected, committed, uncommitted, loop.outcomes())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--seed", type=int, default=int(time.time()) % 100_000)
    parser.add_argument("--records", type=int, default=None, help="input records")
    parser.add_argument("--dir", type=Path, default=None, help="kept afterwards (default: temp)")
    parser.add_argument(
        "--client-debug", default="", help="librdkafka debug contexts of the loop's producer"
    )
    parser.add_argument(
        "--offsets-apart",
        action="store_true",
        help="the loop commits offsets after its transactions and only the loop is killed:"
        " the run must report the records written twice (it exits 1)",
    )
    args = parser.parse_args(argv)
    directory = args.dir or Path(tempfile.mkdtemp(prefix="eos-"))
    directory.mkdir(parents=True, exist_ok=True)
    print(
        f"run directory {directory} (brokers' logs in cluster/broker-<id>/broker.log,"
        " the loop's in cluster/loop.log)"
    )
    with zookeeper_ensemble(directory / "zookeeper") as zookeeper:
        report = run(
            zookeeper,
            directory / "cluster",
            rounds=args.rounds,
            seed=args.seed,
            records=args.records or (1000 if args.offsets_apart else None),
            # checking the checks: only the loop's kills can make it write a batch twice
            kinds=(Kind.LOOP,) if args.offsets_apart else tuple(Kind),
            offsets_apart=args.offsets_apart,
            client_debug=args.client_debug,
        )
    print(report.summary())
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
