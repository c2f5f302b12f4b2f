"""ElectLeaders (key 43): preferred or unclean leader election asked by an admin client.

Only the active controller's broker handles it, as Kafka's ZooKeeper-mode brokers do; any
other broker answers NOT_CONTROLLER for the whole request in the shape of Kafka's
``ElectLeadersRequest.getErrorResponse``: the error at the top level (v1+) and on every
requested partition (all versions). So are INVALID_REQUEST for an unknown ``election_type``
(v1+: 0 preferred, 1 unclean; v0 is always preferred) and for a request over
``MAX_PARTITIONS_PER_REQUEST`` partitions.

``topic_partitions`` null means every partition this broker knows; then, as Kafka does, the
partitions that needed no election are left out of the answer. Per partition: NONE,
ELECTION_NOT_NEEDED, PREFERRED_LEADER_NOT_AVAILABLE, ELIGIBLE_LEADERS_NOT_AVAILABLE,
UNKNOWN_TOPIC_OR_PARTITION, INVALID_TOPIC_EXCEPTION (being deleted). Like Kafka's
``DelayedElectLeader``, an elected partition is answered once this broker's metadata shows its
new leader, or REQUEST_TIMED_OUT after the request's ``timeout`` (capped at
``MAX_WAIT_MS``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from kio.schema.errors import ErrorCode

from storage_core.common import TopicPartition
from storage_core.controller.partition_state_machine import ElectionOutcome
from storage_core.protocol.acl import AclOperation
from storage_core.protocol.messages import build
from storage_core.server.broker_services import BrokerServices
from storage_core.server.handlers.auth_helper import authorize_cluster
from storage_core.server.handlers.common import NO_THROTTLE, milliseconds
from storage_core.server.request_context import RequestContext
from storage_core.zk.controller_zk import ControllerMovedError

logger = logging.getLogger(__name__)

API_KEY = 43
MIN_VERSION = 0
MAX_VERSION = 2

PREFERRED = 0
UNCLEAN = 1
MAX_PARTITIONS_PER_REQUEST = 10_000
MAX_WAIT_MS = 60_000  # the longest a request waits for its new leaders to show
_POLL_S = 0.01
NOT_CONTROLLER_MESSAGE = "This is not the correct controller for this cluster."


async def handle(ctx: RequestContext, request: Any) -> Any:
    services = ctx.services
    requested = _requested(request)
    election_type = int(getattr(request, "election_type", PREFERRED))
    if election_type not in (PREFERRED, UNCLEAN):
        return _error_response(
            ctx, requested, ErrorCode.invalid_request, f"Unknown election type {election_type}"
        )
    if requested is not None and len(requested) > MAX_PARTITIONS_PER_REQUEST:
        return _error_response(
            ctx,
            requested,
            ErrorCode.invalid_request,
            f"ElectLeaders asks for {len(requested)} partitions, more than the"
            f" {MAX_PARTITIONS_PER_REQUEST} one request may name: split it into smaller requests",
        )
    if not authorize_cluster(ctx, AclOperation.ALTER):
        return _error_response(
            ctx, requested, ErrorCode.cluster_authorization_failed, "Cluster authorization failed."
        )
    if not services.controller.is_active:
        return _error_response(ctx, requested, ErrorCode.not_controller, NOT_CONTROLLER_MESSAGE)
    partitions = requested if requested is not None else _all_partitions(services)
    try:
        outcomes: dict[TopicPartition, ElectionOutcome] = await asyncio.wrap_future(
            services.controller.elect_leaders(partitions, unclean=election_type == UNCLEAN)
        )
    except ControllerMovedError:
        return _error_response(ctx, requested, ErrorCode.not_controller, NOT_CONTROLLER_MESSAGE)
    timeout_ms = min(max(milliseconds(request.timeout), 0), MAX_WAIT_MS)
    results = await _await_leaders(services, outcomes, timeout_ms)
    if requested is None:
        results = {tp: r for tp, r in results.items() if r[0] is not ErrorCode.election_not_needed}
    return _response(ctx, ErrorCode.none, results)


def _requested(request: Any) -> list[TopicPartition] | None:
    if request.topic_partitions is None:
        return None
    wanted: dict[TopicPartition, None] = {}  # a set, in the order asked
    for topic in request.topic_partitions:
        for partition in topic.partitions:
            wanted[TopicPartition(topic.topic, int(partition))] = None
    return list(wanted)


def _all_partitions(services: BrokerServices) -> list[TopicPartition]:
    image = services.metadata_cache.image()
    return [
        TopicPartition(topic.name, p.partition)
        for topic in image.topics.values()
        for p in topic.partitions
    ]


async def _await_leaders(
    services: BrokerServices, outcomes: dict[TopicPartition, ElectionOutcome], timeout_ms: int
) -> dict[TopicPartition, tuple[ErrorCode, str | None]]:
    """Each partition's answer; an elected one once this broker's metadata shows its leader."""
    results: dict[TopicPartition, tuple[ErrorCode, str | None]] = {}
    waiting: dict[TopicPartition, int] = {}
    for tp, outcome in outcomes.items():
        if outcome.error is not None:
            results[tp] = (ErrorCode[outcome.error], outcome.message)
        elif outcome.leader is not None:
            waiting[tp] = outcome.leader
        else:
            results[tp] = (ErrorCode.none, None)
    deadline = time.monotonic() + timeout_ms / 1000
    while waiting:
        image = services.metadata_cache.image()
        for tp, leader in list(waiting.items()):
            shown = image.partition(tp)
            if shown is not None and shown.leader == leader:
                results[tp] = (ErrorCode.none, None)
                del waiting[tp]
        if not waiting or time.monotonic() >= deadline:
            break
        await asyncio.sleep(_POLL_S)
    for tp, leader in waiting.items():
        logger.warning("elected leader not shown in time, partition=%s leader=%s", tp, leader)
        results[tp] = (ErrorCode.request_timed_out, None)
    return {tp: results[tp] for tp in outcomes}


def _error_response(
    ctx: RequestContext,
    requested: list[TopicPartition] | None,
    error: ErrorCode,
    message: str,
) -> Any:
    return _response(ctx, error, {tp: (error, message) for tp in requested or ()})


def _response(
    ctx: RequestContext,
    error: ErrorCode,
    results: dict[TopicPartition, tuple[ErrorCode, str | None]],
) -> Any:
    """Results grouped by topic; the top-level error exists from v1."""
    module = ctx.response_module
    by_topic: dict[str, list[Any]] = {}
    for tp, (partition_error, message) in results.items():
        by_topic.setdefault(tp.topic, []).append(
            build(
                module.PartitionResult,
                partition_id=tp.partition,
                error_code=partition_error,
                error_message=message,
            )
        )
    return build(
        module.ElectLeadersResponse,
        throttle_time=NO_THROTTLE,
        error_code=error,  # dropped at v0, which has no top-level error
        replica_election_results=tuple(
            build(module.ReplicaElectionResult, topic=topic, partition_result=tuple(parts))
            for topic, parts in by_topic.items()
        ),
    )
