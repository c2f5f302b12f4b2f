"""ListGroups (key 16): every group this coordinator knows, optionally filtered by state
(v4+, KIP-518) and type (v5+, KIP-848: every group here is "classic")."""

from __future__ import annotations

from typing import Any

from storage_core.coordinator.group.group_coordinator import ListGroupsResult
from storage_core.protocol.acl import CLUSTER_NAME, AclOperation, ResourceType
from storage_core.protocol.messages import build
from storage_core.server.handlers.auth_helper import authorize, filter_by_authorized
from storage_core.server.handlers.common import NO_THROTTLE, error_code_of
from storage_core.server.handlers.group_support import NOT_RUNNING, coordinator_of
from storage_core.server.request_context import RequestContext

API_KEY = 16
MIN_VERSION = 0
MAX_VERSION = 5

GROUP_TYPE = "classic"


async def handle(ctx: RequestContext, request: Any) -> Any:
    coordinator = coordinator_of(ctx)
    states = tuple(getattr(request, "states_filter", ()))
    types = {t.lower() for t in getattr(request, "types_filter", ())}
    if coordinator is None:
        result = ListGroupsResult(error=NOT_RUNNING)
    elif types and GROUP_TYPE not in types:
        result = ListGroupsResult()
    else:
        result = coordinator.list_groups(states=states)
    groups = result.groups
    if ctx.services.authorizer is not None and not authorize(
        ctx, AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME, log_if_denied=False
    ):  # without DESCRIBE on the cluster, only the groups it may describe
        visible = filter_by_authorized(
            ctx,
            AclOperation.DESCRIBE,
            ResourceType.GROUP,
            (g.group_id for g in groups),
            log_if_denied=False,
        )
        groups = tuple(g for g in groups if g.group_id in visible)
    module = ctx.response_module
    return build(
        module.ListGroupsResponse,
        throttle_time=NO_THROTTLE,
        error_code=error_code_of(result.error),
        groups=tuple(
            build(
                module.ListedGroup,
                group_id=group.group_id,
                protocol_type=group.protocol_type,
                group_state=group.state.value,
                group_type=GROUP_TYPE,
            )
            for group in sorted(groups, key=lambda g: g.group_id)
        ),
    )
