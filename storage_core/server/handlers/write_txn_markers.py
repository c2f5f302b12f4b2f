"""WriteTxnMarkers (key 27): a transaction coordinator asks partition leaders to end a
transaction with a COMMIT or ABORT marker (Kafka's ``handleWriteTxnMarkersRequest``).

For each marker (producer id, epoch, result, coordinator epoch) and each of its partitions,
the leader appends one control batch (``build_end_txn_marker_batch``) with acks=-1 and
origin COORDINATOR: no client checks, but the producer epoch and the coordinator epoch are
checked against the partition's producer state (INVALID_PRODUCER_EPOCH,
TRANSACTION_COORDINATOR_FENCED), and an aborted transaction gets its entry in the segment's
transaction index. Internal topics are allowed (the offsets of a transaction live in
``__consumer_offsets``). The caller needs CLUSTER_ACTION on the cluster, as in Kafka; without
it every partition answers CLUSTER_AUTHORIZATION_FAILED.

Once a marker is written on partitions of ``__consumer_offsets``, the group coordinator is
told (Kafka's ``onTransactionCompleted``), for those partitions only: the transaction's
pending offsets there become committed offsets (commit) or are dropped (abort).

Each partition answers with its append's error (NONE, UNKNOWN_TOPIC_OR_PARTITION,
NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS, REQUEST_TIMED_OUT after ``request.timeout.ms``,
...); the coordinator retries what failed. A marker without a producer id or epoch answers
UNKNOWN_SERVER_ERROR for its partitions, as Kafka's does (its batch builder refuses it).
"""

from __future__ import annotations

import asyncio
from typing import Any

from kio.schema.errors import ErrorCode

from storage_core.common import TopicPartition
from storage_core.protocol.acl import AclOperation
from storage_core.protocol.messages import build
from storage_core.server.handlers.auth_helper import authorize_cluster
from storage_core.server.request_context import RequestContext
from storage_core.server.txn_marker_writer import write_txn_marker

API_KEY = 27
MIN_VERSION = 0
MAX_VERSION = 1


async def handle(ctx: RequestContext, request: Any) -> Any:
    authorized = authorize_cluster(ctx, AclOperation.CLUSTER_ACTION)
    outcomes = await asyncio.gather(
        *(_write(ctx, marker) if authorized else _denied(marker) for marker in request.markers)
    )
    module = ctx.response_module
    return build(
        module.WriteTxnMarkersResponse,
        markers=tuple(
            build(
                module.WritableTxnMarkerResult,
                producer_id=marker.producer_id,
                topics=tuple(
                    build(
                        module.WritableTxnMarkerTopicResult,
                        name=topic.name,
                        partitions=tuple(
                            build(
                                module.WritableTxnMarkerPartitionResult,
                                partition_index=index,
                                error_code=errors[TopicPartition(topic.name, int(index))],
                            )
                            for index in topic.partition_indexes
                        ),
                    )
                    for topic in marker.topics
                ),
            )
            for marker, errors in zip(request.markers, outcomes, strict=True)
        ),
    )


async def _denied(marker: Any) -> dict[TopicPartition, ErrorCode]:
    return dict.fromkeys(_partitions(marker), ErrorCode.cluster_authorization_failed)


async def _write(ctx: RequestContext, marker: Any) -> dict[TopicPartition, ErrorCode]:
    return await write_txn_marker(
        ctx.services,
        producer_id=int(marker.producer_id),
        producer_epoch=int(marker.producer_epoch),
        coordinator_epoch=int(marker.coordinator_epoch),
        commit=bool(marker.transaction_result),
        partitions=_partitions(marker),
        requested_by=ctx.client_id or "",
    )


def _partitions(marker: Any) -> list[TopicPartition]:
    return [
        TopicPartition(topic.name, int(index))
        for topic in marker.topics
        for index in topic.partition_indexes
    ]
