"""Each DAG run end to end with ``dag.test()`` against a live broker process.

Story (one broker, remote storage on, ``LocalTieredStorage`` in a temp dir; the cluster is the
``tiered_storage_default`` connection given as ``AIRFLOW_CONN_TIERED_STORAGE_DEFAULT``)::

    produce 600 records to each partition of orders (2) and doomed (1)
                                     local: [seg 0]...[seg k][active]   remote: -
    tiering                          copy_segments -> quality: every closed segment remote;
                                     topic_manifests beside it: one manifest per topic
    retention_nightly                reconcile -> expire_remote -> quality -> report, with
                                     backup_consumer_offsets beside: one backup object;
                                     orders' retention.bytes shrunk first: the oldest remote
                                     segments are deleted and the log start offset moves
    partition_deletion, bad params   refused at run creation (ParamValidationError) or by the
                                     first task (confirm != topic): the topic still exists
    partition_deletion, dry run      nothing marked, nothing deleted
    partition_deletion (doomed)      DeleteTopics marks it, delete_partitions removes its
                                     remote data: no remote object of doomed is left
    partition_deletion_sweep         scheduled run, no params: succeeds, nothing left to do
    data_quality                     quality publishes its summary and Data Docs, which the
                                     plugin's web app serves with the status page
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaProducer

from storage_core.client import AlterConfigOp, AlterConfigOpType, KafkaAdminClient, KafkaCluster
from storage_core.protocol.config_resource import ConfigResourceType
from tests.broker_process import BrokerProcess
from tests.tiered_broker_support import EARLIEST, LATEST_TIERED, list_offset, wait_until
from tests.unit.airflow import airflow_env
from tests.unit.expectations.test_data_docs import observed_values

pytestmark = pytest.mark.timeout(1200)

ORDERS, DOOMED = "orders", "doomed"
RECORDS = 600
SEGMENT_BYTES = 16 * 1024


def value_of(i: int) -> bytes:
    return f"record-{i:05d}-".encode() * 8


@pytest.fixture(scope="module")
def cluster(airflow_home: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    root = tmp_path_factory.mktemp("cluster")
    remote = root / "remote-tier"
    with BrokerProcess(
        root,
        overrides={
            "remote.log.storage.system.enable": "true",
            "remote.log.storage.manager.class.name": "LocalTieredStorage",
            "rsm.config.local.storage.dir": str(remote),
            "rsm.config.local.fsync": "false",
            "remote.log.metadata.topic.num.partitions": "3",
            "remote.log.manager.task.interval.ms": "200",
            "log.retention.check.interval.ms": "200",
        },
    ) as broker:
        with KafkaCluster(broker.bootstrap) as kafka:
            admin = KafkaAdminClient(kafka)
            for topic, partitions in ((ORDERS, 2), (DOOMED, 1)):
                admin.create_topic(
                    topic,
                    num_partitions=partitions,
                    replication_factor=1,
                    configs={"remote.storage.enable": "true", "segment.bytes": str(SEGMENT_BYTES)},
                )
        producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all", linger_ms=5)
        for topic, partitions in ((ORDERS, 2), (DOOMED, 1)):
            for partition in range(partitions):
                for i in range(RECORDS):
                    producer.send(topic, value=value_of(i), partition=partition)
        producer.flush()
        producer.close()
        os.environ["AIRFLOW_CONN_TIERED_STORAGE_DEFAULT"] = json.dumps(
            {
                "conn_type": "generic",
                "host": "127.0.0.1",
                "port": broker.port,
                "extra": {
                    "log_dirs": [str(broker.log_dir)],
                    "broker_config": str(broker.config_path),
                    "remote_storage_manager": "LocalTieredStorage",
                    "rsm_config": {"local.storage.dir": str(remote)},
                },
            }
        )
        broker.remote_dir = remote  # type: ignore[attr-defined]
        yield broker
        os.environ.pop("AIRFLOW_CONN_TIERED_STORAGE_DEFAULT", None)


@pytest.fixture(scope="module")
def dags(airflow_home: Path) -> dict[str, Any]:
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(airflow_env.DAGS))
    assert bag.import_errors == {}
    return bag.dags


def run(
    dag: Any, conf: dict[str, Any] | None = None, *, mark_success: str | None = None
) -> tuple[str, dict[str, str | None]]:
    """``dag.test`` and the run's state with every task's state; the tasks whose id
    ``mark_success`` matches are marked successful instead of run."""
    dag_run = dag.test(run_conf=conf, mark_success_pattern=mark_success)
    states = {ti.task_id: ti.state for ti in dag_run.get_task_instances()}
    return str(dag_run.state), {k: None if v is None else str(v) for k, v in states.items()}


def deletion_conf(**conf: Any) -> dict[str, Any]:
    """Every param given: ``dag.test`` runs tasks in this process, where a run's conf stays
    in the DAG object's params for the next run (a scheduler runs each task afresh)."""
    return {"topic": None, "partitions": None, "confirm": None, "dry_run": False, **conf}


