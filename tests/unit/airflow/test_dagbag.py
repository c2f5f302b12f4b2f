"""The DAGs as Airflow parses them: one DagBag load, then structure, schedules and params."""

from __future__ import annotations

import copy
import re
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

EXPECTED = {
    "tiering": ["copy_segments", "quality"],
    "retention_nightly": ["reconcile", "expire_remote", "quality", "report"],
    "partition_deletion": ["validate_request", "mark_partitions", "delete_partitions"],
    "partition_deletion_sweep": ["delete_partitions"],
    "data_quality": ["quality", "publish"],
    "preferred_leader_election": ["validate_request", "elect_leaders"],
    "restore_topic": ["validate_request", "restore_topic"],
    "restore_drill": ["restore_drill", "publish"],
}


@pytest.fixture(scope="module")
def dagbag(airflow_home: Path) -> Any:
    from airflow.dag_processing.dagbag import DagBag

    from tests.unit.airflow.airflow_env import DAGS

    return DagBag(dag_folder=str(DAGS))


# Tasks beside the main chain: the status snapshot, and what the bucket needs for a restore.
SIDE_TASKS = {"status", "topic_manifests", "backup_consumer_offsets"}


def chain(dag: Any) -> list[str]:
    """Task ids in dependency order along the main chain (the side tasks are left out)."""
    order = [t for t in dag.tasks if not t.upstream_task_ids and t.task_id not in SIDE_TASKS]
    assert len(order) == 1, f"{dag.dag_id}: one root task expected"
    while True:
        following = [t for t in order[-1].downstream_list if t.task_id not in SIDE_TASKS]
        if not following:
            return [t.task_id for t in order]
        (nxt,) = following
        order.append(nxt)


def test_dags_load_without_import_errors(dagbag: Any) -> None:
    assert dagbag.import_errors == {}
    assert sorted(dagbag.dags) == sorted(EXPECTED)


@pytest.mark.parametrize("dag_id", sorted(EXPECTED))
def test_dag_conventions(dagbag: Any, dag_id: str) -> None:
    dag = dagbag.dags[dag_id]
    assert Path(dag.fileloc).stem == dag_id
    assert "tiered-storage" in dag.tags
    assert dag.doc_md and dag_id in dag.doc_md
    # the DAG list's one line about what the DAG does
    assert dag.description and "\n" not in dag.description and len(dag.description) <= 80
    assert dag.start_date.utcoffset() == timedelta(0)
    assert dag.catchup is False
    assert dag.max_active_runs == 1
    assert chain(dag) == EXPECTED[dag_id]
    for task in dag.tasks:
        if task.task_id not in ("report", "publish", "validate_request"):
            assert task.retries >= 2, f"{dag_id}.{task.task_id} retries {task.retries}"


def test_schedules_show_in_words(dagbag: Any) -> None:
    """What the DAG list shows (the timetable's summary, the description on hover), as the
    scheduler and the api-server read the serialized DAG back."""
    from airflow.serialization.serialized_objects import DagSerialization

    shown = {}
    for dag_id, dag in dagbag.dags.items():
        timetable = DagSerialization.from_dict(DagSerialization.to_dict(dag)).timetable
        shown[dag_id] = (timetable.summary, timetable.description)
    assert shown == {
        "tiering": ("Every 5 minutes", "cron */5 * * * * (UTC)"),
        "retention_nightly": ("At 02:00 UTC", "cron 0 2 * * * (UTC)"),
        "partition_deletion_sweep": ("At 30 minutes past the hour", "cron 30 * * * * (UTC)"),
        "data_quality": ("Asset", "Triggered by assets"),
        "partition_deletion": ("None", "Never, external triggers only"),
        "preferred_leader_election": ("None", "Never, external triggers only"),
        "restore_topic": ("None", "Never, external triggers only"),
        "restore_drill": ("At 03:00 UTC", "cron 0 3 * * * (UTC)"),
    }
    assert dagbag.dags["data_quality"].timetable.asset_condition.name == (
        "tiered_storage_remote_tier"
    )


# Unpausing a DAG with a schedule starts its latest scheduled run at once (catchup off): the
# DAGs that a user triggers with params have none, so the trigger form's "Unpause on trigger"
# never starts anything, whatever the trigger's answer.
TRIGGERED_ONLY = {"partition_deletion", "preferred_leader_election", "restore_topic"}


