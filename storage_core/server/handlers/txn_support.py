"""Helpers shared by the transaction handlers (InitProducerId ... ListTransactions)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from storage_core.coordinator.transaction.transaction_coordinator import TransactionCoordinator
from storage_core.coordinator.transaction.transaction_results import producer_fenced_for_version

if TYPE_CHECKING:
    from storage_core.server.request_context import RequestContext


def txn_coordinator_of(ctx: RequestContext) -> TransactionCoordinator | None:
    """The broker's transaction coordinator, None until it runs."""
    coordinator = ctx.services.transaction_coordinator
    return coordinator if coordinator is not None and coordinator.is_active else None


def for_client(ctx: RequestContext, error: ErrorCode) -> ErrorCode:
    """``error`` as the request's version understands it (PRODUCER_FENCED is
    INVALID_PRODUCER_EPOCH before the versions of KIP-588)."""
    return producer_fenced_for_version(ctx.api_key, ctx.api_version, error)
