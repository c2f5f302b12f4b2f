"""CreateAcls (key 30), as Kafka's ``AclApis.handleCreateAcls``: needs ALTER on the CLUSTER
(else CLUSTER_AUTHORIZATION_FAILED for every creation); SECURITY_DISABLED without an
authorizer. Each creation is answered on its own: INVALID_REQUEST for a CLUSTER resource not
named ``kafka-cluster``, an empty name, a name with ``/``, an UNKNOWN or filter-only element;
the others are written to ZooKeeper (grouped by
resource, each resource one conditional write) and announced to every broker. Versions 1-3
(the codec has no v0).
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from storage_core.protocol.acl import CLUSTER_NAME, AclBinding, AclOperation, ResourceType
from storage_core.protocol.messages import build
from storage_core.server.handlers.acl_support import binding_of
from storage_core.server.handlers.auth_helper import authorize_cluster
from storage_core.server.handlers.common import NO_THROTTLE
from storage_core.server.request_context import RequestContext

API_KEY = 30
MIN_VERSION = 1
MAX_VERSION = 3
MAX_CREATIONS = 10_000


async def handle(ctx: RequestContext, request: Any) -> Any:
    module = ctx.response_module
    creations = request.creations

    def answer(errors: list[tuple[ErrorCode, str | None]]) -> Any:
        return build(
            module.CreateAclsResponse,
            throttle_time=NO_THROTTLE,
            results=tuple(
                build(module.AclCreationResult, error_code=code, error_message=message)
                for code, message in errors
            ),
        )

    if not authorize_cluster(ctx, AclOperation.ALTER):
        return answer(
            [(ErrorCode.cluster_authorization_failed, "Cluster authorization failed.")]
            * len(creations)
        )
    authorizer = ctx.services.authorizer
    if authorizer is None:
        return answer(
            [(ErrorCode.security_disabled, "No Authorizer is configured.")] * len(creations)
        )
    if len(creations) > MAX_CREATIONS:
        return answer(
            [(ErrorCode.invalid_request, f"at most {MAX_CREATIONS} ACLs per request")]
            * len(creations)
        )
    errors: list[tuple[ErrorCode, str | None] | None] = [None] * len(creations)
    valid: list[tuple[int, AclBinding]] = []
    for index, creation in enumerate(creations):
        binding = binding_of(creation)
        problem: str | None
        if isinstance(binding, str):
            problem = binding
        elif binding.is_unknown:
            problem = "ACL binding contains unknown elements"
        elif (
            binding.pattern.resource_type == ResourceType.CLUSTER
            and binding.pattern.name != CLUSTER_NAME
        ):
            problem = f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
        elif not binding.pattern.name:
            problem = "Invalid empty resource name"
        else:
            problem = None
        if problem is not None or isinstance(binding, str):
            errors[index] = (ErrorCode.invalid_request, problem)
        else:
            valid.append((index, binding))
    results = authorizer.create_acls([binding for _, binding in valid])
    for (index, _binding), result in zip(valid, results, strict=True):
        if result.error is None:
            errors[index] = (ErrorCode.none, None)
        else:
            errors[index] = (ErrorCode[result.error.error_code], str(result.error))
    return answer([e if e is not None else (ErrorCode.none, None) for e in errors])
