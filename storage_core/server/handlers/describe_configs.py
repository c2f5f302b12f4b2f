"""DescribeConfigs (key 32): the configs of topics (resource type 2) and of this broker (4).

Topics: every topic config, its value and where it comes from (the topic's override, a
server.properties default, the built-in default). The broker: its dynamic configs, its
server.properties keys and topic defaults (read-only where Kafka cannot change them while
running); the empty broker name: the cluster-wide dynamic defaults. ``configuration_keys``
null or empty means every key; ``include_synonyms`` lists the sources most precise first;
``include_documentation`` (v3+) adds a sentence per key. Errors per resource:
INVALID_TOPIC_EXCEPTION, UNKNOWN_TOPIC_OR_PARTITION, INVALID_REQUEST (another broker's id, an
unsupported type).
"""

from __future__ import annotations

from typing import Any

from storage_core.errors import StorageError
from storage_core.protocol.acl import AclOperation
from storage_core.protocol.config_resource import ConfigResourceType
from storage_core.protocol.messages import build
from storage_core.server.handlers.auth_helper import check_config_resource
from storage_core.server.handlers.common import NO_THROTTLE, error_code_of
from storage_core.server.handlers.config_support import (
    MAX_RESOURCES_PER_REQUEST,
    DescribedConfig,
    InvalidRequestError,
    check_broker_resource,
    describe_broker,
    describe_dynamic_default,
    describe_topic,
    topic_info_or_raise,
)
from storage_core.server.request_context import RequestContext

API_KEY = 32
MIN_VERSION = 1
MAX_VERSION = 4


async def handle(ctx: RequestContext, request: Any) -> Any:
    module = ctx.response_module
    include_synonyms = bool(request.include_synonyms)
    include_documentation = bool(getattr(request, "include_documentation", False))
    results = []
    for index, resource in enumerate(request.resources):
        error: StorageError | None = None
        rows: list[DescribedConfig] = []
        try:
            if index >= MAX_RESOURCES_PER_REQUEST:
                raise InvalidRequestError(
                    f"at most {MAX_RESOURCES_PER_REQUEST} resources per request"
                )
            rows = _describe(ctx, resource.resource_type, resource.resource_name)
        except StorageError as exc:
            error = exc
        keys = resource.configuration_keys
        if keys:
            wanted = set(keys)
            rows = [row for row in rows if row.name in wanted]
        results.append(
            build(
                module.DescribeConfigsResult,
                error_code=error_code_of(error),
                error_message=None if error is None else str(error),
                resource_type=resource.resource_type,
                resource_name=resource.resource_name,
                configs=tuple(
                    _config(module, row, include_synonyms, include_documentation) for row in rows
                ),
            )
        )
    return build(module.DescribeConfigsResponse, throttle_time=NO_THROTTLE, results=tuple(results))


def _describe(ctx: RequestContext, resource_type: int, name: str) -> list[DescribedConfig]:
    services = ctx.services
    check_config_resource(ctx, AclOperation.DESCRIBE_CONFIGS, resource_type, name)
    if resource_type == ConfigResourceType.TOPIC:
        info = topic_info_or_raise(services, name)
        store = services.dynamic_broker_config
        return describe_topic(
            info,
            services.admin_manager.default_log_config,
            services.config.props,
            dynamic=store.configs(per_broker=True),
            dynamic_default=store.configs(per_broker=False),
        )
    if resource_type == ConfigResourceType.BROKER:
        check_broker_resource(name, services.broker_id)
        store = services.dynamic_broker_config
        if name == "":
            return describe_dynamic_default(store.configs(per_broker=False))
        return describe_broker(
            services.admin_manager.default_log_config,
            services.config.props,
            dynamic=store.configs(per_broker=True),
            dynamic_default=store.configs(per_broker=False),
        )
    raise InvalidRequestError(f"Unsupported resource type {resource_type} for DescribeConfigs")


def _config(
    module: Any, row: DescribedConfig, include_synonyms: bool, include_documentation: bool
) -> Any:
    synonyms = (
        tuple(
            build(module.DescribeConfigsSynonym, name=s.name, value=s.value, source=int(s.source))
            for s in row.synonyms
        )
        if include_synonyms
        else ()
    )
    return build(
        module.DescribeConfigsResourceResult,
        name=row.name,
        value=row.value,
        read_only=row.read_only,
        config_source=int(row.source),
        is_sensitive=row.is_sensitive,
        synonyms=synonyms,
        config_type=int(row.config_type),
        documentation=row.documentation if include_documentation else None,
    )
