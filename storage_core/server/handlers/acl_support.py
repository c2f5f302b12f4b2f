"""What CreateAcls, DescribeAcls and DeleteAcls share: the request's ACL fields as the ACL
model's bindings and filters (unknown ids become UNKNOWN), and the answer when no authorizer
is configured."""

from __future__ import annotations

from typing import Any

from storage_core.protocol.acl import (
    AccessControlEntry,
    AccessControlEntryFilter,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
)

SECURITY_DISABLED_MESSAGE = "No Authorizer is configured on the broker"
LITERAL = int(PatternType.LITERAL)


def binding_of(creation: Any) -> AclBinding | str:
    """A CreateAcls creation as a binding, or why it is not one (ANY or MATCH where a
    concrete value is needed)."""
    try:
        return AclBinding(
            pattern=ResourcePattern(
                resource_type=ResourceType.from_code(int(creation.resource_type)),
                name=creation.resource_name,
                pattern_type=PatternType.from_code(
                    int(getattr(creation, "resource_pattern_type", LITERAL))
                ),
            ),
            entry=AccessControlEntry(
                principal=creation.principal,
                host=creation.host,
                operation=AclOperation.from_code(int(creation.operation)),
                permission_type=AclPermissionType.from_code(int(creation.permission_type)),
            ),
        )
    except ValueError as exc:
        return str(exc)


def filter_of(request: Any) -> AclBindingFilter:
    """A DescribeAcls request or a DeleteAcls filter as a binding filter."""
    return AclBindingFilter(
        pattern_filter=ResourcePatternFilter(
            resource_type=ResourceType.from_code(int(request.resource_type_filter)),
            name=request.resource_name_filter,
            pattern_type=PatternType.from_code(
                int(getattr(request, "pattern_type_filter", LITERAL))
            ),
        ),
        entry_filter=AccessControlEntryFilter(
            principal=request.principal_filter,
            host=request.host_filter,
            operation=AclOperation.from_code(int(request.operation)),
            permission_type=AclPermissionType.from_code(int(request.permission_type)),
        ),
    )


def filter_problem(binding_filter: AclBindingFilter) -> str | None:
    """Why a filter is not one Kafka accepts (``DescribeAclsRequest``/``DeleteAclsRequest``
    refuse UNKNOWN elements), or None."""
    if binding_filter.is_unknown:
        return "the filter contains UNKNOWN elements"
    return None
