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

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

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


def mark_for_deletion(bootstrap_server: str, request: DeletionRequest) -> dict[str, Any]:
    """Delete ``request.topic`` through the broker (which marks its remote partitions), after
    checking that the request covers every partition of it. Returns what was done."""
    from kio.schema.errors import ErrorCode

    from storage_core.client import BrokerResponseError, KafkaAdminClient, KafkaCluster

    with KafkaCluster(bootstrap_server) as cluster:
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
