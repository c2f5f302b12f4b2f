"""DescribeGroups (key 15): state, protocol and members of each named group.

Member metadata and assignments are shown only while the group is Stable, as in Kafka. An
unknown group is reported Dead without error. Authorized operations are not computed (there
are no ACLs): the field keeps its "not provided" value.
"""

from __future__ import annotations

from typing import Any

from storage_core.coordinator.group.group_coordinator import DescribeGroupResult
from storage_core.protocol.acl import AclOperation, ResourceType
from storage_core.protocol.messages import build
from storage_core.server.handlers.auth_helper import (
    GroupAuthorizationFailedError,
    authorize,
    authorized_operations,
)
from storage_core.server.handlers.common import NO_THROTTLE, error_code_of
from storage_core.server.handlers.group_support import NOT_RUNNING, coordinator_of
from storage_core.server.request_context import RequestContext

API_KEY = 15
MIN_VERSION = 0
MAX_VERSION = 5


async def handle(ctx: RequestContext, request: Any) -> Any:
    module = ctx.response_module
    coordinator = coordinator_of(ctx)
    described = []
    for group_id in request.groups:
        if not authorize(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
            result = DescribeGroupResult(
                error=GroupAuthorizationFailedError(f"Not authorized to access group: {group_id}")
            )
        elif coordinator is None:
            result = DescribeGroupResult(error=NOT_RUNNING)
        else:
            result = coordinator.describe_group(group_id)
        summary = result.summary
        members = () if summary is None else summary.members
        described.append(
            build(
                module.DescribedGroup,
                error_code=error_code_of(result.error),
                group_id=group_id,
                group_state="" if summary is None else summary.state.value,
                protocol_type="" if summary is None else summary.protocol_type,
                protocol_data="" if summary is None else summary.protocol,
                members=tuple(
                    build(
                        module.DescribedGroupMember,
                        member_id=m.member_id,
                        group_instance_id=m.group_instance_id,
                        client_id=m.client_id,
                        client_host=m.client_host,
                        member_metadata=m.metadata,
                        member_assignment=m.assignment,
                    )
                    for m in members
                ),
                authorized_operations=(
                    authorized_operations(ctx, ResourceType.GROUP, group_id)
                    if result.error is None
                    and getattr(request, "include_authorized_operations", False)
                    else -(2**31)
                ),
            )
        )
    return build(module.DescribeGroupsResponse, throttle_time=NO_THROTTLE, groups=tuple(described))
