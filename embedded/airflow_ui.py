"""The Airflow UI over the embedded cluster: every DAG can be triggered from the browser.

    python -m embedded.airflow_ui [--dir demo-data] [--port 8080]

Starts the embedded cluster (ZooKeeper and three brokers, ``EmbeddedCluster``, secured as
the demo's: SASL_SSL for clients, the pipeline as User:pipeline) on the working
directory (its topics and records are kept from an earlier run, e.g. the demo's; a new
directory gets the demo topic, replicated three times, with some records so the DAGs have
work), then ``airflow standalone`` (api-server on 127.0.0.1, scheduler, dag-processor,
triggerer; SQLite; parallelism 4) in its own process group. Once the UI answers it prints
where to log in. Ctrl-C or SIGTERM stops Airflow's whole process group, then the brokers and
ZooKeeper. DAGs start paused, as Airflow creates them: unpause one or trigger it from the UI.
"""

from __future__ import annotations

import argparse
import json
import signal
import socket
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import FrameType

from embedded import airflow_env
from embedded.cluster import REPLICATION_FACTOR, EmbeddedCluster, prepare_directory
from embedded.cluster_security import DEMO_CLIENT, PIPELINE
from embedded.processes import ProcessGroup
from embedded.workload import produce
from storage_core.client import KafkaAdminClient, KafkaCluster

READY_TIMEOUT_S = 240.0
DEMO_TOPIC = "events"
SAMPLE_RECORDS_PER_PARTITION = 2000
PASSWORDS_FILE = "simple_auth_manager_passwords.json.generated"


class AirflowUiError(RuntimeError):
    """Airflow did not come up, or stopped on its own; the message says where its output is."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m embedded.airflow_ui",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--dir", type=Path, default=Path("demo-data"), help="working directory")
    parser.add_argument("--port", type=int, default=8080, help="the UI and REST API port")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        serve(args.dir, port=args.port)
    except KeyboardInterrupt:
        print("Stopped Airflow, the brokers and ZooKeeper.", flush=True)
        return 0
    except (AirflowUiError, OSError, RuntimeError) as e:
        print(f"airflow_ui FAILED: {e}", file=sys.stderr, flush=True)
        return 1
    return 0


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def serve(directory: Path, *, port: int) -> None:
    directory = directory.resolve()
    _check_port_free(port)
    prepare_directory(directory, fresh=False)
    with EmbeddedCluster(directory, topic=DEMO_TOPIC) as cluster:
        print(
            f"brokers on {cluster.bootstrap_server}; remote tier {cluster.remote_dir}", flush=True
        )
        print(
            f"SASL_SSL (SCRAM-SHA-512); the pipeline's client settings:"
            f" {cluster.client_config_path(PIPELINE)}",
            flush=True,
        )
        _ensure_demo_topic(cluster)
        env = airflow_env.airflow_environment(directory, cluster, api_port=port)
        log_path = directory / "logs" / "airflow-standalone.log"
        standalone = ProcessGroup(
            "airflow standalone",
            [str(Path(sys.executable).with_name("airflow")), "standalone"],
            log_path=log_path,
            env=env,
        ).start()
        try:
            _wait_until_healthy(standalone, port, log_path)
            home = airflow_env.airflow_home(directory)
            print(
                f"Airflow UI ready: http://127.0.0.1:{port}/ (user admin, password in"
                f" {home / PASSWORDS_FILE}); tiered-storage status:"
                f" http://127.0.0.1:{port}/tiered-storage/",
                flush=True,
            )
            print(f"Airflow output: {log_path}. Ctrl-C stops everything.", flush=True)
            while standalone.exit_code() is None:
                time.sleep(0.5)
            raise AirflowUiError(
                f"airflow standalone exited with {standalone.exit_code()}; see {log_path}"
            )
        finally:
            standalone.stop()


def _check_port_free(port: int) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the api-server binds
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            raise AirflowUiError(f"port {port} is in use: choose another with --port") from None


def _ensure_demo_topic(cluster: EmbeddedCluster) -> None:
    with KafkaCluster(cluster.bootstrap_server, config=cluster.admin_config()) as kafka:
        admin = KafkaAdminClient(kafka)
        if DEMO_TOPIC in admin.list_topics():
            return
        admin.create_topic(
            DEMO_TOPIC,
            num_partitions=3,
            replication_factor=REPLICATION_FACTOR,
            configs={"remote.storage.enable": "true", "segment.bytes": str(256 * 1024)},
        )
    count = produce(
        cluster.bootstrap_server,
        DEMO_TOPIC,
        partitions=3,
        records_per_partition=SAMPLE_RECORDS_PER_PARTITION,
        security=cluster.security.kafka_python(DEMO_CLIENT),
    )
    print(f"created topic {DEMO_TOPIC} with {count} records", flush=True)


def _wait_until_healthy(standalone: ProcessGroup, port: int, log_path: Path) -> None:
    url = f"http://127.0.0.1:{port}/api/v2/monitor/health"
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if standalone.exit_code() is not None:
            raise AirflowUiError(
                f"airflow standalone exited with {standalone.exit_code()} while starting;"
                f" see {log_path}:\n{standalone.tail(2000)}"
            )
        if _healthy(url):
            return
        time.sleep(1.0)
    raise AirflowUiError(f"Airflow was not healthy within {READY_TIMEOUT_S:.0f} s; see {log_path}")


def _healthy(url: str) -> bool:
    """The api-server answers and reports the scheduler healthy."""
    try:
        with urllib.request.urlopen(url, timeout=2.0) as response:  # noqa: S310 (loopback URL)
            health = json.loads(response.read())
    except (urllib.error.URLError, OSError, ValueError):
        return False
    return bool(health.get("scheduler", {}).get("status") == "healthy")


if __name__ == "__main__":
    raise SystemExit(main())
