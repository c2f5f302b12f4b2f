"""The Jepsen-style run: three brokers (RF 3, min.insync.replicas 2), idempotent acks=all
producers the whole time, a seeded nemesis for N rounds; after each round and its heal, every
acknowledged record is read exactly once and in order, and the replicas' logs agree below the
HW (batches and leader-epoch checkpoints). Prints counts and failover times.

    python -m tests.chaos.jepsen --rounds 20 --seed 7 [--dir DIR]     (make jepsen)

Exits 0 when every round passed, 1 otherwise (the report says where).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from embedded.zookeeper import ZooKeeperEnsemble
from tests.chaos.cluster import RelayedCluster
from tests.chaos.ledger import (
    Ledger,
    LedgerProducer,
    LedgerReport,
    check,
    failover_time_s,
    high_watermarks,
    read_partitions,
)
from tests.chaos.nemesis import Event, Fault, FaultKind, Injected, Nemesis, plan
from tests.chaos.replica_logs import Comparison, compare_partition
from tests.cluster_support import eventually, zookeeper_ensemble

TOPIC = "jepsen"
PARTITIONS = 3
PRODUCERS = 2
ACKS_ALL_PREFLIGHT_S = 20.0
FAILOVER_WAIT_S = 30.0
HEAL_TIMEOUT_S = 60.0
READ_TIMEOUT_S = 60.0


class ReplicationNotWorkingError(AssertionError):
    """An acks=all produce to the RF 3 topic did not complete on a healthy cluster."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RoundResult:
    injected: Injected
    failover_s: dict[int, float | None]  # partition -> seconds, for partitions the fault led
    healthy_after_s: float | None  # from the heal until every ISR was full (None: not in time)
    ledger: LedgerReport
    logs: list[Comparison]

    @property
    def ok(self) -> bool:
        failed_over = all(v is not None for v in self.failover_s.values())
        healed = self.healthy_after_s is not None
        return healed and failed_over and self.ledger.ok and all(c.ok for c in self.logs)

    def describe(self) -> str:
        fault = self.injected.fault
        lines = [
            f"round {fault.round}: {fault.kind.value} broker {self.injected.target}"
            f" (leader of {TOPIC}-{fault.partition} was {self.injected.leader})"
            f" -> {'ok' if self.ok else 'FAILED'}"
        ]
        if self.failover_s:
            shown = ", ".join(
                f"{TOPIC}-{p} {'none' if s is None else f'{s:.2f} s'}"
                for p, s in sorted(self.failover_s.items())
            )
            lines.append(f"  failover: {shown}")
        if self.healthy_after_s is None:
            lines.append(f"  ISRs NOT full {HEAL_TIMEOUT_S:.0f} s after the heal")
        else:
            lines.append(f"  ISRs full {self.healthy_after_s:.2f} s after the heal")
        lines.append("  ledger: " + self.ledger.summary().replace("\n", "\n  "))
        for comparison in self.logs:
            lines.append(
                f"  logs {comparison.partition}: HW {comparison.high_watermark},"
                f" {comparison.batches_compared} batches compared,"
                f" {len(comparison.differences)} differences"
            )
            lines += [f"    {d}" for d in comparison.differences]
        return "\n".join(lines)