def remote_bytes(cluster: Any, topic: str, partition: int) -> int:
    """The remote tier's own answer: sizes of the partition's remote .log files."""
    return sum(p.stat().st_size for p in cluster.remote_dir.glob(f"{topic}-*/{partition}/*.log"))


def latest_summary_path(dag_id: str, task_id: str) -> Path:
    paths = sorted(
        (airflow_env.reports_dir() / "runs" / dag_id).glob(f"*/{task_id}/summary.json"),
        key=lambda p: p.stat().st_mtime,
    )
    assert paths, f"no summary of {dag_id}.{task_id}"
    return paths[-1]


def latest_summary(dag_id: str, task_id: str) -> dict[str, Any]:
    return json.loads(latest_summary_path(dag_id, task_id).read_text())


def remote_tier_events() -> int:
    """Asset events recorded for the remote tier (what schedules data_quality)."""
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session
    from sqlalchemy import func, select

    with create_session() as session:
        return int(
            session.scalar(
                select(func.count())
                .select_from(AssetEvent)
                .join(AssetModel, AssetEvent.asset_id == AssetModel.id)
                .where(AssetModel.name == "tiered_storage_remote_tier")
            )
            or 0
        )


def remote_logs(cluster: Any, topic: str) -> list[Path]:
    return sorted(cluster.remote_dir.glob(f"{topic}-*/*/*.log"))


def ok(states: dict[str, str | None]) -> bool:
    return all(s == "success" for s in states.values())


def test_tiering_copies_every_closed_segment_then_checks(cluster: Any, dags: Any) -> None:
    events = remote_tier_events()
    state, states = run(dags["tiering"])
    assert (state, ok(states)) == ("success", True), states
    assert set(states) == {"copy_segments", "quality", "topic_manifests", "status"}
    assert remote_tier_events() == events + 1  # data_quality is due
    copy = latest_summary("tiering", "copy_segments")
    assert copy["job"] == "copy_segments" and copy["status"] == "ok"
    assert remote_logs(cluster, ORDERS) and remote_logs(cluster, DOOMED)
    # the quality task checked each copy of the run against the LSO it was planned with
    run_dir = latest_summary_path("tiering", "copy_segments").parent.parent
    record = json.loads((run_dir / "copy_segments" / "copied-segments.json").read_text())
    copied = copy["counts"]["segments_copied"]
    assert len(record["segments"]) == copied > 1, record
    (page,) = (run_dir / "quality" / "report").glob(
        "gx/uncommitted/data_docs/local_site/validations/remote_segments/*/*/*.html"
    )
    assert observed_values(page)["expect_copied_segment_end_below_last_stable_offset"] == (
        f"none of {copied} remote segments breaks the rule"
    )
    tiered, _ = list_offset(cluster.bootstrap, ORDERS, LATEST_TIERED)
    assert tiered > 0
    # the status snapshot agrees with the broker and with the remote tier's files
    snapshot = latest_summary("tiering", "status")
    assert snapshot["job"] == "cluster_status" and snapshot["details"]["dag_id"] == "tiering"
    (broker,) = snapshot["details"]["cluster"]["brokers"]
    assert broker["address"] == cluster.bootstrap
    status = {p["partition"]: p for p in snapshot["partitions"]}
    assert set(status) == {"orders-0", "orders-1", "doomed-0"}
    orders0 = status["orders-0"]
    assert orders0["highest_tiered_offset"] == tiered
    assert orders0["high_watermark"] == RECORDS and orders0["log_start_offset"] == 0
    assert orders0["remote_bytes"] == remote_bytes(cluster, ORDERS, 0) > 0
    assert orders0["copy_lag_segments"] == 0 and orders0["copy_lag_bytes"] == 0
    # each remote-enabled topic's manifest is in the remote tier
    manifests = latest_summary("tiering", "topic_manifests")
    assert manifests["counts"]["objects_written"] == 2, manifests
    written = sorted(p.parent.name for p in cluster.remote_dir.rglob("topic-manifest.json"))
    assert [name[: -len("-") - 22] for name in written] == sorted([DOOMED, ORDERS])
    # a second run finds nothing more to copy, and does not make data_quality due (its
    # quality, manifests and status tasks, checked above, are not run again)
    assert run(dags["tiering"], mark_success="quality|topic_manifests|status")[0] == "success"
    assert latest_summary("tiering", "copy_segments")["counts"].get("segments_copied", 0) == 0
    assert remote_tier_events() == events + 1


