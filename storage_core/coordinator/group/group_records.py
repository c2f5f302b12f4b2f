"""Conversions between a group and its records in ``__consumer_offsets``: the group
metadata record of a group (Kafka's ``groupMetadataValue``), the group rebuilt from one
(``readGroupMessageValue``), and the offset commit records of a commit.

Thread safety: pure functions (``group_from_record`` builds a new group).
"""

from __future__ import annotations

from collections.abc import Mapping

from storage_core.common import TopicPartition
from storage_core.coordinator.group.errors import CorruptCoordinatorRecordError
from storage_core.coordinator.group.group_metadata import (
    GroupMetadata,
    GroupState,
)
from storage_core.coordinator.group.member_metadata import MemberMetadata
from storage_core.coordinator.group.offset_and_metadata import (
    OffsetAndMetadata,
)
from storage_core.coordinator.group.offsets_records import (
    GroupMetadataValue,
    MemberMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    encode_key,
    encode_offset_commit_value,
)


def offset_records(
    group_id: str, offsets: Mapping[TopicPartition, OffsetAndMetadata]
) -> list[tuple[bytes, bytes | None]]:
    """One offset commit record (key v1, value v3) per partition."""
    records: list[tuple[bytes, bytes | None]] = []
    for tp, committed in offsets.items():
        key = OffsetCommitKey(group=group_id, topic=tp.topic, partition=tp.partition)
        value = OffsetCommitValue(
            offset=committed.offset,
            leader_epoch=committed.leader_epoch,
            metadata=committed.metadata,
            commit_timestamp_ms=committed.commit_timestamp_ms,
            expire_timestamp_ms=committed.expire_timestamp_ms,
        )
        records.append((encode_key(key), encode_offset_commit_value(value)))
    return records


def group_record(group: GroupMetadata, assignments: Mapping[str, bytes]) -> GroupMetadataValue:
    """The group metadata record value of ``group`` (Kafka's ``groupMetadataValue``)."""
    protocol = group.protocol_name
    return GroupMetadataValue(
        protocol_type=group.protocol_type or "",
        generation=group.generation_id,
        protocol=protocol,
        leader=group.leader_id,
        current_state_timestamp_ms=group.current_state_timestamp_ms,
        members=tuple(
            MemberMetadataValue(
                member_id=member.member_id,
                group_instance_id=member.group_instance_id,
                client_id=member.client_id,
                client_host=member.client_host,
                rebalance_timeout_ms=member.rebalance_timeout_ms,
                session_timeout_ms=member.session_timeout_ms,
                subscription=member.metadata(protocol) if protocol is not None else b"",
                assignment=assignments.get(member.member_id, b""),
            )
            for member in group.members
        ),
    )


def group_from_record(group_id: str, value: GroupMetadataValue, *, now_ms: int) -> GroupMetadata:
    """Rebuild a group from its record: Stable with its members, or Empty without."""
    if value.members and value.protocol is None:
        raise CorruptCoordinatorRecordError(
            f"group {group_id}: the metadata record has members but no protocol"
        )
    timestamp = value.current_state_timestamp_ms
    group = GroupMetadata(
        group_id,
        now_ms=timestamp if timestamp >= 0 else now_ms,
        initial_state=GroupState.STABLE if value.members else GroupState.EMPTY,
    )
    group.generation_id = value.generation
    group.protocol_type = value.protocol_type or None
    group.protocol_name = value.protocol
    for stored in value.members:
        try:
            member = MemberMetadata(
                member_id=stored.member_id,
                group_instance_id=stored.group_instance_id,
                client_id=stored.client_id,
                client_host=stored.client_host,
                rebalance_timeout_ms=stored.rebalance_timeout_ms,
                session_timeout_ms=stored.session_timeout_ms,
                protocol_type=value.protocol_type,
                supported_protocols=[(value.protocol or "", stored.subscription)],
            )
            member.assignment = stored.assignment
            group.add(member)  # refuses repeated member ids and group.instance.ids
        except ValueError as exc:
            raise CorruptCoordinatorRecordError(
                f"group {group_id}: the metadata record's members are not valid: {exc}"
            ) from exc
    if value.leader is not None and group.has(value.leader):
        group.leader_id = value.leader
    group.update_subscribed_topics()
    return group
