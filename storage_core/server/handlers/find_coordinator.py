"""FindCoordinator (key 10): this broker coordinates every group (and, as the only node,
answers for transactional ids too; transactions themselves are refused by InitProducerId).

v0-v3 ask for one key; v4+ (KIP-699) for a batch in ``coordinator_keys``. Until the group
coordinator runs, the answer is COORDINATOR_NOT_AVAILABLE and clients retry.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from storage_core.server.handlers.common import NO_THROTTLE
from storage_core.server.handlers.group_support import coordinator_of
from storage_core.server.protocol import build
from storage_core.server.request_context import RequestContext

API_KEY = 10
MIN_VERSION = 0
MAX_VERSION = 4

GROUP_KEY_TYPE = 0
TRANSACTION_KEY_TYPE = 1
MAX_COORDINATOR_KEYS = 10_000


def _answer(ctx: RequestContext, key_type: int) -> tuple[ErrorCode, str | None, int, str, int]:
    if key_type not in (GROUP_KEY_TYPE, TRANSACTION_KEY_TYPE):
        return ErrorCode.invalid_request, f"unknown coordinator key type {key_type}", -1, "", -1
    coordinator = coordinator_of(ctx)
    if coordinator is None or not coordinator.is_active:
        message = "the group coordinator is not available yet"
        return ErrorCode.coordinator_not_available, message, -1, "", -1
    endpoint = ctx.broker.endpoint
    return ErrorCode.none, None, endpoint.node_id, endpoint.host, endpoint.port


async def handle(ctx: RequestContext, request: Any) -> Any:
    module = ctx.response_module
    key_type = int(getattr(request, "key_type", GROUP_KEY_TYPE))
    if ctx.api_version < 4:
        error, message, node_id, host, port = _answer(ctx, key_type)
        return build(
            module.FindCoordinatorResponse,
            throttle_time=NO_THROTTLE,
            error_code=error,
            error_message=message,
            node_id=node_id,
            host=host,
            port=port,
        )
    keys = tuple(request.coordinator_keys)
    coordinators = []
    for key in keys:
        if len(keys) > MAX_COORDINATOR_KEYS:
            error, message, node_id, host, port = (
                ErrorCode.invalid_request,
                f"{len(keys)} coordinator keys in one request, more than {MAX_COORDINATOR_KEYS}",
                -1,
                "",
                -1,
            )
        else:
            error, message, node_id, host, port = _answer(ctx, key_type)
        coordinators.append(
            module.Coordinator(
                key=key,
                node_id=node_id,
                host=host,
                port=port,
                error_code=error,
                error_message=message,
            )
        )
    return build(
        module.FindCoordinatorResponse, throttle_time=NO_THROTTLE, coordinators=tuple(coordinators)
    )
