"""``docker-compose.yml``'s topology run as local processes with the file's own settings (see
``topology`` for what stands for each service; no Docker engine runs here).

Story::

    security-init                            the file's certificates, the brokers' ZooKeeper
                                             login
    ZooKeeper ensemble (ZOO_SERVERS' size)   3 nodes from the pyspark jars, one leader, SASL
                                             required; each answers the file's health probe
                                             (srvr: a Mode)
    3 brokers (the file's --override values) one cluster under the file's chroot, SASL_SSL
                                             for clients, TLS between brokers, ACLs
    security-users                           the pipeline's SCRAM user and least ACLs; the
                                             test's own clients are the admin's certificate
    orders: 3 partitions, no replication     every partition on the 3 brokers, 3 in the ISR
      factor given (the file's default)      (min.insync.replicas as the file says), leaders
                                             spread over the brokers; records with acks=all
    Spark standalone master + worker         the scheduler's SPARK_MASTER points at the master
    tiering through ``airflow dags test``    copy_segments ran its executors on the worker
      (the scheduler's connection: every     (the master's and the worker's JSON), quality
      broker, broker_log_dirs)               its suites on pandas in the driver (no Spark
                                             application); copy_segments read each partition from
                                             its leader's log dirs (the connection's map):
                                             the one bucket and key prefix hold segments of
                                             every partition, led by several brokers;
                                             quality's tables hold every replica of every
                                             partition
    stop                                     no process of the topology is left
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from embedded.zookeeper import java_executable, zookeeper_classpath
from tests import cluster_support
from tests.cluster_support import eventually
from tests.integration.deploy.compose_settings import ComposeSettings, read_compose
from tests.integration.deploy.topology import ComposeTopology, fetch_json

cluster_support.require_java()

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

TOPIC = "orders"
PARTITIONS = 3
RECORDS_PER_PARTITION = 200
SEGMENT_BYTES = 16 * 1024


@pytest.fixture(scope="module")
def settings() -> ComposeSettings:
    return read_compose()


@pytest.fixture(scope="module")
def topology(
    settings: ComposeSettings, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ComposeTopology]:
    with ComposeTopology(tmp_path_factory.mktemp("compose"), settings) as running:
        eventually(
            lambda: _create_topic(running),
            timeout_s=60,
            what=f"{TOPIC} created (the controller may not count every broker yet)",
        )
        failures: list[str] = []
        producer = Producer(
            {
                **running.admin_confluent_config(),
                "acks": "all",
                # small batches: several segments of segment.bytes per partition
                "linger.ms": 0,
                "batch.num.messages": 16,
            }
        )
        eventually(
            lambda: all(len(s[2]) == 3 for s in _partition_states(running).values()),
            timeout_s=60,
            what=f"every partition of {TOPIC} fully in sync",
        )
        for partition in range(PARTITIONS):
            for i in range(RECORDS_PER_PARTITION):
                producer.produce(
                    TOPIC,
                    value=f"order-{i:05d}-".encode() * 16,
                    partition=partition,
                    on_delivery=lambda error, _message: error and failures.append(str(error)),
                )
                producer.poll(0)
        assert producer.flush(60) == 0, "every record acknowledged by all in-sync replicas"
        assert failures == [], failures[:5]
        yield running


def _create_topic(topology: ComposeTopology) -> bool:
    """No replication factor: the brokers' default.replication.factor applies."""
    admin = AdminClient(topology.admin_confluent_config())
    topic = NewTopic(
        TOPIC,
        num_partitions=PARTITIONS,
        config={"remote.storage.enable": "true", "segment.bytes": str(SEGMENT_BYTES)},
    )
    try:
        admin.create_topics([topic])[TOPIC].result(timeout=30)
    except KafkaException as error:
        if error.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:  # an earlier try's
            raise
    return True


def _partition_states(topology: ComposeTopology) -> dict[int, tuple[int, int, tuple[int, ...]]]:
    """partition -> (leader, -1, ISR) as the cluster's Metadata answers the admin."""
    admin = AdminClient(topology.admin_confluent_config())
    topic = admin.list_topics(TOPIC, timeout=30).topics[TOPIC]
    return {p.id: (p.leader, -1, tuple(p.isrs)) for p in topic.partitions.values()}


def _controller_id(topology: ComposeTopology, server: str) -> int:
    """The controller as one broker (its INTERNAL listener) answers."""
    config = {**topology.admin_confluent_config(), "bootstrap.servers": server}
    admin = AdminClient(config)  # kept until the answer: a dropped client cancels it
    controller = admin.describe_cluster().result(30).controller
    return -1 if controller is None else int(controller.id)


