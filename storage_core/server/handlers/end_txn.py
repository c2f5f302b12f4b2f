"""EndTxn (key 26): commit or abort the producer's transaction.

Answered once the transaction coordinator has written PrepareCommit / PrepareAbort to
``__transaction_state`` (acks=all): the outcome is decided then. The markers on the
transaction's partitions follow; until they are written, another EndTxn, AddPartitionsToTxn
or InitProducerId for the id answers CONCURRENT_TRANSACTIONS (clients retry). Needs WRITE
on the transactional id. Versions below 2 get INVALID_PRODUCER_EPOCH where later ones get
PRODUCER_FENCED.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from storage_core.coordinator.transaction.transaction_results import TransactionResult
from storage_core.protocol.acl import AclOperation, ResourceType
from storage_core.protocol.messages import build
from storage_core.server.handlers.auth_helper import authorize
from storage_core.server.handlers.common import NO_THROTTLE
from storage_core.server.handlers.txn_support import for_client, txn_coordinator_of
from storage_core.server.request_context import RequestContext

API_KEY = 26
MIN_VERSION = 0
MAX_VERSION = 4


async def handle(ctx: RequestContext, request: Any) -> Any:
    return build(
        ctx.response_module.EndTxnResponse,
        throttle_time=NO_THROTTLE,
        error_code=for_client(ctx, await _end(ctx, request)),
    )


async def _end(ctx: RequestContext, request: Any) -> ErrorCode:
    transactional_id = str(request.transactional_id)
    if not authorize(ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id):
        return ErrorCode.transactional_id_authorization_failed
    coordinator = txn_coordinator_of(ctx)
    if coordinator is None:
        return ErrorCode.coordinator_not_available
    return await coordinator.handle_end_transaction(
        transactional_id,
        int(request.producer_id),
        int(request.producer_epoch),
        TransactionResult.COMMIT if request.committed else TransactionResult.ABORT,
    )
