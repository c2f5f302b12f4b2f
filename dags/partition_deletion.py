"""# partition_deletion

**Unpausing this DAG starts nothing**: it has no schedule; only an accepted trigger makes a
run. The hourly sweep of partitions already marked is the `partition_deletion_sweep` DAG.

Deletes a topic and its remote data, on demand (Trigger in the UI, with params):

- **Triggered with a topic**: type the topic name again in `confirm`. The topic is deleted
  through the broker (DeleteTopics), which marks its remote partitions, then
  `jobs.delete_partitions` removes their remote data (`.log`, indexes, snapshots,
  leader-epoch checkpoints) and finishes their metadata in `__remote_log_metadata`. Kafka
  deletes whole topics: `partitions`, when given, must list every partition of the topic.
  With `dry_run` nothing is marked or deleted: the plan (per partition: segments, bytes and
  offsets that would go) is in the `mark_partitions` log and in `plan.txt` of the run.
- **Triggered without a topic**: one sweep now, as `partition_deletion_sweep` does it: only
  partitions already marked DELETE_PARTITION_MARKED or _STARTED (of topics Kafka has already
  deleted) lose their remote data. It never deletes a live topic, nor any broker's local log.

Bad params are refused before a run exists (the trigger answers 400 with the reason): types,
the topic name pattern and partition numbers by the params' schemas, `confirm` not equal to
`topic` by the plugin's trigger guard. A request that the broker refuses (partitions that do
not match the topic) fails `mark_partitions` with the reason as the first line of its log;
nothing is marked or deleted.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from airflow.sdk import Param, dag, task
from tiered_storage_plugin.dag_support import (
    DEFAULT_ARGS,
    REMOTE_TIER,
    START_DATE,
    TAGS,
)
from tiered_storage_plugin.deletion import PARTITIONS_MAX, TOPIC_NAME_MAX, TOPIC_PATTERN
from tiered_storage_plugin.operators import TieringJobOperator

log = logging.getLogger("airflow.task")


@dag(
    dag_id="partition_deletion",
    description="Delete a topic and its remote data (trigger with params; dry run possible)",
    schedule=None,
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
            description="The topic to delete; empty for one sweep of partitions already marked.",
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
            log.error("refused: %s", exc)
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
        hook = TieredStorageHook()
        settings = hook.settings()
        try:
            result = mark_for_deletion(settings.bootstrap_server, parsed, settings.security)
        except DeletionRequestError as exc:
            log.error("refused: %s", exc)
            raise AirflowFailException(f"refused: {exc}") from None
        if result["action"] == "would-delete":
            from airflow.sdk import get_current_context
            from tiered_storage_plugin.deletion import write_plan

            result["plan"] = write_plan(
                get_current_context(), settings, result, hook.job_environment()
            )
        return result

    delete = TieringJobOperator(
        task_id="delete_partitions",
        job="delete_partitions",
        dry_run="{{ params.dry_run }}",
        # a dry run of a topic marks nothing, so the job would find nothing to plan: the plan
        # is mark_partitions' (its log and plan.txt)
        skip_reason="{% if params.dry_run and params.topic %}dry run of topic {{ params.topic }}:"
        " the plan is in mark_partitions' log and plan.txt{% endif %}",
        # a named topic restricts the job to it; the sweep takes every marked partition
        extra_args="{% if params.topic %}--topic {{ params.topic }}{% endif %}",
        changes=REMOTE_TIER,
    )
    mark_partitions(validate_request()) >> delete


partition_deletion()
