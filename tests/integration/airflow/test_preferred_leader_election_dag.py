"""The ``preferred_leader_election`` DAG with ``dag.test()`` against three broker processes on a
real ZooKeeper (automatic leader rebalance off), the cluster given as a three-broker
``tiered_storage_default`` connection.

Story::

    orders: replicas [1,2,3] [2,3,1]; 20 records each; broker 1 leads orders-0, 2 orders-1
    broker 1 stopped (SIGTERM)      orders-0 moves to broker 2
    broker 1 restarted              back in the ISR of orders-0, which broker 2 still leads
    the job's dry run               orders-0 not preferred, nothing elected
    bad params                      refused at run creation, naming the param; an unknown
                                    partition fails elect_leaders naming --partition
    DAG run (topic orders)          orders-0 elected (broker 1 leads again, confluent-kafka
                                    describes it so), orders-1 already preferred
    DAG run again                   every partition already preferred
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer, TopicCollection
from confluent_kafka.admin import NewTopic

from embedded.zookeeper import ZooKeeperEnsemble
from tests import cluster_support
from tests.broker_process import BrokerProcess
from tests.cluster_support import SESSION_TIMEOUT_MS, eventually, partition_states
from tests.unit.airflow import airflow_env

cluster_support.require_java()

pytestmark = pytest.mark.timeout(600)

TOPIC = "orders"
ASSIGNMENT = [[1, 2, 3], [2, 3, 1]]
DAG_ID = "preferred_leader_election"
MOVE_S = SESSION_TIMEOUT_MS / 1000 + 30


@pytest.fixture(scope="module")
def brokers(
    airflow_home: Path, zookeeper: ZooKeeperEnsemble, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[int, BrokerProcess]]:
    root = tmp_path_factory.mktemp("election-cluster")
    settings = {"auto.create.topics.enable": "false", "replica.fetch.backoff.ms": "200"}
    with cluster_support.three_brokers(zookeeper, root, settings) as (started, _connect):
        admin = cluster_support.admin(started)
        new = NewTopic(TOPIC, num_partitions=len(ASSIGNMENT), replica_assignment=ASSIGNMENT)
        admin.create_topics([new])[TOPIC].result(30)
        eventually(
            lambda: all(
                len(isr) == 3
                for _l, _e, isr in partition_states(started[1].bootstrap, TOPIC).values()
            ),
            what=f"{TOPIC} online with full ISRs",
        )
        producer = Producer({"bootstrap.servers": servers(started), "acks": "all"})
        for partition in range(len(ASSIGNMENT)):
            for i in range(20):
                producer.produce(TOPIC, f"record-{i}".encode(), partition=partition)
        assert producer.flush(30) == 0
        os.environ["AIRFLOW_CONN_TIERED_STORAGE_DEFAULT"] = json.dumps(
            {
                "conn_type": "generic",
                "host": servers(started),
                "extra": {
                    "broker_log_dirs": {str(i): [str(b.log_dir)] for i, b in started.items()}
                },
            }
        )
        yield started
        os.environ.pop("AIRFLOW_CONN_TIERED_STORAGE_DEFAULT", None)


def servers(brokers: dict[int, BrokerProcess]) -> str:
    return ",".join(b.bootstrap for b in brokers.values())


@pytest.fixture(scope="module")
def dag(airflow_home: Path) -> Any:
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(airflow_env.DAGS))
    assert bag.import_errors == {}
    return bag.dags[DAG_ID]


def leaders(brokers: dict[int, BrokerProcess]) -> dict[int, int]:
    """partition -> leader as confluent-kafka's AdminClient describes orders."""
    admin = cluster_support.admin(brokers)
    (future,) = admin.describe_topics(TopicCollection([TOPIC])).values()
    return {p.id: p.leader.id for p in future.result(30).partitions}


def run(dag: Any, conf: dict[str, Any]) -> tuple[str, dict[str, str | None]]:
    dag_run = dag.test(run_conf=conf)
    states = {ti.task_id: ti.state for ti in dag_run.get_task_instances()}
    return str(dag_run.state), {k: None if v is None else str(v) for k, v in states.items()}


