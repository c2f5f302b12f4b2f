"""Kafka's ACL model, shared by the client and the broker (Kafka's ``common.acl`` and
``common.resource`` packages): the enums with their wire ids, resource patterns, access control
entries, bindings, and the filters DescribeAcls and DeleteAcls carry, with Kafka's matching
rules.

Wire ids (int8 in CreateAcls, DescribeAcls and DeleteAcls):

    ResourceType       UNKNOWN 0, ANY 1, TOPIC 2, GROUP 3, CLUSTER 4, TRANSACTIONAL_ID 5,
                       DELEGATION_TOKEN 6, USER 7
    PatternType        UNKNOWN 0, ANY 1, MATCH 2, LITERAL 3, PREFIXED 4
    AclOperation       UNKNOWN 0, ANY 1, ALL 2, READ 3, WRITE 4, CREATE 5, DELETE 6, ALTER 7,
                       DESCRIBE 8, CLUSTER_ACTION 9, DESCRIBE_CONFIGS 10, ALTER_CONFIGS 11,
                       IDEMPOTENT_WRITE 12, CREATE_TOKENS 13, DESCRIBE_TOKENS 14
    AclPermissionType  UNKNOWN 0, ANY 1, DENY 2, ALLOW 3

ANY and MATCH exist only in filters; UNKNOWN is what an id or name this side does not know
becomes. Names are written in Pascal case where Kafka stores them (``Topic``, ``ClusterAction``,
``Allow``: ``SecurityUtils``) and read case-insensitively, underscores dropped.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Self

WILDCARD_RESOURCE = "*"
WILDCARD_HOST = "*"
WILDCARD_PRINCIPAL = "User:*"
CLUSTER_NAME = "kafka-cluster"
"""The one CLUSTER resource's name (``Resource.CLUSTER_NAME``)."""


