"""``EmbeddedCluster``: ZooKeeper and three brokers on loopback sharing one remote tier.

The embedded default is a replicated cluster, run by ``ClusterProcesses``
(embedded/cluster_processes.py): one ZooKeeper server and brokers 1, 2 and 3, each
``storage-core broker`` with Kafka's property names (``server.properties`` in
``<dir>/broker-<id>``) and tiered storage switched on (``LocalTieredStorage`` under
``<dir>/remote-tier``, which every broker shares). Topics are replicated three times and a
write with acks=all needs two in-sync replicas, so one broker may go down without losing an
acknowledged record. Restarting on an existing directory keeps every topic and record (log
dirs, ZooKeeper's data, the remote tier); only the ports are chosen afresh.

The cluster is secured as embedded/cluster_security.py says: ZooKeeper requires SASL, clients
authenticate with SCRAM-SHA-512 over TLS (``bootstrap_server`` is the SASL_SSL listener), the
brokers talk TLS with certificates, and ACLs decide. Once the brokers serve, the users' SCRAM
credentials and the pipeline's and the demo's ACLs are created through the brokers (output in
``<dir>/logs/security-setup.log``); the Airflow connection carries the pipeline's login.

``python -m embedded.cluster`` runs ``ClusterProcesses`` with any number of brokers until
Ctrl-C (embedded/cluster_command.py).
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from embedded.cluster_processes import BrokerNode, ClusterProcesses, ClusterStartError
from embedded.cluster_security import PIPELINE, ClusterSecurity, run_tools
from storage_core.client.connection import ConnectionConfig

__all__ = ["ClusterStartError", "EmbeddedCluster"]

BROKERS = 3
REPLICATION_FACTOR = 3
MIN_INSYNC_REPLICAS = 2
BROKER_RESTART_TIMEOUT_S = 60.0
MARKER = ".storage-core-embedded"
_POLL_S = 0.2

# Short intervals so a demo sees the broker's tiering side effects (local retention after a
# copy, the log start offset after an expiry) within seconds, not the production minutes.
BROKER_SETTINGS = {
    "default.replication.factor": str(REPLICATION_FACTOR),
    "min.insync.replicas": str(MIN_INSYNC_REPLICAS),
    "offsets.topic.replication.factor": str(REPLICATION_FACTOR),
    "offsets.topic.num.partitions": "4",
    "remote.log.storage.system.enable": "true",
    "remote.log.storage.manager.class.name": "LocalTieredStorage",
    "remote.log.metadata.topic.num.partitions": "3",
    "remote.log.metadata.topic.replication.factor": str(REPLICATION_FACTOR),
    "remote.log.manager.task.interval.ms": "1000",
    "log.retention.check.interval.ms": "1000",
    "log.segment.delete.delay.ms": "0",
}


class EmbeddedCluster:
    """ZooKeeper, brokers 1-3 and the remote tier of the embedded default, under
    ``directory``."""

    def __init__(self, directory: Path, *, topic: str = "events") -> None:
        self.directory = directory.resolve()
        self.remote_dir = self.directory / "remote-tier"
        self.topic = topic
        self.security = ClusterSecurity(self.directory)
        self.processes = ClusterProcesses(
            self.directory,
            brokers=BROKERS,
            overrides={
                **BROKER_SETTINGS,
                **{f"rsm.config.{k}": v for k, v in self.rsm_config().items()},
            },
            security=self.security,
        )

    @property
    def brokers(self) -> list[BrokerNode]:
        return self.processes.brokers

    @property
    def bootstrap_server(self) -> str:
        """Every broker, ``HOST:PORT`` comma-separated."""
        return self.processes.bootstrap_servers

    @property
    def zookeeper_connect(self) -> str:
        return self.processes.zookeeper_connect

    def admin_config(self, **base: Any) -> ConnectionConfig:
        """``storage_core`` client settings as the admin (a super user)."""
        return self.security.connection_config(**base)

    def client_config_path(self, user: str) -> Path:
        """``user``'s client.properties (``--command-config``, 0600)."""
        return self.security.client_config_path(user)

    def broker(self, broker_id: int) -> BrokerNode:
        for node in self.brokers:
            if node.broker_id == broker_id:
                return node
        raise ValueError(f"no broker {broker_id}: the embedded cluster has brokers 1-{BROKERS}")

    def broker_log_dirs(self) -> dict[int, list[str]]:
        """broker id -> its log dirs, as the jobs read each partition from its leader's."""
        return {node.broker_id: [str(node.log_dir)] for node in self.brokers}

    def rsm_config(self) -> dict[str, str]:
        return {"local.storage.dir": str(self.remote_dir)}

    def start(self) -> EmbeddedCluster:
        self.remote_dir.mkdir(parents=True, exist_ok=True)
        (self.directory / MARKER).touch()
        self.processes.start()
        try:
            self.create_users_and_acls()
        except BaseException:
            self.processes.stop()
            raise
        return self

    def create_users_and_acls(self) -> None:
        """The users' SCRAM credentials, then the pipeline's and the demo's ACLs (adding an
        ACL that exists changes nothing, so a restarted cluster does this again)."""
        log_path = self.directory / "logs" / "security-setup.log"
        self.security.create_users(self.processes.brokers[0].internal_bootstrap, log_path)
        commands = self.security.acl_commands(self.bootstrap_server, topic=self.topic)
        run_tools(commands, log_path)
        self.security.client_config_path(PIPELINE)  # for running a job by hand

    def kill_broker(self, broker_id: int) -> None:
        """SIGKILL one broker, as a crash: no clean shutdown, its ZooKeeper session left to
        expire."""
        self.broker(broker_id).kill()

    def restart_broker(self, broker_id: int, timeout_s: float = BROKER_RESTART_TIMEOUT_S) -> None:
        """Start a stopped broker again on its directory and port; returns once it answers
        Metadata naming every broker."""
        node = self.broker(broker_id)
        if node.exit_code() is None and node.process is not None:
            raise ClusterStartError(f"broker {broker_id} is running: stop or kill it first")
        node.start()
        deadline = time.monotonic() + timeout_s
        while not node.answers(len(self.brokers)):
            if node.exit_code() is not None:
                raise ClusterStartError(
                    f"broker {broker_id} exited with {node.exit_code()} on restart;"
                    f" see {node.output_path}"
                )
            if time.monotonic() > deadline:
                raise ClusterStartError(
                    f"broker {broker_id} did not answer within {timeout_s:.0f} s of its"
                    f" restart; see {node.output_path}"
                )
            time.sleep(_POLL_S)

    def stop(self) -> None:
        """The brokers (SIGTERM: each flushes, checkpoints and resigns), then ZooKeeper."""
        self.processes.stop()

    def connection(self) -> dict[str, Any]:
        """The ``tiered_storage_default`` Airflow connection (JSON form) for this cluster:
        every broker as a bootstrap server, every broker's log dirs, and the pipeline's login
        (SASL_SSL, SCRAM-SHA-512, the CA)."""
        security = self.security.connection_fields()
        return {
            "conn_type": "generic",
            "host": self.bootstrap_server,
            "login": security["login"],
            "password": security["password"],
            "extra": {
                "broker_log_dirs": {str(b): dirs for b, dirs in self.broker_log_dirs().items()},
                "remote_storage_manager": "LocalTieredStorage",
                "rsm_config": self.rsm_config(),
                **security["extra"],
            },
        }

    def connection_uri_json(self) -> str:
        return json.dumps(self.connection())

    def __enter__(self) -> EmbeddedCluster:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def prepare_directory(directory: Path, *, fresh: bool) -> None:
    """Create ``directory``; with ``fresh``, empty one that an earlier run created.

    A directory that holds anything else is refused: the demo never deletes what it did not
    make."""
    if directory.exists() and any(directory.iterdir()):
        if not (directory / MARKER).exists():
            raise DirectoryInUseError(
                f"{directory} exists and was not created by the embedded cluster:"
                " choose another --dir or remove it"
            )
        if fresh:
            shutil.rmtree(directory)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / MARKER).touch()


class DirectoryInUseError(RuntimeError):
    """The working directory holds files the embedded cluster did not create."""


if __name__ == "__main__":
    from embedded.cluster_command import main

    raise SystemExit(main())
