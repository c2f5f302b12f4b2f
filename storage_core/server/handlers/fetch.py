"""Fetch (key 1): records from partition leaders up to the high watermark, with long polling.

No fetch sessions: every request is a full fetch and the response carries session id 0, which
tells clients to keep sending full requests (KIP-227 allows a broker to decline sessions). The
response lists exactly the requested partitions, in request order. Topics are named (v4-v12)
or identified by topic id (v13+).

The response is encoded by ``fetch_response`` (not the codec): record sets of 64 KiB or more
stay in their segment files and are sent with sendfile (see ``response_parts``).

With an authorizer, a consumer needs READ on each topic and a follower (replica id >= 0)
CLUSTER_ACTION on the cluster; a denied partition is TOPIC_AUTHORIZATION_FAILED and not read.

A follower's one-partition fetch never reaches this handler: ``follower_fetch`` decodes it by
hand and answers it through the same ``read_partitions`` and ``partition_response``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from storage_core.common import TopicPartition
from storage_core.protocol.acl import AclOperation, ResourceType
from storage_core.replication.delayed_fetch import (
    FetchRequestPartition,
    FetchResult,
    close_regions,
)
from storage_core.server.fetch_response import (
    FetchPartitionResponse,
    FetchTopicResponse,
    encode_fetch_response,
)
from storage_core.server.handlers.auth_helper import authorize_cluster, filter_by_authorized
from storage_core.server.handlers.common import error_code_of, from_kio_uuid, milliseconds
from storage_core.server.request_context import RequestContext
from storage_core.server.response_parts import ResponseParts

if TYPE_CHECKING:
    from storage_core.server.broker_services import BrokerServices

API_KEY = 1
MIN_VERSION = 4
MAX_VERSION = 16

MAX_WAIT_MS_MAX = 30_000  # a bound on how long one request may park in the purgatory


async def handle(ctx: RequestContext, request: Any) -> ResponseParts:
    services = ctx.services
    by_id = ctx.api_version >= 13
    wanted: dict[TopicPartition, FetchRequestPartition] = {}
    layout: list[tuple[Any, str | None, list[int]]] = []  # (topic key, name, partitions)
    topic_errors: dict[int, ErrorCode] = {}
    allowed = _authorized_topics(ctx, request, by_id)
    for index, topic in enumerate(request.topics):
        if by_id:
            info = services.topic_store.get_by_id(from_kio_uuid(topic.topic_id))
            name = info.name if info is not None else None
            if info is None:
                topic_errors[index] = ErrorCode.unknown_topic_id
        else:
            name = topic.topic
        if name is not None and allowed is not None and name not in allowed:
            topic_errors[index] = ErrorCode.topic_authorization_failed
        layout.append((topic, name, [p.partition for p in topic.partitions]))
        if index in topic_errors or name is None:
            continue
        for p in topic.partitions:
            wanted[TopicPartition(name, p.partition)] = FetchRequestPartition(
                fetch_offset=p.fetch_offset,
                max_bytes=p.partition_max_bytes,
                current_leader_epoch=getattr(p, "current_leader_epoch", -1),  # v9+
                last_fetched_epoch=getattr(p, "last_fetched_epoch", -1),  # v12+
                log_start_offset=getattr(p, "log_start_offset", -1),  # v5+
                topic_id=from_kio_uuid(topic.topic_id) if by_id else None,
            )
    results = await read_partitions(
        services,
        wanted,
        max_wait_ms=milliseconds(request.max_wait),
        min_bytes=int(request.min_bytes),
        max_bytes=int(request.max_bytes),
        replica_id=_replica_id(ctx.api_version, request),
    )
    try:
        topics = [
            FetchTopicResponse(
                topic=name or "",
                topic_id=topic.topic_id.bytes if by_id and topic.topic_id else bytes(16),
                partitions=tuple(
                    partition_response(partition_index, None, topic_errors[index])
                    if index in topic_errors or name is None
                    else partition_response(
                        partition_index, results[TopicPartition(name, partition_index)], None
                    )
                    for partition_index in partitions
                ),
            )
            for index, (topic, name, partitions) in enumerate(layout)
        ]
        return encode_fetch_response(
            version=ctx.api_version, correlation_id=ctx.correlation_id, topics=topics
        )
    except BaseException:
        close_regions(results.values())
        raise


async def read_partitions(
    services: BrokerServices,
    wanted: dict[TopicPartition, FetchRequestPartition],
    *,
    max_wait_ms: int,
    min_bytes: int,
    max_bytes: int,
    replica_id: int,
) -> dict[TopicPartition, FetchResult]:
    """The reads a Fetch asks for, within the broker's bounds; record sets of 64 KiB and
    more come back as file regions, which the caller must close."""
    return await services.replica_manager.fetch_messages(
        wanted,
        max_wait_ms=min(max_wait_ms, MAX_WAIT_MS_MAX),
        min_bytes=min_bytes,
        # As Kafka: a response never exceeds the broker's fetch.max.bytes, whatever the client
        # asks for (a 2 GiB max_bytes would otherwise build a response of the whole log).
        max_bytes=min(max_bytes, services.config.get_int("fetch.max.bytes")),
        zero_copy=True,
        replica_id=replica_id,
    )


def _authorized_topics(ctx: RequestContext, request: Any, by_id: bool) -> set[str] | None:
    """The topics this fetch may read (None: all): a follower needs CLUSTER_ACTION on the
    cluster (else every partition is TOPIC_AUTHORIZATION_FAILED), a consumer READ on each."""
    if ctx.services.authorizer is None:
        return None
    if _replica_id(ctx.api_version, request) >= 0:
        return None if authorize_cluster(ctx, AclOperation.CLUSTER_ACTION) else set()
    names: list[str] = []
    for topic in request.topics:
        if by_id:
            info = ctx.services.topic_store.get_by_id(from_kio_uuid(topic.topic_id))
            if info is None:
                continue
            name = info.name
        else:
            name = topic.topic
        names.extend(name for _p in topic.partitions)
    return filter_by_authorized(ctx, AclOperation.READ, ResourceType.TOPIC, names)


def _replica_id(api_version: int, request: Any) -> int:
    """The fetching broker (>= 0) or -1 for a consumer; v15+ carry it in ``replica_state``."""
    if api_version >= 15:
        return int(request.replica_state.replica_id)
    return int(request.replica_id)


def partition_response(
    partition_index: int, result: FetchResult | None, error: ErrorCode | None
) -> FetchPartitionResponse:
    read = result.read if result is not None else None
    if error is None and result is not None:
        error = error_code_of(result.error)
    return FetchPartitionResponse(
        partition_index=partition_index,
        error_code=int(error if error is not None else ErrorCode.none),
        high_watermark=read.high_watermark if read is not None else -1,
        last_stable_offset=read.last_stable_offset if read is not None else -1,
        log_start_offset=read.log_start_offset if read is not None else -1,
        diverging_epoch=result.diverging_epoch if result is not None else None,
        aborted_transactions=None if read is None else (),
        # Empty, not null, with an error: as Kafka; librdkafka cannot parse a null record set.
        records=result.records if result is not None and read is not None else b"",
    )
