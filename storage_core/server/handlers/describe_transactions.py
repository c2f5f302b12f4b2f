"""DescribeTransactions (key 65, v0): the state of transactional ids this broker
coordinates (``kafka-transactions.sh describe``).

Each id needs DESCRIBE on it (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED); the partitions of
topics the principal may not describe are left out of the answer, as Kafka does. An id of a
partition led elsewhere answers NOT_COORDINATOR; an unknown or expiring one
TRANSACTIONAL_ID_NOT_FOUND.
"""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from storage_core.coordinator.transaction.transaction_listing import TransactionDescription
from storage_core.protocol.acl import AclOperation, ResourceType
from storage_core.protocol.messages import build
from storage_core.server.handlers.auth_helper import authorize
from storage_core.server.handlers.common import NO_THROTTLE
from storage_core.server.handlers.txn_support import txn_coordinator_of
from storage_core.server.request_context import RequestContext

API_KEY = 65
MIN_VERSION = 0
MAX_VERSION = 0

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


async def handle(ctx: RequestContext, request: Any) -> Any:
    module = ctx.response_module
    coordinator = txn_coordinator_of(ctx)
    states = []
    for txn_id in request.transactional_ids:
        if not authorize(ctx, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, txn_id):
            described = TransactionDescription(
                transactional_id=txn_id, error=ErrorCode.transactional_id_authorization_failed
            )
        elif coordinator is None:
            described = TransactionDescription(
                transactional_id=txn_id, error=ErrorCode.coordinator_not_available
            )
        else:
            described = coordinator.describe_transactions([txn_id])[0]
        states.append(_state(ctx, module, described))
    return build(
        module.DescribeTransactionsResponse,
        throttle_time=NO_THROTTLE,
        transaction_states=tuple(states),
    )


def _state(ctx: RequestContext, module: Any, described: TransactionDescription) -> Any:
    topics = tuple(
        module.TopicData(topic=topic, partitions=partitions)
        for topic, partitions in described.topics
        if authorize(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, topic)
    )
    return module.TransactionState(
        error_code=described.error,
        transactional_id=described.transactional_id,
        transaction_state=described.state,
        transaction_timeout=datetime.timedelta(milliseconds=described.timeout_ms),
        transaction_start_time=_EPOCH + datetime.timedelta(milliseconds=described.start_time_ms),
        producer_id=described.producer_id,
        producer_epoch=described.producer_epoch,
        topics=topics,
    )
