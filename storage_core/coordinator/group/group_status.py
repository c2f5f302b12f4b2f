"""The checks every group request passes first (Kafka's ``validateGroupStatus``) and the
errors the coordinator answers with when a group or generation is not the one asked for.

``validate_group_status`` decides whether this broker serves the group now: the group id is
valid, the coordinator runs, and the group's ``__consumer_offsets`` partition is loaded here
(loading: COORDINATOR_LOAD_IN_PROGRESS; led elsewhere: NOT_COORDINATOR).
"""

from __future__ import annotations

from storage_core.coordinator.group.errors import (
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    IllegalGenerationError,
    InvalidGroupIdError,
    NotCoordinatorError,
)
from storage_core.coordinator.group.group_metadata import GroupMetadata
from storage_core.coordinator.group.group_metadata_manager import (
    GroupMetadataManager,
    PartitionLoadState,
)
from storage_core.errors import StorageError


def validate_group_status(
    manager: GroupMetadataManager,
    group_id: str | None,
    *,
    active: bool,
    allow_empty_group_id: bool,
) -> StorageError | None:
    if group_id is None or (not allow_empty_group_id and not group_id):
        return InvalidGroupIdError(f"group id {group_id!r} is not valid: use a non-empty id")
    if not active:
        return not_available()
    partition = manager.partition_for(group_id)
    state = manager.partition_state(partition)
    if state is PartitionLoadState.LOADING:
        return CoordinatorLoadInProgressError(
            f"group {group_id}: __consumer_offsets-{partition} is still loading"
        )
    if state is not PartitionLoadState.LOADED:
        return NotCoordinatorError(
            f"group {group_id}: this broker does not serve __consumer_offsets-{partition}"
        )
    return None


def dead_group_error(group: GroupMetadata) -> StorageError:
    return CoordinatorNotAvailableError(
        f"group {group.group_id} is being removed from this coordinator; find it again"
    )


def illegal_generation(group: GroupMetadata | None, generation_id: int) -> StorageError:
    current = "none" if group is None else str(group.generation_id)
    return IllegalGenerationError(
        f"generation {generation_id} is not the group's current generation ({current});"
        " join the group again"
    )


def not_available() -> StorageError:
    return CoordinatorNotAvailableError("the group coordinator is not running")
