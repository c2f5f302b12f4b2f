"""# data_quality

**Unpausing this DAG starts nothing by itself**: its next run follows the next job run that
changes the remote tier (changes made while it was paused are not queued). It reads and
reports; it deletes nothing.

On demand, and after every job run that changed the remote tier (the
`tiered_storage_remote_tier` Asset, updated by tiering, retention_nightly, partition_deletion
and partition_deletion_sweep runs that copied, deleted or repaired something; idle runs do not
trigger it): builds the offsets-and-epochs tables and runs the expectation suites
(`jobs.quality`), then publishes the run's report (`quality_report.json` in the run's
directory) beside the Great Expectations Data Docs, which the Tiered storage page of the UI
serves (`/tiered-storage/`), and records a status snapshot per partition for that page. A
failing suite fails the run: the failing expectations and a link to the Data Docs are in the
quality task's log.
"""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import dag, task
from tiered_storage_plugin.dag_support import (
    DEFAULT_ARGS,
    REMOTE_TIER,
    START_DATE,
    TAGS,
    tiering_status,
    write_run_report,
)
from tiered_storage_plugin.operators import TieringJobOperator


@dag(
    dag_id="data_quality",
    description="Check the remote tier's offsets and epochs; publish the Data Docs",
    schedule=REMOTE_TIER,
    start_date=START_DATE,
    catchup=False,
    max_active_runs=1,
    dagrun_timeout=timedelta(hours=1),
    tags=[*TAGS, "quality"],
    doc_md=__doc__,
    default_args=DEFAULT_ARGS,
)
def data_quality() -> None:
    quality = TieringJobOperator(task_id="quality", job="quality")

    @task(trigger_rule="all_done", retries=0)
    def publish() -> dict[str, object]:
        from airflow.sdk import get_current_context

        return write_run_report(get_current_context(), ["quality"], name="quality_report")

    quality >> publish()
    tiering_status()


data_quality()
