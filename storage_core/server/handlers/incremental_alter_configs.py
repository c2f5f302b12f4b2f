"""IncrementalAlterConfigs (key 44): SET, DELETE, APPEND and SUBTRACT topic configs.

Each resource succeeds or fails alone, atomically: the topic's overrides after every operation
must form a valid config (INVALID_CONFIG naming the key otherwise), and only then are they
persisted and applied to the topic's live logs (a new ``retention.ms`` takes effect at the next
retention pass). APPEND/SUBTRACT work on list configs (``cleanup.policy``) and start from the
effective value; on other keys they are INVALID_CONFIG. A resource listed twice, a key listed
twice in one resource and an unknown operation are INVALID_REQUEST. The BROKER resource takes
the dynamic broker configs Kafka accepts, refusing the others with Kafka's INVALID_REQUEST (see
``dynamic_broker_config``). ``validate_only`` checks and changes nothing.
"""

from __future__ import annotations

import functools
from typing import Any

from storage_core.protocol.acl import AclOperation
from storage_core.protocol.config_resource import ConfigResourceType
from storage_core.protocol.messages import build
from storage_core.server.dynamic_broker_config import (
    incremental_broker_changes,
    validate_broker_configs,
)
from storage_core.server.handlers.auth_helper import check_config_resource
from storage_core.server.handlers.common import NO_THROTTLE
from storage_core.server.handlers.config_support import (
    InvalidRequestError,
    alter_each_resource,
    check_broker_resource,
    check_operations,
    check_unique_keys,
    incremental_changes,
    topic_info_or_raise,
)
from storage_core.server.request_context import RequestContext

API_KEY = 44
MIN_VERSION = 0
MAX_VERSION = 1


async def handle(ctx: RequestContext, request: Any) -> Any:
    module = ctx.response_module
    validate_only = bool(request.validate_only)
    responses = await alter_each_resource(
        module,
        request.resources,
        lambda resource: _alter(ctx, resource, validate_only=validate_only),
    )
    return build(
        module.IncrementalAlterConfigsResponse,
        throttle_time=NO_THROTTLE,
        responses=responses,
    )


async def _alter(ctx: RequestContext, resource: Any, *, validate_only: bool) -> None:
    services = ctx.services
    check_config_resource(
        ctx, AclOperation.ALTER_CONFIGS, resource.resource_type, resource.resource_name
    )
    names = [c.name for c in resource.configs]
    check_unique_keys(names)
    ops = [(c.name, int(c.config_operation), c.value) for c in resource.configs]
    check_operations(ops)
    if resource.resource_type == ConfigResourceType.BROKER:
        check_broker_resource(resource.resource_name, services.broker_id)
        per_broker = resource.resource_name != ""
        store = services.dynamic_broker_config
        new_configs = incremental_broker_changes(
            ops, store.configs(per_broker=per_broker), services.config.props
        )
        validate_broker_configs(new_configs, per_broker=per_broker)
        if not validate_only:
            await services.replica_manager.run_io(
                functools.partial(
                    services.admin_manager.alter_dynamic_broker_configs,
                    new_configs,
                    per_broker=per_broker,
                )
            )
        return
    if resource.resource_type != ConfigResourceType.TOPIC:
        raise InvalidRequestError(
            f"Unsupported resource type {resource.resource_type} for IncrementalAlterConfigs"
        )
    info = topic_info_or_raise(services, resource.resource_name)
    current = services.admin_manager.default_log_config.with_overrides(info.configs).to_props()
    set_configs, delete_configs = incremental_changes(ops, current)
    await services.replica_manager.run_io(
        functools.partial(
            services.admin_manager.alter_topic_configs,
            resource.resource_name,
            set_configs,
            delete_configs,
            validate_only=validate_only,
        )
    )
