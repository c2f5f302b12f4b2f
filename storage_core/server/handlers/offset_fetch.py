"""OffsetFetch (key 9): a group's committed offsets, for named partitions or all of them.

v1 has no group-level error: it is reported on every partition. v2+ accept null topics for
"every partition with a committed offset". v8 (KIP-709) asks for several groups at once.
A partition without a committed offset answers offset -1, leader epoch -1, metadata "".
"""

from __future__ import annotations

from collections import defaultdict
from types import ModuleType
from typing import Any

from storage_core.common import TopicPartition
from storage_core.coordinator.group.offset_manager import OffsetFetchResult
from storage_core.protocol.messages import build
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
    coordinator = coordinator_of(ctx)
    if coordinator is None:
        return OffsetFetchResult(error=NOT_RUNNING, offsets={}), partitions
    result = coordinator.fetch_offsets(
        group_id=group_id, partitions=partitions, require_stable=require_stable
    )
    return result, partitions


def _topics(
    module: ModuleType,
    topic_class: str,
    partition_class: str,
    result: OffsetFetchResult,
    requested: list[TopicPartition] | None,
    *,
    partition_errors: bool,
) -> tuple[Any, ...]:
    """Per-topic answers in request order (or topic/partition order for "all").

    A group-level error leaves no topics (v2+), or is repeated on every partition (v1).
    """
    if result.error is not None and not partition_errors:
        return ()
    order = requested if requested is not None else sorted(result.offsets)
    by_topic: dict[str, list[Any]] = defaultdict(list)
    partition_error = error_code_of(result.error if partition_errors else None)
    for tp in order:
        committed = result.offsets.get(tp)
        by_topic[tp.topic].append(
            build(
                getattr(module, partition_class),
                partition_index=tp.partition,
                committed_offset=-1 if committed is None else committed.offset,
                committed_leader_epoch=-1 if committed is None else committed.leader_epoch,
                metadata="" if committed is None else committed.metadata,
                error_code=partition_error,
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
                    ),
                    error_code=error_code_of(result.error),
                )
            )
        return build(module.OffsetFetchResponse, throttle_time=NO_THROTTLE, groups=tuple(groups))
    result, requested = _fetch(ctx, request.group_id, request.topics, require_stable)
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
        ),
    )