@pytest.mark.parametrize("dag_id", sorted(TRIGGERED_ONLY))
def test_dags_triggered_with_params_have_no_schedule(dagbag: Any, dag_id: str) -> None:
    dag = dagbag.dags[dag_id]
    assert dag.params  # the trigger form asks for them
    assert type(dag.timetable).__name__ == "NullTimetable"
    assert "**Unpausing this DAG starts nothing**" in dag.doc_md


@pytest.mark.parametrize("dag_id", sorted(set(EXPECTED) - TRIGGERED_ONLY))
def test_dags_that_run_on_their_own_have_no_params_and_say_what_unpausing_starts(
    dagbag: Any, dag_id: str
) -> None:
    dag = dagbag.dags[dag_id]
    assert not dag.params  # nothing a refused trigger could leave behind
    assert "**Unpausing this DAG starts" in dag.doc_md


def test_remote_tier_asset_is_produced_by_the_jobs_that_change_it(dagbag: Any) -> None:
    """The asset's producers as the scheduler stores them (the outlets of the serialized
    DAGs, which the asset view lists as producing tasks)."""
    from airflow.serialization.serialized_objects import DagSerialization

    producers = set()
    for dag_id, dag in dagbag.dags.items():
        serialized = DagSerialization.from_dict(DagSerialization.to_dict(dag))
        for task in serialized.tasks:
            if "tiered_storage_remote_tier" in {getattr(o, "name", None) for o in task.outlets}:
                producers.add((dag_id, task.task_id))
    assert producers == {
        ("tiering", "copy_segments"),
        ("retention_nightly", "reconcile"),
        ("retention_nightly", "expire_remote"),
        ("partition_deletion", "delete_partitions"),
        ("partition_deletion_sweep", "delete_partitions"),
        ("restore_topic", "restore_topic"),
    }


@pytest.mark.parametrize(
    ("dag_id", "after"),
    [
        ("tiering", {"copy_segments"}),
        ("retention_nightly", {"expire_remote"}),
        ("data_quality", set()),
    ],
)
def test_status_snapshot_follows_the_job_that_changed_the_tier(
    dagbag: Any, dag_id: str, after: set[str]
) -> None:
    status = dagbag.dags[dag_id].get_task("status")
    assert status.upstream_task_ids == after and not status.downstream_task_ids
    assert status.retries >= 2


def test_the_bucket_manifests_are_written_beside_the_chains(dagbag: Any) -> None:
    """tiering writes the topic manifests after the copy, beside the check; retention_nightly
    backs up the consumer offsets beside its chain, and its report lists that job too."""
    tiering = dagbag.dags["tiering"]
    manifests = tiering.get_task("topic_manifests")
    assert manifests.upstream_task_ids == {"copy_segments"} and not manifests.downstream_task_ids
    assert manifests.job == "topic_manifests" and manifests.retries >= 2
    assert "topic_manifests" in tiering.doc_md
    nightly = dagbag.dags["retention_nightly"]
    backup = nightly.get_task("backup_consumer_offsets")
    assert not backup.upstream_task_ids and backup.downstream_task_ids == {"report"}
    assert backup.job == "backup_consumer_offsets" and backup.retries >= 2
    assert "backup_consumer_offsets" in nightly.doc_md


def test_tiering_checks_the_copies_of_its_own_copy_task(dagbag: Any, tmp_path: Path) -> None:
    """The quality task reads the record the copy task of the same run writes beside its
    summary: each copy's LSO at planning, checked against the segment's end."""
    from jobs.common.copied_segments import copied_segments_path

    dag = dagbag.dags["tiering"]
    copy_task, quality = dag.get_task("copy_segments"), dag.get_task("quality")
    run_dir = tmp_path / "runs" / "tiering" / "20260101T000000--20260101T000500"
    hook = SimpleNamespace(
        settings=lambda: SimpleNamespace(job_arguments=list, copy_max_bytes_per_second=None)
    )
    copy_cmd = copy_task.command(hook, run_dir / copy_task.task_id)
    quality_cmd = quality.command(hook, run_dir / quality.task_id)
    written = copied_segments_path(Path(copy_cmd[copy_cmd.index("--summary-path") + 1]))
    assert quality_cmd[quality_cmd.index("--copied-segments") + 1] == str(written)


def test_report_tasks_run_after_failures(dagbag: Any) -> None:
    assert dagbag.dags["retention_nightly"].get_task("report").trigger_rule == "all_done"
    assert dagbag.dags["data_quality"].get_task("publish").trigger_rule == "all_done"


