"""The authorization checks the handlers share (Kafka's ``AuthHelper``): one place that asks
the broker's authorizer, names the request for the audit line, and allows everything when no
authorizer is configured.

A resource is always checked by its LITERAL name; the authorizer finds the wildcard and
prefixed ACLs that apply. ``log_if_denied=False`` is for answers that only filter or report
(a Metadata request for every topic, ``authorized_operations``): such a denial is not audited.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Iterable
from typing import ClassVar

from kio.schema.errors import ErrorCode
from kio.schema.index import api_key_map

from storage_core.errors import StorageError
from storage_core.protocol.acl import (
    CLUSTER_NAME,
    AclOperation,
    PatternType,
    ResourcePattern,
    ResourceType,
    authorized_operations_bits,
    supported_operations,
)
from storage_core.protocol.config_resource import ConfigResourceType
from storage_core.security.authorizer.acl_authorizer import Action
from storage_core.server.request_context import RequestContext

AUTHORIZATION_ERRORS = {
    ResourceType.TOPIC: ErrorCode.topic_authorization_failed,
    ResourceType.GROUP: ErrorCode.group_authorization_failed,
    ResourceType.CLUSTER: ErrorCode.cluster_authorization_failed,
    ResourceType.TRANSACTIONAL_ID: ErrorCode.transactional_id_authorization_failed,
}
"""``AclEntry.authorizationError``: the error a denied request gets, per resource type."""


class TopicAuthorizationFailedError(StorageError):
    """The principal may not do this on the topic (Kafka's TOPIC_AUTHORIZATION_FAILED)."""

    error_code: ClassVar[str] = "topic_authorization_failed"

    def __init__(self, topic: str) -> None:
        super().__init__(f"Not authorized to access topics: [{topic}]")


class GroupAuthorizationFailedError(StorageError):
    error_code: ClassVar[str] = "group_authorization_failed"


class ClusterAuthorizationFailedError(StorageError):
    error_code: ClassVar[str] = "cluster_authorization_failed"


@functools.cache
def request_name(api_key: int) -> str:
    """Kafka's ``ApiKeys`` name of the request (``Produce``, ``OffsetCommit``)."""
    snake = api_key_map.get(api_key)
    if snake is None:
        return str(api_key)
    return "".join(part.capitalize() for part in snake.split("_"))


@functools.lru_cache(maxsize=4096)  # every produce and fetch asks for its topics' patterns
def _literal(resource_type: ResourceType, name: str) -> ResourcePattern:
    return ResourcePattern(resource_type=resource_type, name=name, pattern_type=PatternType.LITERAL)


def authorize(
    ctx: RequestContext,
    operation: AclOperation,
    resource_type: ResourceType,
    name: str,
    *,
    log_if_allowed: bool = True,
    log_if_denied: bool = True,
    ref_count: int = 1,
) -> bool:
    authorizer = ctx.services.authorizer
    if authorizer is None:
        return True
    action = Action(
        operation=operation,
        pattern=_literal(resource_type, name),
        resource_reference_count=ref_count,
        log_if_allowed=log_if_allowed,
        log_if_denied=log_if_denied,
    )
    return authorizer.authorize(
        ctx.principal, ctx.client_host, request_name(ctx.api_key), [action]
    )[0]


def authorize_cluster(ctx: RequestContext, operation: AclOperation) -> bool:
    """``operation`` on the CLUSTER resource (``kafka-cluster``)."""
    return authorize(ctx, operation, ResourceType.CLUSTER, CLUSTER_NAME)


def filter_by_authorized(
    ctx: RequestContext,
    operation: AclOperation,
    resource_type: ResourceType,
    names: Iterable[str],
    *,
    log_if_allowed: bool = True,
    log_if_denied: bool = True,
) -> set[str]:
    """The names among ``names`` the principal may do ``operation`` on; each distinct name
    is asked once, with the number of times it appears as its reference count."""
    counts: Counter[str] = Counter()
    for name in names:  # a mapping counts its keys once each (Counter(mapping) would not)
        counts[name] += 1
    authorizer = ctx.services.authorizer
    if authorizer is None:
        return set(counts)
    ordered = list(counts)
    actions = [
        Action(
            operation=operation,
            pattern=_literal(resource_type, name),
            resource_reference_count=counts[name],
            log_if_allowed=log_if_allowed,
            log_if_denied=log_if_denied,
        )
        for name in ordered
    ]
    answers = authorizer.authorize(
        ctx.principal, ctx.client_host, request_name(ctx.api_key), actions
    )
    return {name for name, allowed in zip(ordered, answers, strict=True) if allowed}


def authorized_operations(ctx: RequestContext, resource_type: ResourceType, name: str) -> int:
    """The int32 bit field of the operations allowed on the resource, among those an ACL on
    its type can grant (every one of them without an authorizer)."""
    supported = supported_operations(resource_type)
    authorizer = ctx.services.authorizer
    if authorizer is None:
        return authorized_operations_bits(supported)
    ordered = sorted(supported)
    answers = authorizer.authorize(
        ctx.principal,
        ctx.client_host,
        request_name(ctx.api_key),
        [
            Action(
                operation=op,
                pattern=_literal(resource_type, name),
                log_if_allowed=False,
                log_if_denied=False,
            )
            for op in ordered
        ],
    )
    return authorized_operations_bits(
        {op for op, allowed in zip(ordered, answers, strict=True) if allowed}
    )


def authorize_by_resource_type(
    ctx: RequestContext, operation: AclOperation, resource_type: ResourceType
) -> bool:
    """Whether ``operation`` is allowed on at least one resource of the type."""
    authorizer = ctx.services.authorizer
    if authorizer is None:
        return True
    return authorizer.authorize_by_resource_type(
        ctx.principal, ctx.client_host, operation, resource_type
    )


def check_config_resource(
    ctx: RequestContext, operation: AclOperation, resource_type: int, name: str
) -> None:
    """DESCRIBE_CONFIGS or ALTER_CONFIGS on a config resource (Kafka's ``ConfigHelper`` and
    ``handleAlterConfigsRequest``): a broker's configs are the cluster's, a topic's its own.
    Raises CLUSTER_ or TOPIC_AUTHORIZATION_FAILED."""
    if resource_type == ConfigResourceType.TOPIC:
        if not authorize(ctx, operation, ResourceType.TOPIC, name):
            raise TopicAuthorizationFailedError(name)
        return
    brokers = (ConfigResourceType.BROKER, ConfigResourceType.BROKER_LOGGER)
    if resource_type in brokers and not authorize_cluster(ctx, operation):
        raise ClusterAuthorizationFailedError("Cluster authorization failed.")
