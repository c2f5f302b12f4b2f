"""DeleteAcls (key 31), as Kafka's ``AclApis.handleDeleteAcls``: needs ALTER on the CLUSTER
(else CLUSTER_AUTHORIZATION_FAILED for every filter); SECURITY_DISABLED without an authorizer.
Each filter is answered with the bindings it deleted; a binding two filters match is reported
by the first. A filter with an UNKNOWN element makes the request INVALID_REQUEST. Versions
1-3 (the codec has no v0).
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from storage_core.protocol.acl import AclOperation
from storage_core.protocol.messages import build
from storage_core.server.handlers.acl_support import filter_of, filter_problem
from storage_core.server.handlers.auth_helper import authorize_cluster
from storage_core.server.handlers.common import NO_THROTTLE
from storage_core.server.request_context import RequestContext

API_KEY = 31
MIN_VERSION = 1
MAX_VERSION = 3
MAX_FILTERS = 10_000


async def handle(ctx: RequestContext, request: Any) -> Any:
    module = ctx.response_module
    filters = request.filters

    def answer(results: list[Any]) -> Any:
        return build(
            module.DeleteAclsResponse, throttle_time=NO_THROTTLE, filter_results=tuple(results)
        )

    def failed(code: ErrorCode, message: str) -> Any:
        return build(
            module.DeleteAclsFilterResult, error_code=code, error_message=message, matching_acls=()
        )

    if not authorize_cluster(ctx, AclOperation.ALTER):
        return answer(
            [failed(ErrorCode.cluster_authorization_failed, "Cluster authorization failed.")]
            * len(filters)
        )
    authorizer = ctx.services.authorizer
    if authorizer is None:
        return answer(
            [failed(ErrorCode.security_disabled, "No Authorizer is configured.")] * len(filters)
        )
    if len(filters) > MAX_FILTERS:
        return answer(
            [failed(ErrorCode.invalid_request, f"at most {MAX_FILTERS} filters per request")]
            * len(filters)
        )
    binding_filters = [filter_of(f) for f in filters]
    for binding_filter in binding_filters:
        problem = filter_problem(binding_filter)
        if problem is not None:
            message = f"DeleteAclsRequest: {problem}"
            return answer([failed(ErrorCode.invalid_request, message)] * len(filters))
    results = authorizer.delete_acls(binding_filters)
    return answer(
        [
            build(
                module.DeleteAclsFilterResult,
                error_code=ErrorCode.none,
                error_message=None,
                matching_acls=tuple(
                    build(
                        module.DeleteAclsMatchingAcl,
                        error_code=(
                            ErrorCode.none if r.error is None else ErrorCode[r.error.error_code]
                        ),
                        error_message=None if r.error is None else str(r.error),
                        resource_type=int(r.binding.pattern.resource_type),
                        resource_name=r.binding.pattern.name,
                        pattern_type=int(r.binding.pattern.pattern_type),
                        principal=r.binding.entry.principal,
                        host=r.binding.entry.host,
                        operation=int(r.binding.entry.operation),
                        permission_type=int(r.binding.entry.permission_type),
                    )
                    for r in per_filter
                ),
            )
            for per_filter in results
        ]
    )
