"""Controlled shutdown at scale: three brokers, RF 3, ``SCALE_SHUTDOWN_PARTITIONS`` partitions
(450 in the suite; ``make scale-shutdown`` runs 3,000), a broker that leads a third of them is
SIGTERMed. Before it exits every leadership it held has moved to another in-sync replica by
its controlled shutdown (not by a failover after its session ended), it left every ISR, its
ZooKeeper session never expired and the controller did not change. Every broker's heartbeat
(``ZooKeeperPingLatencyMsMax`` on ``/metrics``, sampled twice a second) keeps a margin to the
session timeout while the partitions are created and while the broker leaves. Prints what it
measured:

    SCALE_SHUTDOWN_PARTITIONS=3000 .venv/bin/python -m pytest -q -s -p no:cacheprovider \\
        tests/integration/test_controlled_shutdown_at_scale.py
"""

from __future__ import annotations

import os
import re
import signal
import threading
import time
import urllib.request
from pathlib import Path

from confluent_kafka import KafkaException
from confluent_kafka.admin import NewTopic

from embedded.ports import free_port
from embedded.zookeeper import ZooKeeperEnsemble
from storage_core.common import TopicPartition
from storage_core.zk.kafka_zk_client import KafkaZkClient
from storage_core.zk.zk_data import LeaderAndIsr
from tests import cluster_support
from tests.cluster_support import admin, controller_id, eventually, metadata, three_brokers

cluster_support.require_java()

PARTITIONS = int(os.environ.get("SCALE_SHUTDOWN_PARTITIONS", "450"))
PARTITIONS_PER_TOPIC = 1000  # Kafka's CreateTopics has no limit; a few topics spread the load
EXIT_TIMEOUT_S = 120.0  # controlled.shutdown: 3 requests x 5 s, then the rest of the stop
PING_MAX_SERIES = "kafka_server_zookeeperclientmetrics_zookeeperpinglatencymsmax_value"


class PingSampler:
    """Scrapes each broker's ``ZooKeeperPingLatencyMsMax`` twice a second; keeps the largest
    seen per phase."""

    def __init__(self, metrics_ports: dict[int, int]) -> None:
        self.metrics_ports = metrics_ports
        self.phase = "create"
        self.peaks: dict[str, float] = {}
        self.scraped = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            for port in self.metrics_ports.values():
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
                        text = r.read().decode()
                except OSError:
                    continue  # stopped, or busy
                for line in text.splitlines():
                    if line.startswith(PING_MAX_SERIES + " "):
                        self.scraped += 1
                        value = float(line.rsplit(" ", 1)[1])
                        self.peaks[self.phase] = max(self.peaks.get(self.phase, 0.0), value)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def topics() -> dict[str, int]:
    """``wide-<i>`` -> its partition count, ``PARTITIONS`` in all."""
    return {
        f"wide-{i}": min(PARTITIONS_PER_TOPIC, PARTITIONS - start)
        for i, start in enumerate(range(0, PARTITIONS, PARTITIONS_PER_TOPIC))
    }


def replicas(partition: int) -> list[int]:
    """Leaders spread evenly over brokers 1-3; every broker a replica of every partition."""
    return [(partition + i) % 3 + 1 for i in range(3)]


def all_in_sync(bootstraps: list[str]) -> bool:
    """Each broker's own Metadata lists every partition with a leader and three in sync."""
    for bootstrap in bootstraps:
        for name, count in topics().items():
            (topic,) = metadata(bootstrap, name).topics
            if len(topic.partitions) != count:
                return False
            if any(p.leader_id < 0 or len(p.isr_nodes) != 3 for p in topic.partitions):
                return False
    return True


def states(zk: KafkaZkClient) -> dict[TopicPartition, LeaderAndIsr]:
    return zk.get_partition_states(
        TopicPartition(name, p) for name, count in topics().items() for p in range(count)
    )


