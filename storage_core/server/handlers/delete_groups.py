"""DeleteGroups (key 42): delete Empty groups and their committed offsets.

One result per distinct group name (Kafka drops repeats). The deletion writes tombstones to
``__consumer_offsets``, so a deleted group stays deleted across restarts. Without ACLs every
group may be deleted (no GROUP_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from typing import Any

from storage_core.errors import StorageError
from storage_core.protocol.messages import build
from storage_core.server.handlers.common import NO_THROTTLE, error_code_of
from storage_core.server.handlers.group_support import NOT_RUNNING, coordinator_of
from storage_core.server.request_context import RequestContext

API_KEY = 42
MIN_VERSION = 0
MAX_VERSION = 2


async def handle(ctx: RequestContext, request: Any) -> Any:
    coordinator = coordinator_of(ctx)
    names = list(dict.fromkeys(request.groups_names))
    results: dict[str, StorageError | None] = (
        dict.fromkeys(names, NOT_RUNNING)
        if coordinator is None
        else await coordinator.delete_groups(names)
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
