"""The restore_drill DAG with ``dag.test()`` on a broker's chunked, encrypted tier
(``tests/chunked_broker_support``; the cluster is the ``tiered_storage_default`` connection).

Story::

    chunked-tier: records 0..299, segments 0..k copied   topic_manifests writes its manifest;
    group "readers" at 120                               backup_consumer_offsets backs it up
    a night's run                  green: chunked-tier-0 drilled, the report names it and its
                                   scratch topic; the Data Docs are where the quality job's
                                   are (the latest the plugin serves); nothing of the drill left
    one byte of the last copied    red at once (no retry), the failing expectation and the
    segment's chunk flipped        damaged chunk named in the log; the report still written
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from storage_core.client import KafkaAdminClient, KafkaCluster
from storage_core.tiered.metadata.metadata import RemoteLogSegmentMetadata
from storage_core.tiered.metadata.states import RemoteLogSegmentState
from tests.chunked_broker_support import TOPIC, ChunkedTier, restorable_tier_for_airflow
from tests.tiered_broker_support import client_rlmm
from tests.unit.airflow import airflow_env

pytestmark = pytest.mark.timeout(600)

DAG_ID = "restore_drill"


@pytest.fixture(scope="module")
def tier(airflow_home: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChunkedTier]:
    with restorable_tier_for_airflow(
        tmp_path_factory.mktemp("drill-dag"), group="readers", group_offset=120
    ) as tier:
        yield tier


@pytest.fixture(scope="module")
def dag(airflow_home: Path) -> Any:
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(airflow_env.DAGS))
    assert bag.import_errors == {}
    return bag.dags[DAG_ID]


def drill_left(tier: ChunkedTier) -> list[str]:
    with KafkaCluster(tier.broker.bootstrap) as kafka:
        topics = KafkaAdminClient(kafka).list_topics()
    objects = [
        str(p)
        for p in tier.remote_dir.rglob("*")
        if p.is_file() and "restore-drill-" in str(p.relative_to(tier.remote_dir))
    ]
    return [t for t in topics if t.startswith("restore-drill-")] + objects


def last_copied_segment(tier: ChunkedTier) -> RemoteLogSegmentMetadata:
    """The source's highest COPY_SEGMENT_FINISHED segment now (the broker's own tiering may
    have copied more than the fixture did)."""
    with client_rlmm(tier.broker.bootstrap) as rlmm:
        finished = [
            m
            for m in rlmm.list_remote_log_segments(tier.topic_id_partition)
            if m.state is RemoteLogSegmentState.COPY_SEGMENT_FINISHED
        ]
    return max(finished, key=lambda m: m.end_offset)


def latest_report() -> dict[str, Any]:
    runs = airflow_env.reports_dir() / "runs" / DAG_ID
    reports = sorted(runs.glob("*/restore_drill_report.json"), key=lambda p: p.stat().st_mtime)
    assert reports, "no restore_drill report"
    return dict(json.loads(reports[-1].read_text()))


def test_a_nightly_drill_is_green_then_red_on_a_tampered_segment(
    tier: ChunkedTier, dag: Any, capfd: pytest.CaptureFixture[str]
) -> None:
    from tiered_storage_plugin import status

    dag_run = dag.test()
    states = {ti.task_id: str(ti.state) for ti in dag_run.get_task_instances()}
    assert (str(dag_run.state), states) == (
        "success",
        {"restore_drill": "success", "publish": "success"},
    )
    report = latest_report()
    summary = report["jobs"]["restore_drill"]["summary"]
    (drilled,) = summary["details"]["drilled"]
    assert (drilled["topic"], drilled["partition"]) == (TOPIC, 0)
    assert drilled["scratch_topic"].startswith("restore-drill-")
    assert drilled["restored_next_offset"] == last_copied_segment(tier).end_offset + 1
    assert summary["counts"]["batches_compared"] > 0
    docs = Path(summary["details"]["data_docs"])
    assert docs.is_file()
    assert status.latest_data_docs(airflow_env.reports_dir()) == docs.parent
    assert drill_left(tier) == []

    last = last_copied_segment(tier)
    tier.corrupt_chunk(last, 0)
    capfd.readouterr()
    dag_run = dag.test()
    tries = {ti.task_id: (str(ti.state), ti.try_number) for ti in dag_run.get_task_instances()}
    logged = "".join(capfd.readouterr())
    assert str(dag_run.state) == "failed"
    assert tries["restore_drill"] == ("failed", 1)  # a verdict: not retried
    assert tries["publish"][0] == "failed"  # the report is written, and the run fails
    assert "DataQualityFailedError" in logged and "failing checks:" in logged
    assert "expect_sampled_partition_restored" in logged
    assert "chunk 0 of its .log fails its checksum" in logged
    assert latest_report()["failed"] == ["restore_drill"]
    assert drill_left(tier) == []
