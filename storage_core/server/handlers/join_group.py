"""JoinGroup (key 11): join a classic group and wait for the rebalance to complete.

v0 has no rebalance timeout (the session timeout is used); v4+ first answer MEMBER_ID_REQUIRED
with a member id to join again with (KIP-394), except to static members; v5+ carry the
``group.instance.id`` of static members (KIP-345); v7+ carry a nullable protocol name and the
protocol type; v9+ tell a static leader rejoining a Stable group to skip the assignment.
"""

from __future__ import annotations

from typing import Any

from storage_core.coordinator.group.member_metadata import JoinGroupResult
from storage_core.protocol.acl import AclOperation, ResourceType
from storage_core.protocol.messages import build
from storage_core.server.handlers.auth_helper import GroupAuthorizationFailedError, authorize
from storage_core.server.handlers.common import NO_THROTTLE, error_code_of
from storage_core.server.handlers.group_support import (
    NOT_RUNNING,
    client_host,
    coordinator_of,
    to_ms,
)
from storage_core.server.request_context import RequestContext

API_KEY = 11
MIN_VERSION = 0
MAX_VERSION = 9


async def handle(ctx: RequestContext, request: Any) -> Any:
    coordinator = coordinator_of(ctx)
    denied = _denied(ctx, request.group_id)
    if denied is not None:
        result = JoinGroupResult.failed(request.member_id, denied)
    elif coordinator is None:
        result = JoinGroupResult.failed(request.member_id, NOT_RUNNING)
    else:
        session_timeout_ms = to_ms(request.session_timeout)
        result = await coordinator.join_group(
            group_id=request.group_id,
            member_id=request.member_id,
            group_instance_id=getattr(request, "group_instance_id", None),
            require_known_member_id=ctx.api_version >= 4,
            client_id=ctx.client_id or "",
            client_host=client_host(ctx),
            rebalance_timeout_ms=(
                to_ms(request.rebalance_timeout) if ctx.api_version >= 1 else session_timeout_ms
            ),
            session_timeout_ms=session_timeout_ms,
            protocol_type=request.protocol_type,
            protocols=[(p.name, p.metadata) for p in request.protocols],
            supports_skip_assignment=ctx.api_version >= 9,
        )
    module = ctx.response_module
    members = tuple(
        build(
            module.JoinGroupResponseMember,
            member_id=m.member_id,
            group_instance_id=m.group_instance_id,
            metadata=m.metadata,
        )
        for m in result.members
    )
    protocol_name = result.protocol_name
    return build(
        module.JoinGroupResponse,
        throttle_time=NO_THROTTLE,
        error_code=error_code_of(result.error),
        generation_id=result.generation_id,
        protocol_type=result.protocol_type,
        protocol_name=protocol_name if ctx.api_version >= 7 else (protocol_name or ""),
        leader=result.leader_id,
        skip_assignment=result.skip_assignment,
        member_id=result.member_id,
        members=members,
    )


def _denied(ctx: RequestContext, group_id: str) -> GroupAuthorizationFailedError | None:
    """READ on the group is needed (Kafka's GROUP_AUTHORIZATION_FAILED otherwise)."""
    if authorize(ctx, AclOperation.READ, ResourceType.GROUP, group_id):
        return None
    return GroupAuthorizationFailedError(f"Not authorized to access group: {group_id}")
