"""InitProducerId (key 22): a producer id and epoch for idempotent producers.

Every call without a transactional id gets a fresh producer id with epoch 0, as Kafka does;
ids come from ``ProducerIdManager`` and are never reused across restarts. Transactions are not
supported: a transactional id is answered with INVALID_REQUEST.
"""

from __future__ import annotations

import logging
from typing import Any

from kio.schema.errors import ErrorCode

from storage_core.protocol.messages import build
from storage_core.server.handlers.common import NO_THROTTLE
from storage_core.server.request_context import RequestContext

logger = logging.getLogger(__name__)

API_KEY = 22
MIN_VERSION = 0
MAX_VERSION = 5


async def handle(ctx: RequestContext, request: Any) -> Any:
    module = ctx.response_module
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
