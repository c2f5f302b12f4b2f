"""Partition scale: three broker processes (replication factor 3) on a real ZooKeeper, a fresh
cluster for each size P (partitions in the cluster), all of them in one topic.

Steps, in order, on each cluster (``--only`` picks some; creation always runs):

  create     CreateTopics of P partitions (replication factor 3) until every broker's own
             Metadata (raw frames, no client cache) shows a leader for each; against the same
             ZooKeeper writes done with kazoo in the same run (the assignment, then one state
             znode per partition, pipelined: ``cluster_metadata.zookeeper_create_baseline``)
  idle       once every ISR is full and every partition.metadata written (the creation's
             deferred writes), nothing produced: CPU (utime+stime, ``/proc/<pid>/stat``,
             all threads) of each broker over ``window_s``, in percent of one core; against
             the same brokers' before the topic was created (no partition)
  fds        open descriptors of each broker (``/proc/<pid>/fd``)
  shutdown   SIGTERM to a broker that is not the controller until its process exits: the
             leaderships it held (a survivor's Metadata), how many were not moved before it
             left (their state znodes written after its registration's deletion, by zxid:
             ``moved_before_exit``), whether its ZooKeeper session expired rather than being
             closed (its /brokers/ids registration still there after the exit, or "expired"
             in its log before the controlled shutdown's outcome); and, as a second opinion,
             how many a survivor's Metadata still showed it leading at the last look (once a
             second) before it exited
  restart    start that broker again until every partition's ISR holds it again (a
             survivor's Metadata)

Each figure is also given per partition.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient

from benchmarks.cluster_metadata import zookeeper_create_baseline
from benchmarks.scale_support import cpu_of, idle_cpu_percent, open_descriptors, wait_for
from embedded.zookeeper import ZooKeeperEnsemble
from tests.broker_process import BrokerProcess
from tests.cluster_support import controller_id, partition_states, three_brokers

TOPIC = "scale"
REPLICATION_FACTOR = 3
STEPS = ("create", "idle", "fds", "shutdown", "restart")
EXIT_POLL_S = 0.05
LOOK_EVERY_S = 1.0


def timeout_for(partitions: int) -> float:
    """Generous bounds that still end a stuck run: 60 s plus 0.3 s a partition."""
    return 60.0 + 0.3 * partitions


def poll_s(partitions: int) -> float:
    """How often a wait asks a broker's Metadata: an answer about P partitions costs the broker
    work in proportion, so that asking does not become what is measured."""
    return 0.1 + partitions / 5000


def brokers_cpu_s(brokers: dict[int, BrokerProcess]) -> float:
    return cpu_of([b.process.pid for b in brokers.values() if b.process is not None])


def leaders_seen_by_all(brokers: dict[int, BrokerProcess], partitions: int, seen: set[int]) -> bool:
    """Every broker's Metadata shows a leader for each partition; ``seen`` keeps the brokers
    that did (they are not asked again)."""
    for broker_id, broker in brokers.items():
        if broker_id in seen:
            continue
        states = partition_states(broker.bootstrap, TOPIC)
        if len(states) != partitions or any(leader < 0 for leader, _, _ in states.values()):
            return False
        seen.add(broker_id)
    return True


def every_isr_holds(
    bootstrap: str, partitions: int, broker_ids: tuple[int, ...] | list[int]
) -> bool:
    states = partition_states(bootstrap, TOPIC)
    return len(states) == partitions and all(
        set(broker_ids) <= set(isr) for _leader, _epoch, isr in states.values()
    )


def metadata_files(broker: BrokerProcess) -> int:
    """How many of the topic's partitions have their partition.metadata on ``broker``."""
    return sum(1 for _ in broker.log_dir.glob(f"{TOPIC}-*/partition.metadata"))


def led_by(bootstrap: str, broker_id: int) -> int:
    return sum(
        1 for leader, _e, _i in partition_states(bootstrap, TOPIC).values() if leader == broker_id
    )


def create(
    brokers: dict[int, BrokerProcess], zookeeper: ZooKeeperEnsemble, partitions: int
) -> dict[str, Any]:
    baseline_s = zookeeper_create_baseline(zookeeper.connect_string, partitions)
    admin = AdminClient({"bootstrap.servers": ",".join(b.bootstrap for b in brokers.values())})
    cpu_before_s = brokers_cpu_s(brokers)
    started = time.monotonic()
    request_timed_out = False
    try:
        admin.create_topics(
            [NewTopic(TOPIC, partitions, REPLICATION_FACTOR)],
            operation_timeout=timeout_for(partitions),
            request_timeout=timeout_for(partitions),
        )[TOPIC].result(timeout_for(partitions))
    except KafkaException as error:
        # As in Kafka, REQUEST_TIMED_OUT says the broker stopped waiting, not that the
        # creation stopped: the leaders are waited for below either way
        if error.args[0].code() != KafkaError.REQUEST_TIMED_OUT:
            raise
        request_timed_out = True
    seen: set[int] = set()
    wait_for(
        lambda: leaders_seen_by_all(brokers, partitions, seen),
        f"{partitions} leaders seen by every broker",
        timeout_for(partitions),
        poll_s=poll_s(partitions),
    )
    create_s = time.monotonic() - started
    cpu_s = brokers_cpu_s(brokers) - cpu_before_s
    return {
        "create_s": round(create_s, 3),
        "create_ms_per_partition": round(create_s * 1000 / partitions, 3),
        "create_cpu_ms_per_partition": round(cpu_s * 1000 / partitions, 3),
        "zookeeper_writes_s": round(baseline_s, 3),
        "create_vs_zookeeper_writes": round(create_s / baseline_s, 1),
        "create_request_timed_out": request_timed_out,
    }


