"""DescribeProducers (key 61, KIP-664): the active producers of partitions this broker leads,
as the partition's producer state knows them (Kafka's ``handleDescribeProducersRequest``).

Per producer: id, epoch, last sequence, last timestamp, the epoch of the last transaction
coordinator that wrote a marker for it, and the first offset of its open transaction (-1:
none); an operator finds hanging transactions with it. Needs READ on the topic
(TOPIC_AUTHORIZATION_FAILED otherwise); a partition not hosted answers
UNKNOWN_TOPIC_OR_PARTITION, one led by another broker NOT_LEADER_OR_FOLLOWER.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from storage_core.common import TopicPartition
from storage_core.errors import StorageError
from storage_core.log.producer_state_entry import ProducerStateEntry
from storage_core.protocol.acl import AclOperation, ResourceType
from storage_core.protocol.messages import build
from storage_core.server.handlers.auth_helper import filter_by_authorized
from storage_core.server.handlers.common import NO_THROTTLE, error_code_of
from storage_core.server.request_context import RequestContext

API_KEY = 61
MIN_VERSION = 0
MAX_VERSION = 0


async def handle(ctx: RequestContext, request: Any) -> Any:
    module = ctx.response_module
    readable = filter_by_authorized(
        ctx, AclOperation.READ, ResourceType.TOPIC, (t.name for t in request.topics)
    )
    topics = []
    for topic in request.topics:
        partitions = []
        for index in topic.partition_indexes:
            error, message, producers = _describe(
                ctx, TopicPartition(topic.name, int(index)), topic.name in readable
            )
            partitions.append(
                build(
                    module.PartitionResponse,
                    partition_index=index,
                    error_code=error,
                    error_message=message,
                    active_producers=tuple(
                        build(
                            module.ProducerState,
                            producer_id=entry.producer_id,
                            producer_epoch=entry.producer_epoch,
                            last_sequence=entry.last_seq,
                            last_timestamp=entry.last_timestamp,
                            coordinator_epoch=entry.coordinator_epoch,
                            current_txn_start_offset=(
                                -1
                                if entry.current_txn_first_offset is None
                                else entry.current_txn_first_offset
                            ),
                        )
                        for entry in producers
                    ),
                )
            )
        topics.append(build(module.TopicResponse, name=topic.name, partitions=tuple(partitions)))
    return build(module.DescribeProducersResponse, throttle_time=NO_THROTTLE, topics=tuple(topics))


def _describe(
    ctx: RequestContext, tp: TopicPartition, readable: bool
) -> tuple[ErrorCode, str | None, list[ProducerStateEntry]]:
    if not readable:
        return ErrorCode.topic_authorization_failed, None, []
    try:
        partition = ctx.services.replica_manager.leader_partition(tp)
    except StorageError as exc:
        return error_code_of(exc), str(exc), []
    producers = partition.log.active_producers
    return ErrorCode.none, None, [producers[pid] for pid in sorted(producers)]
