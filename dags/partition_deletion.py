"""# partition_deletion

Removes the remote data of deleted partitions.

- **Scheduled sweep** (hourly, no params): `jobs.delete_partitions` deletes the remote data of
  every partition already marked DELETE_PARTITION_MARKED (by a topic deletion).
- **Triggered with params** (Trigger DAG w/ config in the UI): deletes a topic. Type the topic
  name again in `confirm`. The topic is deleted through the broker (DeleteTopics), which marks
  its remote partitions, then `jobs.delete_partitions` removes their remote data. Kafka deletes
  whole topics: `partitions`, when given, must list every partition of the topic. With
  `dry_run` nothing is marked or deleted; the plan is in the logs.

Bad params are refused when the run is created (types, topic name pattern, partition numbers)
or by the first task (`confirm` must equal `topic`) before anything is marked or deleted.
Another schedule: set `TIERED_STORAGE_PARTITION_DELETION_SCHEDULE`
(a cron expression or a preset such as `@hourly`) for the scheduler and dag-processor.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from airflow.sdk import Param, dag, task
from tiered_storage_plugin.dag_support import (
    DEFAULT_ARGS,
    REMOTE_TIER,
    START_DATE,
    TAGS,
    schedule_for,
)
from tiered_storage_plugin.deletion import PARTITIONS_MAX, TOPIC_NAME_MAX, TOPIC_PATTERN
from tiered_storage_plugin.operators import TieringJobOperator


@dag(
    dag_id="partition_deletion",
    schedule=schedule_for("partition_deletion", "30 * * * *"),
    start_date=START_DATE,
    catchup=False,
    max_active_runs=1,
    dagrun_timeout=timedelta(hours=2),
    tags=[*TAGS, "deletion"],
    doc_md=__doc__,
    default_args=DEFAULT_ARGS,
    params={
        "topic": Param(
            None,
            type=["null", "string"],
            pattern=TOPIC_PATTERN,
            maxLength=TOPIC_NAME_MAX,
            title="Topic",
            description="The topic to delete; empty for the sweep of partitions already marked.",
        ),
        "partitions": Param(
            None,
            type=["null", "array"],
            items={"type": "integer", "minimum": 0},
            uniqueItems=True,
            maxItems=PARTITIONS_MAX,
            title="Partitions",
            description="Optional: every partition number of the topic (Kafka deletes whole"
            " topics).",
        ),
        "confirm": Param(
            None,
            type=["null", "string"],
            maxLength=TOPIC_NAME_MAX,
            title="Confirm",
            description="Type the topic name again to confirm its deletion.",
        ),
        "dry_run": Param(
            False,
            type="boolean",
            title="Dry run",
            description="Plan only: nothing is marked or deleted.",
        ),
    },
)
def partition_deletion() -> None:
    @task(retries=0)
    def validate_request(params: dict[str, Any]) -> dict[str, Any] | None:
        """Refuse a bad request before anything is marked or deleted."""
        from dataclasses import asdict

        from airflow.sdk.exceptions import AirflowFailException
        from tiered_storage_plugin.deletion import DeletionRequestError, parse_request

        try:
            request = parse_request(params)
        except DeletionRequestError as exc:
            raise AirflowFailException(f"refused: {exc}") from None
        return None if request is None else asdict(request)

    @task
    def mark_partitions(request: dict[str, Any] | None) -> dict[str, Any]:
        """DeleteTopics through the broker: its remote partitions become DELETE_PARTITION_MARKED."""
        from airflow.sdk.exceptions import AirflowFailException
        from tiered_storage_plugin.deletion import (
            DeletionRequest,
            DeletionRequestError,
            mark_for_deletion,
        )
        from tiered_storage_plugin.hooks import TieredStorageHook

        if request is None:
            return {"action": "sweep"}
        partitions = request["partitions"]
        parsed = DeletionRequest(
            topic=request["topic"],
            partitions=None if partitions is None else tuple(partitions),
            dry_run=request["dry_run"],
        )
        bootstrap = TieredStorageHook().settings().bootstrap_server
        try:
            return mark_for_deletion(bootstrap, parsed)
        except DeletionRequestError as exc:
            raise AirflowFailException(f"refused: {exc}") from None

    delete = TieringJobOperator(
        task_id="delete_partitions",
        job="delete_partitions",
        dry_run="{{ params.dry_run }}",
        # a named topic restricts the job to it; the sweep takes every marked partition
        extra_args="{% if params.topic %}--topic {{ params.topic }}{% endif %}",
        changes=REMOTE_TIER,
    )
    mark_partitions(validate_request()) >> delete


partition_deletion()
