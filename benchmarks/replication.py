"""Replication: what acks=all on three replicas costs a producer, how far followers trail, and
how long a partition cannot take writes after its leader dies.

Three broker processes (``storage-core broker``) on a real ZooKeeper (from the jars pyspark
ships), all on loopback, ``zookeeper.session.timeout.ms`` of ``SESSION_TIMEOUT_MS``:

- produce throughput to a topic of replication factor 3 (``min.insync.replicas=2``) with
  acks=all, as a ratio of acks=1 to a topic of replication factor 1, same run, same leader
  (broker 1 leads both), same 1 KiB records in batches of ``--batch-kib``. Two clients, as in
  broker_throughput.py: the confluent-kafka Producer, and the lean client (pre-encoded Produce
  requests over one raw socket, ``IN_FLIGHT`` outstanding). MiB/s counts the leader's log bytes;
  each figure is the best of ``--rounds``, the two cases alternating. Each run starts once one
  warm-up record has been produced with the case's acks (untimed, not counted), so that it
  measures replication, not the followers joining a new partition (one whose first fetch
  reached the leader before it led backs off ``replica.fetch.backoff.ms``, 1 s, as Kafka's
  do). Each run's topic is deleted after it, so that every run finds the same cluster: the
  followers fetch the measured partition only, not the idle ones of earlier runs. The aim is
  a ratio >= 0.5: printed with whether it is met, never asserted. With each case's best
  run, the CPU each broker process and the client (this process) used in it, in ms per MiB
  produced, user and system apart: where the replicated case's extra time goes;
- follower lag under the same load: one more acks=all run per client, after the timed ones,
  sampled every ``LAG_SAMPLE_S`` on each follower (not during the timed runs: the samples
  are requests to the leader and CPU on the same two cores, which would slow the case
  measured and not its baseline). A follower's log size against the leader's
  (DescribeLogDirs to each broker, leader read before and after the follower, their mean
  taken) in records (bytes over the run's mean bytes per record, as followers copy the
  leader's batches byte for byte), and the broker's ``ReplicaFetcherManager`` ``MaxLag``
  gauge (lag behind the leader's high watermark) from ``/metrics`` where the broker has it.
  Max and median over the samples, and that run's throughput;
- leader failover: SIGKILL the leader of a replicated partition and produce one record with
  acks=all (a confluent-kafka Producer that has already delivered to it, short retry
  backoffs), until it is delivered; also when a surviving broker's Metadata first names
  another leader. Median of ``--failover-rounds``, the killed broker restarted and back in
  the ISR between rounds; as a ratio of ``zookeeper.session.timeout.ms``, which bounds any
  failover from below (the controller learns of the death when the session expires).

Runs of the same code on this machine differ by up to about 10%, so one ratio near the aim
says little: ``--repeat N`` measures the ratio N times on the same cluster (lag sampled in the
first only) and prints each client's median, range, how many of the N met the aim and each
measurement's two throughputs.

    python benchmarks/replication.py [--total-mib 64] [--batch-kib 64] [--rounds 2]
                                     [--repeat 1] [--failover-rounds 3] [--dir bench-data]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import shlex
import shutil
import statistics
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from benchmarks import lean_client, process_cpu
from benchmarks.broker_throughput import (
    IN_FLIGHT,
    MESSAGE_MAX_BYTES,
    RECORD_BYTES,
    batch_stats,
    lean_produce,
    mib_s,
    produce,
    records_per_batch,
)
from embedded.ports import free_port
from embedded.zookeeper import ZooKeeperEnsemble
from storage_core.protocol.messages import build
from storage_core.records import SimpleRecord, build_batch
from tests.broker_process import BrokerProcess
from tests.integration import raw_wire

SESSION_TIMEOUT_MS = 6000
BROKER_IDS = (1, 2, 3)
LEADER_ID = 1  # leads both throughput topics (first in each assignment)
MIN_INSYNC_REPLICAS = 2
AIM = 0.5
MIB = 1024 * 1024
WARM_UP_RECORDS = 1  # produced and answered before each timed run
LAG_SAMPLE_S = 0.05
WAIT_TIMEOUT_S = 120.0
DESCRIBE_LOG_DIRS_KEY = 35
DESCRIBE_LOG_DIRS_VERSION = 1
METADATA_KEY = 3
METADATA_VERSION = 12
# Prometheus name of kafka.server:type=ReplicaFetcherManager,name=MaxLag,clientId=Replica
_MAX_LAG = re.compile(
    r"^kafka_server_replicafetchermanager_maxlag_value(?:\{[^}]*\})? (\S+)$", re.MULTILINE
)


# ---------------------------------------------------------------------- the cluster
@dataclass(frozen=True, slots=True, kw_only=True)
class Cluster:
    brokers: dict[int, BrokerProcess]
    metrics_ports: dict[int, int]  # broker id -> port of its /metrics


@contextmanager
def three_brokers(base: Path) -> Iterator[Cluster]:
    """Brokers 1, 2, 3 on one ZooKeeper under a fresh chroot, each with /metrics on its own
    port. Every broker is stopped at the end."""
    with ZooKeeperEnsemble(base / "zk", size=1) as zookeeper:
        connect = f"{zookeeper.connect_string}/bench-{uuid.uuid4().hex[:8]}"
        brokers: dict[int, BrokerProcess] = {}
        metrics_ports = {broker_id: free_port() for broker_id in BROKER_IDS}
        try:
            for broker_id, metrics_port in metrics_ports.items():
                broker = BrokerProcess(
                    base / f"broker-{broker_id}",
                    overrides={
                        "broker.id": str(broker_id),
                        "zookeeper.connect": connect,
                        "zookeeper.session.timeout.ms": str(SESSION_TIMEOUT_MS),
                        "offsets.topic.replication.factor": "1",
                        "auto.leader.rebalance.enable": "false",
                        "metrics.port": str(metrics_port),
                        "message.max.bytes": str(MESSAGE_MAX_BYTES),
                        "replica.fetch.max.bytes": str(MESSAGE_MAX_BYTES),
                        "socket.request.max.bytes": str(4 * MESSAGE_MAX_BYTES),
                    },
                )
                brokers[broker_id] = broker.start()
            yield Cluster(brokers=brokers, metrics_ports=metrics_ports)
        finally:
            for broker in brokers.values():
                try:
                    broker.stop()
                except RuntimeError:
                    broker.kill()


def bootstrap_of(brokers: dict[int, BrokerProcess]) -> str:
    return ",".join(b.bootstrap for b in brokers.values())


def wait_for(condition: Callable[[], object], what: str, timeout_s: float = WAIT_TIMEOUT_S) -> None:
    """Until ``condition()`` is truthy; errors count as "not yet" (a broker may be starting)."""
    deadline = time.monotonic() + timeout_s
    last: object = None
    while True:
        try:
            if condition():
                return
        except Exception as error:  # a broker restarting or electing: ask again
            last = error
        if time.monotonic() > deadline:
            raise SystemExit(f"{what}: not within {timeout_s:.0f} s (last error: {last!r})")
        time.sleep(0.05)


def partition_state(port: int, topic: str) -> tuple[int, tuple[int, ...]]:
    """(leader, ISR) of partition 0 as the broker on ``port`` answers Metadata itself."""
    module = raw_wire.request_classes(METADATA_KEY, METADATA_VERSION)
    with raw_wire.connect(port, timeout_s=2.0) as sock:
        answer = raw_wire.call(
            sock,
            METADATA_KEY,
            METADATA_VERSION,
            topics=(build(module.MetadataRequestTopic, name=topic, topic_id=None),),
            allow_auto_topic_creation=False,
            include_cluster_authorized_operations=False,
            include_topic_authorized_operations=False,
        )
    (described,) = answer.topics
    (partition,) = [p for p in described.partitions if p.partition_index == 0]
    return int(partition.leader_id), tuple(int(b) for b in partition.isr_nodes)


def create_topic(bootstrap: str, topic: str, replicas: list[int]) -> None:
    configs = {"min.insync.replicas": str(MIN_INSYNC_REPLICAS)} if len(replicas) > 1 else {}
    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = NewTopic(topic, 1, replica_assignment=[replicas], config=configs)
    admin.create_topics([new])[topic].result(30)


def wait_fully_replicated(brokers: dict[int, BrokerProcess], topic: str, replicas: int) -> None:
    """Until every broker's own Metadata shows broker 1 leading with the whole ISR."""

    def everywhere() -> bool:
        states = [partition_state(b.port, topic) for b in brokers.values()]
        return all(leader == LEADER_ID and len(isr) == replicas for leader, isr in states)

    wait_for(everywhere, f"{topic}: leader {LEADER_ID} with {replicas} in-sync replicas")