def idle_cpu_per_broker(brokers: dict[int, BrokerProcess], window_s: float) -> dict[int, float]:
    pids = {b: p.process.pid for b, p in brokers.items() if p.process is not None}
    return idle_cpu_percent(pids, window_s)


def idle(
    brokers: dict[int, BrokerProcess], partitions: int, window_s: float, empty_percent: float
) -> dict[str, Any]:
    """The brokers' idle CPU holding ``partitions``, against ``empty_percent``: the most of
    the same brokers before the topic existed (the machine's speed of the moment, which moved
    idle figures by 2-3x between runs hours apart)."""
    per_broker = idle_cpu_per_broker(brokers, window_s)
    worst = max(per_broker.values())
    return {
        "idle_cpu_percent_per_broker": {str(b): v for b, v in sorted(per_broker.items())},
        "idle_cpu_percent_max": worst,
        "idle_cpu_percent_per_1000_partitions": round(worst * 1000 / partitions, 3),
        "idle_empty_cpu_percent_max": empty_percent,
        "idle_vs_empty": round(worst / empty_percent, 1) if empty_percent else None,
        "idle_window_s": window_s,
    }


def descriptors(brokers: dict[int, BrokerProcess], partitions: int) -> dict[str, Any]:
    per_broker = {b: open_descriptors(p.process.pid) for b, p in brokers.items() if p.process}
    worst = max(per_broker.values())
    return {
        "descriptors_per_broker": {str(b): v for b, v in sorted(per_broker.items())},
        "descriptors_max": worst,
        "descriptors_per_partition": round(worst / partitions, 3),
    }


def registered(client: KazooClient, broker_id: int) -> bool:
    return client.exists(f"/brokers/ids/{broker_id}") is not None


def moved_before_exit(client: KazooClient, partitions: list[int]) -> int:
    """How many of ``partitions`` got their last state write before the broker's registration
    went away: ZooKeeper orders every write (zxid), and ``/brokers/ids``'s pzxid is the
    deletion of the registration; a leadership moved by the controlled shutdown was written
    before it, one failed over after it (the ISR no longer holds the stopped broker once its
    leadership moved, so nothing writes those partitions again until it returns)."""
    deleted_zxid = client.exists("/brokers/ids").pzxid
    pending = [
        client.exists_async(f"/brokers/topics/{TOPIC}/partitions/{p}/state") for p in partitions
    ]
    return sum(1 for result in pending if result.get(timeout=30).mzxid < deleted_zxid)


def session_expired_before_close(lines: list[str]) -> list[str]:
    """ "expired" lines before the controlled shutdown's outcome: the broker also logs its own
    clean close of the session as "expired" (kazoo's LOST), which comes after the outcome,
    and without an outcome (controlled shutdown disabled) only the registration tells."""
    out = []
    for line in lines:
        if "controlled shutdown complete" in line or "controlled shutdown incomplete" in line:
            return out
        if "xpired" in line:
            out.append(line[-300:])
    return []


