"""What a request asks the authorizer for (Kafka's ``org.apache.kafka.server.authorizer.Action``):
an operation on one literal resource, how many times the request names it, and whether the
answer is audited."""

from __future__ import annotations

from dataclasses import dataclass

from storage_core.protocol.acl import AclOperation, ResourcePattern


@dataclass(frozen=True, slots=True, kw_only=True)
class Action:
    """An operation on a LITERAL resource a request asks for (Kafka's ``Action``).
    ``log_if_allowed``/``log_if_denied`` False: the answer only filters or reports (audited at
    trace level, i.e. not at all here)."""

    operation: AclOperation
    pattern: ResourcePattern
    resource_reference_count: int = 1
    log_if_allowed: bool = True
    log_if_denied: bool = True
