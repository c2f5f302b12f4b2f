"""Heartbeat (key 12): keeps a member's session alive; REBALANCE_IN_PROGRESS asks it to rejoin."""

from __future__ import annotations

from typing import Any

from storage_core.errors import StorageError
from storage_core.protocol.acl import AclOperation, ResourceType
from storage_core.protocol.messages import build
from storage_core.server.handlers.auth_helper import GroupAuthorizationFailedError, authorize
from storage_core.server.handlers.common import NO_THROTTLE, error_code_of
from storage_core.server.handlers.group_support import NOT_RUNNING, coordinator_of
from storage_core.server.request_context import RequestContext

API_KEY = 12
MIN_VERSION = 0
MAX_VERSION = 4


async def handle(ctx: RequestContext, request: Any) -> Any:
    coordinator = coordinator_of(ctx)
    error: StorageError | None = _denied(ctx, request.group_id)
    if error is None:
        error = (
            NOT_RUNNING
            if coordinator is None
            else coordinator.heartbeat(
                group_id=request.group_id,
                member_id=request.member_id,
                group_instance_id=getattr(request, "group_instance_id", None),
                generation_id=request.generation_id,
            )
        )
    return build(
        ctx.response_module.HeartbeatResponse,
        throttle_time=NO_THROTTLE,
        error_code=error_code_of(error),
    )


def _denied(ctx: RequestContext, group_id: str) -> GroupAuthorizationFailedError | None:
    """READ on the group is needed (Kafka's GROUP_AUTHORIZATION_FAILED otherwise)."""
    if authorize(ctx, AclOperation.READ, ResourceType.GROUP, group_id):
        return None
    return GroupAuthorizationFailedError(f"Not authorized to access group: {group_id}")
