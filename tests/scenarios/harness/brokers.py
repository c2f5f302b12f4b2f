"""Broker processes of one cluster on a real ZooKeeper, and what its controller wrote there.

A ``BrokerSet`` writes each broker's server.properties under ``<dir>/broker-<id>/`` (see
``tests.broker_process``) with ``zookeeper.connect`` under a fresh chroot of the ensemble, so
stories and rounds sharing one ZooKeeper server never see each other's brokers. ZooKeeper is
the source of truth for what the controller decided (registrations, partition states,
assignments), read with the project's ``KafkaZkClient``.

Process faults act on a broker's own process: ``kill`` (SIGKILL: nothing flushed or
checkpointed), ``pause`` (SIGSTOP: the process keeps its sockets and, for a while, its
ZooKeeper session), ``resume`` (SIGCONT), ``start_broker`` (a killed broker again).

A SIGKILLed broker keeps its registration until its session expires; the controller acts on
its death then. ``start_broker`` waits for that before starting the broker again, so the
controller has handled the death (elected, shrunk the ISR) before the broker is back. A
broker started at once would wait for its previous run's registration itself (it registers
when ZooKeeper deletes it), but then the death and the new registration reach the controller
together, as a bounced broker, and the stories' pictures and the chaos rounds' heal times
would be of that other sequence.
"""

from __future__ import annotations

import os
import signal
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Self

from embedded.zookeeper import ZooKeeperEnsemble
from storage_core.common import TopicPartition
from storage_core.zk.kafka_zk_client import KafkaZkClient
from storage_core.zk.zk_data import LeaderAndIsr
from tests.broker_process import BrokerProcess
from tests.cluster_support import eventually
from tests.process_pause import pause


class BrokerSet:
    """The brokers ``broker_ids`` of one cluster under a fresh chroot ``<chroot>-<random>``;
    ``settings`` go into every broker's server.properties (``zookeeper.session.timeout.ms``
    among them), then ``broker.id`` and ``zookeeper.connect``, then ``per_broker[id]``.
    Nothing runs until ``start``; ``stop`` SIGKILLs every broker."""

    def __init__(
        self,
        zookeeper: ZooKeeperEnsemble,
        directory: Path,
        broker_ids: Iterable[int],
        settings: Mapping[str, str],
        *,
        chroot: str,
        per_broker: Mapping[int, Mapping[str, str]] | None = None,
    ) -> None:
        self.connect = f"{zookeeper.connect_string}/{chroot}-{uuid.uuid4().hex[:8]}"
        self.brokers = {
            broker_id: BrokerProcess(
                directory / f"broker-{broker_id}",
                overrides={
                    **settings,
                    "broker.id": str(broker_id),
                    "zookeeper.connect": self.connect,
                    **(per_broker or {}).get(broker_id, {}),
                },
            )
            for broker_id in broker_ids
        }
        self.session_timeout_ms = int(settings["zookeeper.session.timeout.ms"])
        self.paused: set[int] = set()
        self._zk: KafkaZkClient | None = None

    # ------------------------------------------------------------------ lifecycle
    @property
    def zk(self) -> KafkaZkClient:
        if self._zk is None:
            self._zk = KafkaZkClient(
                self.connect,
                session_timeout_ms=self.session_timeout_ms,
                connection_timeout_ms=10_000,
            ).start()
        return self._zk

    def start(self) -> Self:
        """Every broker, in id order, each once it serves."""
        for broker in self.brokers.values():
            broker.start()
        return self

    def stop(self) -> None:
        for broker_id in self.brokers:
            self.resume(broker_id)
            self.brokers[broker_id].kill()
        if self._zk is not None:
            self._zk.close()
            self._zk = None

    def __enter__(self) -> Self:
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

    @property
    def bootstrap(self) -> str:
        """The brokers whose process runs and is not paused."""
        return ",".join(
            broker.bootstrap
            for broker_id, broker in self.brokers.items()
            if broker.process is not None and broker_id not in self.paused
        )

    def log_dir(self, broker_id: int) -> Path:
        return self.brokers[broker_id].log_dir

    def broker_log(self, broker_id: int) -> str:
        return self.brokers[broker_id].output_path.read_text(errors="replace")

    # ------------------------------------------------------------------ faults
    def alive(self) -> list[int]:
        """Brokers whose process runs (paused ones included)."""
        return [b for b, broker in self.brokers.items() if broker.process is not None]

    def status(self, broker_id: int) -> str:
        """``up``, ``paused`` (SIGSTOP) or ``down``."""
        if self.brokers[broker_id].process is None:
            return "down"
        return "paused" if broker_id in self.paused else "up"

    def kill(self, broker_id: int) -> None:
        """SIGKILL: nothing is flushed or checkpointed on the way out."""
        self.brokers[broker_id].kill()
        self.paused.discard(broker_id)

    def pause(self, broker_id: int) -> None:
        """SIGSTOP: the process keeps its sockets and (for a while) its ZooKeeper session."""
        process = self.brokers[broker_id].process
        if process is not None:
            pause(process.pid)
            self.paused.add(broker_id)

    def resume(self, broker_id: int) -> None:
        process = self.brokers[broker_id].process
        if process is not None and broker_id in self.paused:
            os.kill(process.pid, signal.SIGCONT)
        self.paused.discard(broker_id)

    def wait_deregistered(self, broker_id: int, timeout_s: float | None = None) -> None:
        """Until ZooKeeper let the broker's session go (the controller then acts on it);
        at most ``timeout_s``, three session timeouts unless given."""
        eventually(
            lambda: broker_id not in self.zk.get_all_brokers(),
            timeout_s=3 * self.session_timeout_ms / 1000 if timeout_s is None else timeout_s,
            what=f"broker {broker_id}'s registration expired",
        )

    def start_broker(self, broker_id: int, timeout_s: float | None = None) -> None:
        """Start a killed broker once its old registration is gone (waiting at most
        ``timeout_s``, see ``wait_deregistered``; the module docstring says why)."""
        self.wait_deregistered(broker_id, timeout_s)
        self.brokers[broker_id].start()
        eventually(
            lambda: broker_id in self.zk.get_all_brokers(), what=f"broker {broker_id} registered"
        )

    # ------------------------------------------------------------------ what ZooKeeper holds
    def registered(self) -> set[int]:
        return set(self.zk.get_all_brokers())

    def wait_registered(self, *, timeout_s: float = 30.0) -> None:
        """Until every broker of the set is registered."""
        eventually(
            lambda: self.registered() == set(self.brokers),
            timeout_s=timeout_s,
            what="every broker registered",
        )

    def wait_controller(self, broker_id: int) -> None:
        eventually(
            lambda: (c := self.zk.get_controller()) is not None and c.broker_id == broker_id,
            what=f"broker {broker_id} is the controller",
        )

    def partition_state(self, topic: str, partition: int = 0) -> LeaderAndIsr | None:
        """The partition's state as the controller wrote it (None: not written)."""
        tp = TopicPartition(topic, partition)
        return self.zk.get_partition_states([tp]).get(tp)

    def replicas(self, topic: str, partition: int) -> tuple[int, ...]:
        found = self.zk.get_topic_assignment(topic)
        if found is None:
            raise LookupError(f"topic {topic} has no assignment in ZooKeeper")
        return found[0].partitions[partition].replicas
