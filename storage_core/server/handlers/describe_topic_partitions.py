"""DescribeTopicPartitions (key 75, v0): topics and their partitions, page by page (KIP-966;
Kafka's ``DescribeTopicPartitionsRequestHandler``), answered from this broker's metadata.

Topics: the ones named (at or after the cursor's topic, which must be among them), or every
topic (then unknown ones cannot appear). They are answered in name order, at most
``min(response_partition_limit, MAX_PARTITIONS_PER_RESPONSE)`` partitions (at least one) in
all; when partitions remain, ``next_cursor`` names the topic and partition to ask for next.
A named topic that does not exist answers UNKNOWN_TOPIC_OR_PARTITION, or
INVALID_TOPIC_EXCEPTION when its name is not a legal topic name. A cursor with a negative
partition, or whose topic is not among the named ones, fails the request (INVALID_REQUEST).

Per partition: leader (-1 when it has none), leader epoch, replicas, ISR, offline replicas
(replicas whose broker is not registered). This broker runs no eligible-leader-replica
(ELR) tracking, so ``eligible_leader_replicas`` and ``last_known_elr`` are empty.
"""

from __future__ import annotations

import logging
from typing import Any

from kio.schema.errors import ErrorCode

from storage_core.common import validate_topic_name
from storage_core.errors import InvalidTopicError, StorageError
from storage_core.protocol.acl import AclOperation, ResourceType
from storage_core.protocol.messages import build
from storage_core.replication.metadata_cache import INTERNAL_TOPICS, TopicMetadata
from storage_core.server.handlers.auth_helper import authorized_operations, filter_by_authorized
from storage_core.server.handlers.common import NO_THROTTLE, to_kio_uuid
from storage_core.server.request_context import RequestContext
from storage_core.zk.zk_data import NO_LEADER

logger = logging.getLogger(__name__)

API_KEY = 75
MIN_VERSION = 0
MAX_VERSION = 0

MAX_PARTITIONS_PER_RESPONSE = 2000  # Kafka's max.request.partition.size.limit default
MAX_TOPICS_PER_REQUEST = 10_000


class _InvalidRequestError(StorageError):
    error_code = "invalid_request"


async def handle(ctx: RequestContext, request: Any) -> Any:
    try:
        return _describe(ctx, request)
    except _InvalidRequestError as error:
        # Kafka's DescribeTopicPartitionsRequest.getErrorResponse: every named topic, the error
        logger.info("DescribeTopicPartitions refused, client=%s reason=%s", ctx.client_id, error)
        module = ctx.response_module
        return build(
            module.DescribeTopicPartitionsResponse,
            throttle_time=NO_THROTTLE,
            topics=tuple(
                build(
                    module.DescribeTopicPartitionsResponseTopic,
                    error_code=ErrorCode.invalid_request,
                    name=t.name,
                    topic_id=to_kio_uuid(None),
                    is_internal=False,
                    partitions=(),
                )
                for t in request.topics
            ),
            next_cursor=None,
        )


def _describe(ctx: RequestContext, request: Any) -> Any:
    module = ctx.response_module
    image = ctx.services.metadata_cache.image()
    cursor = request.cursor
    cursor_topic = cursor.topic_name if cursor is not None else ""
    fetch_all = not request.topics
    if len(request.topics) > MAX_TOPICS_PER_REQUEST:
        raise _InvalidRequestError(
            f"DescribeTopicPartitionsRequest names {len(request.topics)} topics, more than"
            f" {MAX_TOPICS_PER_REQUEST}: ask for fewer or for all topics (an empty list)"
        )
    if fetch_all:
        names = {name for name in image.topics if name >= cursor_topic}
    else:
        names = {t.name for t in request.topics if t.name >= cursor_topic}
        if cursor is not None and cursor.topic_name not in names:
            raise _InvalidRequestError(
                "DescribeTopicPartitionsRequest topic list should contain the cursor topic: "
                f"{cursor.topic_name}"
            )
    if cursor is not None and cursor.partition_index < 0:
        raise _InvalidRequestError(
            "DescribeTopicPartitionsRequest cursor partition must be valid: "
            f"{cursor.topic_name}-{cursor.partition_index}"
        )
    describable = filter_by_authorized(
        ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, names, log_if_denied=not fetch_all
    )
    remaining = max(min(MAX_PARTITIONS_PER_RESPONSE, int(request.response_partition_limit)), 1)
    topics: list[Any] = []
    next_cursor = None
    for name in sorted(names):
        if remaining <= 0:
            next_cursor = build(module.Cursor, topic_name=name, partition_index=0)
            break
        if name not in describable:  # not disclosed, whether it exists or not
            if not fetch_all:
                topics.append(_unauthorized_topic(module, name))
            continue
        topic = image.topic(name)
        if topic is None or topic.marked_for_deletion:
            if not fetch_all:
                topics.append(_unknown_topic(module, name))
            continue
        start = cursor.partition_index if cursor is not None and name == cursor_topic else 0
        upper = min(len(topic.partitions), start + remaining)
        topics.append(
            _topic(
                module,
                topic,
                start,
                upper,
                authorized_operations(ctx, ResourceType.TOPIC, name),
            )
        )
        if upper < len(topic.partitions):
            next_cursor = build(module.Cursor, topic_name=name, partition_index=upper)
            break
        remaining -= max(upper - start, 0)
    return build(
        module.DescribeTopicPartitionsResponse,
        throttle_time=NO_THROTTLE,
        topics=tuple(topics),
        next_cursor=next_cursor,
    )


def _topic(module: Any, topic: TopicMetadata, start: int, upper: int, operations: int) -> Any:
    """Partitions ``start`` (inclusive) to ``upper`` (exclusive) of the topic."""
    partitions = []
    for index in range(start, upper):
        p = topic.partition(index)
        if p is None:
            continue
        partitions.append(
            build(
                module.DescribeTopicPartitionsResponsePartition,
                error_code=ErrorCode.none,
                partition_index=p.partition,
                leader_id=p.leader if p.leader != NO_LEADER else -1,
                leader_epoch=p.leader_epoch,
                replica_nodes=p.replicas,
                isr_nodes=p.isr,
                eligible_leader_replicas=(),
                last_known_elr=(),
                offline_replicas=p.offline_replicas,
            )
        )
    return build(
        module.DescribeTopicPartitionsResponseTopic,
        error_code=ErrorCode.none,
        name=topic.name,
        topic_id=to_kio_uuid(topic.topic_id),
        is_internal=topic.internal,
        partitions=tuple(partitions),
        topic_authorized_operations=operations,
    )


def _unknown_topic(module: Any, name: str) -> Any:
    try:
        validate_topic_name(name)
        error = ErrorCode.unknown_topic_or_partition
    except InvalidTopicError:
        error = ErrorCode.invalid_topic_exception
    return build(
        module.DescribeTopicPartitionsResponseTopic,
        error_code=error,
        name=name,
        topic_id=to_kio_uuid(None),
        is_internal=name in INTERNAL_TOPICS,
        partitions=(),
    )


def _unauthorized_topic(module: Any, name: str) -> Any:
    return build(
        module.DescribeTopicPartitionsResponseTopic,
        error_code=ErrorCode.topic_authorization_failed,
        name=name,
        topic_id=to_kio_uuid(None),
        is_internal=False,
        partitions=(),
    )
