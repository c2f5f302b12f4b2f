"""The settings of ``docker-compose.yml`` that the process topology runs with, and how they are
moved from the Compose network onto loopback.

Read from the file (its defaults taken, as ``docker compose up`` with no ``.env`` would): each
broker's ``--override`` values, the ZooKeeper ensemble (``ZOO_SERVERS``: its ids and client
ports) and the brokers' chroot, the environment of the brokers, of the Spark worker and of the
Airflow scheduler (which runs the jobs), with the two connections in it.

Moved, and only these: a ``host:port`` of a Compose service becomes the matching local process's
``127.0.0.1:port`` (each listener of each broker, ZooKeeper nodes, MinIO -> the S3 server, the
Spark master), a listener on ``0.0.0.0`` is bound to 127.0.0.1, ``metrics.port`` takes a free
port (three brokers share one host), and a container path ``/x/y`` becomes ``<root>/x/y`` (the
broker's log dirs, its key and trust stores, the JAAS file of its ``KAFKA_OPTS``, and the
connection's ``broker_log_dirs`` and ``ssl_ca_location`` through the same rule, so the
connection is right here only if it is right in the file). The one-shot ``security-init`` and
``security-users`` services are read for what they make: the certificates command, the
passwords' variables, the users. Anything else is used as the file says. A value still naming a
Compose service as ``host:port`` after the move fails, naming the setting: a new host-bearing
setting in the file must be moved here too.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from storage_core.zk.zookeeper_client import split_chroot
from tests.compose_file import broker_props, environment, load_services, zookeeper_servers

TIERED_CONNECTION = "AIRFLOW_CONN_TIERED_STORAGE_DEFAULT"
SCHEDULER = "airflow-scheduler"
SPARK_WORKER = "spark-worker"
S3_SERVICE = "minio"
SPARK_MASTER_SERVICE = "spark-master"


class ComposeRemapError(AssertionError):
    """A setting of docker-compose.yml still names a Compose service after the move to
    loopback: move that setting in ``compose_settings`` too."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ComposeSettings:
    """What ``docker-compose.yml`` configures, as the file says it (container hosts and paths)."""

    services: Mapping[str, Mapping[str, Any]]
    broker_props: Mapping[int, Mapping[str, str]]  # broker id -> every --override
    broker_services: Mapping[int, str]  # broker id -> service (and host) name
    broker_env: Mapping[str, str]  # the brokers' environment (alike on all)
    zookeeper_ids: tuple[int, ...]  # ZOO_SERVERS' ids (= each node's ZOO_MY_ID)
    zookeeper_hosts: Mapping[str, int]  # "host:client port" -> server id
    chroot: str  # the brokers' zookeeper.connect chroot
    scheduler_env: Mapping[str, str]
    worker_env: Mapping[str, str]
    worker_command: tuple[str, ...]
    certificates_argv: tuple[str, ...]  # security-init's ``python -m embedded.certificates``
    zookeeper_password: str  # the brokers' ZooKeeper login (user ``kafka``)
    scram_passwords: Mapping[str, str]  # security-users' users and their passwords

    @property
    def tiered_connection(self) -> dict[str, Any]:
        value: dict[str, Any] = json.loads(self.scheduler_env[TIERED_CONNECTION])
        return value

    def worker_option(self, name: str) -> str:
        return self.worker_command[self.worker_command.index(name) + 1]


