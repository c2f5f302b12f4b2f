"""The scale-out deployment (``docker-compose.yml`` and ``Dockerfile``), checked without Docker.

Nothing here needs a Docker engine or starts a container (no engine runs on the machines this
was written on). What can be checked without one is checked: the file parses (with compose's
``${VAR:-default}`` substitution, no variable set), the services and their images, health
checks and start order, the ZooKeeper ensemble (ids, servers, health through its own
client) and the one cluster the brokers form on it (every broker names every node, the
replication settings), the brokers' log volumes (read-write on the broker, read-only on the
Spark worker and on the Airflow scheduler, which runs the Spark driver), the broker settings
through ``KafkaConfig``, the Airflow connection through the plugin's ``ClusterSettings`` (every
broker, every broker's log dirs as the readers mount them, the brokers' remote tier), and
that every environment variable of ours that the file sets is one the code reads (found by
searching the source, so renaming a variable in the code fails here). ``docker compose
config`` runs only where the compose CLI exists.

Lives beside the Airflow tests because it imports the plugin (the session fixture there sets
Airflow's environment before anything imports ``airflow``).
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import subprocess
import tomllib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from packaging.requirements import Requirement

from embedded.certificates import main as certificates_main
from jobs.common.pipeline_acls import LEADER_ELECTION_ACLS, PIPELINE_ACLS, RESTORE_DRILL_ACLS
from storage_core.cli import _build_parser
from storage_core.security.kafka_principal import SecurityProtocol
from storage_core.security.ssl_principal_mapper import SslPrincipalMapper
from storage_core.server.kafka_config import KafkaConfig
from storage_core.tiered.rsm_loader import RSM_CLASS_ALIASES
from storage_core.tiered.s3_remote_storage_config import S3RemoteStorageConfig
from tests.compose_file import (
    COMPOSE_FILE,
    broker_argv,
    broker_props,
    environment,
    image_tag,
    mounts,
    substituted,
    zookeeper_servers,
)

REPO = Path(__file__).resolve().parents[3]
DOCKERFILE = REPO / "Dockerfile"
PYPROJECT = REPO / "pyproject.toml"
# Where the code that reads environment variables lives (tests excluded).
SOURCE_DIRS = ("storage_core", "jobs", "embedded", "expectations", "dags", "plugins")

BROKERS = ("broker-1", "broker-2", "broker-3")
ZOOKEEPERS = ("zookeeper-1", "zookeeper-2", "zookeeper-3")
AIRFLOW_SERVICES = {
    "airflow-api-server": "api-server",
    "airflow-scheduler": "scheduler",
    "airflow-dag-processor": "dag-processor",
    "airflow-triggerer": "triggerer",
}
ONE_SHOT = ("minio-init", "airflow-init", "security-init", "security-users")
SERVICES = {
    "postgres",
    "minio",
    "spark-master",
    "spark-worker",
    *ZOOKEEPERS,
    *BROKERS,
    *AIRFLOW_SERVICES,
    *ONE_SHOT,
}
# LocalExecutor: tasks, hence the jobs and their Spark driver, run in the scheduler.
AIRFLOW_WORKER = "airflow-scheduler"
SPARK_WORKER = "spark-worker"
TIERED_CONNECTION = "AIRFLOW_CONN_TIERED_STORAGE_DEFAULT"
# Settings that differ between the brokers; everything else must be the same on all three.
PER_BROKER_KEYS = {"broker.id", "advertised.listeners", "log.dirs", "ssl.keystore.location"}
# The cluster's replication: every partition on all three brokers, acks=all needing two.
REPLICATION = {
    "default.replication.factor": 3,
    "min.insync.replicas": 2,
    "offsets.topic.replication.factor": 3,
    "remote.log.metadata.topic.replication.factor": 3,
}
# The keys the Compose Specification allows (compose-spec/schema/compose-spec.json), to catch
# a misspelt key that YAML and these tests would otherwise read past.
TOP_LEVEL_KEYS = {"version", "name", "include", "services", "models", "networks", "volumes"}
TOP_LEVEL_KEYS |= {"secrets", "configs"}
SERVICE_KEYS = set(
    """develop deploy annotations attach build blkio_config cap_add cap_drop cgroup
    cgroup_parent command configs container_name cpu_count cpu_percent cpu_shares cpu_quota
    cpu_period cpu_rt_period cpu_rt_runtime cpus cpuset credential_spec depends_on
    device_cgroup_rules devices dns dns_opt dns_search domainname entrypoint env_file
    label_file environment expose extends provider external_links extra_hosts gpus group_add
    healthcheck hostname image init ipc isolation labels links logging mac_address mem_limit
    mem_reservation mem_swappiness memswap_limit network_mode models networks oom_kill_disable
    oom_score_adj pid pids_limit platform ports post_start pre_stop privileged profiles
    pull_policy pull_refresh_after read_only restart runtime scale security_opt shm_size
    secrets sysctls stdin_open stop_grace_period stop_signal storage_opt tmpfs tty ulimits
    use_api_socket user uts userns_mode volumes
    volumes_from working_dir""".split()  # noqa: SIM905 (a word list)
)
HEALTHCHECK_KEYS = {"disable", "interval", "retries", "test", "timeout", "start_period"}
HEALTHCHECK_KEYS |= {"start_interval"}
BUILD_KEYS = {"context", "dockerfile", "args", "target", "labels", "tags", "platforms"}
OUR_VARIABLE = re.compile(r"(STORAGE_CORE_|TIERED_STORAGE_|AIRFLOW_CONN_)[A-Z0-9_]+|SPARK_MASTER")
SECRET_NAME = re.compile(r"PASSWORD|SECRET|FERNET|ACCESS_KEY|_KEY$|SQL_ALCHEMY_CONN")
CLIENT_LISTENER = "CLIENT"
CERTIFICATES_DIR = "/etc/storage-core/certs"
ADMIN_CERTIFICATE_PROPERTIES = f"{CERTIFICATES_DIR}/admin-certificate.properties"


# ---------------------------------------------------------------------------- the file
@pytest.fixture(scope="module")
def raw() -> dict[str, Any]:
    """The file as YAML reads it (anchors and ``<<`` merges resolved, variables not)."""
    document = yaml.safe_load(COMPOSE_FILE.read_text())
    assert isinstance(document, dict)
    return document


@pytest.fixture(scope="module")
def services(raw: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return substituted(raw)["services"]


def broker_log_dirs(services: Mapping[str, Mapping[str, Any]]) -> dict[int, tuple[str, ...]]:
    """Every broker's id and log dirs as its own configuration says."""
    found = {}
    for broker in BROKERS:
        config = KafkaConfig.from_props(broker_props(services[broker]))
        found[config.broker_id] = tuple(str(path) for path in config.log_dirs())
    return found