def test_a_sigtermed_broker_moves_every_leadership_before_it_exits_and_keeps_its_session(
    zookeeper: ZooKeeperEnsemble, tmp_path: Path
) -> None:
    metrics_ports = {b: free_port() for b in cluster_support.BROKER_IDS}
    per_broker = {b: {"metrics.port": str(port)} for b, port in metrics_ports.items()}
    pings = PingSampler(metrics_ports)
    with three_brokers(zookeeper, tmp_path, per_broker=per_broker) as (brokers, connect):
        client = admin(brokers)
        for name, count in topics().items():
            assignment = [replicas(p) for p in range(count)]
            future = client.create_topics(
                [NewTopic(name, num_partitions=count, replica_assignment=assignment)]
            )[name]
            try:
                future.result(300)
            except KafkaException as error:  # created; a broker was slow to list it
                assert "did not reach" in str(error), error
        bootstraps = [b.bootstrap for b in brokers.values()]
        eventually(
            lambda: all_in_sync(bootstraps),
            timeout_s=120 + PARTITIONS * 0.2,
            poll_s=1.0,
            what=f"{PARTITIONS} partitions led and fully in sync on every broker",
        )
        controller = controller_id(bootstraps[0])
        victim = next(b for b in brokers if b != controller)
        zk = KafkaZkClient(connect, session_timeout_ms=10_000).start()
        try:
            before = states(zk)
            controller_before = zk.get_controller()
            epoch_before = zk.get_controller_epoch()
            led = {tp for tp, s in before.items() if s.leader == victim}
            assert led == {tp for tp in before if replicas(tp.partition)[0] == victim}

            process = brokers[victim].process
            assert process is not None
            pings.phase = "shutdown"
            signalled = time.monotonic()
            process.send_signal(signal.SIGTERM)
            assert process.wait(EXIT_TIMEOUT_S) == 0
            exited_s = time.monotonic() - signalled
            brokers[victim].process = None

            time.sleep(1.0)  # a last sample of the others' heartbeat after it left
            pings.stop()
            after = states(zk)
            assert zk.get_controller() == controller_before  # no controller failover
            assert zk.get_controller_epoch() == epoch_before
        finally:
            zk.close()
        for tp, state in after.items():
            assert state.leader != victim, (tp, state)
            assert victim not in state.isr, (tp, state)
            if tp in led:  # one election, the controlled shutdown's: another in-sync replica
                assert state.leader_epoch == before[tp].leader_epoch + 1, (tp, state)
                assert state.leader in before[tp].isr, (tp, state)

        log = brokers[victim].output_path.read_text(errors="replace")
        completed = re.search(
            rf"controlled shutdown complete broker_id={victim} after_s=(\S+) attempts=(\d+)", log
        )
        assert completed, log[-4000:]
        assert log.index(completed.group(0)) < log.index("broker shut down cleanly")
        for starved in ("zookeeper session expired", "Session has expired", "Connection dropped"):
            assert starved not in log, starved
        closing = re.search(r"pings=(\d+) ping_latency_ms_max=(\d+) session_timeout_ms=(\d+)", log)
        assert closing, log[-4000:]
        ping_max_ms, session_timeout_ms = int(closing.group(2)), int(closing.group(3))
        assert ping_max_ms < session_timeout_ms, closing.group(0)

        # the controller moved them on the request, before the broker's session ended
        controller_log = brokers[controller].output_path.read_text(errors="replace")
        served = controller_log.index(f"controlled shutdown served, broker={victim} ")
        gone = controller_log.index(f"dead=[{victim}]")
        assert served < gone
        assert re.search(
            rf"controlled shutdown served, broker={victim} .*partitions_still_led=\[\]\n",
            controller_log,
        )
        assert pings.scraped > 0 and set(pings.peaks) == {"create", "shutdown"}, pings.peaks
        assert max(pings.peaks.values()) < session_timeout_ms, pings.peaks
        print(
            f"\n{PARTITIONS} partitions (RF 3), broker {victim} led {len(led)}: SIGTERM to exit"
            f" {exited_s:.1f} s, controlled shutdown complete after {completed.group(1)} s in"
            f" {completed.group(2)} request(s), every leadership moved; its ZooKeeper pings:"
            f" {closing.group(1)}, slowest {ping_max_ms} ms of a {session_timeout_ms} ms session"
            f" timeout; slowest ping of any broker while creating"
            f" {pings.peaks['create']:.0f} ms, while the broker left"
            f" {pings.peaks['shutdown']:.0f} ms"
        )
