"""OffsetCommit (key 8): store a group's consumed positions in ``__consumer_offsets``.

Partitions of unknown topics get UNKNOWN_TOPIC_OR_PARTITION (Kafka checks its metadata cache);
the others go to the coordinator, which answers per partition. The v2-v4 retention time is
ignored: offsets are kept until overwritten or deleted (no offset expiration). With an
authorizer: READ on the group (else GROUP_AUTHORIZATION_FAILED on every partition) and on each
topic (else TOPIC_AUTHORIZATION_FAILED on its partitions); a denied offset is not stored.
"""

from __future__ import annotations

from typing import Any

from storage_core.common import TopicPartition
from storage_core.coordinator.group.offset_and_metadata import (
    OffsetAndMetadata,
)
from storage_core.errors import StorageError, UnknownTopicOrPartitionError
from storage_core.protocol.acl import AclOperation, ResourceType
from storage_core.protocol.messages import build
from storage_core.server.handlers.auth_helper import (
    GroupAuthorizationFailedError,
    TopicAuthorizationFailedError,
    authorize,
    filter_by_authorized,
)
from storage_core.server.handlers.common import NO_THROTTLE, error_code_of
from storage_core.server.handlers.group_support import NOT_RUNNING, coordinator_of
from storage_core.server.request_context import RequestContext

API_KEY = 8
MIN_VERSION = 2
MAX_VERSION = 8


async def handle(ctx: RequestContext, request: Any) -> Any:
    now_ms = ctx.services.clock.milliseconds()
    results: dict[TopicPartition, StorageError | None] = {}
    offsets: dict[TopicPartition, OffsetAndMetadata] = {}
    group_allowed = authorize(ctx, AclOperation.READ, ResourceType.GROUP, request.group_id)
    readable = (
        filter_by_authorized(
            ctx,
            AclOperation.READ,
            ResourceType.TOPIC,
            (t.name for t in request.topics for _p in t.partitions),
        )
        if group_allowed
        else set()
    )
    for topic in request.topics:
        info = ctx.services.topic_store.get(topic.name)
        for partition in topic.partitions:
            tp = TopicPartition(topic.name, partition.partition_index)
            if not group_allowed:
                results[tp] = GroupAuthorizationFailedError(
                    f"Not authorized to access group: {request.group_id}"
                )
                continue
            if topic.name not in readable:
                results[tp] = TopicAuthorizationFailedError(topic.name)
                continue
            if info is None or info.partition(partition.partition_index) is None:
                results[tp] = UnknownTopicOrPartitionError(
                    f"{tp} does not exist: offsets are committed for existing partitions only"
                )
                continue
            offsets[tp] = OffsetAndMetadata(
                offset=partition.committed_offset,
                leader_epoch=max(int(getattr(partition, "committed_leader_epoch", -1)), -1),
                metadata=partition.committed_metadata or "",
                commit_timestamp_ms=now_ms,
            )
    coordinator = coordinator_of(ctx)
    if offsets:
        if coordinator is None:
            results.update(dict.fromkeys(offsets, NOT_RUNNING))
        else:
            results.update(
                await coordinator.commit_offsets(
                    group_id=request.group_id,
                    member_id=request.member_id,
                    group_instance_id=getattr(request, "group_instance_id", None),
                    generation_id=request.generation_id_or_member_epoch,
                    offsets=offsets,
                )
            )
    module = ctx.response_module
    return build(
        module.OffsetCommitResponse,
        throttle_time=NO_THROTTLE,
        topics=tuple(
            module.OffsetCommitResponseTopic(
                name=topic.name,
                partitions=tuple(
                    module.OffsetCommitResponsePartition(
                        partition_index=p.partition_index,
                        error_code=error_code_of(
                            results[TopicPartition(topic.name, p.partition_index)]
                        ),
                    )
                    for p in topic.partitions
                ),
            )
            for topic in request.topics
        ),
    )