# ---------------------------------------------------------------------------- the Dockerfile
@pytest.fixture(scope="module")
def dockerfile() -> str:
    assert DOCKERFILE.is_file(), "the deployment builds the project image from ./Dockerfile"
    return DOCKERFILE.read_text()


def dockerfile_args(text: str) -> dict[str, str]:
    return dict(re.findall(r"^ARG (\w+)=(\S+)$", text, flags=re.MULTILINE))


def pyproject() -> dict[str, Any]:
    return tomllib.loads(PYPROJECT.read_text())


def pipeline_requirement(name: str) -> Requirement:
    for line in pyproject()["project"]["optional-dependencies"]["pipeline"]:
        requirement = Requirement(line)
        if requirement.name == name:
            return requirement
    raise AssertionError(f"{name} is not in the pipeline extra")


# ---------------------------------------------------------------------------- the source
def source_text() -> Iterator[str]:
    for directory in SOURCE_DIRS:
        for path in sorted((REPO / directory).rglob("*.py")):
            yield path.read_text()


def variables_read_by_the_code() -> list[re.Pattern[str]]:
    """Names of ours that the code spells out, as patterns (``TIERED_STORAGE_{dag_id}_...``
    templates become ``TIERED_STORAGE_[A-Z0-9_]+_...``)."""
    literal = re.compile(r"[\"']((?:STORAGE_CORE|TIERED_STORAGE)_[\w{}]+|SPARK_MASTER)[\"']")
    names = {name for text in source_text() for name in literal.findall(text)}
    return [
        re.compile(r"[A-Z0-9_]+".join(map(re.escape, re.split(r"\{\w*\}", name)))) for name in names
    ]


def string_literals() -> set[str]:
    return {s for text in source_text() for s in re.findall(r"\"([\w.-]+)\"", text)}


# ---------------------------------------------------------------------------- the services
def test_services_of_the_scale_out_deployment(services: dict[str, dict[str, Any]]) -> None:
    assert set(services) == SERVICES
    for name, subcommand in AIRFLOW_SERVICES.items():
        assert services[name]["command"] == [subcommand], name
    assert services["airflow-init"]["command"] == ["db", "migrate"]
    master = services["spark-master"]["command"]
    assert "org.apache.spark.deploy.master.Master" in master
    worker = services[SPARK_WORKER]["command"]
    assert worker[:2] == ["spark-class", "org.apache.spark.deploy.worker.Worker"]
    assert worker[2] == f"spark://spark-master:{master[master.index('--port') + 1]}"
    for broker in BROKERS:
        assert broker_argv(services[broker])[0] == "broker"
    for node in ZOOKEEPERS:
        assert "command" not in services[node], f"{node} runs the image's own zkServer.sh"


def test_keys_are_compose_spec_keys(raw: dict[str, Any]) -> None:
    assert {k for k in raw if not k.startswith("x-")} <= TOP_LEVEL_KEYS
    for name, service in raw["services"].items():
        assert set(service) <= SERVICE_KEYS, f"{name}: {set(service) - SERVICE_KEYS}"
        assert set(service.get("healthcheck") or {}) <= HEALTHCHECK_KEYS, name
        assert set(service.get("build") or {}) <= BUILD_KEYS, name
        for target, rule in (service.get("depends_on") or {}).items():
            assert set(rule) <= {"condition", "required", "restart"}, f"{name} -> {target}"
        for key in ("command", "entrypoint"):
            assert isinstance(service.get(key, []), list), f"{name}: {key} in exec form"
    for volume, options in raw["volumes"].items():
        assert options is None, f"{volume}: a plain named volume"


