"""# tiering

**Unpausing this DAG starts a run at once**, then one every 5 minutes. It copies to the remote
tier and deletes nothing but the objects of its own copies that a failure interrupted.

Every 5 minutes: copy every eligible closed segment of the partitions the brokers lead to the
remote tier (`jobs.copy_segments`), then check offsets and epochs (`jobs.quality`, which also
checks that each copy of the run ended below the LSO it was planned with) and, beside it,
record a status snapshot per partition (offsets, local and remote bytes, copy lag) for the
Tiered storage page of the UI. Also beside the check, each remote-enabled topic's manifest is
written to the remote tier (`jobs.topic_manifests`:
`<prefix>/<topic>-<topicId>/topic-manifest.json`, with the topic's id, its own configs and per
partition the remote log's offsets), so that the bucket alone says which topic each directory
holds.
Runs never overlap (`max_active_runs=1`); a copy interrupted by a failure is rolled back by the
job and finished by the next run. The cluster is the `tiered_storage_default` connection.
The copies of a run hold the cluster's copy quota (KIP-956): the strictest broker's
`remote.log.manager.copy.max.bytes.per.second` (`kafka-configs --entity-type brokers
--entity-default --alter --add-config remote.log.manager.copy.max.bytes.per.second=N`), or
the connection's extra `copy_max_bytes_per_second` when set.
Another schedule: set `TIERED_STORAGE_TIERING_SCHEDULE`
(a cron expression or a preset such as `@hourly`) for the scheduler and dag-processor.
"""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import dag
from tiered_storage_plugin.dag_support import (
    DEFAULT_ARGS,
    REMOTE_TIER,
    START_DATE,
    TAGS,
    TIERING_SCHEDULE_DEFAULT,
    cron_schedule,
    schedule_for,
    tiering_status,
)
from tiered_storage_plugin.operators import TieringJobOperator


@dag(
    dag_id="tiering",
    description="Copy closed segments to the remote tier, then check offsets and epochs",
    schedule=cron_schedule(schedule_for("tiering", TIERING_SCHEDULE_DEFAULT)),
    start_date=START_DATE,
    catchup=False,
    max_active_runs=1,
    dagrun_timeout=timedelta(minutes=60),
    tags=[*TAGS, "copy"],
    doc_md=__doc__,
    default_args=DEFAULT_ARGS,
)
def tiering() -> None:
    copy = TieringJobOperator(task_id="copy_segments", job="copy_segments", changes=REMOTE_TIER)
    quality = TieringJobOperator(
        task_id="quality", job="quality", copied_segments_of="copy_segments"
    )
    manifests = TieringJobOperator(task_id="topic_manifests", job="topic_manifests")
    copy >> quality
    copy >> manifests
    copy >> tiering_status()


tiering()
