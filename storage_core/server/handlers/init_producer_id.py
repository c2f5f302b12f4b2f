"""InitProducerId (key 22): a producer id and epoch.

Every call without a transactional id gets a fresh producer id with epoch 0, as Kafka does;
ids come from ``ProducerIdManager`` and are never reused across restarts. A call with a
transactional id goes to the transaction coordinator (this broker must lead the id's
``__transaction_state`` partition, else NOT_COORDINATOR): the id's producer id with its epoch
bumped, which fences every older producer of the id (KIP-98); v3+ may name the producer id
and epoch the client had, to keep its id after a fatal error (KIP-360). Versions below 4 get
INVALID_PRODUCER_EPOCH where later ones get PRODUCER_FENCED.
"""

from __future__ import annotations

import logging
from typing import Any

from kio.schema.errors import ErrorCode

from storage_core.coordinator.transaction.transaction_metadata import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
)
from storage_core.coordinator.transaction.transaction_results import (
    expected_producer_id_and_epoch,
)
from storage_core.protocol.acl import CLUSTER_NAME, AclOperation, ResourceType
from storage_core.protocol.messages import build
from storage_core.server.handlers.auth_helper import authorize, authorize_by_resource_type
from storage_core.server.handlers.common import NO_THROTTLE, milliseconds
from storage_core.server.handlers.txn_support import for_client, txn_coordinator_of
from storage_core.server.request_context import RequestContext

logger = logging.getLogger(__name__)

API_KEY = 22
MIN_VERSION = 0
MAX_VERSION = 5


async def handle(ctx: RequestContext, request: Any) -> Any:
    module = ctx.response_module
    denied = _denied(ctx, request.transactional_id)
    if denied is not None:
        return build(
            module.InitProducerIdResponse,
            throttle_time=NO_THROTTLE,
            error_code=denied,
            producer_id=-1,
            producer_epoch=-1,
        )
    if request.transactional_id is not None:
        error, producer_id, producer_epoch = await _transactional(ctx, request)
        return build(
            module.InitProducerIdResponse,
            throttle_time=NO_THROTTLE,
            error_code=for_client(ctx, error),
            producer_id=producer_id,
            producer_epoch=producer_epoch,
        )
    producer_id = await ctx.services.replica_manager.run_io(
        ctx.services.producer_id_manager.generate_producer_id
    )
    return build(
        module.InitProducerIdResponse,
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        producer_id=producer_id,
        producer_epoch=0,
    )


async def _transactional(ctx: RequestContext, request: Any) -> tuple[ErrorCode, int, int]:
    expected = expected_producer_id_and_epoch(
        int(getattr(request, "producer_id", NO_PRODUCER_ID)),
        int(getattr(request, "producer_epoch", NO_PRODUCER_EPOCH)),
    )
    if isinstance(expected, ErrorCode):
        return expected, NO_PRODUCER_ID, NO_PRODUCER_EPOCH
    coordinator = txn_coordinator_of(ctx)
    if coordinator is None:
        return ErrorCode.coordinator_not_available, NO_PRODUCER_ID, NO_PRODUCER_EPOCH
    return await coordinator.handle_init_producer_id(
        str(request.transactional_id), milliseconds(request.transaction_timeout), expected
    )


def _denied(ctx: RequestContext, transactional_id: str | None) -> ErrorCode | None:
    """Kafka's checks: a transactional producer needs WRITE on its transactional id; an
    idempotent one IDEMPOTENT_WRITE on the cluster or WRITE on at least one topic."""
    if transactional_id is not None:
        if authorize(ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id):
            return None
        return ErrorCode.transactional_id_authorization_failed
    if authorize(
        ctx, AclOperation.IDEMPOTENT_WRITE, ResourceType.CLUSTER, CLUSTER_NAME, log_if_denied=False
    ) or authorize_by_resource_type(ctx, AclOperation.WRITE, ResourceType.TOPIC):
        return None
    return ErrorCode.cluster_authorization_failed