def test_every_variable_has_a_local_default_and_secrets_can_be_replaced(
    raw: dict[str, Any],
) -> None:
    substituted(raw)  # raises on a variable without a default
    for name, service in raw["services"].items():
        for key, value in environment(service).items():
            if SECRET_NAME.search(key):
                assert "${" in value, f"{name}: {key} must come from a variable (${{X:-dev}})"
    aws = json.loads(environment(raw["services"][AIRFLOW_WORKER])["AIRFLOW_CONN_MINIO_S3"])
    assert "${" in aws["login"]
    assert "${" in aws["password"]


def test_environment_values_are_strings(services: dict[str, dict[str, Any]]) -> None:
    """Compose rejects booleans in ``environment``; YAML turns a bare true into one."""
    for name, service in services.items():
        for key, value in environment(service).items():
            assert isinstance(value, str), f"{name}: {key} should be quoted, got {value!r}"


def test_long_running_services_have_health_checks(services: dict[str, dict[str, Any]]) -> None:
    for name, service in services.items():
        if name in ONE_SHOT:
            assert service.get("restart") == "no", f"{name} runs once"
            continue
        check = service.get("healthcheck")
        assert check, f"{name} has no healthcheck"
        assert not check.get("disable", False), name
        test = check["test"]
        assert test[0] in ("CMD", "CMD-SHELL") and len(test) > 1, f"{name}: {test}"
        assert service.get("restart") == "unless-stopped", name


def test_health_checks_ask_each_service_itself(services: dict[str, dict[str, Any]]) -> None:
    def check(name: str) -> str:
        return " ".join(services[name]["healthcheck"]["test"][1:])

    assert "pg_isready" in check("postgres")
    assert check("minio") == "mc ready local"
    assert "/api/v2/monitor/health" in check("airflow-api-server")
    assert "8974/health" in check("airflow-scheduler")
    assert "--job-type DagProcessorJob" in check("airflow-dag-processor")
    assert "--job-type TriggererJob" in check("airflow-triggerer")
    assert "8080/json/" in check("spark-master")
    assert "8081/json/" in check(SPARK_WORKER)
    for node in ZOOKEEPERS:
        # srvr through the image's client: a Mode only once the node serves (with a quorum)
        assert services[node]["healthcheck"]["test"] == ["CMD", "zkServer.sh", "status"]
        assert "srvr" in environment(services[node])["ZOO_4LW_COMMANDS_WHITELIST"].split(",")
    for broker in BROKERS:
        # a DescribeAcls round trip as the admin's certificate on the INTERNAL listener
        test = services[broker]["healthcheck"]["test"][1:]
        assert test[0] == "storage-core"
        args = _build_parser().parse_args(test[1:])
        assert args.command == "acls" and args.list
        props = broker_props(services[broker])
        (internal,) = [
            listener
            for listener in KafkaConfig.from_props(props).listeners()
            if listener.listener_name == props["inter.broker.listener.name"]
        ]
        assert args.bootstrap_server == f"127.0.0.1:{internal.port}"
        assert str(args.command_config) == ADMIN_CERTIFICATE_PROPERTIES


def test_start_order_waits_for_health_or_completion(services: dict[str, dict[str, Any]]) -> None:
    for name, service in services.items():
        depends_on = service.get("depends_on") or {}
        assert isinstance(depends_on, dict), f"{name}: depends_on needs conditions"
        for target, rule in depends_on.items():
            assert target in services, f"{name} depends on unknown {target}"
            expected = "service_completed_successfully" if target in ONE_SHOT else "service_healthy"
            assert rule.get("condition") == expected, f"{name} -> {target}"
    scheduler = services[AIRFLOW_WORKER]["depends_on"]
    assert {"airflow-init", "airflow-api-server", SPARK_WORKER} <= set(scheduler)
    worker = services[SPARK_WORKER]["depends_on"]
    assert {"spark-master", *BROKERS} <= set(worker)
    for broker in BROKERS:
        assert "minio-init" in services[broker]["depends_on"], "the bucket exists first"
        assert set(ZOOKEEPERS) <= set(services[broker]["depends_on"]), (
            f"{broker} starts once every ZooKeeper node serves"
        )


