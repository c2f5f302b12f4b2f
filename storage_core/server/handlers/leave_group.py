"""LeaveGroup (key 13): members leave, which rebalances the group.

v0-v2 name one member and carry one error (the member's unless the group failed); v3+
(KIP-345) name a batch and answer per member.
"""

from __future__ import annotations

from typing import Any

from storage_core.coordinator.group.heartbeat import LeaveGroupResult, MemberIdentity
from storage_core.protocol.acl import AclOperation, ResourceType
from storage_core.protocol.messages import build
from storage_core.server.handlers.auth_helper import GroupAuthorizationFailedError, authorize
from storage_core.server.handlers.common import NO_THROTTLE, error_code_of
from storage_core.server.handlers.group_support import NOT_RUNNING, coordinator_of
from storage_core.server.request_context import RequestContext

API_KEY = 13
MIN_VERSION = 0
MAX_VERSION = 5


async def handle(ctx: RequestContext, request: Any) -> Any:
    if ctx.api_version < 3:
        identities = [MemberIdentity(member_id=request.member_id)]
    else:
        identities = [
            MemberIdentity(member_id=m.member_id, group_instance_id=m.group_instance_id)
            for m in request.members
        ]
    coordinator = coordinator_of(ctx)
    denied = _denied(ctx, request.group_id)
    if denied is not None:
        result = LeaveGroupResult(error=denied)
    elif coordinator is None:
        result = LeaveGroupResult(error=NOT_RUNNING)
    else:
        result = coordinator.leave_group(group_id=request.group_id, members=identities)
    module = ctx.response_module
    if ctx.api_version < 3:
        error = result.error
        if error is None and result.members:
            error = result.members[0][1]
        return build(
            module.LeaveGroupResponse, throttle_time=NO_THROTTLE, error_code=error_code_of(error)
        )
    return build(
        module.LeaveGroupResponse,
        throttle_time=NO_THROTTLE,
        error_code=error_code_of(result.error),
        members=tuple(
            module.MemberResponse(
                member_id=identity.member_id,
                group_instance_id=identity.group_instance_id,
                error_code=error_code_of(error),
            )
            for identity, error in result.members
        ),
    )


def _denied(ctx: RequestContext, group_id: str) -> GroupAuthorizationFailedError | None:
    """READ on the group is needed (Kafka's GROUP_AUTHORIZATION_FAILED otherwise)."""
    if authorize(ctx, AclOperation.READ, ResourceType.GROUP, group_id):
        return None
    return GroupAuthorizationFailedError(f"Not authorized to access group: {group_id}")
