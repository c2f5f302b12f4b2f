"""Partition deletion requests from the ``partition_deletion`` DAG's params.

Params (validated by their JSON schemas when the run is created, then here)::

    topic       null for the scheduled sweep, else a Kafka topic name
    partitions  null (the whole topic) or the topic's partition numbers (ints >= 0)
    confirm     must equal ``topic``: the user types the topic name to confirm
    dry_run     plan only: nothing is marked or deleted

Kafka deletes whole topics: DeleteTopics marks every remote partition of the topic
DELETE_PARTITION_MARKED, and the ``delete_partitions`` job then removes their remote data. A
request naming only some partitions of a live topic is refused. Marking is idempotent: when the
topic is already gone (a retry after DeleteTopics succeeded), there is nothing left to mark and
the sweep goes on.
"""

from __future__ import annotations

import logging
import os
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tiered_storage_plugin.client_security import (
    ClientSecurity,
    client_config_environment,
    connection_config,
)

log = logging.getLogger("airflow.task")

TOPIC_PATTERN = r"^[A-Za-z0-9._-]{1,249}$"
TOPIC_NAME_MAX = 249
PARTITIONS_MAX = 10_000
_TOPIC = re.compile(TOPIC_PATTERN)


class DeletionRequestError(ValueError):
    """The deletion request is invalid; nothing was marked or deleted."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DeletionRequest:
    """A user's request to delete ``topic`` (all partitions, or exactly ``partitions``)."""

    topic: str
    partitions: tuple[int, ...] | None
    dry_run: bool


def parse_request(params: Mapping[str, Any]) -> DeletionRequest | None:
    """The request the params describe, or None for the scheduled sweep (no topic named).

    Raises ``DeletionRequestError`` saying what to fix."""
    topic = params.get("topic")
    partitions = params.get("partitions")
    confirm = params.get("confirm")
    if partitions == []:  # the trigger form's empty list: no partitions named
        partitions = None
    dry_run = params.get("dry_run", False)
    if not isinstance(dry_run, bool):
        raise DeletionRequestError(f"dry_run must be true or false, got {dry_run!r}")
    if topic in (None, ""):
        if partitions or confirm:
            raise DeletionRequestError(
                "partitions and confirm need a topic: name the topic to delete,"
                " or leave all three empty for the sweep of partitions already marked"
            )
        return None
    if not isinstance(topic, str) or not _TOPIC.match(topic) or topic in (".", ".."):
        raise DeletionRequestError(
            f"topic {topic!r} is not a Kafka topic name (1-{TOPIC_NAME_MAX} characters"
            " of letters, digits, '.', '_' and '-')"
        )
    if topic.startswith("__"):
        raise DeletionRequestError(f"topic {topic!r} is internal and cannot be deleted here")
    if confirm != topic:
        raise DeletionRequestError(
            f"confirm must equal the topic name {topic!r} to delete it, got {confirm!r}:"
            " nothing was marked or deleted"
        )
    if partitions is not None:
        if not isinstance(partitions, list | tuple) or len(partitions) > PARTITIONS_MAX:
            raise DeletionRequestError(
                f"partitions must be a list of at most {PARTITIONS_MAX} partition numbers"
            )
        if any(isinstance(p, bool) or not isinstance(p, int) or p < 0 for p in partitions):
            raise DeletionRequestError(
                f"partitions must be integers >= 0, got {list(partitions)!r}"
            )
        if len(set(partitions)) != len(partitions):
            raise DeletionRequestError(f"partitions lists a partition twice: {list(partitions)}")
        partitions = tuple(sorted(partitions))
    return DeletionRequest(topic=topic, partitions=partitions, dry_run=dry_run)


def without_test_libraries() -> None:
    """Keep hypothesis out of the task's process before the Kafka client is imported.

    kio's phantom types import hypothesis when it is installed (a development install) to
    register test strategies; hypothesis pulls in pytest and trio, and trio's import warns
    (``HypothesisWarning`` about ``register_random``) into the task log. Nothing here uses
    them: as the broker's command does (``storage_core.cli``), the import is made to fail
    at once. A process that has imported hypothesis already (a test) keeps it."""
    sys.modules.setdefault("hypothesis", None)  # type: ignore[arg-type] # None: import fails


def mark_for_deletion(
    bootstrap_server: str, request: DeletionRequest, security: ClientSecurity | None = None
) -> dict[str, Any]:
    """Delete ``request.topic`` through the broker (which marks its remote partitions), after
    checking that the request covers every partition of it, connecting as ``security`` says.
    Returns what was done."""
    without_test_libraries()
    from kio.schema.errors import ErrorCode

    from storage_core.client import BrokerResponseError, KafkaAdminClient, KafkaCluster

    config = connection_config(security or ClientSecurity())
    with KafkaCluster(bootstrap_server, config=config) as cluster:
        admin = KafkaAdminClient(cluster)
        try:
            (description,) = admin.describe_topics([request.topic])
        except BrokerResponseError as exc:
            if exc.error != ErrorCode.unknown_topic_or_partition:
                raise
            return {"topic": request.topic, "action": "none", "reason": "topic already deleted"}
        existing = sorted(p.partition for p in description.metadata.partitions)
        if request.partitions is not None and list(request.partitions) != existing:
            missing = sorted(set(request.partitions) - set(existing))
            if missing:
                raise DeletionRequestError(
                    f"topic {request.topic!r} has partitions {existing}; {missing} do not exist"
                )
            raise DeletionRequestError(
                f"Kafka deletes whole topics: {request.topic!r} has partitions {existing} and"
                f" the request names {list(request.partitions)}. Name every partition, or none,"
                " to delete the topic; nothing was marked or deleted"
            )
        if request.dry_run:
            return {"topic": request.topic, "action": "would-delete", "partitions": existing}
        admin.delete_topics([request.topic])
    return {"topic": request.topic, "action": "deleted", "partitions": existing}