def test_images_are_pinned(services: dict[str, dict[str, Any]]) -> None:
    version = pyproject()["project"]["version"]
    for name, service in services.items():
        assert "image" in service, f"{name} names its image"
        image, tag = image_tag(service["image"])
        assert tag, f"{name}: {service['image']} has no tag"
        assert tag != "latest" and not tag.startswith("latest-"), f"{name}: {service['image']}"
        if "build" in service:
            assert (image, tag) == ("storage-core", version), f"{name} builds the project image"
            assert service["build"]["dockerfile"] == "Dockerfile"
            assert service["build"].get("context", ".") == "."
    assert image_tag(services["postgres"]["image"]) == ("postgres", "16")
    assert image_tag(services["spark-master"]["image"])[0] == "apache/spark"
    assert image_tag(services["minio"]["image"])[0].endswith("minio/minio")
    assert image_tag(services["minio-init"]["image"])[0].endswith("minio/mc")
    for node in ZOOKEEPERS:
        name, tag = image_tag(services[node]["image"])
        assert name == "zookeeper", f"{node} runs the official image"
        assert re.fullmatch(r"\d+\.\d+\.\d+", tag), f"{node}: pin a release, not {tag!r}"
    assert len({services[node]["image"] for node in ZOOKEEPERS}) == 1, "one ZooKeeper release"
    project = {*BROKERS, SPARK_WORKER, *AIRFLOW_SERVICES, "airflow-init"}
    project |= {"security-init", "security-users"}
    assert {name for name, s in services.items() if "build" in s} == project


# ---------------------------------------------------------------------------- brokers
def test_broker_settings_are_known_to_kafka_config(
    services: dict[str, dict[str, Any]], caplog: pytest.LogCaptureFixture
) -> None:
    shared: dict[str, str] | None = None
    ids = set()
    for broker in BROKERS:
        props = broker_props(services[broker])
        with caplog.at_level(logging.WARNING, logger="storage_core.server.kafka_config"):
            caplog.clear()
            config = KafkaConfig.from_props(props)
        assert not caplog.records, f"{broker}: {[r.getMessage() for r in caplog.records]}"
        ids.add(config.broker_id)
        for advertised, listener in zip(
            config.advertised_listeners(), config.listeners(), strict=True
        ):
            assert advertised.host == broker, "clients reach the broker by its service name"
            assert advertised.port == listener.port
        assert config.get_bool("remote.log.storage.system.enable")
        rsm_class = config.get_string("remote.log.storage.manager.class.name")
        assert rsm_class == "S3RemoteStorageManager" and rsm_class in RSM_CLASS_ALIASES
        rsm = S3RemoteStorageConfig.from_config(
            {k: v for k, v in props.items() if k.startswith("rsm.config.")}
        )
        assert rsm.endpoint_url == "http://minio:9000" and rsm.path_style_access
        assert rsm.key_prefix, "the cluster's objects under one key prefix"
        common = {k: v for k, v in props.items() if k not in PER_BROKER_KEYS}
        assert shared is None or common == shared, f"{broker} is configured unlike the others"
        shared = common
    assert len(ids) == len(BROKERS), "broker ids are distinct"


# ---------------------------------------------------------------------------- one cluster
def test_zookeeper_ensemble_ids_and_servers_agree(services: dict[str, dict[str, Any]]) -> None:
    ids = {}
    listed = None
    for node in ZOOKEEPERS:
        env = environment(services[node])
        ids[node] = int(env["ZOO_MY_ID"])
        servers = zookeeper_servers(services[node])
        assert listed is None or servers == listed, f"{node} lists another ensemble"
        listed = servers
        assert env["ZOO_STANDALONE_ENABLED"] == "false", f"{node} is a member, never alone"
    assert listed is not None
    assert sorted(ids.values()) == sorted(listed) == list(range(1, len(ZOOKEEPERS) + 1))
    for node, my_id in ids.items():
        assert listed[my_id].host == services[node]["hostname"] == node, (
            f"server.{my_id} is {node}, the node whose ZOO_MY_ID is {my_id}"
        )
    assert len(listed) % 2 == 1, "an odd ensemble: a majority survives one node down"


def test_zookeeper_nodes_keep_their_data_on_their_own_volumes(
    raw: dict[str, Any], services: dict[str, dict[str, Any]]
) -> None:
    owners: dict[str, str] = {}
    for node in ZOOKEEPERS:
        targets = {m.target: m for m in mounts(services[node])}
        assert {"/data", "/datalog"} <= set(targets), f"{node}: snapshots and transaction log"
        for target in ("/data", "/datalog"):
            mount = targets[target]
            assert not mount.read_only and mount.source in raw["volumes"], f"{node}: {target}"
            assert mount.source not in owners, f"{mount.source} is shared with {owners}"
            owners[mount.source] = node
    for name, service in services.items():
        if name not in ZOOKEEPERS:
            assert not {m.source for m in mounts(service)} & set(owners), name


def test_every_broker_names_every_zookeeper_node_under_one_chroot(
    services: dict[str, dict[str, Any]],
) -> None:
    from storage_core.zk.zookeeper_client import split_chroot

    ensemble = zookeeper_servers(services[ZOOKEEPERS[0]])
    nodes = {f"{s.host}:{s.client_port}" for s in ensemble.values()}
    chroots = set()
    for broker in BROKERS:
        connect = KafkaConfig.from_props(broker_props(services[broker])).get_string(
            "zookeeper.connect"
        )
        hosts, chroot = split_chroot(connect)
        assert set(hosts.split(",")) == nodes, f"{broker}: {hosts} is not the whole ensemble"
        assert chroot not in ("", "/"), f"{broker}: the cluster lives under a chroot"
        chroots.add(chroot)
    assert len(chroots) == 1, f"the brokers are one cluster, not {len(chroots)}: {chroots}"