@dataclass(frozen=True, slots=True, kw_only=True)
class JepsenReport:
    seed: int
    rounds: list[RoundResult]
    events: list[Event]
    final: LedgerReport | None = None
    produced: int = 0
    unanswered: int = 0
    errors: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        final_ok = self.final is not None and self.final.ok
        return final_ok and not self.errors and all(r.ok for r in self.rounds)

    def summary(self, *, with_rounds: bool = True) -> str:
        """The run's outcome; ``with_rounds=False`` lists the rounds by outcome only (for a
        caller that printed each round as it ended)."""
        lines = [
            f"seed {self.seed}, {len(self.rounds)} rounds: {'PASSED' if self.ok else 'FAILED'}"
        ]
        if with_rounds:
            lines += [r.describe() for r in self.rounds]
        else:
            outcomes = [("ok" if r.ok else "FAILED") for r in self.rounds]
            lines.append("rounds: " + ", ".join(f"{i} {o}" for i, o in enumerate(outcomes)))
        failovers = [s for r in self.rounds for s in r.failover_s.values() if s is not None]
        if failovers:
            lines.append(
                f"failover times: n={len(failovers)} min {min(failovers):.2f} s"
                f" median {statistics.median(failovers):.2f} s max {max(failovers):.2f} s"
            )
        if self.final is not None:
            lines.append(f"final ledger ({self.produced} produced, {self.unanswered} unanswered):")
            lines.append("  " + self.final.summary().replace("\n", "\n  "))
        lines += [f"error: {e}" for e in self.errors]
        lines.append("nemesis log:")
        lines += [f"  {e}" for e in self.events]
        return "\n".join(lines)


def run(
    zookeeper: ZooKeeperEnsemble,
    directory: Path,
    *,
    rounds: int,
    seed: int,
    acks: str = "all",
    echo: Callable[[str], None] = print,
) -> JepsenReport:
    """``acks`` other than "all" is for checking the harness itself: with acks=1 a leader's
    death may lose acknowledged records, which the checks must then report."""
    with RelayedCluster(zookeeper, directory) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        topic = NewTopic(TOPIC, PARTITIONS, 3, config={"min.insync.replicas": "2"})
        admin.create_topics([topic])[TOPIC].result(30)
        cluster.wait_healthy(TOPIC, PARTITIONS, timeout_s=HEAL_TIMEOUT_S)
        _preflight(cluster.bootstrap, acks)
        echo(f"cluster up (brokers behind relays {cluster.bootstrap}); seed {seed}")
        ledger = Ledger()
        producers = [
            LedgerProducer(
                producer_id=n,
                bootstrap=cluster.bootstrap,
                topic=TOPIC,
                partitions=PARTITIONS,
                ledger=ledger,
                acks=acks,
            )
            for n in range(PRODUCERS)
        ]
        for producer in producers:
            producer.start()
        nemesis = Nemesis(cluster, TOPIC, echo=echo)
        results: list[RoundResult] = []
        errors: list[str] = []
        try:
            for fault in plan(seed, rounds, PARTITIONS):
                result = _round(cluster, nemesis, ledger, fault)
                results.append(result)
                echo(result.describe())
                if result.healthy_after_s is None:
                    errors.append(f"round {fault.round}: the cluster did not heal; stopped there")
                    break
        except Exception as error:  # a round that could not finish is reported, not hidden
            errors.append(f"{type(error).__name__}: {error}")
        unanswered = sum(producer.stop() for producer in producers)
        errors += [f"producer {p.producer_id} fatal: {p.fatal}" for p in producers if p.fatal]
        final = None
        try:
            final = _check_ledger(cluster, ledger)
        except Exception as error:
            errors.append(f"final check: {type(error).__name__}: {error}")
        return JepsenReport(
            seed=seed,
            rounds=results,
            events=list(nemesis.events),
            final=final,
            produced=sum(p.sent for p in producers),
            unanswered=unanswered,
            errors=errors,
        )


