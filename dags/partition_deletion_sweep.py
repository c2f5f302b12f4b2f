"""# partition_deletion_sweep

**Unpausing this DAG starts the sweep**: at 30 minutes past every hour (UTC) while it is
unpaused, the first run as soon as it is unpaused (the latest hourly time already passed).
It has no params and deletes only what Kafka has already deleted.

`jobs.delete_partitions` deletes from the remote tier every object (`.log`, indexes,
snapshots, leader-epoch checkpoints) and finishes the metadata (DELETE_SEGMENT_* then
DELETE_PARTITION_FINISHED in `__remote_log_metadata`) of the partitions already marked
DELETE_PARTITION_MARKED or _STARTED, that is of topics deleted through Kafka (DeleteTopics,
or the `partition_deletion` DAG). It never deletes a live topic, nor any broker's local log.

To delete a topic, trigger `partition_deletion` (which has no schedule) with its params.
Another schedule: set `TIERED_STORAGE_PARTITION_DELETION_SWEEP_SCHEDULE`
(a cron expression or a preset such as `@daily`) for the scheduler and dag-processor.
"""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import dag
from tiered_storage_plugin.dag_support import (
    DEFAULT_ARGS,
    REMOTE_TIER,
    START_DATE,
    TAGS,
    cron_schedule,
    schedule_for,
)
from tiered_storage_plugin.operators import TieringJobOperator


@dag(
    dag_id="partition_deletion_sweep",
    description="Delete the remote data of partitions of topics already deleted",
    schedule=cron_schedule(schedule_for("partition_deletion_sweep", "30 * * * *")),
    start_date=START_DATE,
    catchup=False,
    max_active_runs=1,
    dagrun_timeout=timedelta(hours=2),
    tags=[*TAGS, "deletion"],
    doc_md=__doc__,
    default_args=DEFAULT_ARGS,
)
def partition_deletion_sweep() -> None:
    TieringJobOperator(task_id="delete_partitions", job="delete_partitions", changes=REMOTE_TIER)


partition_deletion_sweep()