def test_replication_settings_of_the_cluster(services: dict[str, dict[str, Any]]) -> None:
    for broker in BROKERS:
        config = KafkaConfig.from_props(broker_props(services[broker]))
        for name, value in REPLICATION.items():
            if name == "min.insync.replicas":  # a topic default: read through LogConfig
                assert config.log_config().min_insync_replicas == value, f"{broker}: {name}"
            else:
                assert config.get_int(name) == value, f"{broker}: {name}"
    factor = REPLICATION["default.replication.factor"]
    assert factor == len(BROKERS), "every partition on every broker"
    assert 1 < REPLICATION["min.insync.replicas"] < factor, "acks=all survives one broker down"


def test_the_brokers_share_one_remote_tier(services: dict[str, dict[str, Any]]) -> None:
    tiers = {
        broker: {
            k: v for k, v in broker_props(services[broker]).items() if k.startswith("rsm.config.")
        }
        for broker in BROKERS
    }
    assert len({tuple(sorted(tier.items())) for tier in tiers.values()}) == 1, tiers


def test_bucket_of_the_brokers_is_created_by_the_init_job(
    services: dict[str, dict[str, Any]],
) -> None:
    script = " ".join(services["minio-init"]["entrypoint"])
    for broker in BROKERS:
        bucket = broker_props(services[broker])["rsm.config.s3.bucket.name"]
        assert f"mc mb --ignore-existing local/{bucket}" in script
    assert "mc alias set local http://minio:9000" in script
    for broker in BROKERS:
        env = environment(services[broker])
        assert env["AWS_ACCESS_KEY_ID"] == environment(services["minio"])["MINIO_ROOT_USER"]


def test_log_volumes_are_written_by_their_broker_and_read_by_spark(
    raw: dict[str, Any], services: dict[str, dict[str, Any]]
) -> None:
    readers = (SPARK_WORKER, AIRFLOW_WORKER)
    for broker in BROKERS:
        (log_dir,) = KafkaConfig.from_props(broker_props(services[broker])).log_dirs()
        own = [m for m in mounts(services[broker]) if log_dir.is_relative_to(m.target)]
        assert len(own) == 1, f"{broker}: {log_dir} is on one volume"
        volume = own[0]
        assert not volume.read_only, f"{broker} writes its log dir"
        assert volume.source in raw["volumes"], f"{volume.source} is a named volume"
        for reader in readers:
            (mount,) = [m for m in mounts(services[reader]) if m.source == volume.source]
            assert mount.target == volume.target, f"{reader} sees {broker}'s files at its path"
            assert mount.read_only, f"{reader} mounts {volume.source} read-only"
        for other in set(services) - {broker, *readers}:
            assert volume.source not in {m.source for m in mounts(services[other])}, other


def test_the_connections_log_dirs_are_where_the_readers_mount_them(
    services: dict[str, dict[str, Any]],
) -> None:
    """The jobs read broker N's files at the paths the connection gives for N: on the driver
    (the scheduler) and on the executors (the Spark worker), each path on N's own volume."""
    from tiered_storage_plugin.hooks import ClusterSettings

    conn = json.loads(environment(services[AIRFLOW_WORKER])[TIERED_CONNECTION])
    settings = ClusterSettings.from_connection(
        host=conn.get("host"),
        port=conn.get("port"),
        extra=conn.get("extra", {}),
        login=conn.get("login"),
        password=conn.get("password"),
    )
    volume_of = {}
    for broker in BROKERS:
        config = KafkaConfig.from_props(broker_props(services[broker]))
        (own,) = [
            m for m in mounts(services[broker]) if config.log_dirs()[0].is_relative_to(m.target)
        ]
        volume_of[config.broker_id] = own.source
    assert set(settings.broker_log_dirs) == set(volume_of)
    for reader in (SPARK_WORKER, AIRFLOW_WORKER):
        for broker_id, dirs in settings.broker_log_dirs.items():
            for log_dir in dirs:
                (mount,) = [
                    m for m in mounts(services[reader]) if Path(log_dir).is_relative_to(m.target)
                ]
                assert mount.source == volume_of[broker_id], (
                    f"{reader}: {log_dir} (broker {broker_id}) is on {mount.source}"
                )
                assert mount.read_only, f"{reader} reads broker {broker_id}'s files only"


