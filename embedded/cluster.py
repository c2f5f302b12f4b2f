"""``EmbeddedCluster``: one broker process on loopback whose remote tier is a local directory.

The broker runs ``storage-core broker`` with Kafka's property names (``server.properties`` in
``<dir>/broker-0``) and tiered storage switched on (``LocalTieredStorage`` under
``<dir>/remote-tier``). Restarting it on an existing directory keeps every topic and record:
the log dir, topic metadata and remote tier persist; only the port is chosen afresh.

This is the demo's one-broker cluster (its metadata in the broker's own log dir). Several
brokers on ZooKeeper are ``ClusterProcesses`` (embedded/cluster_processes.py), which
``python -m embedded.cluster`` runs until Ctrl-C (embedded/cluster_command.py).
"""

from __future__ import annotations

import json
import shutil
import socket
import sys
import time
from pathlib import Path
from typing import Any

from embedded.processes import ProcessGroup

BROKER_START_TIMEOUT_S = 30.0
MARKER = ".storage-core-embedded"

# Short intervals so a demo sees the broker's tiering side effects (local retention after a
# copy, the log start offset after an expiry) within seconds, not the production minutes.
BROKER_SETTINGS = {
    "broker.id": "0",
    "num.partitions": "1",
    "offsets.topic.num.partitions": "4",
    "group.initial.rebalance.delay.ms": "0",
    "remote.log.storage.system.enable": "true",
    "remote.log.storage.manager.class.name": "LocalTieredStorage",
    "remote.log.metadata.topic.num.partitions": "3",
    "remote.log.manager.task.interval.ms": "1000",
    "log.retention.check.interval.ms": "1000",
    "log.segment.delete.delay.ms": "0",
}


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class EmbeddedCluster:
    """The broker and the remote tier of the embedded default, under ``directory``."""

    def __init__(self, directory: Path, *, port: int | None = None) -> None:
        self.directory = directory.resolve()
        self.port = port or free_port()
        self.broker_dir = self.directory / "broker-0"
        self.log_dir = self.broker_dir / "kafka-logs"
        self.config_path = self.broker_dir / "server.properties"
        self.remote_dir = self.directory / "remote-tier"
        self.broker: ProcessGroup | None = None

    @property
    def bootstrap_server(self) -> str:
        return f"127.0.0.1:{self.port}"

    def rsm_config(self) -> dict[str, str]:
        return {"local.storage.dir": str(self.remote_dir)}

    def write_config(self) -> None:
        props = {
            **BROKER_SETTINGS,
            "listeners": f"PLAINTEXT://{self.bootstrap_server}",
            "log.dirs": str(self.log_dir),
            **{f"rsm.config.{k}": v for k, v in self.rsm_config().items()},
        }
        self.broker_dir.mkdir(parents=True, exist_ok=True)
        self.remote_dir.mkdir(parents=True, exist_ok=True)
        (self.directory / MARKER).touch()
        self.config_path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))

    def start(self) -> EmbeddedCluster:
        self.write_config()
        self.broker = ProcessGroup(
            "broker-0",
            [sys.executable, "-m", "storage_core.cli", "broker", "--config", str(self.config_path)],
            log_path=self.broker_dir / "broker.log",
        ).start()
        deadline = time.monotonic() + BROKER_START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.broker.exit_code() is not None:
                raise ClusterStartError(
                    f"the broker exited with {self.broker.exit_code()} at start:\n"
                    f"{self.broker.tail()}"
                )
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return self
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise ClusterStartError(
            f"the broker did not listen on {self.bootstrap_server} within"
            f" {BROKER_START_TIMEOUT_S:.0f} s; see {self.broker_dir / 'broker.log'}"
        )

    def stop(self) -> None:
        """SIGTERM: the broker flushes, checkpoints and leaves its clean-shutdown marker."""
        if self.broker is not None:
            self.broker.stop()
            self.broker = None

    def connection(self) -> dict[str, Any]:
        """The ``tiered_storage_default`` Airflow connection (JSON form) for this cluster."""
        return {
            "conn_type": "generic",
            "host": "127.0.0.1",
            "port": self.port,
            "extra": {
                "log_dirs": [str(self.log_dir)],
                "broker_config": str(self.config_path),
                "remote_storage_manager": "LocalTieredStorage",
                "rsm_config": self.rsm_config(),
            },
        }

    def connection_uri_json(self) -> str:
        return json.dumps(self.connection())

    def __enter__(self) -> EmbeddedCluster:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


class ClusterStartError(RuntimeError):
    """The embedded broker did not come up; the message carries its last output."""


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
