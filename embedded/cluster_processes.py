"""``ClusterProcesses``: ZooKeeper (one server or an ensemble) and N broker processes on loopback,
all under one directory, as ``python -m embedded.cluster`` runs them.

    <dir>/zookeeper/zookeeper-<n>/      zoo.cfg, data, zookeeper.log
    <dir>/broker-<id>/                  server.properties, kafka-logs, broker.log

Every broker reads Kafka's property names (``broker.id`` 1..N, ``listeners``, ``log.dirs``,
``zookeeper.connect`` with the chroot ``/storage-core``). The cluster counts as started once
every broker answers Metadata naming all N brokers and a controller; it stops brokers first
(SIGTERM: each resigns and closes its session), then ZooKeeper. On a reused directory the
registrations of brokers that were killed last time are waited out before the brokers start.

With a ``ClusterSecurity`` (embedded/cluster_security.py) ZooKeeper requires SASL, the brokers
log in to it and set znode ACLs, each broker serves a SASL_SSL client listener (``port``) and
an SSL inter-broker listener (``internal_port``), and authorizes with ACLs; the cluster counts
as started once every broker answers the admin's certificate on the inter-broker listener.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from types import TracebackType

from embedded.cluster_security import ClusterSecurity
from embedded.ports import free_port
from embedded.processes import ProcessGroup
from embedded.zookeeper import ZooKeeperEnsemble
from storage_core.client import KafkaCluster
from storage_core.client.connection import ConnectionConfig
from storage_core.zk.kafka_zk_client import KafkaZkClient

CHROOT = "/storage-core"
START_TIMEOUT_S = 60.0
BROKER_STOP_GRACE_S = 30.0
MAX_BROKERS = 16
MAX_ZOOKEEPER_NODES = 7
_POLL_S = 0.2
_PROBE = ConnectionConfig(connect_timeout_ms=1000, request_timeout_ms=5000)


class ClusterStartError(RuntimeError):
    """A broker did not come up; the message carries its last output."""


# Sessions within what the loopback ZooKeeper grants (2-20 ticks of 500 ms): a broker whose
# ZooKeeper server died reconnects to another member well inside its session.
BROKER_SETTINGS = {
    "num.partitions": "3",
    "offsets.topic.num.partitions": "6",
    "group.initial.rebalance.delay.ms": "0",
    "zookeeper.session.timeout.ms": "6000",
    "zookeeper.connection.timeout.ms": "10000",
}


class BrokerNode:
    """One broker of the cluster: its directory, port and process."""

    def __init__(
        self, directory: Path, *, broker_id: int, security: ClusterSecurity | None = None
    ) -> None:
        self.broker_id = broker_id
        self.directory = directory
        self.security = security
        self.port = free_port()
        self.internal_port = free_port() if security is not None else None
        self.config_path = directory / "server.properties"
        self.log_dir = directory / "kafka-logs"
        self.output_path = directory / "broker.log"
        self.process: ProcessGroup | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def internal_bootstrap(self) -> str:
        """The inter-broker listener (a secured cluster's), else the one listener."""
        port = self.internal_port if self.internal_port is not None else self.port
        return f"127.0.0.1:{port}"

    def write_config(self, settings: dict[str, str]) -> None:
        props = {
            "broker.id": str(self.broker_id),
            "listeners": f"PLAINTEXT://{self.bootstrap}",
            "log.dirs": str(self.log_dir),
            **settings,
        }
        if self.security is not None and self.internal_port is not None:
            props.update(
                self.security.broker_settings(
                    self.broker_id, client_port=self.port, internal_port=self.internal_port
                )
            )
        self.directory.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))

    def start(self) -> None:
        command = [sys.executable, "-m", "storage_core.cli", "broker"]
        self.process = ProcessGroup(
            f"broker-{self.broker_id}",
            [*command, "--config", str(self.config_path)],
            log_path=self.output_path,
            env=self._environment(),
            cwd=self.directory,
        ).start()

    def _environment(self) -> dict[str, str]:
        env = dict(os.environ)
        if self.security is not None:
            env.update(self.security.broker_environment())
        return env

    def exit_code(self) -> int | None:
        return None if self.process is None else self.process.exit_code()

    def answers(self, broker_count: int) -> bool:
        """Whether the broker answers Metadata with every broker and a controller."""
        config = _PROBE
        if self.security is not None:
            config = self.security.admin_certificate_config(
                connect_timeout_ms=_PROBE.connect_timeout_ms,
                request_timeout_ms=_PROBE.request_timeout_ms,
            )
        try:
            with KafkaCluster(self.internal_bootstrap, config=config) as cluster:
                metadata = cluster.refresh_metadata([])
        except Exception:  # not listening or not serving yet
            return False
        return len(metadata.brokers) == broker_count and metadata.controller_id >= 0

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop(grace_s=BROKER_STOP_GRACE_S)

    def kill(self) -> None:
        if self.process is not None:
            self.process.kill()


