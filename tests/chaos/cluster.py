"""Three broker processes on a real ZooKeeper, each behind its own ``KafkaRelay``: the broker
listens on its own port and advertises the relay's, so clients and followers' fetchers all go
through the relays. What the controller decided (leaders, ISR, assignments, registrations) is
read from ZooKeeper, the source of truth, with the project's ``KafkaZkClient``.

    <dir>/broker-<id>/   server.properties, kafka-logs, broker.log

Process faults act on the broker's own process: ``kill`` (SIGKILL), ``pause`` (SIGSTOP),
``resume`` (SIGCONT), ``start_broker``; they, and the reads of ZooKeeper, are the scenario
harness's ``BrokerSet`` (``tests.scenarios.harness.brokers``). A broker SIGKILLed keeps its
registration until its session expires; ``start_broker`` waits that out before starting it,
so that a round's heal starts from a controller that has handled the death (the broker would
wait for it itself, but then its death and its new registration reach the controller
together, as a bounced broker).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Self

from embedded.ports import free_port
from embedded.zookeeper import ZooKeeperEnsemble
from tests.chaos.tcp_relay import KafkaRelay
from tests.cluster_support import eventually
from tests.scenarios.harness.brokers import BrokerSet

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


class RelayedCluster(BrokerSet):
    """Brokers 1-3 under a fresh chroot of ``zookeeper``, each behind a relay."""

    def __init__(
        self,
        zookeeper: ZooKeeperEnsemble,
        directory: Path,
        *,
        overrides: dict[str, str] | None = None,
    ) -> None:
        relay_ports = {broker_id: free_port() for broker_id in BROKER_IDS}
        super().__init__(
            zookeeper,
            directory,
            BROKER_IDS,
            {**SETTINGS, **(overrides or {})},
            chroot="jepsen",
            per_broker={
                broker_id: {"advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}"}
                for broker_id, port in relay_ports.items()
            },
        )
        self.relays = {
            broker_id: KafkaRelay(target_port=self.brokers[broker_id].port, port=port)
            for broker_id, port in relay_ports.items()
        }

    @property
    def bootstrap(self) -> str:
        """Every relay: what clients are given."""
        return ",".join(relay.bootstrap for relay in self.relays.values())

    def start(self) -> Self:
        for broker_id in BROKER_IDS:
            self.relays[broker_id].start()
            self.brokers[broker_id].start()
        self.wait_registered(timeout_s=30)
        return self

    def stop(self) -> None:
        super().stop()
        for relay in self.relays.values():
            relay.stop()

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