# ---------------------------------------------------------------- partition_deletion params
GOOD_CONFS = [
    {},
    {"topic": "orders", "confirm": "orders"},
    {"topic": "orders.v2_eu-1", "confirm": "orders.v2_eu-1", "partitions": [0, 1, 2]},
    {"topic": "orders", "confirm": "orders", "partitions": None, "dry_run": True},
]
BAD_CONFS = [
    ({"topic": "bad topic!"}, "does not match"),
    ({"topic": "x" * 250}, "does not match|is too long"),
    ({"topic": "orders", "partitions": [-1]}, "less than the minimum of 0"),
    ({"topic": "orders", "partitions": [0, "1"]}, "is not of type 'integer'"),
    ({"topic": "orders", "partitions": [1, 1]}, "non-unique elements"),
    ({"topic": "orders", "partitions": 3}, "is not of type 'null', 'array'|is not valid under any"),
    ({"dry_run": "yes"}, "is not of type 'boolean'"),
    ({"topic": 5}, "is not of type 'null', 'string'|is not valid under any"),
]


def validated(dag: Any, conf: dict[str, Any]) -> dict[str, Any]:
    """The params a run created with ``conf`` gets (the run creation's merge, then validate)."""
    params = copy.deepcopy(dag.params)
    params.update(conf)
    return params.validate()


@pytest.fixture
def deletion_dag(dagbag: Any) -> Any:
    return dagbag.dags["partition_deletion"]


def test_param_defaults_are_valid(dagbag: Any) -> None:
    for dag in dagbag.dags.values():
        dag.params.validate()


@pytest.mark.parametrize("conf", GOOD_CONFS)
def test_good_conf_is_accepted(deletion_dag: Any, conf: dict[str, Any]) -> None:
    params = validated(deletion_dag, conf)
    assert {k: params[k] for k in conf} == conf


@pytest.mark.parametrize(("conf", "message"), BAD_CONFS)
def test_bad_conf_is_refused_with_a_clear_message(
    deletion_dag: Any, conf: dict[str, Any], message: str
) -> None:
    from airflow.sdk.exceptions import ParamValidationError

    with pytest.raises(ParamValidationError) as caught:
        validated(deletion_dag, conf)
    text = str(caught.value)
    assert text.startswith("Invalid input for param ")
    assert re.search(message, text), text


@pytest.mark.parametrize(
    ("conf", "message"),
    [
        ({"topic": "orders"}, "confirm must equal the topic name 'orders'"),
        ({"topic": "orders", "confirm": "Orders"}, "got 'Orders'"),
        ({"confirm": "orders"}, "partitions and confirm need a topic"),
        ({"partitions": [0]}, "partitions and confirm need a topic"),
        ({"topic": "__consumer_offsets", "confirm": "__consumer_offsets"}, "internal"),
        ({"topic": "..", "confirm": ".."}, "not a Kafka topic name"),
    ],
)
def test_deletion_request_refused_before_anything_runs(
    deletion_dag: Any, conf: dict[str, Any], message: str
) -> None:
    from tiered_storage_plugin.deletion import DeletionRequestError, parse_request

    params = validated(deletion_dag, conf)
    with pytest.raises(DeletionRequestError, match=message):
        parse_request(params)


def test_deletion_request_parsed(deletion_dag: Any) -> None:
    from tiered_storage_plugin.deletion import DeletionRequest, parse_request

    assert parse_request(deletion_dag.params.validate()) is None  # the scheduled sweep
    conf = {"topic": "orders", "confirm": "orders", "partitions": [2, 0, 1], "dry_run": True}
    assert parse_request(validated(deletion_dag, conf)) == DeletionRequest(
        topic="orders", partitions=(0, 1, 2), dry_run=True
    )


def test_the_validation_task_runs_first(deletion_dag: Any) -> None:
    validate = deletion_dag.get_task("validate_request")
    assert validate.retries == 0
    assert not validate.upstream_task_ids
    assert deletion_dag.get_task("mark_partitions").upstream_task_ids == {"validate_request"}


def test_a_schedule_can_be_replaced_through_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from airflow.dag_processing.dagbag import DagBag

    from tests.unit.airflow.airflow_env import DAGS

    monkeypatch.setenv("TIERED_STORAGE_TIERING_SCHEDULE", "*/15 * * * *")
    monkeypatch.setenv("TIERED_STORAGE_RETENTION_NIGHTLY_SCHEDULE", "every night")
    bag = DagBag(dag_folder=str(DAGS))
    assert bag.dags["tiering"].timetable.summary == "Every 15 minutes"
    (error,) = [e for path, e in bag.import_errors.items() if path.endswith("retention_nightly.py")]
    assert "TIERED_STORAGE_RETENTION_NIGHTLY_SCHEDULE='every night' is not a cron" in error
