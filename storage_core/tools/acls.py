"""``storage-core acls``: add, remove and list ACLs over the Kafka protocol (CreateAcls,
DeleteAcls, DescribeAcls v3), with the options of Kafka's ``kafka-acls.sh``:

    storage-core acls --bootstrap-server H:P --command-config client.properties \\
        --add --allow-principal User:alice --operation Read --topic orders [--group g]
    storage-core acls ... --add --allow-principal User:etl --producer --topic t [--idempotent]
    storage-core acls ... --add --allow-principal User:etl --consumer --topic t --group g
    storage-core acls ... --remove --allow-principal User:alice --operation Read --topic orders
    storage-core acls ... --remove --topic orders --force      (every ACL of the topic)
    storage-core acls ... --list [--topic t] [--principal User:alice]

Resources: ``--topic`` and ``--group`` (repeatable, ``*`` for all), ``--cluster``,
``--transactional-id``; ``--resource-pattern-type`` LITERAL (default for --add and --remove),
PREFIXED, or for --list and --remove also ANY and MATCH. Operations (``--operation``,
repeatable, default All) are Kafka's names: Read, Write, Create, Delete, Alter, Describe,
ClusterAction, DescribeConfigs, AlterConfigs, IdempotentWrite, All. Hosts default to ``*``.
``--producer`` is WRITE, DESCRIBE and CREATE on the topics (and WRITE, DESCRIBE on the
transactional ids, IDEMPOTENT_WRITE on the cluster with --idempotent); ``--consumer`` is READ
and DESCRIBE on the topics and READ on the groups. ``--remove`` asks for confirmation unless
``--force``. The output is kafka-acls.sh's ("Adding ACLs for resource `ResourcePattern(...)`").
``--command-config`` holds the client's security settings, as for ``user-scram``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from kio.schema.create_acls.v3 import request as create_request
from kio.schema.create_acls.v3 import response as create_response
from kio.schema.delete_acls.v3 import request as delete_request
from kio.schema.delete_acls.v3 import response as delete_response
from kio.schema.describe_acls.v3 import request as describe_request
from kio.schema.describe_acls.v3 import response as describe_response

from storage_core.client.connection import KafkaConnection
from storage_core.protocol.acl import (
    CLUSTER_NAME,
    WILDCARD_HOST,
    AccessControlEntry,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from storage_core.tools.user_scram import UserScramError, client_settings, open_connection

MAX_ACLS_PER_COMMAND = 10_000


class AclsCommandError(ValueError):
    """A bad option combination or a refusal by the broker; the message says which."""


@dataclass(frozen=True, slots=True, kw_only=True)
class AclOptions:
    add: bool = False
    remove: bool = False
    list: bool = False
    allow_principals: Sequence[str] = ()
    deny_principals: Sequence[str] = ()
    allow_hosts: Sequence[str] = ()
    deny_hosts: Sequence[str] = ()
    operations: Sequence[str] = ()
    topics: Sequence[str] = ()
    groups: Sequence[str] = ()
    cluster: bool = False
    transactional_ids: Sequence[str] = ()
    resource_pattern_type: str | None = None
    producer: bool = False
    consumer: bool = False
    idempotent: bool = False
    principal: Sequence[str] = ()
    force: bool = False


def _pattern_type(options: AclOptions) -> PatternType:
    default = "ANY" if options.list else "LITERAL"
    name = (options.resource_pattern_type or default).strip().upper()
    pattern_type = PatternType.from_name(name)
    allowed: tuple[PatternType, ...] = (PatternType.LITERAL, PatternType.PREFIXED)
    if not options.add:
        allowed += (PatternType.ANY, PatternType.MATCH)
    if pattern_type not in allowed:
        raise AclsCommandError(
            f"--resource-pattern-type {name}: use one of {', '.join(p.name for p in allowed)}"
        )
    return pattern_type


def _resources(options: AclOptions) -> list[tuple[ResourceType, str]]:
    resources = [(ResourceType.TOPIC, t) for t in options.topics]
    resources += [(ResourceType.GROUP, g) for g in options.groups]
    resources += [(ResourceType.TRANSACTIONAL_ID, t) for t in options.transactional_ids]
    if options.cluster:
        resources.append((ResourceType.CLUSTER, CLUSTER_NAME))
    if options.producer and options.idempotent:
        resources.append((ResourceType.CLUSTER, CLUSTER_NAME))
    return list(dict.fromkeys(resources))


def _operations_for(options: AclOptions, resource_type: ResourceType) -> list[AclOperation]:
    """The operations to grant or remove on one resource (kafka-acls.sh's rules)."""
    if options.producer or options.consumer:
        ops: list[AclOperation] = []
        if options.producer:
            ops += {
                ResourceType.TOPIC: [
                    AclOperation.WRITE,
                    AclOperation.DESCRIBE,
                    AclOperation.CREATE,
                ],
                ResourceType.TRANSACTIONAL_ID: [AclOperation.WRITE, AclOperation.DESCRIBE],
                ResourceType.CLUSTER: [AclOperation.IDEMPOTENT_WRITE],
            }.get(resource_type, [])
        if options.consumer:
            ops += {
                ResourceType.TOPIC: [AclOperation.READ, AclOperation.DESCRIBE],
                ResourceType.GROUP: [AclOperation.READ],
            }.get(resource_type, [])
        return list(dict.fromkeys(ops))
    ops = []
    for name in options.operations or ("All",):
        op = AclOperation.from_name(name)
        if op in (AclOperation.UNKNOWN, AclOperation.ANY):
            raise AclsCommandError(
                f"--operation {name} is not an ACL operation: use Read, Write, Create, Delete,"
                " Alter, Describe, ClusterAction, DescribeConfigs, AlterConfigs,"
                " IdempotentWrite or All"
            )
        ops.append(op)
    return ops


def _entries(options: AclOptions, resource_type: ResourceType) -> list[AccessControlEntry]:
    entries = []
    for permission, principals, hosts in (
        (AclPermissionType.ALLOW, options.allow_principals, options.allow_hosts),
        (AclPermissionType.DENY, options.deny_principals, options.deny_hosts),
    ):
        for principal in principals:
            if ":" not in principal:
                raise AclsCommandError(
                    f"principal {principal!r} is not <type>:<name>, e.g. User:alice"
                )
            for host in hosts or (WILDCARD_HOST,):
                for op in _operations_for(options, resource_type):
                    entries.append(
                        AccessControlEntry(
                            principal=principal, host=host, operation=op, permission_type=permission
                        )
                    )
    return entries


def _pattern_text(resource_type: int, name: str, pattern_type: int) -> str:
    return (
        f"ResourcePattern(resourceType={ResourceType.from_code(resource_type).name},"
        f" name={name}, patternType={PatternType.from_code(pattern_type).name})"
    )


def _entry_text(principal: str, host: str, operation: int, permission: int) -> str:
    return (
        f"(principal={principal}, host={host}, operation={AclOperation.from_code(operation).name},"
        f" permissionType={AclPermissionType.from_code(permission).name})"
    )


def run_acls(
    *,
    bootstrap_server: str,
    command_config: Path | None,
    options: AclOptions,
    out: TextIO,
    confirm: Callable[[str], str] = input,
) -> int:
    if sum((options.add, options.remove, options.list)) != 1:
        raise AclsCommandError("give exactly one of --add, --remove, --list")
    if (options.producer or options.consumer) and not options.add:
        raise AclsCommandError("--producer and --consumer go with --add only")
    if options.consumer and options.topics and not options.groups:
        raise AclsCommandError("--consumer needs --group as well as --topic")
    pattern_type = _pattern_type(options)
    resources = _resources(options)
    settings = _settings(command_config)
    if options.list:
        return _list(
            bootstrap_server,
            settings=settings,
            resources=resources,
            pattern_type=pattern_type,
            options=options,
            out=out,
        )
    if not resources:
        raise AclsCommandError(
            "name the resource: --topic, --group, --cluster or --transactional-id"
        )
    if options.add:
        if not options.allow_principals and not options.deny_principals:
            raise AclsCommandError("--add needs --allow-principal or --deny-principal")
        return _add(
            bootstrap_server,
            settings=settings,
            resources=resources,
            pattern_type=pattern_type,
            options=options,
            out=out,
        )
    return _remove(
        bootstrap_server,
        settings=settings,
        resources=resources,
        pattern_type=pattern_type,
        options=options,
        out=out,
        confirm=confirm,
    )


def _settings(command_config: Path | None) -> dict[str, str]:
    try:
        return client_settings(command_config)
    except UserScramError as error:
        raise AclsCommandError(str(error)) from None


def _connect(bootstrap_server: str, settings: dict[str, str]) -> KafkaConnection:
    try:
        return open_connection(bootstrap_server, settings)
    except UserScramError as error:
        raise AclsCommandError(str(error)) from None


def _add(
    bootstrap_server: str,
    *,
    settings: dict[str, str],
    resources: list[tuple[ResourceType, str]],
    pattern_type: PatternType,
    options: AclOptions,
    out: TextIO,
) -> int:
    creations = []
    for resource_type, name in resources:
        entries = _entries(options, resource_type)
        if not entries:
            continue
        out.write(
            f"Adding ACLs for resource `{_pattern_text(resource_type, name, pattern_type)}`: \n"
        )
        for e in entries:
            text = _entry_text(e.principal, e.host, e.operation, e.permission_type)
            out.write(f" \t{text} \n")
            creations.append(
                create_request.AclCreation(
                    resource_type=int(resource_type),  # type: ignore[arg-type]
                    resource_name=name,
                    resource_pattern_type=int(pattern_type),  # type: ignore[arg-type]
                    principal=e.principal,
                    host=e.host,
                    operation=int(e.operation),  # type: ignore[arg-type]
                    permission_type=int(e.permission_type),  # type: ignore[arg-type]
                )
            )
        out.write("\n")
    if len(creations) > MAX_ACLS_PER_COMMAND:
        raise AclsCommandError(f"{len(creations)} ACLs; at most {MAX_ACLS_PER_COMMAND} at once")
    with _connect(bootstrap_server, settings) as connection:
        response = connection.send(
            create_request.CreateAclsRequest(creations=tuple(creations)),
            create_response.CreateAclsResponse,
        )
        failures = [
            f"{r.error_code.name}: {r.error_message}"
            for r in response.results
            if r.error_code.value != 0
        ]
        if failures:
            raise AclsCommandError("the broker refused ACLs: " + "; ".join(failures))
        _print_current(connection, resources, pattern_type, out)
    return 0


def _remove(
    bootstrap_server: str,
    *,
    settings: dict[str, str],
    resources: list[tuple[ResourceType, str]],
    pattern_type: PatternType,
    options: AclOptions,
    out: TextIO,
    confirm: Callable[[str], str],
) -> int:
    filters = []
    for resource_type, name in resources:
        entries = _entries(options, resource_type)
        what = "the ACLs above" if entries else "every ACL"
        question = (
            f"Are you sure you want to remove {what} from resource filter"
            f" `{_pattern_text(resource_type, name, pattern_type)}`? (y/n)"
        )
        if not options.force and confirm(question).strip().lower() != "y":
            out.write("Nothing removed.\n")
            return 0
        # the entries given, or without them every ACL of the resource
        matchers: list[tuple[str | None, str | None, AclOperation, AclPermissionType]] = [
            (e.principal, e.host, e.operation, e.permission_type) for e in entries
        ] or [(None, None, AclOperation.ANY, AclPermissionType.ANY)]
        filters += [
            delete_request.DeleteAclsFilter(
                resource_type_filter=int(resource_type),  # type: ignore[arg-type]
                resource_name_filter=name,
                pattern_type_filter=int(pattern_type),  # type: ignore[arg-type]
                principal_filter=principal,
                host_filter=host,
                operation=int(operation),  # type: ignore[arg-type]
                permission_type=int(permission),  # type: ignore[arg-type]
            )
            for principal, host, operation, permission in matchers
        ]
    with _connect(bootstrap_server, settings) as connection:
        response = connection.send(
            delete_request.DeleteAclsRequest(filters=tuple(filters)),
            delete_response.DeleteAclsResponse,
        )
        failures = [
            f"{r.error_code.name}: {r.error_message}"
            for r in response.filter_results
            if r.error_code.value != 0
        ]
        if failures:
            raise AclsCommandError("the broker refused the removal: " + "; ".join(failures))
        _print_current(connection, resources, pattern_type, out)
    return 0


def _list(
    bootstrap_server: str,
    *,
    settings: dict[str, str],
    resources: list[tuple[ResourceType, str]],
    pattern_type: PatternType,
    options: AclOptions,
    out: TextIO,
) -> int:
    principals: Sequence[str | None] = options.principal or (None,)
    with _connect(bootstrap_server, settings) as connection:
        for principal in principals:
            if principal is not None:
                out.write(f"ACLs for principal `{principal}`\n")
            targets: list[tuple[ResourceType, str | None]] = list(resources) or [
                (ResourceType.ANY, None)
            ]
            for resource_type, name in targets:
                _describe_and_print(
                    connection,
                    resource_type=resource_type,
                    name=name,
                    pattern_type=pattern_type,
                    principal=principal,
                    out=out,
                )
    return 0


def _print_current(
    connection: KafkaConnection,
    resources: list[tuple[ResourceType, str]],
    pattern_type: PatternType,
    out: TextIO,
) -> None:
    for resource_type, name in resources:
        _describe_and_print(
            connection,
            resource_type=resource_type,
            name=name,
            pattern_type=pattern_type,
            principal=None,
            out=out,
        )


def _describe_and_print(
    connection: KafkaConnection,
    *,
    resource_type: ResourceType,
    name: str | None,
    pattern_type: PatternType,
    principal: str | None,
    out: TextIO,
) -> None:
    response = connection.send(
        describe_request.DescribeAclsRequest(
            resource_type_filter=int(resource_type),  # type: ignore[arg-type]
            resource_name_filter=name,
            pattern_type_filter=int(pattern_type),  # type: ignore[arg-type]
            principal_filter=principal,
            host_filter=None,
            operation=int(AclOperation.ANY),  # type: ignore[arg-type]
            permission_type=int(AclPermissionType.ANY),  # type: ignore[arg-type]
        ),
        describe_response.DescribeAclsResponse,
    )
    if response.error_code.value != 0:
        raise AclsCommandError(
            f"the broker refused to list ACLs: {response.error_code.name}: {response.error_message}"
        )
    for resource in response.resources:
        pattern = _pattern_text(
            resource.resource_type, resource.resource_name, resource.pattern_type
        )
        out.write(f"Current ACLs for resource `{pattern}`: \n")
        for acl in resource.acls:
            text = _entry_text(acl.principal, acl.host, acl.operation, acl.permission_type)
            out.write(f" \t{text} \n")
        out.write("\n")


def main_confirm(question: str) -> str:
    """The prompt of ``--remove`` without ``--force``."""
    sys.stdout.write(question + " ")
    sys.stdout.flush()
    return sys.stdin.readline()
