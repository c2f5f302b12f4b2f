"""CreatePartitions (key 37): grow a topic to ``count`` partitions.

New partitions are assigned, persisted in the topic store and hosted (log created, leader) at
once; producers see them after their next metadata refresh. Each topic succeeds or fails
alone: INVALID_PARTITIONS (a count that does not grow the topic, or too many),
UNKNOWN_TOPIC_OR_PARTITION, INVALID_REQUEST (a topic listed twice), INVALID_REPLICA_ASSIGNMENT
(manual assignments that do not fit the new partitions or name unknown brokers).
``validate_only`` checks and changes nothing.
"""

from __future__ import annotations

import functools
from collections import Counter
from typing import Any

from storage_core.errors import StorageError, UnknownTopicOrPartitionError
from storage_core.server.handlers.common import NO_THROTTLE, error_code_of
from storage_core.server.handlers.config_support import InvalidRequestError
from storage_core.server.protocol import build
from storage_core.server.request_context import RequestContext

API_KEY = 37
MIN_VERSION = 0
MAX_VERSION = 3


class InvalidReplicaAssignmentError(StorageError):
    """Manual replica assignments that do not match the partitions being added."""

    error_code = "invalid_replica_assignment"


async def handle(ctx: RequestContext, request: Any) -> Any:
    module = ctx.response_module
    broker = ctx.broker
    counts = Counter(t.name for t in request.topics)
    results = []
    for topic in request.topics:
        error: StorageError | None = None
        try:
            if counts[topic.name] > 1:
                raise InvalidRequestError("Duplicate topic in request.")
            info = broker.topic_store.get(topic.name)
            if info is None:
                raise UnknownTopicOrPartitionError(f"The topic '{topic.name}' does not exist.")
            if topic.assignments is not None:
                _check_assignments(
                    topic.assignments,
                    added=int(topic.count) - len(info.partitions),
                    replication_factor=len(info.partitions[0].replicas),
                    brokers=(broker.broker_id,),
                )
            await broker.replica_manager.run_io(
                functools.partial(
                    broker.add_partitions,
                    topic.name,
                    int(topic.count),
                    validate_only=bool(request.validate_only),
                )
            )
        except StorageError as exc:
            error = exc
        results.append(
            build(
                module.CreatePartitionsTopicResult,
                name=topic.name,
                error_code=error_code_of(error),
                error_message=None if error is None else str(error),
            )
        )
    return build(module.CreatePartitionsResponse, throttle_time=NO_THROTTLE, results=tuple(results))


def _check_assignments(
    assignments: Any, *, added: int, replication_factor: int, brokers: tuple[int, ...]
) -> None:
    """Kafka's checks of manual assignments; the partition count is checked by the store."""
    if added <= 0:
        return
    if len(assignments) != added:
        raise InvalidReplicaAssignmentError(
            f"Attempted to add {added} additional partition(s), but only"
            f" {len(assignments)} assignment(s) were specified."
        )
    for assignment in assignments:
        replicas = [int(b) for b in assignment.broker_ids]
        if len(replicas) != replication_factor:
            raise InvalidReplicaAssignmentError(
                f"The manual partition assignment includes a partition with {len(replicas)}"
                f" replica(s), but this is not consistent with previous partitions, which have"
                f" {replication_factor} replica(s)."
            )
        if len(set(replicas)) != len(replicas):
            raise InvalidReplicaAssignmentError(
                f"The manual partition assignment includes the broker {replicas[0]} more than once."
            )
        unknown = [b for b in replicas if b not in brokers]
        if unknown:
            raise InvalidReplicaAssignmentError(
                f"The manual partition assignment includes broker {unknown[0]}, but no such"
                " broker is registered."
            )
