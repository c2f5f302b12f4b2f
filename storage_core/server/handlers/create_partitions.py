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
from storage_core.protocol.acl import AclOperation, ResourceType
from storage_core.protocol.messages import build
from storage_core.server.handlers.auth_helper import TopicAuthorizationFailedError, authorize
from storage_core.server.handlers.common import NO_THROTTLE, error_code_of
from storage_core.server.handlers.config_support import InvalidRequestError
from storage_core.server.request_context import RequestContext

API_KEY = 37
MIN_VERSION = 0
MAX_VERSION = 3


async def handle(ctx: RequestContext, request: Any) -> Any:
    module = ctx.response_module
    services = ctx.services
    counts = Counter(t.name for t in request.topics)
    results = []
    for topic in request.topics:
        error: StorageError | None = None
        try:
            if counts[topic.name] > 1:
                raise InvalidRequestError("Duplicate topic in request.")
            if not authorize(ctx, AclOperation.ALTER, ResourceType.TOPIC, topic.name):
                raise TopicAuthorizationFailedError(topic.name)
            info = services.topic_store.get(topic.name)
            if info is None:
                raise UnknownTopicOrPartitionError(f"The topic '{topic.name}' does not exist.")
            assignment = None
            if topic.assignments is not None:
                assignment = tuple(tuple(int(b) for b in a.broker_ids) for a in topic.assignments)
            await services.replica_manager.run_io(
                functools.partial(
                    services.admin_manager.add_partitions,
                    topic.name,
                    int(topic.count),
                    validate_only=bool(request.validate_only),
                    replica_assignment=assignment,
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
