"""Fetch (key 1): records from partition leaders up to the high watermark, with long polling.

Fetch sessions (KIP-227, ``fetch_sessions``): a follower's full fetch (session epoch 0)
creates a session, and its incremental fetches name only the partitions that changed and are
answered with only those that have something new. A consumer's fetch is answered sessionless
(session id 0), which tells it to keep sending full requests (KIP-227 allows a broker to
decline sessions). A full response lists exactly the requested partitions, in request order.
Topics are named (v4-v12) or identified by topic id (v13+).

The response is encoded by ``fetch_response`` (not the codec): record sets of 64 KiB or more
stay in their segment files and are sent with sendfile (see ``response_parts``).

With an authorizer, a consumer needs READ on each topic and a follower (replica id >= 0)
CLUSTER_ACTION on the cluster; a denied partition is TOPIC_AUTHORIZATION_FAILED and not read.

A follower's fetch of at most one partition never reaches this handler: ``follower_fetch``
decodes it by hand and answers it through the same ``read_partitions``, ``partition_response``
and ``fetch_sessions``.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from storage_core.common import TopicPartition
from storage_core.protocol.acl import AclOperation, ResourceType
from storage_core.protocol.fetch_metadata import (
    FINAL_EPOCH,
    INVALID_SESSION_ID,
)
from storage_core.replication.delayed_fetch import FetchRequestPartition, close_regions
from storage_core.server.fetch_response import FetchTopicResponse, encode_fetch_response
from storage_core.server.fetch_session import (
    FullFetchContext,
    IncrementalFetchContext,
    SessionErrorContext,
)
from storage_core.server.handlers import fetch_sessions
from storage_core.server.handlers.auth_helper import authorize_cluster, filter_by_authorized
from storage_core.server.handlers.common import from_kio_uuid, milliseconds
from storage_core.server.handlers.fetch_reads import (
    MAX_WAIT_MS_MAX,
    partition_response,
    read_partitions,
)
from storage_core.server.request_context import RequestContext
from storage_core.server.response_parts import ResponseParts

__all__ = ["MAX_WAIT_MS_MAX", "handle", "partition_response", "read_partitions"]

API_KEY = 1
MIN_VERSION = 4
MAX_VERSION = 16


async def handle(ctx: RequestContext, request: Any) -> ResponseParts:
    services = ctx.services
    by_id = ctx.api_version >= 13
    wanted: dict[TopicPartition, FetchRequestPartition] = {}
    layout: list[tuple[Any, str | None, list[int]]] = []  # (topic key, name, partitions)
    topic_errors: dict[int, ErrorCode] = {}
    allowed = _authorized_topics(ctx, request, by_id)
    for index, topic in enumerate(request.topics):
        name = _topic_name(ctx, topic, by_id)
        if name is None:
            topic_errors[index] = ErrorCode.unknown_topic_id
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
    replica_id = _replica_id(ctx.api_version, request)
    session_id, session_epoch = _session(ctx.api_version, request)
    context = fetch_sessions.new_context(
        services,
        version=ctx.api_version,
        session_id=session_id,
        session_epoch=session_epoch,
        replica_id=replica_id,
        fetch_data=wanted,
        to_forget=_forgotten(ctx, request, by_id),
    )
    if isinstance(context, SessionErrorContext):
        return fetch_sessions.error_response(
            ctx.api_version, ctx.correlation_id, context.error_code
        )
    if isinstance(context, IncrementalFetchContext):
        return await fetch_sessions.answer_incremental(
            services,
            context,
            version=ctx.api_version,
            correlation_id=ctx.correlation_id,
            max_wait_ms=milliseconds(request.max_wait),
            min_bytes=int(request.min_bytes),
            max_bytes=int(request.max_bytes),
            replica_id=replica_id,
            authorized=allowed is None,
            sent=wanted,
            isolation_level=int(request.isolation_level),  # 1: read_committed
        )
    results = await read_partitions(
        services,
        wanted,
        max_wait_ms=milliseconds(request.max_wait),
        min_bytes=int(request.min_bytes),
        max_bytes=int(request.max_bytes),
        replica_id=replica_id,
        isolation_level=int(request.isolation_level),  # 1: read_committed
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
        new_session_id = INVALID_SESSION_ID
        if isinstance(context, FullFetchContext):
            new_session_id = context.update_and_generate_response_data(
                {
                    TopicPartition(topic.topic, p.partition_index): p
                    for topic in topics
                    for p in topic.partitions
                }
            ).session_id
        return encode_fetch_response(
            version=ctx.api_version,
            correlation_id=ctx.correlation_id,
            topics=topics,
            session_id=new_session_id,
        )
    except BaseException:
        close_regions(results.values())
        raise


def _session(api_version: int, request: Any) -> tuple[int, int]:
    """The request's session id and epoch; before v7 there are none (sessionless)."""
    if api_version < 7:
        return INVALID_SESSION_ID, FINAL_EPOCH
    return int(request.session_id), int(request.session_epoch)


def _topic_name(ctx: RequestContext, topic: Any, by_id: bool) -> str | None:
    """The topic a Fetch entry names: by id from v13 (None for an unknown id), else by name."""
    if not by_id:
        return str(topic.topic)
    info = ctx.services.topic_store.get_by_id(from_kio_uuid(topic.topic_id))
    return info.name if info is not None else None


def _forgotten(ctx: RequestContext, request: Any, by_id: bool) -> list[TopicPartition]:
    """The partitions an incremental fetch removes from its session (v7+)."""
    if ctx.api_version < 7:
        return []
    forgotten: list[TopicPartition] = []
    for topic in request.forgotten_topics_data:
        name = _topic_name(ctx, topic, by_id)
        if name is not None:
            forgotten.extend(TopicPartition(name, int(p)) for p in topic.partitions)
    return forgotten


def _authorized_topics(ctx: RequestContext, request: Any, by_id: bool) -> set[str] | None:
    """The topics this fetch may read (None: all): a follower needs CLUSTER_ACTION on the
    cluster (else every partition is TOPIC_AUTHORIZATION_FAILED), a consumer READ on each."""
    if ctx.services.authorizer is None:
        return None
    if _replica_id(ctx.api_version, request) >= 0:
        return None if authorize_cluster(ctx, AclOperation.CLUSTER_ACTION) else set()
    names: list[str] = []
    for topic in request.topics:
        name = _topic_name(ctx, topic, by_id)
        if name is not None:
            names.extend(name for _p in topic.partitions)
    return filter_by_authorized(ctx, AclOperation.READ, ResourceType.TOPIC, names)


def _replica_id(api_version: int, request: Any) -> int:
    """The fetching broker (>= 0) or -1 for a consumer; v15+ carry it in ``replica_state``."""
    if api_version >= 15:
        return int(request.replica_state.replica_id)
    return int(request.replica_id)
