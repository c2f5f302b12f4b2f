"""The pipeline's principal on three secured brokers on a real ZooKeeper: every listener
SASL_SSL, the ACL authorizer on each broker (the brokers' own PLAIN login a super user), the
pipeline's SCRAM credential made through broker 1 and its ACLs (``ALL_PIPELINE_ACLS``) through
broker 1 with the project's tools, so that brokers 2 and 3 learn them from ZooKeeper.

Story::

    orders: replicas [1,2,3] [2,3,1]; broker 1 leads orders-0
    broker 1 stopped, then restarted       orders-0 led by broker 2, broker 1 back in its ISR
    preferred_leader_election (pipeline)   orders-0 elected: broker 1 leads it again
    cluster_status (pipeline)              three brokers, both partitions, nothing offline

The jobs run as the operator runs them: the connection's security settings in the file named
by STORAGE_CORE_CLIENT_CONFIG.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer, TopicCollection
from confluent_kafka.admin import AdminClient, NewTopic

from embedded.ports import free_port
from embedded.zookeeper import ZooKeeperEnsemble
from jobs.common.pipeline_acls import ALL_PIPELINE_ACLS
from storage_core.client.client_properties import write_client_properties
from tests import cluster_support
from tests.broker_process import BrokerProcess
from tests.cluster_support import SESSION_TIMEOUT_MS, eventually
from tests.integration.security.secured_pipeline_support import (
    ADMIN,
    MECHANISM,
    SecuredBroker,
    secured_overrides,
)
from tests.security_support import TestPki

cluster_support.require_java()
pytestmark = pytest.mark.timeout(600)

REPO = Path(__file__).resolve().parents[3]
LOGIN, PASSWORD = "pipeline", "pipeline-cluster-Pa55-51b7"
TOPIC = "orders"
ASSIGNMENT = [[1, 2, 3], [2, 3, 1]]
MOVE_S = SESSION_TIMEOUT_MS / 1000 + 30


@pytest.fixture(scope="module")
def cluster(
    zookeeper: ZooKeeperEnsemble, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[dict[int, BrokerProcess], SecuredBroker]]:
    root = tmp_path_factory.mktemp("secured-pipeline-cluster")
    pki = TestPki(root)
    connect = f"{zookeeper.connect_string}/secured-{uuid.uuid4().hex[:8]}"
    started: dict[int, BrokerProcess] = {}
    try:
        for broker_id in (1, 2, 3):
            port = free_port()
            started[broker_id] = BrokerProcess(
                root / f"broker-{broker_id}",
                port=port,
                overrides={
                    **secured_overrides(port, pki, root / "remote-tier"),
                    "broker.id": str(broker_id),
                    "zookeeper.connect": connect,
                    "zookeeper.session.timeout.ms": str(SESSION_TIMEOUT_MS),
                    "offsets.topic.replication.factor": "1",
                    "auto.leader.rebalance.enable": "false",
                    "auto.create.topics.enable": "false",
                    "replica.fetch.backoff.ms": "200",
                },
            ).start()
        # the tools and the admin client talk to broker 1 only
        tools = SecuredBroker(broker=started[1], pki=pki, remote_dir=root, directory=root)
        tools.add_scram_user(LOGIN, PASSWORD)
        tools.grant(f"User:{LOGIN}", ALL_PIPELINE_ACLS)
        admin = AdminClient({**tools.confluent(), "bootstrap.servers": servers(started)})
        new = NewTopic(TOPIC, num_partitions=len(ASSIGNMENT), replica_assignment=ASSIGNMENT)
        admin.create_topics([new])[TOPIC].result(30)
        eventually(
            lambda: all(len(isr) == 3 for _leader, isr in states(started, tools).values()),
            what=f"{TOPIC} online with full ISRs",
        )
        producer = Producer({**tools.confluent(), "bootstrap.servers": servers(started)})
        for partition in range(len(ASSIGNMENT)):
            for i in range(20):
                producer.produce(TOPIC, f"record-{i}".encode(), partition=partition)
        assert producer.flush(30) == 0
        yield started, tools
    finally:
        for broker in started.values():
            broker.kill()


def servers(brokers: dict[int, BrokerProcess]) -> str:
    return ",".join(b.bootstrap for b in brokers.values())


def states(
    brokers: dict[int, BrokerProcess], tools: SecuredBroker
) -> dict[int, tuple[int, set[int]]]:
    """partition -> (leader, ISR) as confluent-kafka's AdminClient describes orders (as the
    administrator, through every live broker)."""
    live = {i: b for i, b in brokers.items() if b.process is not None}
    admin = AdminClient({**tools.confluent(), "bootstrap.servers": servers(live)})
    (future,) = admin.describe_topics(TopicCollection([TOPIC])).values()
    return {p.id: (p.leader.id, {r.id for r in p.isr}) for p in future.result(30).partitions}


def run_job(
    brokers: dict[int, BrokerProcess], tools: SecuredBroker, job: str, *args: str
) -> dict[str, Any]:
    """The job as the pipeline's principal; its run summary (it must exit 0)."""
    directory = tools.directory / f"client-{uuid.uuid4().hex[:6]}"
    directory.mkdir(mode=0o700)
    properties = write_client_properties(
        directory / "client.properties",
        {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": MECHANISM,
            "sasl.username": LOGIN,
            "sasl.password": PASSWORD,
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(tools.pki.ca_pem),
        },
    )
    summary_path = directory / "summary.json"
    command = [
        sys.executable,
        "-m",
        f"jobs.{job}",
        "--bootstrap-server",
        servers(brokers),
        *[
            option
            for broker_id, broker in brokers.items()
            for option in ("--broker-log-dirs", f"{broker_id}={broker.log_dir}")
        ],
        "--summary-path",
        str(summary_path),
        "--spark-master",
        "local[2]",
        *args,
    ]
    result = subprocess.run(
        command,
        env={**os.environ, "STORAGE_CORE_CLIENT_CONFIG": str(properties)},
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert PASSWORD not in output and ADMIN[1] not in output
    summary = json.loads(summary_path.read_text())
    assert PASSWORD not in summary_path.read_text()
    return dict(summary)


def test_the_pipeline_elects_the_preferred_leader_and_snapshots_three_secured_brokers(
    cluster: tuple[dict[int, BrokerProcess], SecuredBroker],
) -> None:
    brokers, tools = cluster
    assert {p: leader for p, (leader, _isr) in states(brokers, tools).items()} == {0: 1, 1: 2}
    brokers[1].stop()
    eventually(
        lambda: states(brokers, tools)[0][0] == 2,
        timeout_s=MOVE_S,
        what="orders-0 led by broker 2 while broker 1 is down",
    )
    brokers[1].start()
    eventually(
        lambda: 1 in states(brokers, tools)[0][1],
        timeout_s=MOVE_S,
        what="broker 1 back in the ISR of orders-0",
    )

    summary = run_job(brokers, tools, "preferred_leader_election", "--topic", TOPIC)
    assert summary["counts"]["elected"] == 1, summary
    assert summary["counts"]["already_preferred"] == 1, summary
    assert {p: leader for p, (leader, _isr) in states(brokers, tools).items()} == {0: 1, 1: 2}

    status = run_job(brokers, tools, "cluster_status")
    assert status["counts"]["brokers"] == 3, status
    assert status["counts"]["offline_partitions"] == 0, status
    assert status["counts"]["partitions"] == 0  # orders is not remote-enabled