# ---------------------------------------------------------------------------- Airflow and jobs
def test_tiered_storage_connection_is_accepted_by_the_plugin(
    services: dict[str, dict[str, Any]],
) -> None:
    from tiered_storage_plugin.hooks import ClusterSettings

    env = environment(services[AIRFLOW_WORKER])
    conn = json.loads(env[TIERED_CONNECTION])
    settings = ClusterSettings.from_connection(
        host=conn.get("host"),
        port=conn.get("port"),
        extra=conn.get("extra", {}),
        login=conn.get("login"),
        password=conn.get("password"),
    )
    advertised = []
    for broker in BROKERS:
        (listener,) = [
            listener
            for listener in KafkaConfig.from_props(
                broker_props(services[broker])
            ).advertised_listeners()
            if listener.listener_name == CLIENT_LISTENER
        ]
        advertised.append(f"{listener.host}:{listener.port}")
    assert settings.bootstrap_servers == tuple(advertised), "every broker bootstraps the jobs"
    assert env["STORAGE_CORE_BOOTSTRAP_SERVER"] == settings.bootstrap_server
    assert settings.log_dirs == (), "the cluster's form: broker_log_dirs, not one broker's"
    assert dict(settings.broker_log_dirs) == broker_log_dirs(services), (
        "every broker's log dirs under its own broker id"
    )
    props = broker_props(services["broker-1"])
    assert settings.remote_storage_manager == props["remote.log.storage.manager.class.name"]
    assert dict(settings.rsm_config) == {
        k.removeprefix("rsm.config."): v for k, v in props.items() if k.startswith("rsm.config.")
    }, "the jobs write where the brokers read"
    assert settings.aws_conn_id
    aws = json.loads(env[f"AIRFLOW_CONN_{settings.aws_conn_id.upper()}"])
    assert aws["conn_type"] == "aws"
    assert aws["extra"]["endpoint_url"] == settings.rsm_config["s3.endpoint.url"]
    assert aws["login"] == environment(services["minio"])["MINIO_ROOT_USER"]
    assert aws["password"] == environment(services["minio"])["MINIO_ROOT_PASSWORD"]


def test_environment_names_of_ours_are_read_by_the_code(
    services: dict[str, dict[str, Any]],
) -> None:
    patterns = variables_read_by_the_code()
    literals = string_literals()
    connections = {
        name: value
        for service in services.values()
        for name, value in environment(service).items()
        if name.startswith("AIRFLOW_CONN_")
    }
    referenced = {
        json.loads(value).get("extra", {}).get("aws_conn_id") for value in connections.values()
    }
    checked = set()
    for name, service in services.items():
        for key in environment(service):
            if not OUR_VARIABLE.fullmatch(key):
                continue
            checked.add(key)
            if key.startswith("AIRFLOW_CONN_"):
                conn_id = key.removeprefix("AIRFLOW_CONN_").lower()
                assert conn_id in literals or conn_id in referenced, (
                    f"{name}: {key} is a connection no code and no other connection uses"
                )
            else:
                assert any(p.fullmatch(key) for p in patterns), (
                    f"{name}: {key} is read nowhere in {', '.join(SOURCE_DIRS)}"
                )
    assert {
        TIERED_CONNECTION,
        "SPARK_MASTER",
        "TIERED_STORAGE_PROJECT_DIR",
        "STORAGE_CORE_JOBS_LOCK_DIR",
    } <= checked


def test_airflow_services_share_one_configuration(services: dict[str, dict[str, Any]]) -> None:
    shared = (
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN",
        "AIRFLOW__API_AUTH__JWT_SECRET",
        "AIRFLOW__API__SECRET_KEY",
        "AIRFLOW__CORE__FERNET_KEY",
        "AIRFLOW__CORE__EXECUTOR",
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL",
        TIERED_CONNECTION,
    )
    envs = [environment(services[name]) for name in [*AIRFLOW_SERVICES, "airflow-init"]]
    for key in shared:
        assert len({env[key] for env in envs}) == 1, f"{key} differs between Airflow services"
    env = envs[0]
    assert env["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor"
    assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].startswith("postgresql+psycopg2://")
    assert "@postgres:5432/airflow" in env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]
    api = services["airflow-api-server"]
    assert env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"] == (
        "http://airflow-api-server:8080/execution/"
    )
    assert any(port.endswith(":8080:8080") for port in api["ports"])


def test_jobs_reach_spark_the_project_and_their_directories(
    services: dict[str, dict[str, Any]], dockerfile: str
) -> None:
    scheduler = services[AIRFLOW_WORKER]
    env = environment(scheduler)
    assert env["SPARK_MASTER"] == services[SPARK_WORKER]["command"][2]
    assert env["SPARK_LOCAL_HOSTNAME"] == scheduler["hostname"] == AIRFLOW_WORKER
    (project_dir,) = re.findall(r"\"(/[^\"]+)\[pipeline\]\"", dockerfile)
    assert env["TIERED_STORAGE_PROJECT_DIR"] == project_dir
    writable = {m.target for m in mounts(scheduler) if not m.read_only}
    assert env["TIERED_STORAGE_REPORTS_DIR"] in writable
    assert env["STORAGE_CORE_JOBS_LOCK_DIR"] in writable
    api_mounts = {m.target for m in mounts(services["airflow-api-server"])}
    assert env["TIERED_STORAGE_REPORTS_DIR"] in api_mounts, "the plugin's pages read reports"
    for name in (*BROKERS, SPARK_WORKER):
        assert "AWS_SECRET_ACCESS_KEY" in environment(services[name]), f"{name} reaches S3"


