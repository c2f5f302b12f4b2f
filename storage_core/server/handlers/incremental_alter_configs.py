"""IncrementalAlterConfigs (key 44): SET, DELETE, APPEND and SUBTRACT topic configs.

Each resource succeeds or fails alone, atomically: the topic's overrides after every operation
must form a valid config (INVALID_CONFIG naming the key otherwise), and only then are they
persisted and applied to the topic's live logs (a new ``retention.ms`` takes effect at the next
retention pass). APPEND/SUBTRACT work on list configs (``cleanup.policy``) and start from the
effective value; on other keys they are INVALID_CONFIG. A resource listed twice, a key listed
twice in one resource and an unknown operation are INVALID_REQUEST; so is any broker config,
since none can change while the broker runs. ``validate_only`` checks and changes nothing.
"""

from __future__ import annotations

import functools
from collections import Counter
from typing import Any

from storage_core.errors import StorageError
from storage_core.server.handlers.common import NO_THROTTLE, error_code_of
from storage_core.server.handlers.config_support import (
    MAX_RESOURCES_PER_REQUEST,
    InvalidRequestError,
    ResourceType,
    check_broker_resource,
    check_operations,
    check_unique_keys,
    incremental_changes,
    reject_broker_changes,
    topic_info_or_raise,
)
from storage_core.server.protocol import build
from storage_core.server.request_context import RequestContext

API_KEY = 44
MIN_VERSION = 0
MAX_VERSION = 1


async def handle(ctx: RequestContext, request: Any) -> Any:
    module = ctx.response_module
    seen = Counter((r.resource_type, r.resource_name) for r in request.resources)
    responses = []
    for index, resource in enumerate(request.resources):
        error: StorageError | None = None
        try:
            if index >= MAX_RESOURCES_PER_REQUEST:
                raise InvalidRequestError(
                    f"at most {MAX_RESOURCES_PER_REQUEST} resources per request"
                )
            if seen[(resource.resource_type, resource.resource_name)] > 1:
                raise InvalidRequestError("Each resource must appear at most once.")
            await _alter(ctx, resource, validate_only=bool(request.validate_only))
        except StorageError as exc:
            error = exc
        responses.append(
            build(
                module.AlterConfigsResourceResponse,
                error_code=error_code_of(error),
                error_message=None if error is None else str(error),
                resource_type=resource.resource_type,
                resource_name=resource.resource_name,
            )
        )
    return build(
        module.IncrementalAlterConfigsResponse,
        throttle_time=NO_THROTTLE,
        responses=tuple(responses),
    )


async def _alter(ctx: RequestContext, resource: Any, *, validate_only: bool) -> None:
    broker = ctx.broker
    names = [c.name for c in resource.configs]
    check_unique_keys(names)
    ops = [(c.name, int(c.config_operation), c.value) for c in resource.configs]
    check_operations(ops)
    if resource.resource_type == ResourceType.BROKER:
        check_broker_resource(resource.resource_name, broker.broker_id)
        if names:
            reject_broker_changes(names)
        return
    if resource.resource_type != ResourceType.TOPIC:
        raise InvalidRequestError(
            f"Unsupported resource type {resource.resource_type} for IncrementalAlterConfigs"
        )
    info = topic_info_or_raise(broker, resource.resource_name)
    current = broker.default_log_config.with_overrides(info.configs).to_props()
    set_configs, delete_configs = incremental_changes(ops, current)
    await broker.replica_manager.run_io(
        functools.partial(
            broker.alter_topic_configs,
            resource.resource_name,
            set_configs,
            delete_configs,
            validate_only=validate_only,
        )
    )
