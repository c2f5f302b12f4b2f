"""DeleteGroups and OffsetDelete (Kafka's ``handleDeleteGroups`` / ``handleDeleteOffsets``).

DeleteGroups, per group, after the coordinator checks (INVALID_GROUP_ID for a null id only,
COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS, NOT_COORDINATOR):

    unknown or Dead                                  GROUP_ID_NOT_FOUND
    Empty                                            deleted: tombstones for every offset
                                                     (pending transactional ones too, as
                                                     Kafka 4) and the group record; gone
                                                     from the cache
    PreparingRebalance, CompletingRebalance, Stable  NON_EMPTY_GROUP

OffsetDelete, for one group (the same checks, but an empty group id is INVALID_GROUP_ID);
a group-level error answers the whole request:

    unknown or Dead                                  GROUP_ID_NOT_FOUND (group error)
    Empty                                            every partition's offset deleted; the
                                                     group too once it has no offsets left,
                                                     pending transactional ones included
                                                     (Kafka's ``hasOffsets``)
    active consumer group (protocol type consumer)   GROUP_SUBSCRIBED_TO_TOPIC per partition
                                                     of a subscribed topic (or of any topic
                                                     while the subscriptions are unknown);
                                                     the other partitions' offsets deleted
    active group of another protocol type            NON_EMPTY_GROUP (group error)

Partitions without a committed offset are answered without error, as in Kafka.

Both answer once the tombstones are acknowledged by every in-sync replica.

Thread safety: none; runs on the coordinator's asyncio loop.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from storage_core.common import TopicPartition
from storage_core.coordinator.group.errors import (
    GroupIdNotFoundError,
    GroupSubscribedToTopicError,
    NonEmptyGroupError,
)
from storage_core.coordinator.group.group_metadata import GroupMetadata, GroupState
from storage_core.coordinator.group.group_metadata_manager import GroupMetadataManager
from storage_core.errors import StorageError

logger = logging.getLogger(__name__)

ValidateGroup = Callable[[str], StorageError | None]


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetDeleteResult:
    """A group-level error (then no partitions), or one error (None: deleted) per partition."""

    error: StorageError | None = None
    partitions: Mapping[TopicPartition, StorageError | None] = field(default_factory=dict)


async def delete_groups(
    manager: GroupMetadataManager, group_ids: Sequence[str], validate: ValidateGroup
) -> dict[str, StorageError | None]:
    """One result per distinct group id, in request order."""
    results: dict[str, StorageError | None] = {}
    for group_id in dict.fromkeys(group_ids):
        error = validate(group_id)
        if error is None:
            error = await _delete_group(manager, group_id)
        results[group_id] = error
    return results


async def _delete_group(manager: GroupMetadataManager, group_id: str) -> StorageError | None:
    group = manager.get_group(group_id)
    if group is None:
        return _not_found(group_id)

    def every_offset(group: GroupMetadata) -> list[TopicPartition] | StorageError:
        # Checked once the group's earlier writes are applied: it may have died or gained
        # members meanwhile.
        if group.is_in(GroupState.DEAD):
            return _not_found(group_id)
        if not group.is_in(GroupState.EMPTY):
            return NonEmptyGroupError(
                f"group {group_id} is {group.state.value} with {group.size} members: only an"
                " Empty group can be deleted; stop its consumers first"
            )
        # Pending transactional offsets go too (Kafka 4's deleteAllOffsets).
        return [*group.committed, *sorted(group.pending_txn_offsets.partitions())]

    removed, error = await manager.cleanup_group_metadata(group, every_offset)
    if error is None:
        logger.info("group deleted group=%s offsets=%d", group_id, removed)
    return error


async def delete_offsets(
    manager: GroupMetadataManager,
    group_id: str,
    partitions: Sequence[TopicPartition],
    validate: ValidateGroup,
) -> OffsetDeleteResult:
    error = validate(group_id)
    if error is not None:
        return OffsetDeleteResult(error=error)
    group = manager.get_group(group_id)
    if group is None:
        return OffsetDeleteResult(error=_not_found(group_id))
    results: dict[TopicPartition, StorageError | None] = {}
    eligible: list[TopicPartition] = []

    def unsubscribed(group: GroupMetadata) -> list[TopicPartition] | StorageError:
        results.clear()
        eligible.clear()
        if group.is_in(GroupState.DEAD):
            return _not_found(group_id)
        if group.is_in(GroupState.EMPTY):
            eligible.extend(partitions)
        elif group.is_consumer_group:
            for tp in partitions:
                if group.is_subscribed_to_topic(tp.topic):
                    results[tp] = _subscribed(group, tp)
                else:
                    eligible.append(tp)
        else:
            return NonEmptyGroupError(
                f"group {group_id} is {group.state.value} with protocol type"
                f" {group.protocol_type!r}: offsets of an active group that is not a consumer"
                " group cannot be deleted; stop its members first"
            )
        return eligible

    removed, write_error = await manager.cleanup_group_metadata(group, unsubscribed)
    if write_error is not None and not eligible:
        return OffsetDeleteResult(error=write_error)  # the group-level answer of ``select``
    results.update(dict.fromkeys(eligible, write_error))
    logger.info(
        "offsets deleted group=%s requested=%d removed=%d error=%s",
        group_id,
        len(eligible),
        removed,
        write_error,
    )
    return OffsetDeleteResult(partitions={tp: results[tp] for tp in partitions})


def _not_found(group_id: str) -> StorageError:
    return GroupIdNotFoundError(f"group {group_id} does not exist on its coordinator")


def _subscribed(group: GroupMetadata, tp: TopicPartition) -> StorageError:
    return GroupSubscribedToTopicError(
        f"group {group.group_id} is {group.state.value} and subscribed to topic {tp.topic}:"
        f" the offset of {tp} is not deleted; unsubscribe the topic or stop the group first"
    )
