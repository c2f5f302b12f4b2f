"""The restore_topic DAG with ``dag.test()`` on a broker's chunked, encrypted tier
(``tests/chunked_broker_support``; the cluster is the ``tiered_storage_default`` connection,
which names the broker's server.properties for the tier's settings).

Story::

    chunked-tier: records 0..299, segments 0..k copied   topic_manifests writes its manifest;
    group "readers" at 120                               backup_consumer_offsets backs it up
    bad params                  refused at run creation naming the param, or by
                                validate_request (no topic): restore_topic never runs
    dry run (the default)       the task log holds the plan line of chunked-tier-0 and the
                                offset line of readers; no target, no object written
    dry_run false               restored-dag created: every record 0..E read back from the
                                remote tier, readers at 120 there; the source's objects as
                                they were; the remote tier asset event emitted
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as ConfluentTopicPartition

from storage_core.client import KafkaAdminClient, KafkaCluster
from tests.chunked_broker_support import TOPIC, ChunkedTier, restorable_tier_for_airflow, value_of
from tests.unit.airflow import airflow_env

pytestmark = pytest.mark.timeout(900)

DAG_ID = "restore_topic"
TARGET = "restored-dag"
GROUP, GROUP_OFFSET = "readers", 120


@pytest.fixture(scope="module")
def tier(airflow_home: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChunkedTier]:
    with restorable_tier_for_airflow(
        tmp_path_factory.mktemp("restore-dag"), group=GROUP, group_offset=GROUP_OFFSET
    ) as tier:
        yield tier


@pytest.fixture(scope="module")
def dag(airflow_home: Path) -> Any:
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(airflow_env.DAGS))
    assert bag.import_errors == {}
    return bag.dags[DAG_ID]


def run(dag: Any, conf: dict[str, Any]) -> tuple[str, dict[str, str | None]]:
    dag_run = dag.test(run_conf=conf)
    states = {ti.task_id: ti.state for ti in dag_run.get_task_instances()}
    return str(dag_run.state), {k: None if v is None else str(v) for k, v in states.items()}


def topics(tier: ChunkedTier) -> list[str]:
    with KafkaCluster(tier.broker.bootstrap) as kafka:
        return list(KafkaAdminClient(kafka).list_topics())


def objects(tier: ChunkedTier) -> dict[Path, tuple[int, int]]:
    return {
        p: (p.stat().st_size, p.stat().st_mtime_ns)
        for p in tier.remote_dir.rglob("*")
        if p.is_file()
    }


def latest_summary() -> dict[str, Any]:
    paths = sorted(
        (airflow_env.reports_dir() / "runs" / DAG_ID).glob("*/restore_topic/summary.json"),
        key=lambda p: p.stat().st_mtime,
    )
    assert paths, "no summary of restore_topic"
    return dict(json.loads(paths[-1].read_text()))


def test_bad_params_are_refused_before_the_restore_runs(tier: ChunkedTier, dag: Any) -> None:
    from airflow.sdk.exceptions import ParamValidationError

    with pytest.raises(ParamValidationError, match="Invalid input for param target"):
        dag.test(run_conf={"topic": TOPIC, "target": "no such/topic"})
    with pytest.raises(ParamValidationError, match="Invalid input for param topic_id"):
        dag.test(run_conf={"topic": TOPIC, "topic_id": "not-a-topic-id"})
    with pytest.raises(ParamValidationError, match="Invalid input for param partitions"):
        dag.test(run_conf={"topic": TOPIC, "partitions": [-1]})
    # no topic: the schemas allow null (the defaults must validate), the first task refuses
    state, states = run(dag, {"target": TARGET, "dry_run": False})
    assert (state, states) == (
        "failed",
        {"validate_request": "failed", "restore_topic": "upstream_failed"},
    )
    assert TARGET not in topics(tier)


def test_a_dry_run_logs_the_plan_and_creates_nothing(
    tier: ChunkedTier, dag: Any, capfd: pytest.CaptureFixture[str]
) -> None:
    before = objects(tier)
    capfd.readouterr()
    state, states = run(dag, {"topic": TOPIC, "target": TARGET})  # dry_run by default
    logged = "".join(capfd.readouterr())
    assert (state, states) == (
        "success",
        {"validate_request": "success", "restore_topic": "success"},
    )
    end = tier.copied[-1].end_offset
    (plan,) = [line for line in logged.splitlines() if f"plan partition={TOPIC}-0 " in line]
    assert f"target={TARGET}-0" in plan and f"segments={len(tier.copied)}" in plan, plan
    assert "log_start_offset=0" in plan and f"next_offset={end + 1}" in plan, plan
    assert f"offset group={GROUP} partition={TARGET}-0" in logged
    assert "--dry-run" in logged  # the command the task ran
    assert "job=restore_topic remote tier unchanged: no asset event" in logged
    assert TARGET not in topics(tier)
    assert objects(tier) == before
    assert latest_summary()["counts"]["segments_planned"] == len(tier.copied)


def test_a_restore_through_the_dag_reads_back_every_record(
    tier: ChunkedTier, dag: Any, capfd: pytest.CaptureFixture[str]
) -> None:
    source = {
        p: stat
        for p, stat in objects(tier).items()
        if str(tier.topic_id_partition.topic_id) in str(p)
    }
    capfd.readouterr()
    state, states = run(dag, {"topic": TOPIC, "target": TARGET, "dry_run": False})
    assert (state, states) == (
        "success",
        {"validate_request": "success", "restore_topic": "success"},
    )
    # new remote segments (the target's): data_quality is triggered by the asset event
    assert "job=restore_topic remote tier changed: asset event" in "".join(capfd.readouterr())
    summary = latest_summary()
    assert summary["counts"]["segments_restored"] == len(tier.copied), summary
    assert summary["counts"]["groups_restored"] == 1, summary
    end = tier.copied[-1].end_offset
    consumer = Consumer(
        {"bootstrap.servers": tier.broker.bootstrap, "group.id": GROUP, "enable.auto.commit": False}
    )
    try:
        (committed,) = consumer.committed([ConfluentTopicPartition(TARGET, 0)], timeout=20)
        assert committed.offset == GROUP_OFFSET
        consumer.assign([ConfluentTopicPartition(TARGET, 0, 0)])
        records: list[tuple[int, bytes]] = []
        misses = 0
        while misses < 30:
            message = consumer.poll(1)
            if message is None:
                misses += 1
                continue
            assert message.error() is None, message.error()
            records.append((message.offset(), message.value()))
            if message.offset() >= end:
                break
    finally:
        consumer.close()
    assert records == [(i, value_of(i)) for i in range(end + 1)]
    assert {p: s for p, s in objects(tier).items() if p in source} == source