def election_summary() -> dict[str, Any]:
    paths = sorted(
        (airflow_env.reports_dir() / "runs" / DAG_ID).glob("*/elect_leaders/summary.json"),
        key=lambda p: p.stat().st_mtime,
    )
    assert paths, "no summary of elect_leaders"
    return json.loads(paths[-1].read_text())


def results(summary: dict[str, Any]) -> dict[str, str]:
    return {p["partition"]: p["status"] for p in summary["partitions"]}


def test_the_dag_gives_leadership_back_to_the_preferred_replica(
    brokers: dict[int, BrokerProcess], dag: Any, tmp_path: Path
) -> None:
    from airflow.sdk.exceptions import ParamValidationError

    assert leaders(brokers) == {0: 1, 1: 2}
    brokers[1].stop()
    survivor = brokers[2].bootstrap
    eventually(
        lambda: partition_states(survivor, TOPIC)[0][0] == 2,
        timeout_s=MOVE_S,
        what="orders-0 led by broker 2 while broker 1 is down",
    )
    brokers[1].start()
    eventually(
        lambda: 1 in partition_states(survivor, TOPIC)[0][2],
        timeout_s=MOVE_S,
        what="broker 1 back in the ISR of orders-0",
    )
    assert leaders(brokers) == {0: 2, 1: 2}  # no automatic rebalance

    # bad params: refused before a run exists, naming the param
    with pytest.raises(ParamValidationError, match="Invalid input for param topic"):
        dag.test(run_conf={"topic": "no such/topic", "partitions": None})
    with pytest.raises(ParamValidationError, match="Invalid input for param partitions"):
        dag.test(run_conf={"topic": TOPIC, "partitions": [-1]})
    # the job's dry run names the partition off its preferred replica and elects nothing
    dry = tmp_path / "dry-run.json"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "jobs.preferred_leader_election",
            "--bootstrap-server",
            servers(brokers),
            "--topic",
            TOPIC,
            "--dry-run",
            "--summary-path",
            str(dry),
        ],
        cwd=airflow_env.REPO,
        check=True,
        timeout=120,
    )
    assert results(json.loads(dry.read_text())) == {
        f"{TOPIC}-0": "not_preferred",
        f"{TOPIC}-1": "already_preferred",
    }
    assert leaders(brokers) == {0: 2, 1: 2}

    # no topic: the first task refuses the run
    state, states = run(dag, {"topic": None, "partitions": None})
    assert (state, states) == (
        "failed",
        {"validate_request": "failed", "elect_leaders": "upstream_failed"},
    )
    # a partition the topic does not have: the job refuses it, nothing is elected
    state, states = run(dag, {"topic": TOPIC, "partitions": [0, 7]})
    assert (state, states) == ("failed", {"validate_request": "success", "elect_leaders": "failed"})
    refused = election_summary()
    assert refused["status"] == "failed"
    assert "--partition 7: topic 'orders' has partitions 0..1" in refused["errors"][0]["error"]
    assert leaders(brokers) == {0: 2, 1: 2}

    state, states = run(dag, {"topic": TOPIC, "partitions": None})
    assert (state, states) == (
        "success",
        {"validate_request": "success", "elect_leaders": "success"},
    )
    summary = election_summary()
    assert results(summary) == {f"{TOPIC}-0": "elected", f"{TOPIC}-1": "already_preferred"}
    elected = next(p for p in summary["partitions"] if p["partition"] == f"{TOPIC}-0")
    assert (elected["leader_before"], elected["leader"], elected["preferred_leader"]) == (2, 1, 1)
    assert summary["counts"]["elected"] == 1 and summary["counts"]["already_preferred"] == 1
    assert leaders(brokers) == {0: 1, 1: 2}
    assert partition_states(brokers[3].bootstrap, TOPIC)[0][0] == 1

    state, _ = run(dag, {"topic": TOPIC, "partitions": [0, 1]})
    assert state == "success"
    assert results(election_summary()) == {
        f"{TOPIC}-0": "already_preferred",
        f"{TOPIC}-1": "already_preferred",
    }
