"""TxnOffsetCommit (key 28, v0-3): a transactional producer commits a group's offsets inside
its transaction (Kafka's ``handleTxnOffsetCommitRequest``; ``send_offsets_to_transaction``).

The transaction coordinator has added the group's ``__consumer_offsets`` partition to the
transaction (AddOffsetsToTxn) before. The offsets are written as a transactional batch of the
producer and stay pending, invisible to OffsetFetch (UNSTABLE_OFFSET_COMMIT with
require_stable), until the transaction's marker decides them.

Checks, in Kafka's order, each answering every partition:

    WRITE on the transactional id         else TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    READ on the group                     else GROUP_AUTHORIZATION_FAILED
    READ on each topic                    else TOPIC_AUTHORIZATION_FAILED (its partitions)
    the topic and partition exist         else UNKNOWN_TOPIC_OR_PARTITION

then the coordinator's: INVALID_GROUP_ID (empty id), COORDINATOR_NOT_AVAILABLE,
COORDINATOR_LOAD_IN_PROGRESS (COORDINATOR_NOT_AVAILABLE before v2, which older producers
cannot handle), NOT_COORDINATOR; with a member id or generation (v3, KIP-447)
UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID, ILLEGAL_GENERATION; OFFSET_METADATA_TOO_LARGE,
INVALID_COMMIT_OFFSET_SIZE; the append's INVALID_PRODUCER_EPOCH and the like as they are.
An unknown group is created when no member or generation is given.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

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
from storage_core.server.handlers.produce import TransactionalIdAuthorizationFailedError
from storage_core.server.request_context import RequestContext

API_KEY = 28
MIN_VERSION = 0
MAX_VERSION = 3


async def handle(ctx: RequestContext, request: Any) -> Any:
    results = await _commit(ctx, request)
    module = ctx.response_module
    old_client = ctx.api_version < 2

    def answer(tp: TopicPartition) -> ErrorCode:
        error = error_code_of(results[tp])
        if old_client and error == ErrorCode.coordinator_load_in_progress:
            return ErrorCode.coordinator_not_available  # KAFKA-7296: 0.11-2.0 producers
        return error

    return build(
        module.TxnOffsetCommitResponse,
        throttle_time=NO_THROTTLE,
        topics=tuple(
            module.TxnOffsetCommitResponseTopic(
                name=topic.name,
                partitions=tuple(
                    module.TxnOffsetCommitResponsePartition(
                        partition_index=p.partition_index,
                        error_code=answer(TopicPartition(topic.name, p.partition_index)),
                    )
                    for p in topic.partitions
                ),
            )
            for topic in request.topics
        ),
    )


async def _commit(ctx: RequestContext, request: Any) -> dict[TopicPartition, StorageError | None]:
    requested = [
        TopicPartition(topic.name, p.partition_index)
        for topic in request.topics
        for p in topic.partitions
    ]
    if not authorize(
        ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id
    ):
        denied: StorageError = TransactionalIdAuthorizationFailedError(
            f"Not authorized to use transactional id: {request.transactional_id}"
        )
        return dict.fromkeys(requested, denied)
    if not authorize(ctx, AclOperation.READ, ResourceType.GROUP, request.group_id):
        denied = GroupAuthorizationFailedError(
            f"Not authorized to access group: {request.group_id}"
        )
        return dict.fromkeys(requested, denied)
    readable = filter_by_authorized(
        ctx, AclOperation.READ, ResourceType.TOPIC, (t.name for t in request.topics)
    )
    now_ms = ctx.services.clock.milliseconds()
    results: dict[TopicPartition, StorageError | None] = {}
    offsets: dict[TopicPartition, OffsetAndMetadata] = {}
    for topic in request.topics:
        info = ctx.services.topic_store.get(topic.name)
        for partition in topic.partitions:
            tp = TopicPartition(topic.name, partition.partition_index)
            if topic.name not in readable:
                results[tp] = TopicAuthorizationFailedError(topic.name)
            elif info is None or info.partition(partition.partition_index) is None:
                results[tp] = UnknownTopicOrPartitionError(
                    f"{tp} does not exist: offsets are committed for existing partitions only"
                )
            else:
                offsets[tp] = OffsetAndMetadata(
                    offset=int(partition.committed_offset),
                    leader_epoch=max(int(getattr(partition, "committed_leader_epoch", -1)), -1),
                    metadata=partition.committed_metadata or "",
                    commit_timestamp_ms=now_ms,
                )
    if offsets:
        coordinator = coordinator_of(ctx)
        if coordinator is None:
            results.update(dict.fromkeys(offsets, NOT_RUNNING))
        else:
            results.update(
                await coordinator.commit_transactional_offsets(
                    group_id=request.group_id,
                    producer_id=int(request.producer_id),
                    producer_epoch=int(request.producer_epoch),
                    member_id=getattr(request, "member_id", ""),
                    group_instance_id=getattr(request, "group_instance_id", None),
                    generation_id=int(getattr(request, "generation_id", -1)),
                    offsets=offsets,
                )
            )
    return results