# ---------------------------------------------------------------------- follower lag
def log_size(port: int, topic: str) -> int:
    """Bytes of partition 0 of ``topic`` on the broker at ``port`` (DescribeLogDirs)."""
    module = raw_wire.request_classes(DESCRIBE_LOG_DIRS_KEY, DESCRIBE_LOG_DIRS_VERSION)
    with raw_wire.connect(port, timeout_s=5.0) as sock:
        answer = raw_wire.call(
            sock,
            DESCRIBE_LOG_DIRS_KEY,
            DESCRIBE_LOG_DIRS_VERSION,
            topics=(build(module.DescribableLogDirTopic, topic=topic, partitions=(0,)),),
        )
    return sum(
        p.partition_size
        for result in answer.results
        for t in result.topics
        if t.name == topic
        for p in t.partitions
        if p.partition_index == 0
    )


def max_lag_gauge(metrics_port: int) -> int | None:
    """The broker's ReplicaFetcherManager MaxLag, or None where /metrics has no such gauge."""
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as reply:
        return parse_max_lag(reply.read().decode())


def parse_max_lag(exposition: str) -> int | None:
    """MaxLag from a Prometheus exposition of a broker's metrics (None: no such gauge)."""
    found = _MAX_LAG.search(exposition)
    return None if found is None else int(float(found.group(1)))


