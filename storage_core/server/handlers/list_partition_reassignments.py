"""ListPartitionReassignments (key 46): the partition reassignments in progress, each with its
replicas (RS = target + original) and the replicas being added and removed.

Only the active controller's broker answers; any other broker answers NOT_CONTROLLER at the
top level. ``topics`` null lists every reassignment; named partitions that are not reassigning
(or do not exist) are left out, as Kafka does. INVALID_REQUEST for a request naming more than
``MAX_PARTITIONS_PER_REQUEST`` partitions.
"""

from __future__ import annotations

import asyncio
from typing import Any

from kio.schema.errors import ErrorCode

from storage_core.common import TopicPartition
from storage_core.protocol.acl import AclOperation
from storage_core.protocol.messages import build
from storage_core.server.handlers.auth_helper import authorize_cluster
from storage_core.server.handlers.common import NO_THROTTLE
from storage_core.server.request_context import RequestContext
from storage_core.zk.controller_zk import ControllerMovedError
from storage_core.zk.zk_data import ReplicaAssignment

API_KEY = 46
MIN_VERSION = 0
MAX_VERSION = 0

MAX_PARTITIONS_PER_REQUEST = 10_000
NOT_CONTROLLER_MESSAGE = "This is not the correct controller for this cluster."


async def handle(ctx: RequestContext, request: Any) -> Any:
    services = ctx.services
    if not authorize_cluster(ctx, AclOperation.DESCRIBE):
        return _top_level(
            ctx, ErrorCode.cluster_authorization_failed, "Cluster authorization failed."
        )
    requested: list[TopicPartition] | None = None
    if request.topics is not None:
        wanted: dict[TopicPartition, None] = {}  # a set, in the order asked
        for topic in request.topics:
            for index in topic.partition_indexes:
                wanted[TopicPartition(topic.name, int(index))] = None
        requested = list(wanted)
        if len(requested) > MAX_PARTITIONS_PER_REQUEST:
            return _top_level(
                ctx,
                ErrorCode.invalid_request,
                f"ListPartitionReassignments names {len(requested)} partitions, more than the"
                f" {MAX_PARTITIONS_PER_REQUEST} one request may name",
            )
    if not services.controller.is_active:
        return _top_level(ctx, ErrorCode.not_controller, NOT_CONTROLLER_MESSAGE)
    try:
        ongoing: dict[TopicPartition, ReplicaAssignment] = await asyncio.wrap_future(
            services.controller.list_partition_reassignments(requested)
        )
    except ControllerMovedError:
        return _top_level(ctx, ErrorCode.not_controller, NOT_CONTROLLER_MESSAGE)
    module = ctx.response_module
    by_topic: dict[str, list[Any]] = {}
    for tp, assignment in ongoing.items():
        by_topic.setdefault(tp.topic, []).append(
            build(
                module.OngoingPartitionReassignment,
                partition_index=tp.partition,
                replicas=assignment.replicas,
                adding_replicas=assignment.adding_replicas,
                removing_replicas=assignment.removing_replicas,
            )
        )
    return build(
        module.ListPartitionReassignmentsResponse,
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        error_message=None,
        topics=tuple(
            build(module.OngoingTopicReassignment, name=topic, partitions=tuple(parts))
            for topic, parts in by_topic.items()
        ),
    )


def _top_level(ctx: RequestContext, error: ErrorCode, message: str) -> Any:
    return build(
        ctx.response_module.ListPartitionReassignmentsResponse,
        throttle_time=NO_THROTTLE,
        error_code=error,
        error_message=message,
        topics=(),
    )
