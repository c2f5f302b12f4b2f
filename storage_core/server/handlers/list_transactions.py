"""ListTransactions (key 66, v0-1): the transactional ids this broker coordinates, filtered by
state, producer id and (v1, KIP-994) how long their transaction has been open
(``kafka-transactions.sh list`` / ``find-hanging``).

Ids the principal may not DESCRIBE are left out. While a ``__transaction_state`` partition is
loading the answer is COORDINATOR_LOAD_IN_PROGRESS; unknown state names come back in
``unknown_state_filters``.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from storage_core.coordinator.transaction.transaction_listing import ListTransactionsResult
from storage_core.protocol.acl import AclOperation, ResourceType
from storage_core.protocol.messages import build
from storage_core.server.handlers.auth_helper import authorize
from storage_core.server.handlers.common import NO_THROTTLE
from storage_core.server.handlers.txn_support import txn_coordinator_of
from storage_core.server.request_context import RequestContext

API_KEY = 66
MIN_VERSION = 0
MAX_VERSION = 1


async def handle(ctx: RequestContext, request: Any) -> Any:
    module = ctx.response_module
    coordinator = txn_coordinator_of(ctx)
    if coordinator is None:
        result = ListTransactionsResult(error=ErrorCode.coordinator_not_available)
    else:
        result = coordinator.list_transactions(
            state_filters=tuple(str(s) for s in request.state_filters),
            producer_id_filters=tuple(int(p) for p in request.producer_id_filters),
            duration_filter_ms=int(getattr(request, "duration_filter", -1)),
        )
    return build(
        module.ListTransactionsResponse,
        throttle_time=NO_THROTTLE,
        error_code=result.error,
        unknown_state_filters=result.unknown_state_filters,
        transaction_states=tuple(
            module.TransactionState(
                transactional_id=listing.transactional_id,
                producer_id=listing.producer_id,
                transaction_state=listing.state,
            )
            for listing in result.transactions
            if authorize(
                ctx,
                AclOperation.DESCRIBE,
                ResourceType.TRANSACTIONAL_ID,
                listing.transactional_id,
                log_if_denied=False,
            )
        ),
    )
