"""# retention_nightly

**Unpausing this DAG starts a run at once** (for the latest 02:00 UTC already passed), then one
every night: it deletes remote segments beyond retention and orphaned objects of the remote
tier (never a live topic, nor any broker's local log).

Nightly at 02:00 UTC: finish or roll back transitions stuck in a STARTED state and delete
orphaned objects (`jobs.reconcile`), apply remote retention (`jobs.expire_remote`: retention.ms,
retention.bytes, log start offset, segments off the leader-epoch lineage), check offsets and
epochs (`jobs.quality`); beside them, back up every consumer group's committed offsets in
the remote-enabled topics, with the partitions' high watermarks, to the remote tier
(`jobs.backup_consumer_offsets`: `<prefix>/_consumer-offsets/<ms>.json`, the newest 30 kept);
then write the run's report (`report.json` in the run's directory,
listing every job's summary; written even when a job failed, and the run then fails).
A status snapshot per partition is recorded after the expiry for the Tiered storage page.
Another schedule: set `TIERED_STORAGE_RETENTION_NIGHTLY_SCHEDULE`
(a cron expression or a preset such as `@hourly`) for the scheduler and dag-processor.
"""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import dag, task
from tiered_storage_plugin.dag_support import (
    DEFAULT_ARGS,
    REMOTE_TIER,
    START_DATE,
    TAGS,
    cron_schedule,
    schedule_for,
    tiering_status,
    write_run_report,
)
from tiered_storage_plugin.operators import TieringJobOperator

JOB_TASKS = ("reconcile", "expire_remote", "quality", "backup_consumer_offsets")


@dag(
    dag_id="retention_nightly",
    description="Repair stuck transitions, delete expired and orphaned remote data, check",
    schedule=cron_schedule(schedule_for("retention_nightly", "0 2 * * *")),
    start_date=START_DATE,
    catchup=False,
    max_active_runs=1,
    dagrun_timeout=timedelta(hours=6),
    tags=[*TAGS, "retention"],
    doc_md=__doc__,
    default_args=DEFAULT_ARGS,
)
def retention_nightly() -> None:
    reconcile = TieringJobOperator(task_id="reconcile", job="reconcile", changes=REMOTE_TIER)
    expire = TieringJobOperator(task_id="expire_remote", job="expire_remote", changes=REMOTE_TIER)
    quality = TieringJobOperator(task_id="quality", job="quality")
    backup = TieringJobOperator(task_id="backup_consumer_offsets", job="backup_consumer_offsets")

    @task(trigger_rule="all_done", retries=0)
    def report() -> dict[str, object]:
        from airflow.sdk import get_current_context

        return write_run_report(get_current_context(), JOB_TASKS)

    done = report()
    reconcile >> expire >> quality >> done
    backup >> done
    expire >> tiering_status()


retention_nightly()
