"""DescribeAcls (key 29), as Kafka's ``AclApis.handleDescribeAcls``: needs DESCRIBE on the
CLUSTER (else CLUSTER_AUTHORIZATION_FAILED); SECURITY_DISABLED without an authorizer. Answers
the ACLs the filter matches, from this broker's cache, grouped by resource pattern. A filter
with an UNKNOWN element is INVALID_REQUEST. Versions 1-3 (the codec has no v0, which knows only
literal patterns).
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from storage_core.protocol.acl import AclOperation, ResourcePattern
from storage_core.protocol.messages import build
from storage_core.server.handlers.acl_support import (
    SECURITY_DISABLED_MESSAGE,
    filter_of,
    filter_problem,
)
from storage_core.server.handlers.auth_helper import authorize_cluster
from storage_core.server.handlers.common import NO_THROTTLE
from storage_core.server.request_context import RequestContext

API_KEY = 29
MIN_VERSION = 1
MAX_VERSION = 3


async def handle(ctx: RequestContext, request: Any) -> Any:
    module = ctx.response_module

    def error(code: ErrorCode, message: str) -> Any:
        return build(
            module.DescribeAclsResponse,
            throttle_time=NO_THROTTLE,
            error_code=code,
            error_message=message,
            resources=(),
        )

    if not authorize_cluster(ctx, AclOperation.DESCRIBE):
        return error(ErrorCode.cluster_authorization_failed, "Cluster authorization failed.")
    authorizer = ctx.services.authorizer
    if authorizer is None:
        return error(ErrorCode.security_disabled, SECURITY_DISABLED_MESSAGE)
    binding_filter = filter_of(request)
    problem = filter_problem(binding_filter)
    if problem is not None:
        return error(ErrorCode.invalid_request, f"DescribeAclsRequest: {problem}")
    grouped: dict[ResourcePattern, list[Any]] = {}
    for binding in authorizer.acls(binding_filter):
        grouped.setdefault(binding.pattern, []).append(binding.entry)
    return build(
        module.DescribeAclsResponse,
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        error_message=None,
        resources=tuple(
            build(
                module.DescribeAclsResource,
                resource_type=int(pattern.resource_type),
                resource_name=pattern.name,
                pattern_type=int(pattern.pattern_type),
                acls=tuple(
                    build(
                        module.AclDescription,
                        principal=entry.principal,
                        host=entry.host,
                        operation=int(entry.operation),
                        permission_type=int(entry.permission_type),
                    )
                    for entry in entries
                ),
            )
            for pattern, entries in grouped.items()
        ),
    )
