"""Three broker processes on a real ZooKeeper, each behind its own ``KafkaRelay``: the broker
listens on its own port and advertises the relay's, so clients and followers' fetchers all go
through the relays. What the controller decided (leaders, ISR, assignments, registrations) is
read from ZooKeeper, the source of truth, with the project's ``KafkaZkClient``.

    <dir>/broker-<id>/   server.properties, kafka-logs, broker.log

Process faults act on the broker's own process: ``kill`` (SIGKILL), ``pause`` (SIGSTOP),
``resume`` (SIGCONT), ``start``. A broker SIGKILLed keeps its registration until its session
expires; ``start`` waits that out (a live registration refuses the broker id).
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from pathlib import Path
from types import TracebackType

from embedded.ports import free_port
from embedded.zookeeper import ZooKeeperEnsemble
from storage_core.common import TopicPartition
from storage_core.controller.kafka_zk_client import KafkaZkClient
from storage_core.controller.zk_data import LeaderAndIsr
from tests.broker_process import BrokerProcess
from tests.chaos.tcp_relay import KafkaRelay
from tests.cluster_support import eventually

BROKER_IDS = (1, 2, 3)
SESSION_TIMEOUT_MS = 6000
REPLICA_LAG_TIME_MAX_MS = 3000
# RF 3 with min.insync.replicas 2: acks=all survives one broker down, never an unclean leader.
SETTINGS = {
    "zookeeper.session.timeout.ms": str(SESSION_TIMEOUT_MS),
    "zookeeper.connection.timeout.ms": "10000",
    "default.replication.factor": "3",
    "min.insync.replicas": "2",
    "unclean.leader.election.enable": "false",
    "replica.lag.time.max.ms": str(REPLICA_LAG_TIME_MAX_MS),
    "offsets.topic.replication.factor": "1",
    "auto.leader.rebalance.enable": "false",
    "auto.create.topics.enable": "false",
}


class RelayedCluster:
    """Brokers 1-3 under a fresh chroot of ``zookeeper``, each behind a relay."""

    def __init__(
        self,
        zookeeper: ZooKeeperEnsemble,
        directory: Path,
        *,
        overrides: dict[str, str] | None = None,
    ) -> None:
        self.connect = f"{zookeeper.connect_string}/jepsen-{uuid.uuid4().hex[:8]}"
        self.relays: dict[int, KafkaRelay] = {}
        self.brokers: dict[int, BrokerProcess] = {}
        for broker_id in BROKER_IDS:
            relay_port = free_port()
            broker = BrokerProcess(
                directory / f"broker-{broker_id}",
                overrides={
                    **SETTINGS,
                    "broker.id": str(broker_id),
                    "zookeeper.connect": self.connect,
                    "advertised.listeners": f"PLAINTEXT://127.0.0.1:{relay_port}",
                    **(overrides or {}),
                },
            )
            self.brokers[broker_id] = broker
            self.relays[broker_id] = KafkaRelay(target_port=broker.port, port=relay_port)
        self.paused: set[int] = set()
        self._zk: KafkaZkClient | None = None

    @property
    def bootstrap(self) -> str:
        """Every relay: what clients are given."""
        return ",".join(relay.bootstrap for relay in self.relays.values())

    @property
    def zk(self) -> KafkaZkClient:
        if self._zk is None:
            self._zk = KafkaZkClient(
                self.connect, session_timeout_ms=SESSION_TIMEOUT_MS, connection_timeout_ms=10_000
            ).start()
        return self._zk

    def log_dir(self, broker_id: int) -> Path:
        return self.brokers[broker_id].log_dir

    def start(self) -> RelayedCluster:
        for broker_id in BROKER_IDS:
            self.relays[broker_id].start()
            self.brokers[broker_id].start()
        eventually(
            lambda: set(self.zk.get_all_brokers()) == set(BROKER_IDS),
            timeout_s=30,
            what="every broker registered",
        )
        return self

    def stop(self) -> None:
        for broker_id in BROKER_IDS:
            self.resume(broker_id)
            self.brokers[broker_id].kill()
            self.relays[broker_id].stop()
        if self._zk is not None:
            self._zk.close()
            self._zk = None

    # Process faults -------------------------------------------------------------------------

    def alive(self) -> list[int]:
        """Brokers whose process runs (paused ones included)."""
        return [b for b, broker in self.brokers.items() if broker.process is not None]

    def kill(self, broker_id: int) -> None:
        self.brokers[broker_id].kill()
        self.paused.discard(broker_id)

    def start_broker(
        self, broker_id: int, timeout_s: float = 3 * SESSION_TIMEOUT_MS / 1000
    ) -> None:
        """Start a killed broker once ZooKeeper has let its last session's registration go."""
        eventually(
            lambda: broker_id not in self.zk.get_all_brokers(),
            timeout_s=timeout_s,
            what=f"broker {broker_id}'s old registration expired",
        )
        self.brokers[broker_id].start()

    def pause(self, broker_id: int) -> None:
        process = self.brokers[broker_id].process
        if process is not None:
            os.kill(process.pid, signal.SIGSTOP)
            self.paused.add(broker_id)

    def resume(self, broker_id: int) -> None:
        process = self.brokers[broker_id].process
        if process is not None and broker_id in self.paused:
            os.kill(process.pid, signal.SIGCONT)
        self.paused.discard(broker_id)

    # What the controller decided -----------------------------------------------------------

    def registered(self) -> set[int]:
        return set(self.zk.get_all_brokers())

    def partition_state(self, topic: str, partition: int) -> LeaderAndIsr | None:
        tp = TopicPartition(topic, partition)
        return self.zk.get_partition_states([tp]).get(tp)

    def replicas(self, topic: str, partition: int) -> tuple[int, ...]:
        found = self.zk.get_topic_assignment(topic)
        if found is None:
            raise LookupError(f"topic {topic} has no assignment in ZooKeeper")
        return found[0].partitions[partition].replicas

    def wait_healthy(self, topic: str, partitions: int, timeout_s: float = 60.0) -> float:
        """Wait until every broker is registered and every partition has a leader and its
        full ISR; returns the seconds it took."""
        began = time.monotonic()

        def healthy() -> bool:
            if self.registered() != set(BROKER_IDS):
                return False
            for partition in range(partitions):
                state = self.partition_state(topic, partition)
                if state is None or state.leader < 0:
                    return False
                if set(state.isr) != set(self.replicas(topic, partition)):
                    return False
            return True

        eventually(healthy, timeout_s=timeout_s, what=f"{topic}: leaders and full ISRs")
        return time.monotonic() - began

    def __enter__(self) -> RelayedCluster:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
