"""Controller failovers under topic churn: three broker processes on a real ZooKeeper, the
controller's broker SIGKILLed again and again (and started again each time) while a
confluent-kafka AdminClient creates and deletes topics (1-6 partitions, replication factor
1-3, names reused so that a topic comes back as a new incarnation) the whole time.

Once the churn stops and the cluster settles, ZooKeeper and every broker agree (Metadata and
DescribeTopicPartitions against the znodes read with kazoo: the controller, topics, ids,
assignments, leaders, epochs, ISRs), no topic is half made or half deleted, no partition is
offline while a replica lives, no log dir keeps a deleted topic, and the controller epoch went
up once per failover.

``make test`` runs 3 kills; ``make chaos-controller`` runs 10 (``CHAOS_CONTROLLER_KILLS``).
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections import Counter
from concurrent.futures import TimeoutError as FutureTimeoutError
from pathlib import Path

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from embedded.zookeeper import ZooKeeperEnsemble
from tests import cluster_consistency, cluster_support
from tests.broker_process import BrokerProcess
from tests.cluster_support import BROKER_IDS, SESSION_TIMEOUT_MS, eventually

cluster_support.require_java()

KILLS = int(os.environ.get("CHAOS_CONTROLLER_KILLS", "3"))
SETTLE_TIMEOUT_S = 90.0
TOPIC_NAMES = tuple(f"churn-{i}" for i in range(10))
CLIENT_TIMEOUT_S = 20.0

pytestmark = pytest.mark.timeout(240 + 40 * KILLS)


class TopicChurn(threading.Thread):
    """Creates and deletes topics through a real AdminClient until stopped; counts outcomes
    by operation and error name."""

    def __init__(self, bootstrap: str, seed: int) -> None:
        super().__init__(name="topic-churn", daemon=True)
        self.bootstrap = bootstrap
        self.rng = random.Random(seed)
        self.outcomes: Counter[str] = Counter()
        self.stopping = threading.Event()
        self._maybe_present: set[str] = set()

    def run(self) -> None:
        # While the controller is a killed broker whose port refuses at once, librdkafka's
        # admin requests look it up in a busy loop (each refusal is a broker state change that
        # wakes the lookup, which asks for a connection again): a whole core until the request
        # times out, and ZooKeeper's JVM starved of CPU stalls long enough to expire the live
        # brokers' sessions. Its threads inherit the nice value of the thread that creates the
        # client (per thread on Linux): at 19 they spin on idle CPU only.
        os.setpriority(os.PRIO_PROCESS, 0, 19)
        # librdkafka logs every refused connection to a killed broker: the counts say enough
        self.client = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})
        while not self.stopping.is_set():
            name = self.rng.choice(TOPIC_NAMES)
            if name in self._maybe_present:
                outcome = self._wait(
                    self.client.delete_topics(
                        [name], operation_timeout=CLIENT_TIMEOUT_S, request_timeout=CLIENT_TIMEOUT_S
                    )[name]
                )
                self.outcomes[f"delete {outcome}"] += 1
                if outcome in ("ok", "UNKNOWN_TOPIC_OR_PART"):
                    self._maybe_present.discard(name)
            else:
                topic = NewTopic(
                    name,
                    num_partitions=self.rng.randint(1, 6),
                    replication_factor=self.rng.randint(1, 3),
                )
                outcome = self._wait(
                    self.client.create_topics(
                        [topic],
                        operation_timeout=CLIENT_TIMEOUT_S,
                        request_timeout=CLIENT_TIMEOUT_S,
                    )[name]
                )
                self.outcomes[f"create {outcome}"] += 1
                if outcome in ("ok", "TOPIC_ALREADY_EXISTS"):
                    self._maybe_present.add(name)

    def _wait(self, future: object) -> str:
        try:
            future.result(timeout=CLIENT_TIMEOUT_S * 2)  # type: ignore[attr-defined]
        except KafkaException as error:
            return str(error.args[0].name())
        except FutureTimeoutError:
            return "no answer"
        return "ok"

    def stop(self) -> None:
        self.stopping.set()
        self.join(CLIENT_TIMEOUT_S * 3)


def settled(connect: str, brokers: dict[int, BrokerProcess]) -> cluster_consistency.ZkReading:
    """The cluster once ZooKeeper and every broker agree; fails with the last disagreements."""
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    problems: list[str] = []
    while time.monotonic() < deadline:
        try:
            reading, problems = cluster_consistency.cluster_problems(
                connect, [(b, brokers[b].port, brokers[b].log_dir) for b in BROKER_IDS]
            )
        except Exception as error:  # a broker still starting: ask again
            problems = [repr(error)]
        else:
            if not problems:
                return reading
        time.sleep(0.5)
    raise AssertionError(f"not settled within {SETTLE_TIMEOUT_S} s:\n" + "\n".join(problems[:40]))


def test_controller_sigkills_under_topic_churn_leave_zookeeper_and_brokers_agreeing(
    zookeeper: ZooKeeperEnsemble, tmp_path: Path
) -> None:
    with cluster_support.three_brokers(zookeeper, tmp_path) as (brokers, connect):
        client = cluster_support.admin(brokers)
        eventually(lambda: len(client.describe_cluster().result(10).nodes) == 3, what="3 brokers")
        _controller, epoch_before = eventually(
            lambda: (c := cluster_consistency.read_controller(connect))[0] in BROKER_IDS and c,
            what="a controller",
        )
        churn = TopicChurn(",".join(b.bootstrap for b in brokers.values()), seed=KILLS)
        churn.start()
        failovers_s: list[float] = []
        rng = random.Random(7)
        try:
            for _kill in range(KILLS):
                time.sleep(rng.uniform(1.0, 3.0))  # the churn runs against this controller
                victim, _epoch = cluster_consistency.read_controller(connect)
                assert victim in BROKER_IDS, victim
                brokers[victim].kill()
                killed_at = time.monotonic()
                survivor = brokers[next(b for b in BROKER_IDS if b != victim)]
                eventually(
                    lambda survivor=survivor, victim=victim: (
                        cluster_support.controller_id(survivor.bootstrap) not in (victim, -1)
                    ),
                    timeout_s=SESSION_TIMEOUT_MS / 1000 + 20,
                    poll_s=0.05,
                    what=f"a controller after broker {victim}",
                )
                failovers_s.append(time.monotonic() - killed_at)
                brokers[victim].start()  # its old session is gone with its /controller
        finally:
            churn.stop()
        assert not churn.is_alive(), "the churn did not stop"

        reading = settled(connect, brokers)
        epochs = reading.controller_epoch - epoch_before
        print(
            f"\ncontroller chaos: {KILLS} SIGKILLs of the controller's broker,"
            f" zookeeper.session.timeout.ms={SESSION_TIMEOUT_MS}"
            f"\n  failover s: {', '.join(f'{s:.2f}' for s in failovers_s)}"
            f" (max {max(failovers_s):.2f}, mean {sum(failovers_s) / len(failovers_s):.2f})"
            f"\n  topic churn: {dict(sorted(churn.outcomes.items()))}"
            f"\n  settled: {len(reading.topics)} topics,"
            f" {sum(len(t.partitions) for t in reading.topics.values())} partitions,"
            f" controller epoch {epoch_before} -> {reading.controller_epoch}"
        )
        assert epochs == KILLS, f"controller epoch went up {epochs} times for {KILLS} failovers"
        assert churn.outcomes["create ok"] > 0 and churn.outcomes["delete ok"] > 0, churn.outcomes
        assert all(s < SESSION_TIMEOUT_MS / 1000 + 10 for s in failovers_s), failovers_s