def _preflight(bootstrap: str, acks: str) -> None:
    """One acks=all record must be written before the faults begin (fails fast, with a reason,
    on a build whose followers do not replicate)."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": acks,
            "message.timeout.ms": int(ACKS_ALL_PREFLIGHT_S * 1000),
        }
    )
    outcome: list[object] = []
    producer.produce(TOPIC, b"preflight", partition=0, on_delivery=lambda e, m: outcome.append(e))
    producer.flush(ACKS_ALL_PREFLIGHT_S + 5)
    # ``is``, not ``==``: KafkaError's comparison with None raises inside the C extension.
    if len(outcome) != 1 or outcome[0] is not None:
        raise ReplicationNotWorkingError(
            f"an acks={acks} produce to {TOPIC}-0 (RF 3, min.insync.replicas 2) did not complete"
            f" within {ACKS_ALL_PREFLIGHT_S:.0f} s on a healthy cluster: {outcome}"
        )


def _round(cluster: RelayedCluster, nemesis: Nemesis, ledger: Ledger, fault: Fault) -> RoundResult:
    leaders = {p: _leader(cluster, p) for p in range(PARTITIONS)}
    injected = nemesis.run(fault)
    healthy_after_s: float | None = None
    try:
        healthy_after_s = cluster.wait_healthy(TOPIC, PARTITIONS, timeout_s=HEAL_TIMEOUT_S)
        nemesis.log(fault.round, "healthy", f"every ISR full after {healthy_after_s:.2f} s")
    except AssertionError as error:  # checked all the same: what is there to see is reported
        nemesis.log(fault.round, "unhealed", str(error))
    failover: dict[int, float | None] = {}
    if fault.kind is not FaultKind.CUT_FOLLOWER:
        for partition, leader in leaders.items():
            if leader == injected.target:
                failover[partition] = _failover(ledger, partition, injected.at)
    return RoundResult(
        injected=injected,
        failover_s=failover,
        healthy_after_s=healthy_after_s,
        ledger=_check_ledger(cluster, ledger),
        logs=_compare_logs(cluster),
    )


def _leader(cluster: RelayedCluster, partition: int) -> int:
    state = cluster.partition_state(TOPIC, partition)
    return -1 if state is None else state.leader


def _failover(ledger: Ledger, partition: int, since: float) -> float | None:
    try:
        return eventually(
            lambda: failover_time_s(ledger.acks(), partition, since),
            timeout_s=FAILOVER_WAIT_S,
            what=f"an acknowledged produce to {TOPIC}-{partition}",
        )
    except AssertionError:
        return None


def _check_ledger(cluster: RelayedCluster, ledger: Ledger) -> LedgerReport:
    acks = ledger.acks()  # before the HWs are read: every one of these must lie below them
    consumed = eventually(  # a client's metadata may lag just after a leader change
        lambda: read_partitions(cluster.bootstrap, TOPIC, PARTITIONS),
        timeout_s=READ_TIMEOUT_S,
        what=f"{TOPIC} read to its high watermarks",
    )
    return check(acks, consumed, failed=len(ledger.failures()))


def _compare_logs(cluster: RelayedCluster) -> list[Comparison]:
    hws = eventually(
        lambda: high_watermarks(cluster.bootstrap, TOPIC, PARTITIONS),
        timeout_s=READ_TIMEOUT_S,
        what=f"{TOPIC}'s high watermarks",
    )
    log_dirs = {b: cluster.log_dir(b) for b in cluster.brokers}
    return [compare_partition(f"{TOPIC}-{p}", log_dirs, hw) for p, hw in hws.items()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--seed", type=int, default=int(time.time()) % 100_000)
    parser.add_argument("--dir", type=Path, default=None, help="kept afterwards (default: temp)")
    parser.add_argument(
        "--acks", default="all", choices=("all", "1"), help="1: check that the checks see loss"
    )
    args = parser.parse_args(argv)
    directory = args.dir or Path(tempfile.mkdtemp(prefix="jepsen-"))
    directory.mkdir(parents=True, exist_ok=True)
    print(f"run directory {directory} (brokers' logs in broker-<id>/broker.log)")
    try:
        with zookeeper_ensemble(directory / "zookeeper") as zookeeper:
            report = run(
                zookeeper, directory / "cluster", rounds=args.rounds, seed=args.seed, acks=args.acks
            )
    except ReplicationNotWorkingError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(report.summary(with_rounds=False))  # each round was printed as it ended
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
