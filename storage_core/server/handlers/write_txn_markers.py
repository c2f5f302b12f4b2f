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
import logging
from typing import Any

from kio.schema.errors import ErrorCode

from storage_core.common import TopicPartition
from storage_core.coordinator.group.offsets_records import OFFSETS_TOPIC_NAME
from storage_core.log.producer_append_info import AppendOrigin
from storage_core.protocol.acl import AclOperation
from storage_core.protocol.messages import build
from storage_core.records.end_transaction_marker import (
    ControlRecordType,
    build_end_txn_marker_batch,
)
from storage_core.replication.delayed_produce import ProduceResult
from storage_core.server.handlers.auth_helper import authorize_cluster
from storage_core.server.handlers.common import error_code_of
from storage_core.server.handlers.group_support import coordinator_of
from storage_core.server.request_context import RequestContext

logger = logging.getLogger(__name__)

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
    services = ctx.services
    try:
        batch = build_end_txn_marker_batch(
            producer_id=int(marker.producer_id),
            producer_epoch=int(marker.producer_epoch),
            coordinator_epoch=int(marker.coordinator_epoch),
            control_type=(
                ControlRecordType.COMMIT if marker.transaction_result else ControlRecordType.ABORT
            ),
            timestamp=services.clock.milliseconds(),
        )
    except ValueError as exc:  # no producer id or epoch: Kafka's builder refuses it too
        logger.warning("WriteTxnMarkers refused client=%s error=%s", ctx.client_id, exc)
        return dict.fromkeys(_partitions(marker), ErrorCode.unknown_server_error)
    results: dict[TopicPartition, ProduceResult] = await services.replica_manager.append_records(
        dict.fromkeys(_partitions(marker), batch),
        required_acks=-1,
        timeout_ms=services.config.get_int("request.timeout.ms"),
        origin=AppendOrigin.COORDINATOR,
    )
    errors = {tp: error_code_of(result.error) for tp, result in results.items()}
    _maybe_complete_offsets(ctx, marker, errors)
    return errors


def _maybe_complete_offsets(
    ctx: RequestContext, marker: Any, errors: dict[TopicPartition, ErrorCode]
) -> None:
    """Tell the group coordinator which ``__consumer_offsets`` partitions got the marker;
    should that fail, those partitions answer UNKNOWN_SERVER_ERROR and the transaction
    coordinator retries them (Kafka's handler does the same)."""
    written = [
        tp
        for tp, error in errors.items()
        if tp.topic == OFFSETS_TOPIC_NAME and error == ErrorCode.none
    ]
    coordinator = coordinator_of(ctx)
    if not written or coordinator is None:
        return
    try:
        coordinator.on_transaction_completed(
            int(marker.producer_id), written, is_commit=bool(marker.transaction_result)
        )
    except Exception:
        logger.exception(
            "transactional offsets not decided producer_id=%d partitions=%s",
            int(marker.producer_id),
            written,
        )
        errors.update(dict.fromkeys(written, ErrorCode.unknown_server_error))


def _partitions(marker: Any) -> list[TopicPartition]:
    return [
        TopicPartition(topic.name, int(index))
        for topic in marker.topics
        for index in topic.partition_indexes
    ]
