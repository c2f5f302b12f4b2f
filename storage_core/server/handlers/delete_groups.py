"""DeleteGroups (key 42): delete Empty groups and their committed offsets.

One result per distinct group name (Kafka drops repeats). The deletion writes tombstones to
``__consumer_offsets``, so a deleted group stays deleted across restarts. Without ACLs every
group may be deleted (no GROUP_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from typing import Any

from storage_core.errors import StorageError
from storage_core.protocol.acl import AclOperation, ResourceType
from storage_core.protocol.messages import build
from storage_core.server.handlers.auth_helper import (
    GroupAuthorizationFailedError,
    filter_by_authorized,
)
from storage_core.server.handlers.common import NO_THROTTLE, error_code_of
from storage_core.server.handlers.group_support import NOT_RUNNING, coordinator_of
from storage_core.server.request_context import RequestContext

API_KEY = 42
MIN_VERSION = 0
MAX_VERSION = 2


async def handle(ctx: RequestContext, request: Any) -> Any:
    coordinator = coordinator_of(ctx)
    names = list(dict.fromkeys(request.groups_names))
    deletable = filter_by_authorized(ctx, AclOperation.DELETE, ResourceType.GROUP, names)
    allowed = [name for name in names if name in deletable]
    results: dict[str, StorageError | None] = {
        name: GroupAuthorizationFailedError(f"Not authorized to access group: {name}")
        for name in names
        if name not in deletable
    }
    if allowed:
        results.update(
            dict.fromkeys(allowed, NOT_RUNNING)
            if coordinator is None
            else await coordinator.delete_groups(allowed)
        )
    module = ctx.response_module
    return build(
        module.DeleteGroupsResponse,
        throttle_time=NO_THROTTLE,
        results=tuple(
            module.DeletableGroupResult(group_id=name, error_code=error_code_of(results[name]))
            for name in names
        ),
    )