def _pascal(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_"))


class _KafkaEnum(IntEnum):
    @property
    def pascal_name(self) -> str:
        """Kafka's stored name: ``TRANSACTIONAL_ID`` -> ``TransactionalId``."""
        return _pascal(self.name)

    @classmethod
    def from_code(cls, code: int) -> Self:
        """The member with wire id ``code``, or UNKNOWN."""
        try:
            return cls(code)
        except ValueError:
            return cls(0)

    @classmethod
    def from_name(cls, name: str) -> Self:
        """The member named ``name`` (``Topic``, ``TOPIC``, ``topic``, ``transactional_id``), or
        UNKNOWN."""
        key = name.strip().upper().replace("_", "").replace("-", "")
        for member in cls:
            if member.name.replace("_", "") == key:
                return member
        return cls(0)


class ResourceType(_KafkaEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(_KafkaEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4

    @property
    def is_specific(self) -> bool:
        """LITERAL or PREFIXED: a pattern a stored ACL can have."""
        return self in (PatternType.LITERAL, PatternType.PREFIXED)


class AclOperation(_KafkaEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class AclPermissionType(_KafkaEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


_SUPPORTED_OPERATIONS: dict[ResourceType, frozenset[AclOperation]] = {
    ResourceType.TOPIC: frozenset(
        {
            AclOperation.READ,
            AclOperation.WRITE,
            AclOperation.CREATE,
            AclOperation.DESCRIBE,
            AclOperation.DELETE,
            AclOperation.ALTER,
            AclOperation.DESCRIBE_CONFIGS,
            AclOperation.ALTER_CONFIGS,
        }
    ),
    ResourceType.GROUP: frozenset({AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE}),
    ResourceType.CLUSTER: frozenset(
        {
            AclOperation.CREATE,
            AclOperation.CLUSTER_ACTION,
            AclOperation.DESCRIBE_CONFIGS,
            AclOperation.ALTER_CONFIGS,
            AclOperation.IDEMPOTENT_WRITE,
            AclOperation.ALTER,
            AclOperation.DESCRIBE,
        }
    ),
    ResourceType.TRANSACTIONAL_ID: frozenset({AclOperation.DESCRIBE, AclOperation.WRITE}),
    ResourceType.DELEGATION_TOKEN: frozenset({AclOperation.DESCRIBE}),
    ResourceType.USER: frozenset({AclOperation.CREATE_TOKENS, AclOperation.DESCRIBE_TOKENS}),
}


def supported_operations(resource_type: ResourceType) -> frozenset[AclOperation]:
    """The operations an ACL on ``resource_type`` can grant (``AclEntry.supportedOperations``):
    what ``authorized_operations`` reports on."""
    try:
        return _SUPPORTED_OPERATIONS[resource_type]
    except KeyError:
        raise ValueError(f"{resource_type.name} is not a concrete resource type") from None


def authorized_operations_bits(operations: set[AclOperation] | frozenset[AclOperation]) -> int:
    """The int32 bit field of ``authorized_operations`` (``Utils.to32BitField``): bit i set
    when the operation with wire id i is allowed."""
    bits = 0
    for operation in operations:
        bits |= 1 << int(operation)
    return bits


@dataclass(frozen=True, slots=True, kw_only=True)
class ResourcePattern:
    """A resource ACLs apply to: a type, a name and how the name matches (LITERAL, where ``*``
    is every resource of the type, or PREFIXED)."""

    resource_type: ResourceType
    name: str
    pattern_type: PatternType

    def __post_init__(self) -> None:
        if self.resource_type == ResourceType.ANY:
            raise ValueError("resource type ANY is only for filters")
        if self.pattern_type in (PatternType.ANY, PatternType.MATCH):
            raise ValueError(f"pattern type {self.pattern_type.name} is only for filters")

    @property
    def is_unknown(self) -> bool:
        return (
            self.resource_type == ResourceType.UNKNOWN or self.pattern_type == PatternType.UNKNOWN
        )

    def __str__(self) -> str:
        """Kafka's audit shape: ``Topic:LITERAL:t``."""
        return f"{self.resource_type.pascal_name}:{self.pattern_type.name}:{self.name}"


@dataclass(frozen=True, slots=True, kw_only=True)
class ResourcePatternFilter:
    """Matches resource patterns (``ResourcePatternFilter``): ANY type, name None (any name),
    pattern ANY (any stored pattern, the name taken as it is written) or MATCH (every stored
    pattern that would apply to a resource named ``name``: the literal, the wildcard and the
    prefixes of it)."""

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY

    @property
    def is_unknown(self) -> bool:
        return (
            self.resource_type == ResourceType.UNKNOWN or self.pattern_type == PatternType.UNKNOWN
        )

    def matches(self, pattern: ResourcePattern) -> bool:
        if self.resource_type not in (ResourceType.ANY, pattern.resource_type):
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH, pattern.pattern_type):
            return False
        if self.name is None:
            return True
        if self.pattern_type in (PatternType.ANY, pattern.pattern_type):
            return self.name == pattern.name
        if pattern.pattern_type == PatternType.LITERAL:  # MATCH
            return pattern.name in (self.name, WILDCARD_RESOURCE)
        return self.name.startswith(pattern.name)

    def find_indefinite_field(self) -> str | None:
        """Why the filter could match more than one pattern, or None."""
        if self.resource_type in (ResourceType.ANY, ResourceType.UNKNOWN):
            return f"Resource type is {self.resource_type.name}"
        if self.pattern_type in (PatternType.ANY, PatternType.MATCH, PatternType.UNKNOWN):
            return f"Resource pattern type is {self.pattern_type.name}"
        if self.name is None:
            return "Resource name is NULL"
        return None

    @property
    def matches_at_most_one(self) -> bool:
        return self.find_indefinite_field() is None


@dataclass(frozen=True, slots=True, kw_only=True)
class AccessControlEntry:
    """Who (``User:alice``, ``User:*``) may or may not do what from where (an IP address or
    ``*``)."""

    principal: str
    host: str
    operation: AclOperation
    permission_type: AclPermissionType

    def __post_init__(self) -> None:
        if self.operation == AclOperation.ANY:
            raise ValueError("operation ANY is only for filters")
        if self.permission_type == AclPermissionType.ANY:
            raise ValueError("permission type ANY is only for filters")

    @property
    def is_unknown(self) -> bool:
        return (
            self.operation == AclOperation.UNKNOWN
            or self.permission_type == AclPermissionType.UNKNOWN
        )

    def __str__(self) -> str:
        return (
            f"{self.principal} has {self.permission_type.pascal_name} permission for "
            f"operations: {self.operation.pascal_name} from hosts: {self.host}"
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class AccessControlEntryFilter:
    """Matches entries (``AccessControlEntryFilter``): None principal or host is any, ANY
    operation or permission type is any."""

    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission_type: AclPermissionType = AclPermissionType.ANY

    @property
    def is_unknown(self) -> bool:
        return (
            self.operation == AclOperation.UNKNOWN
            or self.permission_type == AclPermissionType.UNKNOWN
        )

    def matches(self, entry: AccessControlEntry) -> bool:
        if self.principal is not None and self.principal != entry.principal:
            return False
        if self.host is not None and self.host != entry.host:
            return False
        if self.operation not in (AclOperation.ANY, entry.operation):
            return False
        return self.permission_type in (AclPermissionType.ANY, entry.permission_type)


@dataclass(frozen=True, slots=True, kw_only=True)
class AclBinding:
    pattern: ResourcePattern
    entry: AccessControlEntry

    @property
    def is_unknown(self) -> bool:
        return self.pattern.is_unknown or self.entry.is_unknown

    def __str__(self) -> str:
        return f"(pattern={self.pattern}, entry={self.entry})"


@dataclass(frozen=True, slots=True, kw_only=True)
class AclBindingFilter:
    pattern_filter: ResourcePatternFilter = ResourcePatternFilter()
    entry_filter: AccessControlEntryFilter = AccessControlEntryFilter()

    @property
    def is_unknown(self) -> bool:
        return self.pattern_filter.is_unknown or self.entry_filter.is_unknown

    def matches(self, binding: AclBinding) -> bool:
        return self.pattern_filter.matches(binding.pattern) and self.entry_filter.matches(
            binding.entry
        )


ANY_ACL = AclBindingFilter()
"""Every binding."""
