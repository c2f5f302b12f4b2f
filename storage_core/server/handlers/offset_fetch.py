"""OffsetFetch (key 9): a group's committed offsets, for named partitions or all of them.

v1 has no group-level error: it is reported on every partition. v2+ accept null topics for
"every partition with a committed offset". v8 (KIP-709) asks for several groups at once.
A partition without a committed offset answers offset -1, leader epoch -1, metadata "".
With an authorizer: DESCRIBE on the group (else GROUP_AUTHORIZATION_FAILED) and on each topic
(a requested one answers TOPIC_AUTHORIZATION_FAILED, "all" leaves it out).
v7+ ``require_stable`` (KIP-447): a partition whose offset is pending in a transaction (or
being written) answers UNSTABLE_OFFSET_COMMIT with offset -1, in v7 and v8 alike, as Kafka's
``getOffsets`` does; the consumer retries it. Without it the committed offset is answered.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from types import ModuleType
from typing import Any

from kio.schema.errors import ErrorCode

from storage_core.common import TopicPartition
from storage_core.coordinator.group.offset_manager import OffsetFetchResult
from storage_core.protocol.acl import AclOperation, ResourceType
from storage_core.protocol.messages import build
from storage_core.server.handlers.auth_helper import (
    GroupAuthorizationFailedError,
    authorize,
    filter_by_authorized,
)
from storage_core.server.handlers.common import NO_THROTTLE, error_code_of
from storage_core.server.handlers.group_support import NOT_RUNNING, coordinator_of
from storage_core.server.request_context import RequestContext

API_KEY = 9
MIN_VERSION = 1
MAX_VERSION = 8


def _fetch(
    ctx: RequestContext, group_id: str, topics: Any, require_stable: bool
) -> tuple[OffsetFetchResult, list[TopicPartition] | None]:
    partitions = (
        None
        if topics is None
        else [TopicPartition(t.name, int(p)) for t in topics for p in t.partition_indexes]
    )
    if not authorize(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
        denied = GroupAuthorizationFailedError(f"Not authorized to access group: {group_id}")
        return OffsetFetchResult(error=denied, offsets={}), partitions
    coordinator = coordinator_of(ctx)
    if coordinator is None:
        return OffsetFetchResult(error=NOT_RUNNING, offsets={}), partitions
    # Offsets of topics it may not describe are not disclosed: left out of "all", and
    # TOPIC_AUTHORIZATION_FAILED where asked for by name.
    describable = filter_by_authorized(
        ctx,
        AclOperation.DESCRIBE,
        ResourceType.TOPIC,
        [tp.topic for tp in partitions] if partitions is not None else [],
    )
    wanted = None if partitions is None else [tp for tp in partitions if tp.topic in describable]
    result = coordinator.fetch_offsets(
        group_id=group_id, partitions=wanted, require_stable=require_stable
    )
    if partitions is None and ctx.services.authorizer is not None:
        shown = filter_by_authorized(
            ctx,
            AclOperation.DESCRIBE,
            ResourceType.TOPIC,
            {tp.topic for tp in result.offsets},
            log_if_denied=False,
        )
        result = dataclasses.replace(
            result, offsets={tp: o for tp, o in result.offsets.items() if tp.topic in shown}
        )
    return result, partitions


def _denied_topics(ctx: RequestContext, requested: list[TopicPartition] | None) -> frozenset[str]:
    """The requested topics the principal may not describe (asked again, not audited)."""
    if requested is None or ctx.services.authorizer is None:
        return frozenset()
    names = {tp.topic for tp in requested}
    allowed = filter_by_authorized(
        ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, names, log_if_denied=False
    )
    return frozenset(names - allowed)


def _topics(
    module: ModuleType,
    topic_class: str,
    partition_class: str,
    result: OffsetFetchResult,
    requested: list[TopicPartition] | None,
    *,
    partition_errors: bool,
    denied_topics: frozenset[str] = frozenset(),
) -> tuple[Any, ...]:
    """Per-topic answers in request order (or topic/partition order for "all").

    A group-level error leaves no topics (v2+), or is repeated on every partition (v1).
    """
    if result.error is not None and not partition_errors:
        return ()
    order = requested if requested is not None else sorted(result.offsets)
    by_topic: dict[str, list[Any]] = defaultdict(list)
    group_error = error_code_of(result.error if partition_errors else None)
    for tp in order:
        committed = result.offsets.get(tp)
        partition_error = (
            error_code_of(result.partition_errors.get(tp))
            if group_error == ErrorCode.none
            else group_error
        )
        by_topic[tp.topic].append(
            build(
                getattr(module, partition_class),
                partition_index=tp.partition,
                committed_offset=-1 if committed is None else committed.offset,
                committed_leader_epoch=-1 if committed is None else committed.leader_epoch,
                metadata="" if committed is None else committed.metadata,
                error_code=ErrorCode.topic_authorization_failed
                if tp.topic in denied_topics and result.error is None
                else partition_error,
            )
        )
    return tuple(
        getattr(module, topic_class)(name=name, partitions=tuple(parts))
        for name, parts in by_topic.items()
    )


async def handle(ctx: RequestContext, request: Any) -> Any:
    module = ctx.response_module
    require_stable = bool(getattr(request, "require_stable", False))
    if ctx.api_version >= 8:
        groups = []
        for group in request.groups:
            result, requested = _fetch(ctx, group.group_id, group.topics, require_stable)
            denied = _denied_topics(ctx, requested)
            groups.append(
                module.OffsetFetchResponseGroup(
                    group_id=group.group_id,
                    topics=_topics(
                        module,
                        "OffsetFetchResponseTopics",
                        "OffsetFetchResponsePartitions",
                        result,
                        requested,
                        partition_errors=False,
                        denied_topics=denied,
                    ),
                    error_code=error_code_of(result.error),
                )
            )
        return build(module.OffsetFetchResponse, throttle_time=NO_THROTTLE, groups=tuple(groups))
    result, requested = _fetch(ctx, request.group_id, request.topics, require_stable)
    denied = _denied_topics(ctx, requested)
    return build(
        module.OffsetFetchResponse,
        throttle_time=NO_THROTTLE,
        error_code=error_code_of(result.error),
        topics=_topics(
            module,
            "OffsetFetchResponseTopic",
            "OffsetFetchResponsePartition",
            result,
            requested,
            partition_errors=ctx.api_version < 2,
            denied_topics=denied,
        ),
    )