SNAPSHOT_FILE = "plan_status.json"
PLAN_FILE = "plan.txt"
PLAN_COLUMNS = (
    "partition",
    "local segments",
    "local bytes",
    "remote segments",
    "remote bytes",
    "offsets that would go",
)


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanRow:
    """What deleting one partition would remove: its local and remote segments and bytes,
    and its offsets ``[log_start_offset, high_watermark)`` (start inclusive, end exclusive)."""

    partition: str
    local_segments: int | None
    local_bytes: int | None
    remote_segments: int | None
    remote_bytes: int | None
    log_start_offset: int | None
    high_watermark: int | None

    def offsets(self) -> str:
        if self.log_start_offset is None or self.high_watermark is None:
            return "unknown (no remote-enabled log dir here)"
        if self.high_watermark <= self.log_start_offset:
            return "none (empty)"
        count = self.high_watermark - self.log_start_offset
        return f"{self.log_start_offset}..{self.high_watermark - 1} ({count} offsets)"


def deletion_plan(
    topic: str, partitions: Sequence[int], entries: Sequence[Mapping[str, Any]]
) -> list[PlanRow]:
    """A row per partition of ``topic`` from the status entries (``cluster_status``)."""
    by_name = {str(e.get("partition")): e for e in entries}
    rows = []
    for partition in partitions:
        entry = by_name.get(f"{topic}-{partition}", {})
        rows.append(
            PlanRow(
                partition=f"{topic}-{partition}",
                local_segments=entry.get("local_segments"),
                local_bytes=entry.get("local_bytes"),
                remote_segments=entry.get("remote_segments"),
                remote_bytes=entry.get("remote_bytes"),
                log_start_offset=entry.get("log_start_offset"),
                high_watermark=entry.get("high_watermark"),
            )
        )
    return rows


def plan_table(rows: Sequence[PlanRow]) -> str:
    """The plan as an aligned text table with a totals line."""

    def number(value: int | None) -> str:
        return "-" if value is None else str(value)

    body = [
        (
            r.partition,
            number(r.local_segments),
            number(r.local_bytes),
            number(r.remote_segments),
            number(r.remote_bytes),
            r.offsets(),
        )
        for r in rows
    ]
    total = (
        f"total ({len(rows)} partitions)",
        str(sum(r.local_segments or 0 for r in rows)),
        str(sum(r.local_bytes or 0 for r in rows)),
        str(sum(r.remote_segments or 0 for r in rows)),
        str(sum(r.remote_bytes or 0 for r in rows)),
        str(
            sum(
                max(0, r.high_watermark - r.log_start_offset)
                for r in rows
                if r.high_watermark is not None and r.log_start_offset is not None
            )
        )
        + " offsets",
    )
    table = [PLAN_COLUMNS, *body, total]
    widths = [max(len(line[i]) for line in table) for i in range(len(PLAN_COLUMNS))]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            c.ljust(w) if i in (0, 5) else c.rjust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(PLAN_COLUMNS), rule, *(line(c) for c in body), rule, line(total)])


def write_plan(
    context: Mapping[str, Any],
    settings: Any,
    result: Mapping[str, Any],
    env: Mapping[str, str] | None = None,
) -> list[dict[str, Any]]:
    """The dry run's plan for ``result`` (a ``would-delete`` answer of ``mark_for_deletion``):
    logged as a table and written to ``<run dir>/mark_partitions/plan.txt``, which the
    plugin's web app serves at ``/tiered-storage/plans/<dag_id>/<run key>``."""
    from dataclasses import asdict

    from tiered_storage_plugin import paths
    from tiered_storage_plugin.cluster_status import topic_snapshot
    from tiered_storage_plugin.operators import job_environment

    topic = str(result["topic"])
    run_dir = paths.run_dir(context)
    target = run_dir / "mark_partitions" / PLAN_FILE
    target.parent.mkdir(parents=True, exist_ok=True)
    # not summary.json: the status page reads those, and this one covers one topic only
    with client_config_environment(settings.security) as client_env:
        entries = topic_snapshot(
            settings,
            topic,
            target.with_name(SNAPSHOT_FILE),
            job_environment({**(env or {}), **client_env}),
        )
    rows = deletion_plan(topic, result["partitions"], entries)
    table = plan_table(rows)
    temporary = target.with_name(f".{PLAN_FILE}.tmp")
    temporary.write_text(
        f"Dry run: deleting topic {topic} would remove (nothing was marked or deleted)\n\n{table}\n"
    )
    os.replace(temporary, target)
    log.info("dry run: deleting topic %s would remove:\n%s", topic, table)
    log.info("plan: %s (file %s)", plan_url(run_dir), target)
    return [asdict(r) for r in rows]


def plan_url(run_dir: Any) -> str:
    """Where the plugin's web app serves the plan of the run in ``run_dir``."""
    from airflow.configuration import conf

    from tiered_storage_plugin import paths
    from tiered_storage_plugin.operators import DEFAULT_BASE_URL

    base = (conf.get("api", "base_url", fallback=None) or DEFAULT_BASE_URL).rstrip("/")
    return f"{base}{paths.URL_PREFIX}/plans/{run_dir.parent.name}/{run_dir.name}"
