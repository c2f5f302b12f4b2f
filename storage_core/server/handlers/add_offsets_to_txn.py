"""AddOffsetsToTxn (key 25): a transactional producer will commit a consumer group's offsets
in its transaction (``send_offsets_to_transaction``): the group's ``__consumer_offsets``
partition joins the transaction, so that its offsets are committed or aborted with it.

Needs WRITE on the transactional id (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED) and READ
on the group (else GROUP_AUTHORIZATION_FAILED), as Kafka. Versions below 2 get
INVALID_PRODUCER_EPOCH where later ones get PRODUCER_FENCED.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from storage_core.protocol.acl import AclOperation, ResourceType
from storage_core.protocol.messages import build
from storage_core.server.handlers.auth_helper import authorize
from storage_core.server.handlers.common import NO_THROTTLE
from storage_core.server.handlers.txn_support import for_client, txn_coordinator_of
from storage_core.server.request_context import RequestContext

API_KEY = 25
MIN_VERSION = 0
MAX_VERSION = 3


async def handle(ctx: RequestContext, request: Any) -> Any:
    return build(
        ctx.response_module.AddOffsetsToTxnResponse,
        throttle_time=NO_THROTTLE,
        error_code=for_client(ctx, await _add(ctx, request)),
    )


async def _add(ctx: RequestContext, request: Any) -> ErrorCode:
    transactional_id = str(request.transactional_id)
    if not authorize(ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id):
        return ErrorCode.transactional_id_authorization_failed
    if not authorize(ctx, AclOperation.READ, ResourceType.GROUP, str(request.group_id)):
        return ErrorCode.group_authorization_failed
    coordinator = txn_coordinator_of(ctx)
    if coordinator is None:
        return ErrorCode.coordinator_not_available
    return await coordinator.handle_add_offsets(
        transactional_id,
        int(request.producer_id),
        int(request.producer_epoch),
        str(request.group_id),
    )