def shutdown(
    brokers: dict[int, BrokerProcess], connect: str, victim: int, partitions: int
) -> dict[str, Any]:
    """SIGTERM ``victim`` and wait for its exit (see the module's docstring)."""
    broker = brokers[victim]
    survivor = next(p for b, p in brokers.items() if b != victim)
    process = broker.process
    if process is None:
        raise RuntimeError(f"broker {victim} is not running")
    held = [
        p
        for p, (leader, _e, _i) in partition_states(survivor.bootstrap, TOPIC).items()
        if leader == victim
    ]
    log_offset = broker.output_path.stat().st_size
    others = {b: p for b, p in brokers.items() if b != victim}
    others_cpu_s = brokers_cpu_s(others)
    victim_cpu_s = victim_cpu_before_s = cpu_of([process.pid])
    started = time.monotonic()
    process.send_signal(signal.SIGTERM)
    deadline = started + timeout_for(partitions)
    looked_at = started
    led_at_last_look: int | None = None
    while True:  # the victim's CPU read until it exits (a reaped process has no /proc entry)
        victim_cpu_s = max(victim_cpu_s, cpu_of([process.pid]))
        if time.monotonic() - looked_at >= LOOK_EVERY_S:  # a second opinion, from Metadata
            looked_at = time.monotonic()
            with contextlib.suppress(Exception):  # the survivor busy: look again later
                seen = led_by(survivor.bootstrap, victim)
                if process.poll() is None:
                    led_at_last_look = seen
        try:
            process.wait(EXIT_POLL_S)
            break
        except subprocess.TimeoutExpired:
            if time.monotonic() > deadline:
                process.kill()
                process.wait()
                raise TimeoutError(
                    f"broker {victim} did not exit within {timeout_for(partitions)} s"
                ) from None
    shutdown_s = time.monotonic() - started
    cpu_s = victim_cpu_s - victim_cpu_before_s + brokers_cpu_s(others) - others_cpu_s
    broker.process = None
    client = KazooClient(hosts=connect)
    client.start(timeout=10)
    try:
        registration_left = registered(client, victim)
        wait_for(
            lambda: not registered(client, victim) and led_by(survivor.bootstrap, victim) == 0,
            f"broker {victim}'s registration gone and its leaderships failed over",
            timeout_for(partitions),
            poll_s=poll_s(partitions),
        )
        moved = moved_before_exit(client, held)
    finally:
        client.stop()
        client.close()
    with broker.output_path.open("rb") as output:
        output.seek(log_offset)
        lines = output.read().decode(errors="replace").splitlines()
    expired = session_expired_before_close(lines)
    outcome = [line[-300:] for line in lines if "controlled shutdown" in line.lower()]
    return {
        "shutdown_s": round(shutdown_s, 3),
        "shutdown_ms_per_partition": round(shutdown_s * 1000 / partitions, 3),
        "shutdown_cpu_ms_per_partition": round(cpu_s * 1000 / partitions, 3),
        "leaderships_held": len(held),
        "leaderships_not_moved": len(held) - moved,
        "leaderships_led_at_last_look": led_at_last_look,
        "last_look_s_before_exit": round(shutdown_s - (looked_at - started), 2),
        "session_expired": registration_left or bool(expired),
        "registration_left_after_exit": registration_left,
        "expired_log_lines": expired[:5],
        "controlled_shutdown_log_lines": outcome[:5],
        "exit_code": process.returncode,
    }


def restart(brokers: dict[int, BrokerProcess], victim: int, partitions: int) -> dict[str, Any]:
    broker = brokers[victim]
    survivor = next(p for b, p in brokers.items() if b != victim)
    others = {b: p for b, p in brokers.items() if b != victim}
    others_cpu_s = brokers_cpu_s(others)
    started = time.monotonic()
    broker.start(timeout_s=timeout_for(partitions))
    wait_for(
        lambda: every_isr_holds(survivor.bootstrap, partitions, [victim]),
        f"broker {victim} back in every ISR",
        timeout_for(partitions),
        poll_s=poll_s(partitions),
    )
    restart_s = time.monotonic() - started
    cpu_s = brokers_cpu_s(brokers) - others_cpu_s  # the restarted broker's whole life
    return {
        "restart_isr_s": round(restart_s, 3),
        "restart_ms_per_partition": round(restart_s * 1000 / partitions, 3),
        "restart_cpu_ms_per_partition": round(cpu_s * 1000 / partitions, 3),
    }


def measure_size(
    zookeeper: ZooKeeperEnsemble,
    base: Path,
    partitions: int,
    *,
    only: set[str],
    idle_window_s: float,
) -> dict[str, Any]:
    """Every step of ``only`` on a fresh three-broker cluster holding ``partitions``."""
    result: dict[str, Any] = {"partitions": partitions}
    directory = base / f"partitions-{partitions}-{uuid.uuid4().hex[:6]}"
    with three_brokers(zookeeper, directory) as (brokers, connect):
        empty_percent = 0.0
        if "idle" in only:  # the same brokers' idle before the topic: the run's baseline
            time.sleep(2.0)
            empty_percent = max(idle_cpu_per_broker(brokers, idle_window_s).values())
        result.update(create(brokers, zookeeper, partitions))
        ids = tuple(brokers)
        if only & {"idle", "fds", "shutdown", "restart"}:
            wait_for(
                lambda: all(
                    every_isr_holds(b.bootstrap, partitions, ids) for b in brokers.values()
                ),
                "every ISR full",
                timeout_for(partitions),
                poll_s=poll_s(partitions),
            )
            # The creation's aftermath: each log's partition.metadata is written after it
            # serves (deferred), then checkpoints and fetch back-offs pass.
            wait_for(
                lambda: all(metadata_files(b) == partitions for b in brokers.values()),
                "every partition.metadata written",
                timeout_for(partitions),
                poll_s=poll_s(partitions),
            )
            time.sleep(2.0)
        if "idle" in only:
            result.update(idle(brokers, partitions, idle_window_s, empty_percent))
        if "fds" in only:
            result.update(descriptors(brokers, partitions))
        if only & {"shutdown", "restart"}:
            controller = controller_id(next(iter(brokers.values())).bootstrap)
            victim = max(b for b in brokers if b != controller)
            result["stopped_broker"] = victim
            result.update(shutdown(brokers, connect, victim, partitions))
            if "restart" in only:
                result.update(restart(brokers, victim, partitions))
    return result
