"""ListGroups (key 16): every group this coordinator knows, optionally filtered by state
(v4+, KIP-518) and type (v5+, KIP-848: every group here is "classic")."""

from __future__ import annotations

from typing import Any

from storage_core.coordinator.group.group_coordinator import ListGroupsResult
from storage_core.protocol.messages import build
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
            for group in sorted(result.groups, key=lambda g: g.group_id)
        ),
    )