def test_retention_nightly_expires_and_reports(cluster: Any, dags: Any) -> None:
    before = remote_logs(cluster, ORDERS)
    assert before, "the tiering test runs first"
    with KafkaCluster(cluster.bootstrap) as kafka:
        KafkaAdminClient(kafka).incremental_alter_configs(
            ConfigResourceType.TOPIC,
            ORDERS,
            [AlterConfigOp(name="retention.bytes", op=AlterConfigOpType.SET, value="40000")],
        )
    events = remote_tier_events()
    state, states = run(dags["retention_nightly"])
    assert state == "success", states
    assert remote_tier_events() == events + 1  # expire_remote deleted segments
    assert ok(states)
    after = remote_logs(cluster, ORDERS)
    assert len(after) < len(before)
    wait_until(lambda: list_offset(cluster.bootstrap, ORDERS, EARLIEST)[0] > 0, "log start moved")
    reports = sorted((airflow_env.reports_dir() / "runs/retention_nightly").glob("*/report.json"))
    report = json.loads(reports[-1].read_text())
    assert report["failed"] == []
    assert set(report["jobs"]) == {
        "reconcile",
        "expire_remote",
        "quality",
        "backup_consumer_offsets",
    }
    backup = report["jobs"]["backup_consumer_offsets"]["summary"]
    assert backup["counts"]["objects_written"] == 1, backup
    assert backup["status"] == "ok" and backup["counts"]["topics"] >= 1


def test_partition_deletion_refuses_bad_params_before_anything_runs(
    cluster: Any, dags: Any
) -> None:
    from airflow.sdk.exceptions import ParamValidationError

    dag = dags["partition_deletion"]
    with pytest.raises(ParamValidationError, match="Invalid input for param topic"):
        dag.test(run_conf=deletion_conf(topic="no such/topic", confirm="no such/topic"))
    with pytest.raises(ParamValidationError, match="Invalid input for param partitions"):
        dag.test(run_conf=deletion_conf(topic=DOOMED, confirm=DOOMED, partitions=[-1]))

    state, states = run(dag, deletion_conf(topic=DOOMED, confirm="orders"))
    assert state == "failed"
    assert states == {
        "validate_request": "failed",
        "mark_partitions": "upstream_failed",
        "delete_partitions": "upstream_failed",
    }
    with KafkaCluster(cluster.bootstrap) as kafka:
        assert DOOMED in KafkaAdminClient(kafka).list_topics()


def test_partition_deletion_refuses_part_of_a_topic(cluster: Any, dags: Any) -> None:
    state, states = run(
        dags["partition_deletion"], deletion_conf(topic=ORDERS, confirm=ORDERS, partitions=[0])
    )
    assert state == "failed"
    assert states["mark_partitions"] == "failed"
    assert states["delete_partitions"] == "upstream_failed"
    with KafkaCluster(cluster.bootstrap) as kafka:
        assert ORDERS in KafkaAdminClient(kafka).list_topics()


def test_partition_deletion_dry_run_changes_nothing(cluster: Any, dags: Any) -> None:
    before = remote_logs(cluster, DOOMED)
    state, states = run(
        dags["partition_deletion"], deletion_conf(topic=DOOMED, confirm=DOOMED, dry_run=True)
    )
    assert state == "success", states
    # the plan is mark_partitions': the job, which would find nothing marked, is skipped
    assert states == {
        "validate_request": "success",
        "mark_partitions": "success",
        "delete_partitions": "skipped",
    }
    with KafkaCluster(cluster.bootstrap) as kafka:
        assert DOOMED in KafkaAdminClient(kafka).list_topics()
    assert remote_logs(cluster, DOOMED) == before
    (plan,) = sorted(
        (airflow_env.reports_dir() / "runs" / "partition_deletion").glob(
            "*/mark_partitions/plan.txt"
        ),
        key=lambda p: p.stat().st_mtime,
    )[-1:]
    lines = plan.read_text().splitlines()
    assert lines[0].startswith(f"Dry run: deleting topic {DOOMED} would remove")
    assert "offsets that would go" in lines[2]
    row = next(line for line in lines if line.startswith(f"{DOOMED}-0 "))
    remote = sum(p.stat().st_size for p in cluster.remote_dir.glob(f"{DOOMED}-*/0/*.log"))
    assert str(remote) in row.split(), row  # the remote bytes that would go


