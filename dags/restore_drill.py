"""# restore_drill

**Unpausing this DAG starts a run at once** (for the latest 03:00 UTC already passed), then one
every night, after `retention_nightly` (02:00 UTC) has backed up the consumer offsets.
Another schedule: set `TIERED_STORAGE_RESTORE_DRILL_SCHEDULE` (a cron expression or a preset).

Proves, on a schedule, that the bucket can be restored (`jobs.restore_drill`): a sample of
the remote-enabled partitions (3 by default; the Airflow Variable
`restore_drill_sample_partitions` sets how many), chosen by rotating on the night's date so that
consecutive nights drill every partition, is restored from the bucket alone with
`restore_topic` (`--verify-checksums`: every object read and its checksum compared with its
manifest; `--restore-offsets`) into a scratch topic per source topic,
`restore-drill-<yyyymmdd>-<topic>`. Great Expectations then checks that every record batch
of each drilled partition has the source's base offset, last offset, partition leader epoch
and CRC (and bytes that match it), that the restored offsets are contiguous and cover what the
source had tiered, and that each restored group offset lies in the restored range.

Whatever the verdict, the drill cleans up before it ends: the groups' offsets under the
scratch topics, the scratch topics, then their remote data once their partitions are marked
deleted. It never deletes anything but the scratch topics it created (checked by topic id);
a source's objects are only read.

`publish` writes the run's report (`restore_drill_report.json` in the run's directory) beside
the Data Docs, which the Tiered storage page of the UI serves (`/tiered-storage/`): which
partitions were drilled, into which scratch topic, their offsets and the number of batches
compared. A failing check fails the run at once (no retry: the bucket will not change by
retrying), naming the failing expectations (for instance
`expect_sampled_partition_restored` with the damaged chunk when an object was tampered with)
in the task's log.
"""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import dag, task
from tiered_storage_plugin.dag_support import (
    DEFAULT_ARGS,
    START_DATE,
    TAGS,
    cron_schedule,
    schedule_for,
    write_run_report,
)
from tiered_storage_plugin.operators import TieringJobOperator

SAMPLE_PARTITIONS_VARIABLE = "restore_drill_sample_partitions"
SAMPLE_PARTITIONS_DEFAULT = 3


@dag(
    dag_id="restore_drill",
    description="Restore a sample of partitions from the bucket and check them; clean up",
    schedule=cron_schedule(schedule_for("restore_drill", "0 3 * * *")),
    start_date=START_DATE,
    catchup=False,
    max_active_runs=1,
    dagrun_timeout=timedelta(hours=3),
    tags=[*TAGS, "recovery", "quality"],
    doc_md=__doc__,
    default_args=DEFAULT_ARGS,
)
def restore_drill() -> None:
    drill = TieringJobOperator(
        task_id="restore_drill",
        job="restore_drill",
        extra_args=(
            "--sample-partitions"
            f" {{{{ var.value.get('{SAMPLE_PARTITIONS_VARIABLE}', {SAMPLE_PARTITIONS_DEFAULT}) }}}}"
            " --night {{ ds }}"
        ),
        execution_timeout=timedelta(hours=2),
    )

    @task(trigger_rule="all_done", retries=0)
    def publish() -> dict[str, object]:
        from airflow.sdk import get_current_context

        return write_run_report(
            get_current_context(), ["restore_drill"], name="restore_drill_report"
        )

    drill >> publish()


restore_drill()