def test_the_brokers_are_one_cluster_on_the_ensemble(
    topology: ComposeTopology, settings: ComposeSettings
) -> None:
    modes = sorted(str(server.mode()) for server in topology.zookeeper.servers)
    assert modes == ["follower", "follower", "leader"], modes
    for server in topology.zookeeper.servers:
        # the probe of the file's health check (zkServer.sh status), asked of each node
        probe = subprocess.run(
            [
                java_executable(),
                "-cp",
                zookeeper_classpath(),
                "org.apache.zookeeper.client.FourLetterWordMain",
                "127.0.0.1",
                str(server.client_port),
                "srvr",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert re.search(r"^Mode: (leader|follower)$", probe.stdout, re.MULTILINE), probe
    admin = AdminClient(topology.admin_confluent_config())
    cluster = admin.describe_cluster().result(30)
    assert sorted(node.id for node in cluster.nodes) == sorted(settings.broker_props)
    assert cluster.controller is not None and cluster.controller.id in settings.broker_props
    for server in topology.internal_bootstrap_servers.split(","):
        assert _controller_id(topology, server) == cluster.controller.id, (
            f"{server} knows the controller"
        )


def test_a_topic_takes_the_files_replication(
    topology: ComposeTopology, settings: ComposeSettings
) -> None:
    states = _partition_states(topology)
    factor = int(next(iter(settings.broker_props.values()))["default.replication.factor"])
    assert factor == 3
    for partition, (leader, _epoch, isr) in states.items():
        assert sorted(isr) == sorted(settings.broker_props), f"{TOPIC}-{partition}: ISR {isr}"
        assert leader in isr
    assert len({leader for leader, _, _ in states.values()}) > 1, "leaders on several brokers"
    admin = AdminClient(topology.admin_confluent_config())
    resource = ConfigResource(ConfigResource.Type.TOPIC, TOPIC)
    configs = admin.describe_configs([resource])[resource].result(30)
    expected = next(iter(settings.broker_props.values()))["min.insync.replicas"]
    assert configs["min.insync.replicas"].value == expected


def test_tiering_runs_its_jobs_on_the_standalone_worker_across_every_leader(
    topology: ComposeTopology, settings: ComposeSettings
) -> None:
    code, output = topology.run_dag("tiering")  # copy_segments -> quality (and status)
    assert code == 0, output
    master = fetch_json(f"{topology.spark_webui}/json/")
    worker = fetch_json(f"{topology.spark_worker_webui}/json/")
    apps = [app for app in master["completedapps"] if app["name"] == "copy_segments"]
    assert len(apps) == 1, master["completedapps"]
    assert apps[0]["state"] == "FINISHED"
    executors = [e for e in worker["finishedexecutors"] if e["appid"] == apps[0]["id"]]
    assert executors, f"no executor of copy_segments ({apps[0]['id']}) ran on the worker: {worker}"
    # the quality suites ran on pandas in the driver (a few rows): no Spark application
    assert "quality" not in [app["name"] for app in master["completedapps"]]
    copy = _summary(topology, "tiering", "copy_segments")
    assert copy["status"] == "ok", copy
    assert copy["counts"]["segments_copied"] > 0, copy
    quality = _summary(topology, "tiering", "quality")
    assert quality["status"] == "ok", quality
    assert quality["details"]["validation_engine"] == "pandas"
    assert quality["counts"]["partitions"] == PARTITIONS
    assert quality["counts"]["replicas"] == PARTITIONS * 3, "every replica on every broker"
    props = next(iter(settings.broker_props.values()))
    bucket, prefix = props["rsm.config.s3.bucket.name"], props["rsm.config.s3.key.prefix"]
    pages = (
        topology.s3.client()
        .get_paginator("list_objects_v2")
        .paginate(Bucket=bucket, Prefix=f"{prefix}/{TOPIC}-")
    )
    keys = [o["Key"] for page in pages for o in page.get("Contents", [])]
    # <prefix>/<topic>-<topic id>/<partition>/<base offset>-<segment id>.log
    tiered = {int(key.split("/")[-2]) for key in keys if key.endswith(".log")}
    leaders = {p: leader for p, (leader, _, _) in _partition_states(topology).items()}
    assert tiered == set(leaders), f"tiered partitions {tiered}, leaders {leaders}"
    assert len({leaders[p] for p in tiered}) > 1, f"copied from one leader only: {leaders}"


def test_stopping_the_topology_leaves_no_process(topology: ComposeTopology) -> None:
    assert topology.live_groups(), "the topology runs before it is stopped"
    assert topology.leftover_processes(), "its processes are found by their directory"
    topology.stop()
    assert topology.live_groups() == []
    assert topology.leftover_processes() == []


def _summary(topology: ComposeTopology, dag_id: str, task_id: str) -> dict[str, Any]:
    paths = sorted(
        (topology.reports_dir / "runs" / dag_id).glob(f"*/{task_id}/summary.json"),
        key=lambda p: p.stat().st_mtime,
    )
    assert paths, f"no summary of {dag_id}.{task_id} under {topology.reports_dir}"
    value: dict[str, Any] = json.loads(Path(paths[-1]).read_text())
    return value