class ClusterProcesses:
    """ZooKeeper and ``brokers`` broker processes under ``directory``, started and stopped
    together; ``overrides`` go into every broker's ``server.properties``."""

    def __init__(
        self,
        directory: Path,
        *,
        brokers: int = 3,
        zookeeper_nodes: int = 1,
        overrides: dict[str, str] | None = None,
        security: ClusterSecurity | None = None,
    ) -> None:
        if not 1 <= brokers <= MAX_BROKERS:
            raise ValueError(f"--brokers must be between 1 and {MAX_BROKERS}, not {brokers}")
        if not 1 <= zookeeper_nodes <= MAX_ZOOKEEPER_NODES:
            raise ValueError(
                f"--zookeeper-nodes must be between 1 and {MAX_ZOOKEEPER_NODES},"
                f" not {zookeeper_nodes}"
            )
        self.directory = directory.resolve()
        self.security = security
        self.zookeeper = ZooKeeperEnsemble(
            self.directory / "zookeeper",
            size=zookeeper_nodes,
            sasl_users=security.zookeeper_users() if security is not None else None,
        )
        self.brokers = [
            BrokerNode(
                self.directory / f"broker-{broker_id}", broker_id=broker_id, security=security
            )
            for broker_id in range(1, brokers + 1)
        ]
        replication = str(min(3, brokers))
        self.settings = {
            **BROKER_SETTINGS,
            "zookeeper.connect": self.zookeeper_connect,
            "offsets.topic.replication.factor": replication,
            **(overrides or {}),
        }
        if security is not None:
            self.settings["super.users"] = security.super_users([b.broker_id for b in self.brokers])

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers)

    @property
    def internal_bootstrap_servers(self) -> str:
        return ",".join(b.internal_bootstrap for b in self.brokers)

    @property
    def zookeeper_connect(self) -> str:
        """``zookeeper.connect`` of the brokers: every ZooKeeper server, then the chroot."""
        return f"{self.zookeeper.connect_string}{CHROOT}"

    def start(self, timeout_s: float = START_TIMEOUT_S) -> ClusterProcesses:
        self.zookeeper.start()
        try:
            self.wait_for_stale_registrations()
            for broker in self.brokers:
                broker.write_config(self.settings)
                broker.start()
            self.wait_until_serving(timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def wait_for_stale_registrations(self) -> None:
        """A reused directory may hold the sessions of brokers that were killed: ZooKeeper
        restores them with their ``/brokers/ids/<id>``, which would refuse the brokers' ids
        until the sessions expire. Wait for that (bounded); the brokers report what is left."""
        session_ms = int(self.settings["zookeeper.session.timeout.ms"])
        client = KafkaZkClient(
            self.zookeeper_connect,
            session_timeout_ms=session_ms,
            connection_timeout_ms=int(self.settings["zookeeper.connection.timeout.ms"]),
            sasl_login=self.security.zookeeper_login() if self.security is not None else None,
            set_acl=self.security is not None,
        ).start()
        try:
            deadline = time.monotonic() + 2 * session_ms / 1000
            while client.get_all_brokers() and time.monotonic() < deadline:
                time.sleep(_POLL_S)
        finally:
            client.close()

    def wait_until_serving(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        waiting = list(self.brokers)
        while waiting:
            for broker in waiting:
                if broker.exit_code() is not None:
                    raise ClusterStartError(
                        f"broker {broker.broker_id} exited with {broker.exit_code()} at start;"
                        f" see {broker.output_path}:\n{_tail(broker)}"
                    )
            waiting = [b for b in waiting if not b.answers(len(self.brokers))]
            if waiting and time.monotonic() > deadline:
                raise ClusterStartError(
                    f"broker {waiting[0].broker_id} did not answer within {timeout_s:.0f} s;"
                    f" see {waiting[0].output_path}:\n{_tail(waiting[0])}"
                )
            if waiting:
                time.sleep(_POLL_S)

    def stop(self) -> None:
        """Brokers first (SIGTERM each: it resigns and closes its session), then ZooKeeper."""
        for broker in self.brokers:
            broker.stop()
        self.zookeeper.stop()

    def __enter__(self) -> ClusterProcesses:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _tail(broker: BrokerNode) -> str:
    return broker.process.tail(2000) if broker.process is not None else ""