def bytes_behind(leader_before: int, follower: int, leader_after: int) -> int:
    """A follower's log bytes behind the leader, whose size was read just before and just
    after the follower's (their mean: the leader's size when the follower's was read)."""
    return max(0, (leader_before + leader_after) // 2 - follower)


@dataclass(slots=True)
class LagSamples:
    """Per follower: log bytes behind the leader, and MaxLag gauge values (offsets)."""

    bytes_behind: dict[int, list[int]] = field(default_factory=dict)
    max_lag: dict[int, list[int]] = field(default_factory=dict)


class LagSampler:
    """Samples every follower against the leader on a thread while a produce runs."""

    def __init__(self, cluster: Cluster, topic: str, samples: LagSamples) -> None:
        self.brokers = cluster.brokers
        self.metrics_ports = cluster.metrics_ports
        self.topic = topic
        self.samples = samples  # appended to
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="lag-sampler", daemon=True)

    def __enter__(self) -> LagSampler:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        leader = self.brokers[LEADER_ID]
        followers = {i: b for i, b in self.brokers.items() if i != LEADER_ID}
        while not self._stop.wait(LAG_SAMPLE_S):
            for broker_id, follower in followers.items():
                before = log_size(leader.port, self.topic)
                size = log_size(follower.port, self.topic)
                after = log_size(leader.port, self.topic)
                behind = bytes_behind(before, size, after)
                self.samples.bytes_behind.setdefault(broker_id, []).append(behind)
                gauge = max_lag_gauge(self.metrics_ports[broker_id])
                if gauge is not None:
                    self.samples.max_lag.setdefault(broker_id, []).append(gauge)


def summarize(values: list[int]) -> dict[str, float]:
    return {"max": max(values), "median": statistics.median(values)} if values else {}


# ---------------------------------------------------------------------- throughput
@dataclass(frozen=True, slots=True, kw_only=True)
class Case:
    name: str
    replicas: list[int]
    acks: str