def read_compose() -> ComposeSettings:
    services = load_services()
    props: dict[int, dict[str, str]] = {}
    names: dict[int, str] = {}
    envs = []
    for name, service in sorted(services.items()):
        if "broker" not in service.get("entrypoint", []):
            continue
        broker = broker_props(service)
        broker_id = int(broker["broker.id"])
        props[broker_id] = broker
        names[broker_id] = name
        envs.append(environment(service))
    assert props, "docker-compose.yml has no broker service"
    assert all(env == envs[0] for env in envs), "the brokers' environments differ"
    nodes = [s for s in services.values() if "ZOO_SERVERS" in environment(s)]
    assert nodes, "docker-compose.yml has no ZooKeeper node"
    ensemble = zookeeper_servers(nodes[0])
    chroots = {split_chroot(p["zookeeper.connect"])[1] for p in props.values()}
    assert len(chroots) == 1, f"the brokers use different chroots: {chroots}"
    init_script = services["security-init"]["entrypoint"][-1]
    (certificates,) = re.findall(
        r"python -m embedded\.certificates (.*?)(?: &&|$)", init_script, re.S
    )
    users_script = services["security-users"]["entrypoint"][-1]
    users_env = environment(services["security-users"])
    return ComposeSettings(
        services=services,
        broker_props=props,
        broker_services=names,
        broker_env=envs[0],
        zookeeper_ids=tuple(sorted(ensemble)),
        zookeeper_hosts={f"{s.host}:{s.client_port}": i for i, s in ensemble.items()},
        chroot=chroots.pop(),
        scheduler_env=environment(services[SCHEDULER]),
        worker_env=environment(services[SPARK_WORKER]),
        worker_command=tuple(services[SPARK_WORKER]["command"]),
        certificates_argv=tuple(certificates.split()),
        zookeeper_password=environment(services["security-init"])["ZOOKEEPER_KAFKA_PASSWORD"],
        scram_passwords={
            user: users_env[f"KAFKA_{user.upper()}_PASSWORD"]
            for user in re.findall(r"for user in ([\w ]+?); do", users_script)[0].split()
        },
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class LoopbackPlaces:
    """Where each Compose service lives here: ports on 127.0.0.1 and a root for paths."""

    root: Path
    broker_ports: Mapping[int, int]  # broker id -> its first listener's port (clients')
    listener_ports: Mapping[int, Mapping[str, int]]  # broker id -> listener name -> port
    metrics_ports: Mapping[int, int]
    zookeeper_ports: Mapping[int, int]  # server id -> client port
    s3_endpoint: str  # http://127.0.0.1:port
    spark_master: str  # spark://127.0.0.1:port
    hosts: dict[str, str] = field(default_factory=dict)  # "service:port" -> "127.0.0.1:port"

    def local_path(self, container_path: str) -> Path:
        """``/x/y`` in a container -> ``<root>/x/y`` here."""
        return self.root.joinpath(*PurePosixPath(container_path).parts[1:])


def host_map(settings: ComposeSettings, places: LoopbackPlaces) -> dict[str, str]:
    """Every Compose ``service:port`` the settings use -> its ``127.0.0.1:port`` here."""
    found = {}
    for broker_id, props in settings.broker_props.items():
        for advertised in props["advertised.listeners"].split(","):
            name, hostport = advertised.split("://", 1)
            found[hostport] = f"127.0.0.1:{places.listener_ports[broker_id][name]}"
    for host, server_id in settings.zookeeper_hosts.items():
        found[host] = f"127.0.0.1:{places.zookeeper_ports[server_id]}"
    s3 = next(iter(settings.broker_props.values()))["rsm.config.s3.endpoint.url"]
    found[s3.split("//", 1)[1]] = places.s3_endpoint.split("//", 1)[1]
    master = settings.scheduler_env["SPARK_MASTER"]
    found[master.split("//", 1)[1]] = places.spark_master.split("//", 1)[1]
    return found


def move_hosts(text: str, hosts: Mapping[str, str]) -> str:
    for compose_host, local in hosts.items():
        text = re.sub(rf"(?<![\w.-]){re.escape(compose_host)}(?!\d)", local, text)
    return text


def check_moved(name: str, value: str, services: Mapping[str, Any]) -> None:
    for service in services:
        if re.search(rf"(?<![\w/.-]){re.escape(service)}:\d", value):
            raise ComposeRemapError(
                f"{name}={value!r} still names the Compose service {service}: move it in"
                " tests/integration/deploy/compose_settings.py"
            )


def local_broker_props(
    settings: ComposeSettings, places: LoopbackPlaces, broker_id: int
) -> dict[str, str]:
    """Broker ``broker_id``'s ``--override`` values, moved onto loopback."""
    hosts = host_map(settings, places)
    props = {}
    for key, raw in settings.broker_props[broker_id].items():
        if key == "listeners":
            value = ",".join(
                f"{name}://127.0.0.1:{places.listener_ports[broker_id][name]}"
                for name in (entry.split("://", 1)[0] for entry in raw.split(","))
            )
        elif key.endswith(".location"):  # ssl.keystore.location, ssl.truststore.location
            value = str(places.local_path(raw))
        elif key == "log.dirs":
            value = ",".join(str(places.local_path(p)) for p in raw.split(","))
        elif key == "metrics.host":
            value = "127.0.0.1"
        elif key == "metrics.port":
            value = str(places.metrics_ports[broker_id])
        else:
            value = move_hosts(raw, hosts)
        check_moved(key, value, settings.services)
        props[key] = value
    return props


def local_tiered_connection(settings: ComposeSettings, places: LoopbackPlaces) -> dict[str, Any]:
    """The scheduler's ``tiered_storage_default`` connection, moved onto loopback."""
    conn = settings.tiered_connection
    hosts = host_map(settings, places)
    conn["host"] = move_hosts(conn["host"], hosts)
    extra = dict(conn["extra"])
    dirs = extra.get("broker_log_dirs")
    if not dirs:
        raise ComposeRemapError(
            f"{TIERED_CONNECTION} has no extra.broker_log_dirs: the jobs would not know every"
            " broker's log dirs"
        )
    if isinstance(dirs, str):  # the jobs' ID=DIR[,DIR];... form
        extra["broker_log_dirs"] = ";".join(
            f"{entry.split('=', 1)[0]}="
            + ",".join(str(places.local_path(d)) for d in entry.split("=", 1)[1].split(","))
            for entry in dirs.split(";")
        )
    else:
        extra["broker_log_dirs"] = {
            broker: [str(places.local_path(d)) for d in _dir_list(listed)]
            for broker, listed in dirs.items()
        }
    extra["rsm_config"] = {k: move_hosts(v, hosts) for k, v in extra["rsm_config"].items()}
    if extra.get("ssl_ca_location"):
        extra["ssl_ca_location"] = str(places.local_path(extra["ssl_ca_location"]))
    conn["extra"] = extra
    check_moved(TIERED_CONNECTION, json.dumps(conn), settings.services)
    return conn


def local_environment(
    settings: ComposeSettings, places: LoopbackPlaces, env: Mapping[str, str]
) -> dict[str, str]:
    """A service's environment with every ``AIRFLOW_CONN_*`` and host moved onto loopback."""
    hosts = host_map(settings, places)
    moved = {}
    for key, raw in env.items():
        if key == TIERED_CONNECTION:
            moved[key] = json.dumps(local_tiered_connection(settings, places))
        elif key.startswith("AIRFLOW_CONN_"):
            moved[key] = json.dumps(_move_json(json.loads(raw), hosts))
        else:
            moved[key] = move_hosts(raw, hosts)
    return moved


def local_broker_environment(settings: ComposeSettings, places: LoopbackPlaces) -> dict[str, str]:
    """The brokers' environment, the JAAS file of ``KAFKA_OPTS`` moved under the root."""
    env = dict(settings.broker_env)
    if "KAFKA_OPTS" in env:
        env["KAFKA_OPTS"] = re.sub(
            r"(-Djava\.security\.auth\.login\.config=)(\S+)",
            lambda m: m.group(1) + str(places.local_path(m.group(2))),
            env["KAFKA_OPTS"],
        )
    return env


def local_certificates_argv(settings: ComposeSettings, places: LoopbackPlaces) -> list[str]:
    """security-init's certificates command, its ``--dir`` moved under the root."""
    argv = list(settings.certificates_argv)
    at = argv.index("--dir") + 1
    argv[at] = str(places.local_path(argv[at]))
    return argv


def _dir_list(listed: Any) -> list[str]:
    if isinstance(listed, str):
        return [d.strip() for d in listed.split(",") if d.strip()]
    return [str(d) for d in listed]


def _move_json(value: Any, hosts: Mapping[str, str]) -> Any:
    if isinstance(value, str):
        return move_hosts(value, hosts)
    if isinstance(value, dict):
        return {k: _move_json(v, hosts) for k, v in value.items()}
    if isinstance(value, list):
        return [_move_json(v, hosts) for v in value]
    return value
