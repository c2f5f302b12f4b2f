"""DeleteTopics (key 20): delete topics by name (or by topic id, v6+), with their logs."""

from __future__ import annotations

import functools
from typing import Any

from kio.schema.errors import ErrorCode

from storage_core.errors import StorageError, UnknownTopicOrPartitionError
from storage_core.protocol.acl import AclOperation, ResourceType
from storage_core.protocol.messages import build
from storage_core.server.handlers.auth_helper import TopicAuthorizationFailedError, authorize
from storage_core.server.handlers.common import (
    NO_THROTTLE,
    error_code_of,
    from_kio_uuid,
    to_kio_uuid,
)
from storage_core.server.request_context import RequestContext

API_KEY = 20
MIN_VERSION = 1
MAX_VERSION = 6


async def handle(ctx: RequestContext, request: Any) -> Any:
    module = ctx.response_module
    services = ctx.services
    if ctx.api_version >= 6:
        wanted = [(t.name, t.topic_id) for t in request.topics]
    else:
        wanted = [(name, None) for name in request.topic_names]
    results = []
    for requested_name, topic_id in wanted:
        name = requested_name
        try:
            if name is None:
                by_id = services.topic_store.get_by_id(from_kio_uuid(topic_id))
                if by_id is None:
                    raise _UnknownTopicIdError(f"No topic with id {topic_id}.")
                name = by_id.name
                if not authorize(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, name):
                    name = None  # not disclosed
                    raise TopicAuthorizationFailedError(f"topic id {topic_id}")
            if not authorize(ctx, AclOperation.DELETE, ResourceType.TOPIC, name):
                raise TopicAuthorizationFailedError(name)
            existing = services.topic_store.get(name)
            if existing is not None and existing.internal:
                raise _InvalidTopicDeletionError(f"Internal topic {name} cannot be deleted.")
            deleted = await services.replica_manager.run_io(
                functools.partial(services.admin_manager.delete_topic, name)
            )
            results.append(
                build(
                    module.DeletableTopicResult,
                    name=name,
                    topic_id=to_kio_uuid(deleted.topic_id),
                    error_code=ErrorCode.none,
                    error_message=None,
                )
            )
        except StorageError as error:
            results.append(
                build(
                    module.DeletableTopicResult,
                    name=name,
                    topic_id=topic_id if topic_id is not None else to_kio_uuid(None),
                    error_code=error_code_of(error),
                    error_message=str(error),
                )
            )
    return build(module.DeleteTopicsResponse, throttle_time=NO_THROTTLE, responses=tuple(results))


class _UnknownTopicIdError(UnknownTopicOrPartitionError):
    error_code = "unknown_topic_id"


class _InvalidTopicDeletionError(StorageError):
    error_code = "invalid_topic_exception"
