"""The pure part of benchmarks/security_throughput.py: the ACLs the authorizer case loads."""

from __future__ import annotations

from collections import Counter

from confluent_kafka.admin import AclOperation, AclPermissionType, ResourcePatternType

from benchmarks.security_throughput import acl_bindings


def test_the_authorizer_case_loads_exactly_its_acls_and_one_allows_the_write() -> None:
    bindings = acl_bindings("bench-authorized", 1000)
    assert len(bindings) == len({str(b) for b in bindings}) == 1000
    assert Counter(b.resource_pattern_type for b in bindings) == {
        ResourcePatternType.LITERAL: 750,
        ResourcePatternType.PREFIXED: 250,
    }
    assert sum(b.name == "bench-authorized" for b in bindings) == 250
    spread = acl_bindings("bench-authorized", 1000, on_topic=0)
    assert len(spread) == 1000 and sum(b.name == "bench-authorized" for b in spread) == 1
    assert all(b.permission_type == AclPermissionType.ALLOW for b in bindings)
    assert all(b.operation == AclOperation.WRITE for b in bindings)
    # ANONYMOUS (the benchmark's producer) is allowed by one ACL only; no prefix matches it
    matching = [
        b
        for b in bindings
        if b.principal == "User:ANONYMOUS"
        and (
            b.name == "bench-authorized"
            or (
                b.resource_pattern_type == ResourcePatternType.PREFIXED
                and "bench-authorized".startswith(b.name)
            )
        )
    ]
    assert len(matching) == 1
