"""AddPartitionsToTxn (key 24): partitions a transactional producer is about to write join
its transaction (Kafka's ``handleAddPartitionsToTxnRequest``).

v0-3 come from clients: one transaction, every partition answered with the coordinator's one
error. v4 (KIP-890 part 1) comes from brokers (CLUSTER_ACTION, else
CLUSTER_AUTHORIZATION_FAILED for the whole request): several transactions, each either added
or, with ``verify_only``, only checked (TRANSACTION_ABORTABLE for a partition not in it).

Each transaction of v0-3 needs WRITE on its transactional id (else
TRANSACTIONAL_ID_AUTHORIZATION_FAILED on all its partitions) and WRITE on each topic; v4 is
the broker's own question (CLUSTER_ACTION), asked for its clients: no further check, as in
Kafka (a leader whose principal has only ClusterAction can verify any produce). A
partition denied (TOPIC_AUTHORIZATION_FAILED) or unknown (UNKNOWN_TOPIC_OR_PARTITION) fails
the whole transaction's request: its other partitions answer OPERATION_NOT_ATTEMPTED and
nothing is added, as in Kafka.
"""

from __future__ import annotations

import logging
from typing import Any

from kio.schema.errors import ErrorCode

from storage_core.common import TopicPartition
from storage_core.protocol.acl import AclOperation, ResourceType
from storage_core.protocol.messages import build
from storage_core.server.handlers.auth_helper import (
    authorize,
    authorize_cluster,
    filter_by_authorized,
)
from storage_core.server.handlers.common import NO_THROTTLE
from storage_core.server.handlers.txn_support import for_client, txn_coordinator_of
from storage_core.server.request_context import RequestContext

logger = logging.getLogger(__name__)

API_KEY = 24
MIN_VERSION = 0
MAX_VERSION = 4

E = ErrorCode


async def handle(ctx: RequestContext, request: Any) -> Any:
    module = ctx.response_module
    if ctx.api_version < 4:
        errors = await _transaction(
            ctx,
            str(request.v3_and_below_transactional_id),
            int(request.v3_and_below_producer_id),
            int(request.v3_and_below_producer_epoch),
            _partitions(request.v3_and_below_topics),
            verify_only=False,
            from_broker=False,
        )
        return build(
            module.AddPartitionsToTxnResponse,
            throttle_time=NO_THROTTLE,
            results_by_topic_v3_and_below=_topic_results(module, errors),
        )
    if not authorize_cluster(ctx, AclOperation.CLUSTER_ACTION):
        return build(
            module.AddPartitionsToTxnResponse,
            throttle_time=NO_THROTTLE,
            error_code=E.cluster_authorization_failed,
            results_by_transaction=(),
        )
    results = []
    for txn in request.transactions:
        errors = await _transaction(
            ctx,
            str(txn.transactional_id),
            int(txn.producer_id),
            int(txn.producer_epoch),
            _partitions(txn.topics),
            verify_only=bool(txn.verify_only),
            from_broker=True,
        )
        results.append(
            module.AddPartitionsToTxnResult(
                transactional_id=txn.transactional_id,
                topic_results=_topic_results(module, errors),
            )
        )
    return build(
        module.AddPartitionsToTxnResponse,
        throttle_time=NO_THROTTLE,
        error_code=E.none,
        results_by_transaction=tuple(results),
    )


def _partitions(topics: Any) -> list[TopicPartition]:
    return [TopicPartition(str(t.name), int(p)) for t in topics for p in t.partitions]


async def _transaction(
    ctx: RequestContext,
    transactional_id: str,
    producer_id: int,
    producer_epoch: int,
    partitions: list[TopicPartition],
    *,
    verify_only: bool,
    from_broker: bool,
) -> dict[TopicPartition, ErrorCode]:
    if from_broker:
        allowed = {tp.topic for tp in partitions}
    else:
        if not authorize(ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id):
            return dict.fromkeys(partitions, E.transactional_id_authorization_failed)
        allowed = filter_by_authorized(
            ctx, AclOperation.WRITE, ResourceType.TOPIC, (tp.topic for tp in partitions)
        )
    image = ctx.services.metadata_cache.image()
    failed: dict[TopicPartition, ErrorCode] = {}
    for tp in partitions:
        if tp.topic not in allowed:
            failed[tp] = E.topic_authorization_failed
        elif image.partition(tp) is None:
            failed[tp] = E.unknown_topic_or_partition
    if failed:
        return {tp: failed.get(tp, E.operation_not_attempted) for tp in partitions}
    coordinator = txn_coordinator_of(ctx)
    if coordinator is None:
        return dict.fromkeys(partitions, E.coordinator_not_available)
    if verify_only:
        return coordinator.verify_partitions(
            transactional_id, producer_id, producer_epoch, partitions
        )
    error = await coordinator.handle_add_partitions(
        transactional_id, producer_id, producer_epoch, partitions
    )
    return dict.fromkeys(partitions, for_client(ctx, error))


def _topic_results(module: Any, errors: dict[TopicPartition, ErrorCode]) -> tuple[Any, ...]:
    by_topic: dict[str, list[Any]] = {}
    for tp, error in errors.items():
        by_topic.setdefault(tp.topic, []).append(
            module.AddPartitionsToTxnPartitionResult(
                partition_index=tp.partition, partition_error_code=error
            )
        )
    return tuple(
        module.AddPartitionsToTxnTopicResult(name=topic, results_by_partition=tuple(results))
        for topic, results in by_topic.items()
    )
