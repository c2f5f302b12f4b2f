"""The Compose deployment's topology as local processes on loopback, without Docker.

    compose service           here
    security-init             the file's ``python -m embedded.certificates`` command (its
                              --dir under the root), the admin's client settings and the
                              brokers' ZooKeeper JAAS file where KAFKA_OPTS names it
    zookeeper-1..N            ``ZooKeeperEnsemble(size=N)`` from the pyspark jars (N and the
                              ids from ZOO_SERVERS), requiring SASL of the brokers' user
    minio, minio-init         moto's S3 server; the brokers' bucket created
    broker-1..3               ``storage-core broker`` with the file's --override values
                              (``compose_settings`` moves hosts, ports and paths), the file's
                              broker environment
    security-users            ``storage-core user-scram`` for its users and ``storage-core acls``
                              for the pipeline's least ACLs (the demo's, which the structural
                              test finds in the file's script), as the admin's certificate
    spark-master              ``spark-class org.apache.spark.deploy.master.Master``
    spark-worker              ``spark-class ...worker.Worker`` with the file's --cores, a small
                              --memory, the file's worker environment, this checkout on its
                              Python path (the image installs the project)
    airflow-scheduler         ``airflow dags test`` with the scheduler's connections, SPARK_MASTER
                              and bootstrap servers (SQLite instead of Postgres)

Every process leads its own process group and is stopped through it (Spark executors are the
worker's children, a job's Spark driver the task's), so ``stop`` leaves nothing behind.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import sys
import time
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Any

from embedded import certificates
from embedded.cluster_security import run_tools
from embedded.ports import free_port
from embedded.processes import ProcessGroup, group_alive, process_table, run_to_completion
from embedded.zookeeper import ZooKeeperEnsemble, write_private_file
from jobs.common.pipeline_acls import LEADER_ELECTION_ACLS, PIPELINE_ACLS, RESTORE_DRILL_ACLS
from storage_core.client import KafkaCluster
from storage_core.client.client_properties import write_client_properties
from storage_core.client.connection import ConnectionConfig
from storage_core.security.client_transport import ClientSecurityConfig
from tests.integration.deploy.compose_settings import (
    ComposeSettings,
    LoopbackPlaces,
    local_broker_environment,
    local_broker_props,
    local_certificates_argv,
    local_environment,
)
from tests.s3_server import S3Server

REPO = Path(__file__).resolve().parents[3]
START_TIMEOUT_S = 90.0
MIGRATE_TIMEOUT_S = 180.0
DAG_TIMEOUT_S = 300.0
STOP_GRACE_S = 20.0
SPARK_DAEMON_MEMORY = "256m"
SPARK_WORKER_MEMORY = "1g"  # an executor's default heap: the least a worker must offer
_PROBE = ConnectionConfig(connect_timeout_ms=1000, request_timeout_ms=5000)
_POLL_S = 0.5
ZOOKEEPER_USER = "kafka"  # the user of the brokers' ZooKeeper login in the file
# What the scheduler's environment gives the jobs, besides the Airflow settings of its own
# deployment (Postgres, the api-server's URL), which do not apply to ``airflow dags test``.
SCHEDULER_KEYS = (
    "AIRFLOW_CONN_TIERED_STORAGE_DEFAULT",
    "AIRFLOW_CONN_MINIO_S3",
    "SPARK_MASTER",
    "STORAGE_CORE_BOOTSTRAP_SERVER",
)


class TopologyStartError(RuntimeError):
    """A process of the topology did not start; the message carries the end of its log."""


def pyspark_home() -> Path:
    """The pyspark package, which is a Spark distribution (``bin/spark-class``, ``jars/``)."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise TopologyStartError("pyspark is not installed: install the pipeline extra")
    return Path(spec.origin).resolve().parent


def fetch_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.load(response)


