"""AlterConfigs (key 33): replace a topic's config overrides with exactly the ones given.

Kafka's legacy API: every override not in the request is removed. Prefer
IncrementalAlterConfigs, which changes only the keys it names. The BROKER resource (this
broker's id, or empty for the cluster default) takes the dynamic broker configs Kafka accepts
(see ``dynamic_broker_config``). Errors per resource: INVALID_REQUEST (a resource listed twice,
a key listed twice, a null value, a broker config Kafka cannot change dynamically),
INVALID_CONFIG naming the key, UNKNOWN_TOPIC_OR_PARTITION. ``validate_only`` changes nothing.
"""

from __future__ import annotations

import functools
from typing import Any

from storage_core.protocol.acl import AclOperation
from storage_core.protocol.config_resource import ConfigResourceType
from storage_core.protocol.messages import build
from storage_core.server.dynamic_broker_config import validate_broker_configs
from storage_core.server.handlers.auth_helper import check_config_resource
from storage_core.server.handlers.common import NO_THROTTLE
from storage_core.server.handlers.config_support import (
    InvalidRequestError,
    alter_each_resource,
    check_broker_resource,
    check_unique_keys,
    topic_info_or_raise,
)
from storage_core.server.request_context import RequestContext

API_KEY = 33
MIN_VERSION = 0
MAX_VERSION = 2


async def handle(ctx: RequestContext, request: Any) -> Any:
    module = ctx.response_module
    validate_only = bool(request.validate_only)
    responses = await alter_each_resource(
        module,
        request.resources,
        lambda resource: _alter(ctx, resource, validate_only=validate_only),
    )
    return build(module.AlterConfigsResponse, throttle_time=NO_THROTTLE, responses=responses)


async def _alter(ctx: RequestContext, resource: Any, *, validate_only: bool) -> None:
    services = ctx.services
    check_config_resource(
        ctx, AclOperation.ALTER_CONFIGS, resource.resource_type, resource.resource_name
    )
    names = [c.name for c in resource.configs]
    check_unique_keys(names)
    nulls = [c.name for c in resource.configs if c.value is None]
    if nulls:
        raise InvalidRequestError("Null value not supported for : " + ", ".join(nulls))
    if resource.resource_type == ConfigResourceType.BROKER:
        check_broker_resource(resource.resource_name, services.broker_id)
        per_broker = resource.resource_name != ""
        new_configs = {c.name: str(c.value) for c in resource.configs}
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
            f"Unsupported resource type {resource.resource_type} for AlterConfigs"
        )
    info = topic_info_or_raise(services, resource.resource_name)
    set_configs = {c.name: str(c.value) for c in resource.configs}
    delete_configs = tuple(k for k in info.configs if k not in set_configs)
    await services.replica_manager.run_io(
        functools.partial(
            services.admin_manager.alter_topic_configs,
            resource.resource_name,
            set_configs,
            delete_configs,
            validate_only=validate_only,
        )
    )