BASELINE = Case(name="RF=1 acks=1", replicas=[LEADER_ID], acks="1")
REPLICATED = Case(name="RF=3 acks=all", replicas=list(BROKER_IDS), acks="all")


def produce_case(
    cluster: Cluster,
    case: Case,
    client: str,
    topic: str,
    batch_bytes: int,
    total_records: int,
    lags: LagSamples | None = None,
) -> tuple[float, int, int, process_cpu.CpuUse]:
    """Seconds, leader log bytes, records and the CPU each broker and the client used, of one
    produce run to a fresh topic, deleted afterwards; with ``lags``, followers are sampled
    into it while the run goes on."""
    brokers = cluster.brokers
    bootstrap = bootstrap_of(brokers)
    create_topic(bootstrap, topic, case.replicas)
    wait_fully_replicated(brokers, topic, len(case.replicas))
    leader = brokers[LEADER_ID]
    replicated = len(case.replicas) > 1
    warm_up_bytes = warm_up(leader.port, topic, case.acks)
    sampling = lags is not None and replicated
    pids = {f"broker {b}": p.process.pid for b, p in brokers.items() if p.process is not None}
    with (
        LagSampler(cluster, topic, lags) if sampling else contextlib.nullcontext(),
        process_cpu.measure(pids) as cpu,
    ):
        if client == "confluent-kafka":
            wanted = total_records
            elapsed = produce(bootstrap, topic, case.acks, batch_bytes, total_records)
        else:
            per_batch = records_per_batch(batch_bytes)
            wanted = total_records // per_batch * per_batch
            elapsed = lean_produce(leader.port, topic, case.acks, batch_bytes, total_records)
    if replicated:
        followers_caught_up(brokers, topic)
    _batches, records, size = batch_stats(leader.log_dir / f"{topic}-0")
    records, size = records - WARM_UP_RECORDS, size - warm_up_bytes
    if records != wanted:
        raise SystemExit(f"{topic}: {records} records in the leader's log, {wanted} produced")
    delete_topic(cluster.brokers, topic)
    return elapsed, size, records, cpu


def delete_topic(brokers: dict[int, BrokerProcess], topic: str) -> None:
    """Delete ``topic`` and wait until no broker holds its partition (a follower stops
    fetching it before its log goes)."""
    admin = AdminClient({"bootstrap.servers": bootstrap_of(brokers)})
    admin.delete_topics([topic])[topic].result(30)
    wait_for(
        lambda: not any((b.log_dir / f"{topic}-0").exists() for b in brokers.values()),
        f"{topic}: deleted from every broker",
    )


def warm_up(port: int, topic: str, acks: str) -> int:
    """Produce ``WARM_UP_RECORDS`` record with ``acks`` and wait for its answer; its batch's
    bytes. With acks=all it is answered once every follower in the ISR fetches the new
    partition, past any back-off after a fetch that came before the leader led it."""
    batch = build_batch(
        [SimpleRecord(value=b"warm-up", timestamp=1_700_000_000_000)] * WARM_UP_RECORDS
    )
    frame = lean_client.produce_frame(topic, batch, acks=-1 if acks == "all" else int(acks))
    lean_client.produce(port, frame, 1, in_flight=1)
    return len(batch)


def followers_caught_up(brokers: dict[int, BrokerProcess], topic: str) -> None:
    """Untimed check that each follower holds the leader's bytes once the produce is done."""
    want = log_size(brokers[LEADER_ID].port, topic)
    wait_for(
        lambda: all(log_size(b.port, topic) == want for b in brokers.values()),
        f"{topic}: followers holding the leader's {want} bytes",
    )


Row = dict[str, Any]


CLIENTS = ("confluent-kafka", f"lean, {IN_FLIGHT} in flight")