class ComposeTopology:
    """The topology under ``root``; ``start`` brings it up in Compose's order."""

    def __init__(self, root: Path, settings: ComposeSettings) -> None:
        self.root = root.resolve()
        self.settings = settings
        self.zookeeper = ZooKeeperEnsemble(
            self.root / "zookeeper",
            size=len(settings.zookeeper_ids),
            sasl_users={ZOOKEEPER_USER: settings.zookeeper_password},
        )
        self.s3 = S3Server(self.root / "s3")
        self.spark_master_port = free_port()
        self.spark_webui_port = free_port()
        self.spark_worker_webui_port = free_port()
        broker_ids = sorted(settings.broker_props)
        listener_ports = {
            b: {
                entry.split("://", 1)[0]: free_port()
                for entry in settings.broker_props[b]["listeners"].split(",")
            }
            for b in broker_ids
        }
        self.places = LoopbackPlaces(
            root=self.root / "volumes",
            broker_ports={b: next(iter(ports.values())) for b, ports in listener_ports.items()},
            listener_ports=listener_ports,
            metrics_ports={b: free_port() for b in broker_ids},
            zookeeper_ports=dict(
                zip(
                    settings.zookeeper_ids,
                    (server.client_port for server in self.zookeeper.servers),
                    strict=True,
                )
            ),
            s3_endpoint=self.s3.endpoint_url,
            spark_master=f"spark://127.0.0.1:{self.spark_master_port}",
        )
        self.brokers: dict[int, ProcessGroup] = {}
        self.spark: list[ProcessGroup] = []
        self.migrate: ProcessGroup | None = None
        self.pgids: list[int] = []
        self.airflow_home = self.root / "airflow"

    # ------------------------------------------------------------------ addresses
    @property
    def bootstrap_servers(self) -> str:
        return ",".join(f"127.0.0.1:{p}" for p in self.places.broker_ports.values())

    @property
    def internal_bootstrap_servers(self) -> str:
        """Every broker's inter-broker listener, where the admin's certificate logs in."""
        return ",".join(f"127.0.0.1:{p}" for p in self._internal_ports().values())

    def _internal_ports(self) -> dict[int, int]:
        return {
            b: self.places.listener_ports[b][props["inter.broker.listener.name"]]
            for b, props in self.settings.broker_props.items()
        }

    @property
    def certificates_dir(self) -> Path:
        argv = local_certificates_argv(self.settings, self.places)
        return Path(argv[argv.index("--dir") + 1])

    @property
    def admin_client_config(self) -> Path:
        return self.certificates_dir / "admin-certificate.properties"

    def admin_confluent_config(self) -> dict[str, str]:
        """confluent-kafka's settings as the admin's certificate on the INTERNAL listener."""
        return {
            "bootstrap.servers": self.internal_bootstrap_servers,
            "security.protocol": "SSL",
            "ssl.ca.location": str(self.certificates_dir / "ca.pem"),
            "ssl.certificate.location": str(self.certificates_dir / "admin.cert.pem"),
            "ssl.key.location": str(self.certificates_dir / "admin.key.pem"),
        }

    @property
    def spark_webui(self) -> str:
        return f"http://127.0.0.1:{self.spark_webui_port}"

    @property
    def spark_worker_webui(self) -> str:
        return f"http://127.0.0.1:{self.spark_worker_webui_port}"

    def broker_props(self, broker_id: int) -> dict[str, str]:
        return local_broker_props(self.settings, self.places, broker_id)

    # ------------------------------------------------------------------ start
    def start(self) -> ComposeTopology:
        try:
            self.migrate = self._group(
                "airflow-db-migrate", [self._airflow(), "db", "migrate"], self.airflow_env()
            )
            self._security_init()
            self.zookeeper.start()
            self.s3.start()
            bucket = next(iter(self.settings.broker_props.values()))["rsm.config.s3.bucket.name"]
            self.s3.create_bucket(bucket)
            for broker_id in sorted(self.settings.broker_props):
                self._start_broker(broker_id)
            self._start_spark()
            self._wait_for_brokers()
            self._security_users()
            self._wait_for_spark()
            code = self.migrate.wait(MIGRATE_TIMEOUT_S)
            if code != 0:
                tail = self.migrate.tail()
                raise TopologyStartError(f"airflow db migrate exited {code}:\n{tail}")
        except BaseException:
            self.stop()
            raise
        return self

    def _security_init(self) -> None:
        """What the security-init service makes: certificates, the admin's client settings,
        the brokers' ZooKeeper login."""
        argv = local_certificates_argv(self.settings, self.places)
        if certificates.main(argv) != 0:
            raise TopologyStartError(f"python -m embedded.certificates {argv} failed")
        write_client_properties(
            self.admin_client_config,
            {
                "security.protocol": "SSL",
                "ssl.keystore.type": "PEM",
                "ssl.keystore.location": str(self.certificates_dir / "admin.keystore.pem"),
                "ssl.truststore.type": "PEM",
                "ssl.truststore.location": str(self.certificates_dir / "ca.pem"),
            },
        )
        opts = local_broker_environment(self.settings, self.places)["KAFKA_OPTS"]
        jaas = Path(opts.split("-Djava.security.auth.login.config=", 1)[1].split()[0])
        password = self.settings.zookeeper_password
        write_private_file(
            jaas,
            "Client {\n  org.apache.zookeeper.server.auth.DigestLoginModule required\n"
            f'  username="{ZOOKEEPER_USER}" password="{password}";\n}};\n',
        )

    def _security_users(self) -> None:
        """What the security-users service does: SCRAM users and the pipeline's ACLs."""
        log_path = self.root / "logs" / "security-users.log"
        internal = self.internal_bootstrap_servers
        config = str(self.admin_client_config)
        commands = []
        for user, password in self.settings.scram_passwords.items():
            password_file = self.root / "secrets" / user
            write_private_file(password_file, password + "\n")
            commands.append(
                [
                    "user-scram",
                    "--bootstrap-server",
                    internal,
                    "--command-config",
                    config,
                    "--add",
                    user,
                    "--mechanism",
                    "SCRAM-SHA-512",
                    "--password-file",
                    str(password_file),
                ]
            )
        acls = ["acls", "--bootstrap-server", internal, "--command-config", config, "--add"]
        commands += [
            [*acls, "--allow-principal", "User:pipeline", *acl.acls_arguments()]
            for acl in (*PIPELINE_ACLS, *LEADER_ELECTION_ACLS, *RESTORE_DRILL_ACLS)
        ]
        run_tools(commands, log_path)

    def _group(self, name: str, command: list[str], env: dict[str, str]) -> ProcessGroup:
        group = ProcessGroup(
            name, command, log_path=self.root / "logs" / f"{name}.log", env=env
        ).start()
        self.pgids.append(group.pid)
        return group

    def _start_broker(self, broker_id: int) -> None:
        directory = self.root / f"broker-{broker_id}"
        directory.mkdir(parents=True, exist_ok=True)
        config = directory / "server.properties"
        config.write_text("".join(f"{k}={v}\n" for k, v in self.broker_props(broker_id).items()))
        env = {
            **os.environ,
            **local_broker_environment(self.settings, self.places),
            "PYTHONPATH": self._pythonpath(),
        }
        command = [sys.executable, "-m", "storage_core.cli", "broker", "--config", str(config)]
        self.brokers[broker_id] = self._group(f"broker-{broker_id}", command, env)

    def _start_spark(self) -> None:
        home = pyspark_home()
        spark_class = str(home / "bin" / "spark-class")
        base = {
            **os.environ,
            "SPARK_HOME": str(home),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_DAEMON_MEMORY": SPARK_DAEMON_MEMORY,
        }
        master = [
            spark_class,
            "org.apache.spark.deploy.master.Master",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.spark_master_port),
            "--webui-port",
            str(self.spark_webui_port),
        ]
        self.spark.append(self._group("spark-master", master, base))
        worker = [
            spark_class,
            "org.apache.spark.deploy.worker.Worker",
            self.places.spark_master,
            "--host",
            "127.0.0.1",
            "--webui-port",
            str(self.spark_worker_webui_port),
            "--cores",
            self.settings.worker_option("--cores"),
            "--memory",
            SPARK_WORKER_MEMORY,
            "--work-dir",
            str(self.root / "spark-work"),
        ]
        worker_env = {
            **base,
            **local_environment(self.settings, self.places, self.settings.worker_env),
            # executors import jobs and storage_core from this checkout, with this interpreter
            "PYTHONPATH": self._pythonpath(),
            "PYSPARK_PYTHON": sys.executable,
        }
        self.spark.append(self._group("spark-worker", worker, worker_env))

    def _wait_for_brokers(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        count = len(self.brokers)
        for broker_id, port in self._internal_ports().items():
            while not self._answers(port, count, self._admin_probe()):
                group = self.brokers[broker_id]
                if group.exit_code() is not None or time.monotonic() > deadline:
                    raise TopologyStartError(
                        f"broker {broker_id} did not serve a cluster of {count}"
                        f" (exit {group.exit_code()}):\n{group.tail(3000)}"
                    )
                time.sleep(_POLL_S)

    def _admin_probe(self) -> ConnectionConfig:
        security = ClientSecurityConfig.from_properties(
            {
                "security.protocol": "SSL",
                "ssl.keystore.type": "PEM",
                "ssl.keystore.location": str(self.certificates_dir / "admin.keystore.pem"),
                "ssl.truststore.type": "PEM",
                "ssl.truststore.location": str(self.certificates_dir / "ca.pem"),
            }
        )
        return dataclasses.replace(_PROBE, security=security)

    @staticmethod
    def _answers(port: int, broker_count: int, config: ConnectionConfig) -> bool:
        try:
            with KafkaCluster(f"127.0.0.1:{port}", config=config) as cluster:
                metadata = cluster.refresh_metadata([])
        except Exception:  # not serving yet
            return False
        return len(metadata.brokers) == broker_count and metadata.controller_id >= 0

    def _wait_for_spark(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                state = fetch_json(f"{self.spark_webui}/json/")
                if state.get("status") == "ALIVE" and state.get("aliveworkers") == 1:
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise TopologyStartError(
                    "the Spark master has no live worker:\n"
                    + "\n".join(group.tail(2000) for group in self.spark)
                )
            time.sleep(_POLL_S)

    # ------------------------------------------------------------------ Airflow
    @staticmethod
    def _airflow() -> str:
        return str(Path(sys.executable).parent / "airflow")

    def _pythonpath(self) -> str:
        existing = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        return os.pathsep.join([str(REPO), *[p for p in existing if p != str(REPO)]])

    @property
    def reports_dir(self) -> Path:
        return self.root / "reports"

    def airflow_env(self) -> dict[str, str]:
        """The scheduler's job settings (moved onto loopback) on an Airflow of SQLite."""
        home = self.airflow_home
        home.mkdir(parents=True, exist_ok=True)
        scheduler = {k: self.settings.scheduler_env[k] for k in SCHEDULER_KEYS}
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "AWS_"))}
        env.update(
            {
                "PATH": os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")]),
                "PYTHONPATH": self._pythonpath(),
                "AIRFLOW_HOME": str(home),
                "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
                "AIRFLOW__CORE__PLUGINS_FOLDER": str(REPO / "plugins"),
                "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
                "AIRFLOW__CORE__PARALLELISM": "4",
                "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
                "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(home / "logs"),
                "TIERED_STORAGE_REPORTS_DIR": str(self.reports_dir),
                "TIERED_STORAGE_PROJECT_DIR": str(REPO),
                "STORAGE_CORE_JOBS_LOCK_DIR": str(self.root / "locks"),
                "SPARK_LOCAL_IP": "127.0.0.1",
                **local_environment(self.settings, self.places, scheduler),
            }
        )
        return env

    def run_dag(self, dag_id: str) -> tuple[int, str]:
        """``airflow dags test DAG_ID``: its exit code and the end of its output."""
        log_path = self.root / "logs" / f"airflow-dags-test-{dag_id}.log"
        code = run_to_completion(
            f"airflow dags test {dag_id}",
            [self._airflow(), "dags", "test", dag_id],
            log_path=log_path,
            env=self.airflow_env(),
            timeout_s=DAG_TIMEOUT_S,
            cwd=self.root,
        )
        return code, log_path.read_text(errors="replace")[-6000:]

    # ------------------------------------------------------------------ stop
    def stop(self) -> None:
        """Airflow's migration, Spark, the brokers (SIGTERM, then SIGKILL after a grace),
        the S3 server, ZooKeeper."""
        if self.migrate is not None:
            self.migrate.stop(grace_s=STOP_GRACE_S)
        for group in reversed(self.spark):
            group.stop(grace_s=STOP_GRACE_S)
        for group in self.brokers.values():
            group.stop(grace_s=STOP_GRACE_S)
        self.s3.stop()
        self.zookeeper.stop()

    def live_groups(self) -> list[int]:
        """The process groups started here that still have a live member."""
        groups = [*self.pgids, *(s.process.pid for s in self.zookeeper.servers if s.process)]
        if self.s3.process is not None:
            groups.append(os.getpgid(self.s3.process.pid))
        return [pgid for pgid in groups if group_alive(pgid)]

    def leftover_processes(self) -> list[str]:
        """Live processes (ours or their children, whatever their group) that run in or name
        the topology's directory: Spark executors and drivers, brokers, ZooKeeper, Airflow."""
        found = []
        for pid in process_table():
            proc = Path("/proc") / str(pid)
            try:
                command = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
                cwd = os.readlink(proc / "cwd")
            except OSError:  # gone meanwhile, or not ours to read
                continue
            if str(self.root) in command or cwd.startswith(str(self.root)):
                found.append(f"{pid}: {command[:200]} (in {cwd})")
        return found

    def __enter__(self) -> ComposeTopology:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
