"""The restore_topic DAG's params: refused by their schemas when a run is created, by the
plugin (the trigger guard, before a run exists, and the first task) for what a schema cannot
say; each refusal names the param. A good request becomes jobs.restore_topic's options."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

TOPIC_ID = "kJ2bXy1qS8aW3m0cJfT9Hg"


@pytest.fixture(scope="module")
def restore_dag(airflow_home: Path) -> Any:
    from airflow.dag_processing.dagbag import DagBag

    from tests.unit.airflow.airflow_env import DAGS

    bag = DagBag(dag_folder=str(DAGS))
    assert bag.import_errors == {}
    return bag.dags["restore_topic"]


def validated(dag: Any, conf: dict[str, Any]) -> dict[str, Any]:
    """The params a run created with ``conf`` gets (the run creation's merge, then validate)."""
    params = copy.deepcopy(dag.params)
    params.update(conf)
    return dict(params.validate())


def test_the_params_and_their_defaults(restore_dag: Any) -> None:
    assert validated(restore_dag, {}) == {
        "topic": None,
        "topic_id": None,
        "target": None,
        "partitions": None,
        "restore_offsets": True,
        "allow_gaps": False,
        "dry_run": True,  # a person sees the plan first
    }
    assert restore_dag.max_active_runs == 1
    assert restore_dag.get_task("validate_request").retries == 0
    assert restore_dag.get_task("restore_topic").upstream_task_ids == {"validate_request"}
    assert restore_dag.get_task("restore_topic").job == "restore_topic"


@pytest.mark.parametrize(
    ("conf", "param"),
    [
        ({"topic": "bad topic!"}, "topic"),
        ({"topic": "x" * 250}, "topic"),
        ({"topic": "orders", "target": "a/b"}, "target"),
        ({"topic": "orders", "topic_id": "not-an-id"}, "topic_id"),
        ({"topic": "orders", "topic_id": 7}, "topic_id"),
        ({"topic": "orders", "partitions": [-1]}, "partitions"),
        ({"topic": "orders", "partitions": [0, "1"]}, "partitions"),
        ({"topic": "orders", "partitions": [1, 1]}, "partitions"),
        ({"topic": "orders", "restore_offsets": "yes"}, "restore_offsets"),
        ({"topic": "orders", "allow_gaps": 1}, "allow_gaps"),
        ({"topic": "orders", "dry_run": "false"}, "dry_run"),
    ],
)
def test_a_bad_param_is_refused_when_the_run_is_created_naming_it(
    restore_dag: Any, conf: dict[str, Any], param: str
) -> None:
    from airflow.sdk.exceptions import ParamValidationError

    with pytest.raises(ParamValidationError) as caught:
        validated(restore_dag, conf)
    assert str(caught.value).startswith(f"Invalid input for param {param}:"), caught.value


@pytest.mark.parametrize(
    ("conf", "message"),
    [
        ({}, "topic is required"),
        ({"topic": ""}, "topic is required"),
        ({"topic_id": TOPIC_ID}, "topic is required"),
        ({"topic": "a/b"}, "topic 'a/b' is not a Kafka topic name"),
        ({"topic": ".."}, "topic '..' is not a Kafka topic name"),
        ({"topic": "__consumer_offsets"}, "topic '__consumer_offsets' is internal"),
        ({"topic": "t", "target": "__remote_log_metadata"}, "target '__remote_log_metadata'"),
        ({"topic": "t", "target": "."}, "target '.' is not a Kafka topic name"),
        ({"topic": "t", "topic_id": "AAAAAAAAAAAAAAAAAAAAAA"}, "topic_id 'A+' is not a Kafka"),
        ({"topic": "t", "topic_id": TOPIC_ID[:21]}, "topic_id .* is not a Kafka topic id"),
        ({"topic": "t", "partitions": [0, -1]}, "partitions must be integers >= 0"),
        ({"topic": "t", "partitions": [True]}, "partitions must be integers >= 0"),
        ({"topic": "t", "partitions": [1, 1]}, "partitions lists a partition twice"),
        ({"topic": "t", "dry_run": "no"}, "dry_run must be true or false"),
        ({"topic": "t", "restore_offsets": None}, "restore_offsets must be true or false"),
    ],
)
def test_a_bad_request_is_refused_before_a_run_exists_naming_the_param(
    conf: dict[str, Any], message: str
) -> None:
    from tiered_storage_plugin.restore import RestoreRequestError, parse_restore_request
    from tiered_storage_plugin.trigger_guard import refusal

    with pytest.raises(RestoreRequestError, match=message):
        parse_restore_request(conf)
    reason = refusal("restore_topic", json.dumps({"conf": conf}).encode())
    assert reason is not None and reason.startswith("refused, no run created: "), reason
    assert message.split(maxsplit=1)[0] in reason


def test_a_good_request_becomes_the_jobs_options(restore_dag: Any) -> None:
    from tiered_storage_plugin.restore import parse_restore_request
    from tiered_storage_plugin.trigger_guard import refusal

    defaults = parse_restore_request(validated(restore_dag, {"topic": "orders"}))
    assert defaults.dry_run and defaults.target == "orders"
    assert defaults.job_arguments() == [
        "--topic",
        "orders",
        "--target",
        "orders",
        "--restore-offsets",
    ]
    conf = {
        "topic": "orders",
        "topic_id": TOPIC_ID,
        "target": "orders-back",
        "partitions": [2, 0],
        "restore_offsets": False,
        "allow_gaps": True,
        "dry_run": False,
    }
    request = parse_restore_request(validated(restore_dag, conf))
    assert not request.dry_run
    assert request.job_arguments() == [
        "--topic", "orders", "--target", "orders-back", "--topic-id", TOPIC_ID,
        "--partitions", "0,2", "--allow-gaps",
    ]  # fmt: skip
    assert refusal("restore_topic", json.dumps({"conf": conf}).encode()) is None