def test_dockerfile_installs_the_project(
    services: dict[str, dict[str, Any]], dockerfile: str
) -> None:
    args = dockerfile_args(dockerfile)
    assert "FROM apache/airflow:${AIRFLOW_VERSION}-python${PYTHON_VERSION}" in dockerfile
    airflow_version = args["AIRFLOW_VERSION"]
    assert pipeline_requirement("apache-airflow").specifier.contains(airflow_version)
    requires_python = pyproject()["project"]["requires-python"]
    assert Requirement(f"python{requires_python}").specifier.contains(args["PYTHON_VERSION"])
    spark_version = args["SPARK_VERSION"]
    assert pipeline_requirement("pyspark").specifier.contains(spark_version)
    build_args = services[SPARK_WORKER]["build"]["args"]
    assert build_args == {"AIRFLOW_VERSION": airflow_version, "SPARK_VERSION": spark_version}
    master = image_tag(services["spark-master"]["image"])[1]
    assert master.split("-")[0] == spark_version, "driver, worker and master run one Spark"

    (install,) = re.findall(r"RUN pip install(?:[^\n\\]|\\\n)*", dockerfile)
    assert '"apache-airflow==${AIRFLOW_VERSION}"' in install
    assert '"pyspark[connect]==${SPARK_VERSION}"' in install
    (project_dir,) = re.findall(r"\"(/[^\"]+)\[pipeline\]\"", install)
    packages = pyproject()["tool"]["setuptools"]["packages"]["find"]["include"]
    copied = dict(re.findall(r"^COPY --chown=\S+ (\S+) (\S+)$", dockerfile, flags=re.MULTILINE))
    for package in [p.rstrip("*") for p in packages] + ["expectations"]:
        assert copied.get(package) == f"{project_dir}/{package}", package
    assert copied["dags"] == "/opt/airflow/dags"
    assert copied["plugins"] == "/opt/airflow/plugins"
    assert "default-jdk-headless" in dockerfile and "ENV JAVA_HOME=" in dockerfile


def test_docker_compose_config_accepts_the_file() -> None:
    docker = shutil.which("docker")
    if docker is None:
        pytest.skip("no docker CLI here: the file's structure is checked by the tests above")
    probe = subprocess.run(
        [docker, "compose", "version"], check=False, capture_output=True, text=True, timeout=60
    )
    if probe.returncode != 0:
        pytest.skip(
            "the docker CLI here has no compose plugin: the file's structure is checked by"
            " the tests above"
        )
    result = subprocess.run(
        [docker, "compose", "-f", str(COMPOSE_FILE), "config", "--quiet"],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert result.returncode == 0, result.stderr


# ---------------------------------------------------------------------------- security
def _script(service: Mapping[str, Any]) -> str:
    """The shell script of a one-shot ``/bin/sh -ec`` service."""
    entrypoint = service["entrypoint"]
    assert entrypoint[:2] == ["/bin/sh", "-ec"], entrypoint
    return str(entrypoint[2])


def _mount_of(service: Mapping[str, Any], path: str) -> str | None:
    """The volume mounted at ``path`` or a parent of it in ``service``, or None."""
    for mount in mounts(service):
        if path == mount.target or path.startswith(mount.target.rstrip("/") + "/"):
            return mount.source
    return None


def test_brokers_serve_sasl_ssl_to_clients_and_tls_between_them(
    services: dict[str, dict[str, Any]],
) -> None:
    for broker in BROKERS:
        props = broker_props(services[broker])
        config = KafkaConfig.from_props(props)
        protocols = {e.listener_name: e.security_protocol for e in config.listeners()}
        assert protocols == {
            CLIENT_LISTENER: SecurityProtocol.SASL_SSL,
            "INTERNAL": SecurityProtocol.SSL,
        }, broker
        assert props["inter.broker.listener.name"] == "INTERNAL"
        assert props["listener.name.internal.ssl.client.auth"] == "required"
        assert props["sasl.enabled.mechanisms"] == "SCRAM-SHA-512"
        assert props["authorizer.class.name"] == "kafka.security.authorizer.AclAuthorizer"
        assert props["allow.everyone.if.no.acl.found"] == "false"
        assert props["zookeeper.set.acl"] == "true"
        # the key store is this broker's, on the certificates volume security-init fills
        keystore = props["ssl.keystore.location"]
        assert keystore == f"{CERTIFICATES_DIR}/{broker}.keystore.pem"
        assert _mount_of(services[broker], keystore) == "certificates"
        assert _mount_of(services[broker], props["ssl.truststore.location"]) == "certificates"
        # its certificate's subject is a super user once mapped; the admin's too
        mapper = SslPrincipalMapper(props["ssl.principal.mapping.rules"])
        super_users = props["super.users"].split(";")
        for name, unit in ((broker, "brokers"), ("admin", "clients")):
            principal = mapper.get_name(f"CN={name},OU={unit},O=storage-core")
            assert f"User:{principal}" in super_users, (broker, principal)
        # the ZooKeeper login: KAFKA_OPTS names a file that security-init writes
        opts = environment(services[broker])["KAFKA_OPTS"]
        (jaas,) = re.findall(r"-Djava\.security\.auth\.login\.config=(\S+)", opts)
        assert _mount_of(services[broker], jaas) == "zookeeper-client-jaas"
        assert jaas in _script(services["security-init"])
        assert "security-init" in services[broker]["depends_on"]


def test_zookeeper_requires_sasl_from_every_client(services: dict[str, dict[str, Any]]) -> None:
    init = _script(services["security-init"])
    for node in ZOOKEEPERS:
        env = environment(services[node])
        extra = env["ZOO_CFG_EXTRA"].split()
        assert "enforce.auth.enabled=true" in extra and "enforce.auth.schemes=sasl" in extra
        assert (
            "authProvider.sasl=org.apache.zookeeper.server.auth.SASLAuthenticationProvider" in extra
        )
        (jaas,) = re.findall(r"-Djava\.security\.auth\.login\.config=(\S+)", env["JVMFLAGS"])
        assert _mount_of(services[node], jaas) == "zookeeper-server-jaas"
        assert "security-init" in services[node]["depends_on"]
        assert f"> {jaas}" in init
    # the server knows the user the brokers log in as, with the same password variable
    assert 'user_kafka="%s"' in init and 'username="kafka"' in init
    assert init.count('"$ZOOKEEPER_KAFKA_PASSWORD"') == 2
    assert "umask 077" in init, "the JAAS files are written private"


def test_security_init_makes_every_brokers_certificate(
    services: dict[str, dict[str, Any]], tmp_path: Path
) -> None:
    """The init's own ``python -m embedded.certificates`` command, run here into a temporary
    directory: a key store for every broker that the brokers' settings name, with the
    broker's service name among its SANs, and the admin's."""
    init = _script(services["security-init"])
    (command,) = re.findall(r"python -m embedded\.certificates (.*?)(?: &&|$)", init, re.S)
    argv = command.split()
    argv[argv.index("--dir") + 1] = str(tmp_path)
    assert certificates_main(argv) == 0
    from cryptography import x509

    for broker in BROKERS:
        keystore = Path(broker_props(services[broker])["ssl.keystore.location"])
        assert keystore.parent == Path(CERTIFICATES_DIR)
        certificate = x509.load_pem_x509_certificate((tmp_path / keystore.name).read_bytes())
        sans = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName)
        assert broker in sans.value.get_values_for_type(x509.DNSName)
    assert (tmp_path / "admin.keystore.pem").is_file()
    assert "admin.keystore.pem" in init and ADMIN_CERTIFICATE_PROPERTIES in init