def test_partition_deletion_deletes_the_topic_and_its_remote_data(cluster: Any, dags: Any) -> None:
    assert remote_logs(cluster, DOOMED), "the tiering test copies doomed first"
    state, states = run(
        dags["partition_deletion"], deletion_conf(topic=DOOMED, confirm=DOOMED, partitions=[0])
    )
    assert (state, ok(states)) == ("success", True), states
    with KafkaCluster(cluster.bootstrap) as kafka:
        assert DOOMED not in KafkaAdminClient(kafka).list_topics()
    assert remote_logs(cluster, DOOMED) == []
    summary = latest_summary("partition_deletion", "delete_partitions")
    assert summary["status"] == "ok" and summary["counts"]["partitions_finished"] >= 1
    assert remote_logs(cluster, ORDERS)  # the other topic keeps its remote data

    # the hourly sweep (its own DAG, no params) then finds nothing left to do
    state, states = run(dags["partition_deletion_sweep"])
    assert (state, states) == ("success", {"delete_partitions": "success"})
    assert latest_summary("partition_deletion_sweep", "delete_partitions")["status"] == "ok"


def test_data_quality_publishes_data_docs_served_by_the_plugin(cluster: Any, dags: Any) -> None:
    from fastapi.testclient import TestClient
    from tiered_storage_plugin.web import airflow_user_required, create_app

    state, states = run(dags["data_quality"])
    assert (state, states) == (
        "success",
        {"quality": "success", "publish": "success", "status": "success"},
    )
    summary = latest_summary("data_quality", "quality")
    assert summary["job"] == "quality" and summary["status"] == "ok"
    app = create_app(airflow_env.reports_dir())
    # the login is checked through the api-server in test_api_server_plugin
    app.dependency_overrides[airflow_user_required()] = lambda: None
    client = TestClient(app)
    docs = client.get("/docs/latest/index.html")
    assert docs.status_code == 200 and "<html" in docs.text.lower()
    page = client.get("/")
    assert page.status_code == 200
    assert "<polyline" in page.text  # remote bytes and lag over the runs' status snapshots
    assert "<td>orders-0</td>" in page.text and "<td>doomed-0</td>" not in page.text
    statuses = {p["partition"]: p for p in client.get("/status.json").json()["partitions"]}
    assert set(statuses) == {"orders-0", "orders-1"}
    assert statuses["orders-0"]["remote_bytes"] == remote_bytes(cluster, ORDERS, 0)


def test_data_quality_fails_at_once_with_the_failing_expectations_and_the_report(
    cluster: Any, dags: Any, capfd: pytest.CaptureFixture[str]
) -> None:
    # the defect: a remote segment whose .log object is gone while its metadata is FINISHED
    (victim, *_) = remote_logs(cluster, ORDERS)
    victim.unlink()
    dag_run = dags["data_quality"].test()
    tries = {ti.task_id: (str(ti.state), ti.try_number) for ti in dag_run.get_task_instances()}
    assert str(dag_run.state) == "failed"
    assert tries["quality"] == ("failed", 1)  # a failing suite is not retried
    assert tries["publish"][0] == "failed"  # the report is written, and the run fails
    output = capfd.readouterr()
    text = output.out + output.err
    assert "DataQualityFailedError" in text
    assert "failing checks:" in text
    assert "remote_segments" in text
    assert "report: http://localhost:8080/tiered-storage/docs/runs/data_quality/" in text
    summary = latest_summary("data_quality", "quality")
    assert summary["details"]["success"] is False
    runs = airflow_env.reports_dir() / "runs" / "data_quality"
    reports = sorted(runs.glob("*/quality_report.json"), key=lambda p: p.stat().st_mtime)
    assert json.loads(reports[-1].read_text())["failed"] == ["quality"]
