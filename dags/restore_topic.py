"""# restore_topic

**Unpausing this DAG starts nothing**: it has no schedule; only an accepted trigger makes a run.

On demand (Trigger in the UI, with params): restores a topic from the remote tier's bucket
alone (`jobs.restore_topic`), as after losing the brokers that held it, or into another name
beside a source that lives. What the bucket holds (each segment's manifest, the topic
manifests of the `tiering` DAG, the consumer offset backups of `retention_nightly`) is all
it reads.

- `topic`: the topic to restore, as the bucket names it (required).
- `topic_id`: the incarnation to restore when the bucket holds several of the name (a topic
  deleted and created again); a run without it is then refused, listing them.
- `target`: the topic to create (default: the source's name). It must not exist: a run is
  refused naming it, unless it is a restore under way (see below).
- `partitions`: optional partition numbers; empty for every partition of the topic.
- `restore_offsets` (default on): each group's committed offsets, from the newest backup,
  committed in the target, clamped to the restored range (a group with active members is
  left as it is and named).
- `allow_gaps` (default off): a partition whose bucket data has a gap is restored from above
  the gap; without it the whole restore stops, the gap named, before anything is created.
- `dry_run` (default **on**: look at the plan first): nothing is created, written or
  committed. The `restore_topic` task's log holds the plan: a `plan` line per partition
  (segments, log start and end offsets, the offset producers continue at, bytes, leader
  epochs), a `left-out` line per segment not restored and why, a `stopped` line per partition
  that cannot be, and with `restore_offsets` an `offset` line per group and partition.

With `dry_run` off the target is created with the source's partition count, replication
factor and configs, each segment's objects are copied inside the store under the target's
topic id and its metadata published, the partitions start their logs after the restored
segments (producers continue at the next offset, consumers read the restored history from the
remote tier), then the offsets are committed. The task's XCom is the run summary.

What it does not do: it never deletes or overwrites an object of the source (the source's
objects are only read; only objects under the target's new topic id are written), never
touches a topic that exists unless a restore of it is under way, and does not restore topics
the bucket has no manifest for. A run cut short (a failure, a kill, the task's timeout) leaves
the target marked as under restore: run the DAG again with the same params and it resumes
where it stopped. Only one run at a time.

Bad params are refused before a run exists (the trigger answers 400 naming the param): types,
topic name patterns, the topic id pattern and partition numbers by the params' schemas, a
missing topic or a bad topic id by the plugin's trigger guard (and by the `validate_request`
task).
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from airflow.sdk import Param, dag, task
from tiered_storage_plugin.dag_support import DEFAULT_ARGS, REMOTE_TIER, START_DATE, TAGS
from tiered_storage_plugin.deletion import PARTITIONS_MAX, TOPIC_NAME_MAX, TOPIC_PATTERN
from tiered_storage_plugin.operators import TieringJobOperator
from tiered_storage_plugin.restore import TOPIC_ID_PATTERN

log = logging.getLogger("airflow.task")


@dag(
    dag_id="restore_topic",
    description="Restore a topic from the remote tier's bucket (trigger with params; dry run)",
    schedule=None,
    start_date=START_DATE,
    catchup=False,
    max_active_runs=1,
    dagrun_timeout=timedelta(hours=6),
    tags=[*TAGS, "recovery"],
    doc_md=__doc__,
    default_args=DEFAULT_ARGS,
    params={
        # null by default (a DAG's defaults must validate); a run without a topic is refused
        # by the trigger guard (400) and by validate_request
        "topic": Param(
            None,
            type=["null", "string"],
            pattern=TOPIC_PATTERN,
            maxLength=TOPIC_NAME_MAX,
            title="Topic",
            description="Required: the topic to restore, as the bucket names it.",
        ),
        "topic_id": Param(
            None,
            type=["null", "string"],
            pattern=TOPIC_ID_PATTERN,
            title="Topic id",
            description="Optional: the incarnation to restore (a topic id, 22 characters)"
            " when the bucket holds several of the name.",
        ),
        "target": Param(
            None,
            type=["null", "string"],
            pattern=TOPIC_PATTERN,
            maxLength=TOPIC_NAME_MAX,
            title="Target",
            description="Optional: the topic to create; empty for the source's name. It must"
            " not exist.",
        ),
        "partitions": Param(
            None,
            type=["null", "array"],
            items={"type": "integer", "minimum": 0},
            uniqueItems=True,
            maxItems=PARTITIONS_MAX,
            title="Partitions",
            description="Optional partition numbers; empty for every partition of the topic.",
        ),
        "restore_offsets": Param(
            True,
            type="boolean",
            title="Restore consumer offsets",
            description="Commit each group's offsets from the newest backup, clamped to the"
            " restored range.",
        ),
        "allow_gaps": Param(
            False,
            type="boolean",
            title="Allow gaps",
            description="Restore a partition whose bucket data has a gap from above the gap.",
        ),
        "dry_run": Param(
            True,
            type="boolean",
            title="Dry run",
            description="Plan only (in the restore_topic task's log): nothing is created.",
        ),
    },
)
def restore_topic() -> None:
    @task(retries=0)
    def validate_request(params: dict[str, Any]) -> list[str]:
        """Refuse a bad request before the bucket or the cluster is asked anything."""
        from airflow.sdk.exceptions import AirflowFailException
        from tiered_storage_plugin.restore import RestoreRequestError, parse_restore_request

        try:
            request = parse_restore_request(params)
        except RestoreRequestError as exc:
            log.error("refused: %s", exc)
            raise AirflowFailException(f"refused: {exc}") from None
        return request.job_arguments()

    restore = TieringJobOperator(
        task_id="restore_topic",
        job="restore_topic",
        dry_run="{{ params.dry_run }}",
        extra_args="{{ ti.xcom_pull(task_ids='validate_request') | join(' ') }}",
        changes=REMOTE_TIER,
        execution_timeout=timedelta(hours=2),
    )
    validate_request() >> restore


restore_topic()