def test_the_pipelines_connection_and_least_acls(services: dict[str, dict[str, Any]]) -> None:
    from tiered_storage_plugin.client_security import ClientSecurity

    users = services["security-users"]
    script = _script(users)
    env = environment(services[AIRFLOW_WORKER])
    conn = json.loads(env[TIERED_CONNECTION])
    security = ClientSecurity.from_connection(
        login=conn.get("login"), password=conn.get("password"), extra=conn["extra"]
    )
    assert (security.security_protocol, security.sasl_mechanism) == ("SASL_SSL", "SCRAM-SHA-512")
    assert security.username == "pipeline"
    # the password the connection sends is the one security-users gives the pipeline's user
    assert security.password == environment(users)["KAFKA_PIPELINE_PASSWORD"]
    assert "${" in environment(raw_services()["security-users"])["KAFKA_PIPELINE_PASSWORD"]
    assert "for user in admin pipeline" in script and "--password-file" in script
    for service in (AIRFLOW_WORKER, "airflow-api-server", SPARK_WORKER):
        assert _mount_of(services[service], str(security.ssl_ca_location)) == "certificates"
    # the pipeline's least ACLs (jobs/common/pipeline_acls.py), as the demo grants them, the
    # nightly restore drill's included; no Delete on every topic
    granted = re.findall(r"\$acls (.*?)(?: &&|$)", script, re.S)
    expected = [
        " ".join("'*'" if arg == "*" else arg for arg in acl.acls_arguments())
        for acl in (*PIPELINE_ACLS, *LEADER_ELECTION_ACLS, *RESTORE_DRILL_ACLS)
    ]
    assert [" ".join(g.split()) for g in granted] == expected
    assert "User:pipeline" in script
    # the jobs' client settings file: made under TMPDIR, which the worker mounts there too
    tmpdir = env["TMPDIR"]
    assert _mount_of(services[AIRFLOW_WORKER], tmpdir) == "job-client-config"
    (worker_mount,) = [m for m in mounts(services[SPARK_WORKER]) if m.source == "job-client-config"]
    assert worker_mount.target == tmpdir and worker_mount.read_only
    assert "security-users" in services[AIRFLOW_WORKER]["depends_on"]
    for broker in BROKERS:
        assert broker in users["depends_on"], "the users are made once every broker serves"


def raw_services() -> dict[str, Any]:
    services: dict[str, Any] = yaml.safe_load(COMPOSE_FILE.read_text())["services"]
    return services
