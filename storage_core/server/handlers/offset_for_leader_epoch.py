"""OffsetForLeaderEpoch (key 23): the end offset of a leader epoch (KIP-101/KIP-279).

Consumers use it after a leader change to detect log truncation; followers use it to find
where to truncate. The answer comes from the leader-epoch cache: the start offset of the
next higher epoch, or the log end offset for the latest epoch; -1/-1 for an unknown epoch.
With an authorizer a follower needs CLUSTER_ACTION, a client DESCRIBE on the topic (else
TOPIC_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from typing import Any

from storage_core.common import TopicPartition
from storage_core.errors import StorageError
from storage_core.protocol.acl import CLUSTER_NAME, AclOperation, ResourceType
from storage_core.protocol.messages import build
from storage_core.server.handlers.auth_helper import (
    TopicAuthorizationFailedError,
    authorize,
    filter_by_authorized,
)
from storage_core.server.handlers.common import NO_THROTTLE, error_code_of
from storage_core.server.request_context import RequestContext

API_KEY = 23
MIN_VERSION = 2
MAX_VERSION = 4


async def handle(ctx: RequestContext, request: Any) -> Any:
    module = ctx.response_module
    replica_manager = ctx.services.replica_manager
    topics = []
    names = [t.topic for t in request.topics for _p in t.partitions]
    # a follower with CLUSTER_ACTION reads every partition; a client needs DESCRIBE on each topic
    allowed = (
        set(names)
        if authorize(
            ctx,
            AclOperation.CLUSTER_ACTION,
            ResourceType.CLUSTER,
            CLUSTER_NAME,
            log_if_denied=False,
        )
        else filter_by_authorized(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, names)
    )
    for topic in request.topics:
        partitions = []
        for p in topic.partitions:
            epoch, end_offset, error = -1, -1, None
            try:
                if topic.topic not in allowed:
                    raise TopicAuthorizationFailedError(topic.topic)
                partition = replica_manager.get_partition(TopicPartition(topic.topic, p.partition))
                epoch, end_offset = partition.last_offset_for_leader_epoch(
                    p.leader_epoch, current_leader_epoch=p.current_leader_epoch
                )
            except StorageError as exc:
                error = exc
            partitions.append(
                build(
                    module.EpochEndOffset,
                    error_code=error_code_of(error),
                    partition=p.partition,
                    leader_epoch=epoch,
                    end_offset=end_offset,
                )
            )
        topics.append(
            build(
                module.OffsetForLeaderTopicResult, topic=topic.topic, partitions=tuple(partitions)
            )
        )
    return build(
        module.OffsetForLeaderEpochResponse, throttle_time=NO_THROTTLE, topics=tuple(topics)
    )