def throughput(
    cluster: Cluster, total_mib: int, batch_bytes: int, rounds: int, *, sample_lag: bool = True
) -> list[Row]:
    """One row per client: the best of ``rounds`` of each case, and their ratio; with
    ``sample_lag``, the follower lag of one more acks=all run."""
    total_records = total_mib * 1024 * 1024 // RECORD_BYTES
    rows: list[Row] = []
    for client in CLIENTS:
        best: dict[str, tuple[float, int, int, process_cpu.CpuUse]] = {}
        name = client.split(",")[0]
        for r in range(rounds):
            for case in (BASELINE, REPLICATED):
                tag = "rf3" if case is REPLICATED else "rf1"
                topic = f"bench-{tag}-{name}-{r}"
                result = produce_case(cluster, case, client, topic, batch_bytes, total_records)
                if case.name not in best or result[0] < best[case.name][0]:
                    best[case.name] = result
        lags = LagSamples()
        lag_s, lag_bytes = 0.0, 0
        if sample_lag:
            lag_s, lag_bytes, _, _ = produce_case(
                cluster, REPLICATED, client, f"bench-lag-{name}", batch_bytes, total_records, lags
            )
        base_s, base_bytes, _, base_cpu = best[BASELINE.name]
        repl_s, repl_bytes, repl_records, repl_cpu = best[REPLICATED.name]
        record_bytes = repl_bytes / repl_records
        rows.append(
            {
                "client": client,
                "batch_bytes": batch_bytes,
                "records": repl_records,
                "baseline": BASELINE.name,
                "baseline_mib_s": mib_s(base_bytes, base_s),
                "replicated": REPLICATED.name,
                "replicated_mib_s": mib_s(repl_bytes, repl_s),
                "ratio": round(mib_s(repl_bytes, repl_s) / mib_s(base_bytes, base_s), 3),
                # where the CPU of each best run went, per MiB in the leader's log
                "cpu_ms_per_mib": {
                    BASELINE.name: base_cpu.ms_per_mib(base_bytes / MIB),
                    REPLICATED.name: repl_cpu.ms_per_mib(repl_bytes / MIB),
                },
                "sampled_run_mib_s": mib_s(lag_bytes, lag_s) if sample_lag else None,
                "follower_lag_records": {
                    broker_id: summarize([round(b / record_bytes) for b in values])
                    for broker_id, values in sorted(lags.bytes_behind.items())
                },
                "follower_max_lag_gauge": {
                    broker_id: summarize(values)
                    for broker_id, values in sorted(lags.max_lag.items())
                },
            }
        )
    return rows


def repeat_summary(ratios: list[float], runs: list[tuple[float, float]] | None = None) -> Row:
    """The ratios of repeated measurements: the machine's speed drifts between runs, so a
    single ratio says little; their median, range and how many met the aim say more.
    ``runs``: each measurement's (baseline, replicated) MiB/s, which show whether a low
    ratio came from a fast baseline or a slow replicated run."""
    return {
        "ratios": ratios,
        "runs_mib_s": [list(run) for run in runs or ()],
        "median": round(statistics.median(ratios), 3),
        "min": min(ratios),
        "max": max(ratios),
        "met": sum(1 for ratio in ratios if ratio >= AIM),
        "repeats": len(ratios),
    }


def repeated_ratios(
    cluster: Cluster, first: list[Row], repeats: int, total_mib: int, batch_bytes: int, rounds: int
) -> dict[str, Row]:
    """Per client, the ratio of ``first`` and of ``repeats - 1`` more measurements on the same
    cluster (without lag sampling), summarized."""
    measured = {row["client"]: [row] for row in first}
    for _ in range(repeats - 1):
        for row in throughput(cluster, total_mib, batch_bytes, rounds, sample_lag=False):
            measured[row["client"]].append(row)
    return {
        client: repeat_summary(
            [row["ratio"] for row in rows],
            [(row["baseline_mib_s"], row["replicated_mib_s"]) for row in rows],
        )
        for client, rows in measured.items()
    }


# ---------------------------------------------------------------------- failover
def failover_producer(bootstrap: str) -> Producer:
    return Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": False,
            "linger.ms": 0,
            "message.timeout.ms": 120_000,
            "retry.backoff.ms": 20,
            "retry.backoff.max.ms": 100,
            "reconnect.backoff.ms": 20,
            "reconnect.backoff.max.ms": 100,
        }
    )


