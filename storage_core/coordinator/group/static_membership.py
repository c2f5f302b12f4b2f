"""Static membership (KIP-345): who a request names, and whether it is still that member.

A member that joins with a ``group.instance.id`` is static. The group maps each instance id
to the member id it was given (``GroupMetadata.current_static_member_id``). When a static
member restarts it joins with an empty member id and the same instance id: the coordinator
hands it a new member id and *replaces* the old one, keeping its place, its assignment and
the generation (no rebalance while the group is Stable and the selected protocol stays).
Requests still carrying the replaced member id are fenced with FENCED_INSTANCE_ID, so two
processes sharing one instance id cannot both consume.

Static members that miss a rebalance are not dropped when it completes (dynamic ones are);
only their session timeout or a LeaveGroup naming them removes them.

Thread safety: none; used on the coordinator's asyncio loop.
"""

from __future__ import annotations

import logging
import uuid

from storage_core.coordinator.group.errors import FencedInstanceIdError, UnknownMemberIdError
from storage_core.coordinator.group.group_metadata import GroupMetadata
from storage_core.errors import StorageError

logger = logging.getLogger(__name__)


def generate_member_id(client_id: str, group_instance_id: str | None) -> str:
    """Kafka's ``generateMemberId``: ``<instance id or client id>-<uuid>``."""
    prefix = client_id if group_instance_id is None else group_instance_id
    return f"{prefix}-{uuid.uuid4()}"


def validate_current_member(
    group: GroupMetadata, member_id: str, group_instance_id: str | None, operation: str
) -> StorageError | None:
    """Kafka's ``validateCurrentMember``: the instance id (when given) must map to
    ``member_id``, and ``member_id`` must be a member."""
    if group_instance_id is not None:
        current = group.current_static_member_id(group_instance_id)
        if current is None:
            return UnknownMemberIdError(
                f"group {group.group_id} has no static member with group.instance.id"
                f" {group_instance_id}; join the group again"
            )
        if current != member_id:
            logger.info(
                "static member fenced group=%s instance=%s member=%s current=%s operation=%s",
                group.group_id,
                group_instance_id,
                member_id,
                current,
                operation,
            )
            return FencedInstanceIdError(
                f"group {group.group_id}: member {member_id} with group.instance.id"
                f" {group_instance_id} was replaced by member {current} ({operation}); another"
                " consumer uses the same group.instance.id: give each consumer its own"
            )
        return None
    if not group.has(member_id):
        return UnknownMemberIdError(f"group {group.group_id} has no member {member_id}")
    return None
