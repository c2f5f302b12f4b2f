"""OffsetDelete (key 47): delete a group's committed offsets of some partitions.

Partitions of unknown topics, or beyond a topic's partition count, get
UNKNOWN_TOPIC_OR_PARTITION (Kafka checks its metadata cache); the others go to the
coordinator. A group-level error (e.g. GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP) is the whole
answer: the topic list is then empty, as in Kafka.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from storage_core.common import TopicPartition
from storage_core.coordinator.group.group_deletion import OffsetDeleteResult
from storage_core.errors import StorageError, UnknownTopicOrPartitionError
from storage_core.protocol.acl import AclOperation, ResourceType
from storage_core.protocol.messages import build
from storage_core.server.handlers.auth_helper import (
    TopicAuthorizationFailedError,
    authorize,
    filter_by_authorized,
)
from storage_core.server.handlers.common import NO_THROTTLE, error_code_of
from storage_core.server.handlers.group_support import NOT_RUNNING, coordinator_of
from storage_core.server.request_context import RequestContext

API_KEY = 47
MIN_VERSION = 0
MAX_VERSION = 0


async def handle(ctx: RequestContext, request: Any) -> Any:
    module = ctx.response_module
    if not authorize(ctx, AclOperation.DELETE, ResourceType.GROUP, request.group_id):
        return build(
            module.OffsetDeleteResponse,
            error_code=ErrorCode.group_authorization_failed,
            throttle_time=NO_THROTTLE,
            topics=(),
        )
    readable = filter_by_authorized(
        ctx,
        AclOperation.READ,
        ResourceType.TOPIC,
        (t.name for t in request.topics for _p in t.partitions),
    )
    results: dict[TopicPartition, StorageError | None] = {}
    known: list[TopicPartition] = []
    for topic in request.topics:
        info = ctx.services.topic_store.get(topic.name)
        for partition in topic.partitions:
            tp = TopicPartition(topic.name, partition.partition_index)
            if topic.name not in readable:
                results[tp] = TopicAuthorizationFailedError(topic.name)
            elif info is None or info.partition(partition.partition_index) is None:
                results[tp] = UnknownTopicOrPartitionError(f"{tp} does not exist")
            else:
                known.append(tp)
    coordinator = coordinator_of(ctx)
    if coordinator is None:
        outcome = OffsetDeleteResult(error=NOT_RUNNING)
    else:
        outcome = await coordinator.delete_offsets(group_id=request.group_id, partitions=known)
    module = ctx.response_module
    if outcome.error is not None:
        return build(
            module.OffsetDeleteResponse,
            error_code=error_code_of(outcome.error),
            throttle_time=NO_THROTTLE,
            topics=(),
        )
    results.update(outcome.partitions)
    return build(
        module.OffsetDeleteResponse,
        error_code=error_code_of(None),
        throttle_time=NO_THROTTLE,
        topics=tuple(
            module.OffsetDeleteResponseTopic(
                name=topic.name,
                partitions=tuple(
                    module.OffsetDeleteResponsePartition(
                        partition_index=p.partition_index,
                        error_code=error_code_of(
                            results[TopicPartition(topic.name, p.partition_index)]
                        ),
                    )
                    for p in dict.fromkeys(topic.partitions)
                ),
            )
            for topic in request.topics
        ),
    )