def deliver_one(producer: Producer, topic: str) -> str | None:
    """Produce one record and wait for it; the delivery error, or None once delivered."""
    outcome: list[object] = []
    producer.produce(topic, b"x", partition=0, on_delivery=lambda e, _m: outcome.append(e))
    producer.flush(180)
    if not outcome:
        return "not delivered within the flush timeout"
    return None if outcome[0] is None else str(outcome[0])


@dataclass(frozen=True, slots=True, kw_only=True)
class FailoverRound:
    killed: int
    was_controller: bool
    elected_s: float
    produce_s: float


def controller_id(port: int) -> int:
    with raw_wire.connect(port, timeout_s=2.0) as sock:
        answer = raw_wire.call(
            sock,
            METADATA_KEY,
            METADATA_VERSION,
            topics=(),
            allow_auto_topic_creation=False,
            include_cluster_authorized_operations=False,
            include_topic_authorized_operations=False,
        )
    return int(answer.controller_id)


def failover_round(brokers: dict[int, BrokerProcess], topic: str) -> FailoverRound:
    some = next(iter(brokers.values()))
    leader_id, _isr = partition_state(some.port, topic)
    was_controller = controller_id(some.port) == leader_id
    survivor = next(b for i, b in brokers.items() if i != leader_id)
    producer = failover_producer(bootstrap_of(brokers))
    error = deliver_one(producer, topic)
    if error is not None:
        raise SystemExit(f"{topic}: produce before the kill failed: {error}")
    elected: list[float] = []

    def watch_election(started: float) -> None:
        deadline = started + WAIT_TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                leader, _ = partition_state(survivor.port, topic)
            except Exception:  # the survivor busy electing: ask again
                leader = -1
            if leader not in (-1, leader_id):
                elected.append(time.monotonic() - started)
                return
            time.sleep(0.01)

    started = time.monotonic()
    brokers[leader_id].kill()
    watcher = threading.Thread(target=watch_election, args=(started,), daemon=True)
    watcher.start()
    error = deliver_one(producer, topic)
    produce_s = time.monotonic() - started
    watcher.join(WAIT_TIMEOUT_S)
    if error is not None:
        raise SystemExit(f"{topic}: produce after killing broker {leader_id} failed: {error}")
    brokers[leader_id].start()
    wait_for(
        lambda: len(partition_state(survivor.port, topic)[1]) == len(BROKER_IDS),
        f"{topic}: broker {leader_id} back in the ISR",
    )
    return FailoverRound(
        killed=leader_id,
        was_controller=was_controller,
        elected_s=elected[0] if elected else float("nan"),
        produce_s=produce_s,
    )


def failover(brokers: dict[int, BrokerProcess], rounds: int) -> Row:
    topic = "bench-failover"
    create_topic(bootstrap_of(brokers), topic, list(BROKER_IDS))
    wait_fully_replicated(brokers, topic, len(BROKER_IDS))
    results = [failover_round(brokers, topic) for _ in range(rounds)]
    produce_s = statistics.median(r.produce_s for r in results)
    elected_s = statistics.median(r.elected_s for r in results)
    return {
        "rounds": [
            {
                "killed": r.killed,
                "was_controller": r.was_controller,
                "elected_s": round(r.elected_s, 3),
                "produce_s": round(r.produce_s, 3),
            }
            for r in results
        ],
        "session_timeout_ms": SESSION_TIMEOUT_MS,
        "median_elected_s": round(elected_s, 3),
        "median_produce_s": round(produce_s, 3),
        "ratio": round(produce_s * 1000 / SESSION_TIMEOUT_MS, 3),
    }


# ---------------------------------------------------------------------- the run
def cpu_figures(used: dict[str, dict[str, float]]) -> str:
    """``broker 1 2.1 user + 0.6 system, ...``; processes that used none are left out."""
    return ", ".join(
        f"{name} {t['user']:.2f} user + {t['system']:.2f} system"
        for name, t in used.items()
        if t["user"] or t["system"]
    )


