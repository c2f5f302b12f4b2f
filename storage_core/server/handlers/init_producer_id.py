"""InitProducerId (key 22): a producer id and epoch for idempotent producers.

Every call without a transactional id gets a fresh producer id with epoch 0, as Kafka does;
ids come from ``ProducerIdManager`` and are never reused across restarts. Transactions are not
supported: a transactional id is answered with INVALID_REQUEST.
"""

from __future__ import annotations

import logging
from typing import Any

from kio.schema.errors import ErrorCode

from storage_core.protocol.acl import CLUSTER_NAME, AclOperation, ResourceType
from storage_core.protocol.messages import build
from storage_core.server.handlers.auth_helper import authorize, authorize_by_resource_type
from storage_core.server.handlers.common import NO_THROTTLE
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
    if request.transactional_id:
        logger.warning(
            "transactions are not supported client=%s transactional_id=%s",
            ctx.client_id,
            request.transactional_id,
        )
        return build(
            module.InitProducerIdResponse,
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.invalid_request,
            producer_id=-1,
            producer_epoch=-1,
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
