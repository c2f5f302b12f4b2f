"""# preferred_leader_election

**Unpausing this DAG starts nothing**: it has no schedule; only an accepted trigger makes a run.

On demand (Trigger in the UI, with params): gives the partitions of a topic back to their
preferred replica (the first of each partition's assignment), as Kafka's
`kafka-leader-election --election-type PREFERRED` does, through the controller (ElectLeaders).
After a broker restarts, the partitions it led stay with the replicas that took over, unless
`auto.leader.rebalance.enable` moves them back: this DAG moves them back now.

- `topic`: the topic (required).
- `partitions`: optional partition numbers; empty for every partition of the topic.

The `elect_leaders` task (`jobs.preferred_leader_election`) reports per partition, in its
log and its run summary (the task's XCom): `elected` (the preferred replica leads now),
`already_preferred` (it led already: ELECTION_NOT_NEEDED) or `error` with the controller's
error, e.g. PREFERRED_LEADER_NOT_AVAILABLE when the preferred replica is down or out of the
ISR; the task then fails (and is retried: the replica may be catching up). The status page
shows which partitions are led by another replica than their preferred one.

Bad params are refused before a run exists (the trigger answers 400 naming the param): the
topic name pattern and partition numbers by the params' schemas, a missing topic by the
plugin's trigger guard (and by the `validate_request` task). A topic or partition the
cluster does not have fails `elect_leaders` at once (no retry), naming it; nothing is
elected.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from airflow.sdk import Param, dag, task
from tiered_storage_plugin.dag_support import DEFAULT_ARGS, START_DATE, TAGS
from tiered_storage_plugin.deletion import PARTITIONS_MAX, TOPIC_NAME_MAX, TOPIC_PATTERN
from tiered_storage_plugin.operators import TieringJobOperator

log = logging.getLogger("airflow.task")


@dag(
    dag_id="preferred_leader_election",
    description="Give a topic's partitions back to their preferred leaders (trigger with params)",
    schedule=None,
    start_date=START_DATE,
    catchup=False,
    max_active_runs=1,
    dagrun_timeout=timedelta(minutes=30),
    tags=[*TAGS, "leadership"],
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
            description="Required: the topic whose partitions go back to their preferred replica.",
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
    },
)
def preferred_leader_election() -> None:
    @task(retries=0)
    def validate_request(params: dict[str, Any]) -> list[str]:
        """Refuse a bad request before anything is asked of the cluster."""
        from airflow.sdk.exceptions import AirflowFailException
        from tiered_storage_plugin.election import ElectionRequestError, parse_election_request

        try:
            request = parse_election_request(params)
        except ElectionRequestError as exc:
            log.error("refused: %s", exc)
            raise AirflowFailException(f"refused: {exc}") from None
        return request.job_arguments()

    elect = TieringJobOperator(
        task_id="elect_leaders",
        job="preferred_leader_election",
        extra_args="{{ ti.xcom_pull(task_ids='validate_request') | join(' ') }}",
    )
    validate_request() >> elect


preferred_leader_election()