def print_results(rows: list[Row], repeated: dict[str, Row], over: Row) -> None:
    print(
        f"{'client':<22} {'batch':>8} {BASELINE.name + ' MiB/s':>18}"
        f" {REPLICATED.name + ' MiB/s':>20} {'ratio':>6}  aim >= {AIM}"
    )
    for r in rows:
        met = "met" if r["ratio"] >= AIM else "NOT met"
        print(
            f"{r['client']:<22} {r['batch_bytes']:>8} {r['baseline_mib_s']:>18}"
            f" {r['replicated_mib_s']:>20} {r['ratio']:>6}  {met}"
        )
    for client, summary in repeated.items():
        if summary["repeats"] > 1:
            print(
                f"ratio over {summary['repeats']} repeats ({client}): median"
                f" {summary['median']}, min {summary['min']}, max {summary['max']};"
                f" aim met in {summary['met']} of {summary['repeats']}"
            )
            runs = ", ".join(f"{base}/{replicated}" for base, replicated in summary["runs_mib_s"])
            print(f"  each repeat's {BASELINE.name} / {REPLICATED.name} MiB/s: {runs}")
    for r in rows:
        for case_name, used in r["cpu_ms_per_mib"].items():
            print(f"CPU ms per MiB ({r['client']}, best {case_name} run): {cpu_figures(used)}")
    for r in rows:
        for source, key in (
            ("log size", "follower_lag_records"),
            ("MaxLag gauge", "follower_max_lag_gauge"),
        ):
            if not r[key]:
                print(f"follower lag ({r['client']}, {source}): none sampled (not on /metrics?)")
                continue
            figures = ", ".join(
                f"broker {b}: max {s['max']:.0f} median {s['median']:.1f}"
                for b, s in r[key].items()
            )
            print(
                f"follower lag in records ({r['client']}, {source}; a run of"
                f" {r['sampled_run_mib_s']} MiB/s while sampled): {figures}"
            )
    for i, round_ in enumerate(over["rounds"]):
        role = " (the controller)" if round_["was_controller"] else ""
        print(
            f"failover round {i}: SIGKILL leader broker {round_['killed']}{role};"
            f" new leader in Metadata after {round_['elected_s']:.2f} s,"
            f" acks=all produce delivered after {round_['produce_s']:.2f} s"
        )
    print(
        f"leader failover (SIGKILL until an acks=all produce succeeds), median of"
        f" {len(over['rounds'])}: {over['median_produce_s']:.2f} s;"
        f" zookeeper.session.timeout.ms={SESSION_TIMEOUT_MS};"
        f" ratio to the session timeout {over['ratio']:.2f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--total-mib", type=int, default=64, help="record bytes per produce")
    parser.add_argument("--batch-kib", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="measure the ratio this many times on the same cluster and summarize them",
    )
    parser.add_argument("--failover-rounds", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=Path("bench-data"))
    args = parser.parse_args()
    if args.repeat < 1:
        parser.error(f"--repeat must be at least 1, got {args.repeat}")
    command = shlex.join([Path(sys.executable).name, *sys.argv])
    print(f"$ {command}", flush=True)
    shutil.rmtree(args.dir, ignore_errors=True)
    args.dir.mkdir(parents=True)
    try:
        with three_brokers(args.dir.resolve()) as cluster:
            batch_bytes = args.batch_kib * 1024
            rows = throughput(cluster, args.total_mib, batch_bytes, args.rounds)
            repeated = repeated_ratios(
                cluster, rows, args.repeat, args.total_mib, batch_bytes, args.rounds
            )
            over = failover(cluster.brokers, args.failover_rounds)
    finally:
        shutil.rmtree(args.dir, ignore_errors=True)
    print_results(rows, repeated, over)
    print(
        json.dumps(
            {
                "benchmark": "replication",
                "command": command,
                "throughput": rows,
                "repeated_ratios": repeated,
                "failover": over,
            }
        )
    )


if __name__ == "__main__":
    main()
