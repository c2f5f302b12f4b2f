"""AlterPartitionReassignments (key 45): start, replace or cancel partition reassignments
(KIP-455; v1 adds ``allow_replication_factor_change``, KIP-860).

Only the active controller's broker handles it, as Kafka's ZooKeeper-mode brokers do; any
other broker answers NOT_CONTROLLER at the top level with no partition results (Kafka's
``sendResponseCallback(Right(error))``). So does INVALID_REQUEST for a request naming more than
``MAX_PARTITIONS_PER_REQUEST`` partitions. Per partition: NONE (accepted: the reassignment goes
on in the background), UNKNOWN_TOPIC_OR_PARTITION, INVALID_REPLICA_ASSIGNMENT (empty,
duplicates, negative ids, a broker to add that is not alive), INVALID_REPLICATION_FACTOR (v1,
when not allowed), NO_REASSIGNMENT_IN_PROGRESS (a cancellation with nothing to cancel), each
with Kafka's message. A partition named twice counts once, its last target winning.
"""

from __future__ import annotations

import asyncio
from typing import Any

from kio.schema.errors import ErrorCode

from storage_core.common import TopicPartition
from storage_core.controller.reassignment import ReassignmentOutcome
from storage_core.protocol.acl import AclOperation
from storage_core.protocol.messages import build
from storage_core.server.handlers.auth_helper import authorize_cluster
from storage_core.server.handlers.common import NO_THROTTLE
from storage_core.server.request_context import RequestContext
from storage_core.zk.controller_zk import ControllerMovedError

API_KEY = 45
MIN_VERSION = 0
MAX_VERSION = 1

MAX_PARTITIONS_PER_REQUEST = 10_000
NOT_CONTROLLER_MESSAGE = "This is not the correct controller for this cluster."


async def handle(ctx: RequestContext, request: Any) -> Any:
    services = ctx.services
    requested: dict[TopicPartition, tuple[int, ...] | None] = {}
    for topic in request.topics:
        for partition in topic.partitions:
            replicas = partition.replicas
            requested[TopicPartition(topic.name, int(partition.partition_index))] = (
                None if replicas is None else tuple(int(r) for r in replicas)
            )
    allow_change = bool(getattr(request, "allow_replication_factor_change", True))
    if not authorize_cluster(ctx, AclOperation.ALTER):
        return _top_level(
            ctx,
            ErrorCode.cluster_authorization_failed,
            "Cluster authorization failed.",
            allow_change,
        )
    if len(requested) > MAX_PARTITIONS_PER_REQUEST:
        return _top_level(
            ctx,
            ErrorCode.invalid_request,
            f"AlterPartitionReassignments names {len(requested)} partitions, more than the"
            f" {MAX_PARTITIONS_PER_REQUEST} one request may name: split it into smaller requests",
            allow_change,
        )
    if not services.controller.is_active:
        return _top_level(ctx, ErrorCode.not_controller, NOT_CONTROLLER_MESSAGE, allow_change)
    try:
        outcomes: dict[TopicPartition, ReassignmentOutcome] = await asyncio.wrap_future(
            services.controller.alter_partition_reassignments(
                requested, allow_replication_factor_change=allow_change
            )
        )
    except ControllerMovedError:
        return _top_level(ctx, ErrorCode.not_controller, NOT_CONTROLLER_MESSAGE, allow_change)
    module = ctx.response_module
    by_topic: dict[str, list[Any]] = {}
    for tp, outcome in outcomes.items():
        by_topic.setdefault(tp.topic, []).append(
            build(
                module.ReassignablePartitionResponse,
                partition_index=tp.partition,
                error_code=ErrorCode.none if outcome.error is None else ErrorCode[outcome.error],
                error_message=outcome.message,
            )
        )
    return build(
        module.AlterPartitionReassignmentsResponse,
        throttle_time=NO_THROTTLE,
        allow_replication_factor_change=allow_change,
        error_code=ErrorCode.none,
        error_message=None,
        responses=tuple(
            build(module.ReassignableTopicResponse, name=topic, partitions=tuple(parts))
            for topic, parts in by_topic.items()
        ),
    )


def _top_level(ctx: RequestContext, error: ErrorCode, message: str, allow_change: bool) -> Any:
    return build(
        ctx.response_module.AlterPartitionReassignmentsResponse,
        throttle_time=NO_THROTTLE,
        allow_replication_factor_change=allow_change,
        error_code=error,
        error_message=message,
        responses=(),
    )
