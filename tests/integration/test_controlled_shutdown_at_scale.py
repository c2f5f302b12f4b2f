"""Controlled shutdown at scale: three brokers, RF 3, ``SCALE_SHUTDOWN_PARTITIONS`` partitions
(450 in the suite; ``make scale-shutdown`` runs 3,000), a broker that leads a third of them is
SIGTERMed. Before it exits every leadership it held has moved to another in-sync replica by
its controlled shutdown (not by a failover after its session ended), it left every ISR, its
ZooKeeper session never expired (its heartbeat kept a margin to the session timeout) and the
controller did not change. Prints what it measured:

    SCALE_SHUTDOWN_PARTITIONS=3000 .venv/bin/python -m pytest -q -s -p no:cacheprovider \\
        tests/integration/test_controlled_shutdown_at_scale.py
"""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

from confluent_kafka import KafkaException
from confluent_kafka.admin import NewTopic

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
    with three_brokers(zookeeper, tmp_path) as (brokers, connect):
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
            assert len(led) == PARTITIONS // 3

            process = brokers[victim].process
            assert process is not None
            signalled = time.monotonic()
            process.send_signal(signal.SIGTERM)
            assert process.wait(EXIT_TIMEOUT_S) == 0
            exited_s = time.monotonic() - signalled
            brokers[victim].process = None

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
        print(
            f"\n{PARTITIONS} partitions (RF 3), broker {victim} led {len(led)}: SIGTERM to exit"
            f" {exited_s:.1f} s, controlled shutdown complete after {completed.group(1)} s in"
            f" {completed.group(2)} request(s), every leadership moved; its ZooKeeper pings:"
            f" {closing.group(1)}, slowest {ping_max_ms} ms of a {session_timeout_ms} ms session"
            " timeout"
        )
