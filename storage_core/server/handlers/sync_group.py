"""SyncGroup (key 14): the leader hands in the assignments; every member gets its own.

v5+ name the protocol type and name, which must match the group's.
"""

from __future__ import annotations

from typing import Any

from storage_core.coordinator.group.member_metadata import SyncGroupResult
from storage_core.protocol.acl import AclOperation, ResourceType
from storage_core.protocol.messages import build
from storage_core.server.handlers.auth_helper import GroupAuthorizationFailedError, authorize
from storage_core.server.handlers.common import NO_THROTTLE, error_code_of
from storage_core.server.handlers.group_support import NOT_RUNNING, coordinator_of
from storage_core.server.request_context import RequestContext

API_KEY = 14
MIN_VERSION = 0
MAX_VERSION = 5


async def handle(ctx: RequestContext, request: Any) -> Any:
    coordinator = coordinator_of(ctx)
    denied = _denied(ctx, request.group_id)
    if denied is not None:
        result = SyncGroupResult(error=denied)
    elif coordinator is None:
        result = SyncGroupResult(error=NOT_RUNNING)
    else:
        result = await coordinator.sync_group(
            group_id=request.group_id,
            generation_id=request.generation_id,
            member_id=request.member_id,
            group_instance_id=getattr(request, "group_instance_id", None),
            protocol_type=getattr(request, "protocol_type", None),
            protocol_name=getattr(request, "protocol_name", None),
            assignments={a.member_id: a.assignment for a in request.assignments},
        )
    return build(
        ctx.response_module.SyncGroupResponse,
        throttle_time=NO_THROTTLE,
        error_code=error_code_of(result.error),
        protocol_type=result.protocol_type,
        protocol_name=result.protocol_name,
        assignment=result.assignment,
    )


def _denied(ctx: RequestContext, group_id: str) -> GroupAuthorizationFailedError | None:
    """READ on the group is needed (Kafka's GROUP_AUTHORIZATION_FAILED otherwise)."""
    if authorize(ctx, AclOperation.READ, ResourceType.GROUP, group_id):
        return None
    return GroupAuthorizationFailedError(f"Not authorized to access group: {group_id}")
