"""Committing and fetching a group's offsets (the offset side of Kafka's coordinator:
``handleCommitOffsets`` / ``handleFetchOffsets``, ``OffsetMetadataManager`` in Kafka 4).

A commit is checked against the group (its generation and member, or no group management
while the group is Empty), its metadata against ``offset.metadata.max.bytes``, then written to
``__consumer_offsets`` by the ``GroupMetadataManager``; the answer waits for every in-sync
replica. A commit by a member of the group counts as a heartbeat. Fetches read the cache.

A transactional commit (TxnOffsetCommit, Kafka's ``handleTxnCommitOffsets``) passes the same
checks, except that a producer outside group management (no member id, generation -1; the
requests before KIP-447) may commit while the group has members; its offsets are pending
until the transaction ends. A fetch with ``require_stable`` (KIP-447) answers
UNSTABLE_OFFSET_COMMIT for a partition with a commit being written or pending.

The coordinator checks the group's status (``group_status.validate_group_status``) before
calling in here. OffsetDelete and the deletion of a group's offsets live in
``group_deletion``.

Thread safety: none; used on the coordinator's asyncio loop.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from storage_core.clock import Clock
from storage_core.common import TopicPartition
from storage_core.coordinator.group.errors import (
    OffsetMetadataTooLargeError,
    RebalanceInProgressError,
    UnknownMemberIdError,
    UnstableOffsetCommitError,
)
from storage_core.coordinator.group.group_coordinator_config import GroupCoordinatorConfig
from storage_core.coordinator.group.group_metadata import (
    GroupMetadata,
    GroupState,
)
from storage_core.coordinator.group.group_metadata_manager import GroupMetadataManager
from storage_core.coordinator.group.group_status import dead_group_error, illegal_generation
from storage_core.coordinator.group.group_timers import GroupTimers
from storage_core.coordinator.group.member_metadata import UNKNOWN_MEMBER_ID
from storage_core.coordinator.group.offset_and_metadata import (
    OffsetAndMetadata,
)
from storage_core.coordinator.group.static_membership import validate_current_member
from storage_core.errors import StorageError


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetFetchResult:
    """A group-level error, or the committed offset (None: none) of each partition, and
    the partitions answered with an error instead (UNSTABLE_OFFSET_COMMIT)."""

    error: StorageError | None = None
    offsets: Mapping[TopicPartition, OffsetAndMetadata | None]
    partition_errors: Mapping[TopicPartition, StorageError] = field(default_factory=dict)


class OffsetManager:
    """OffsetCommit and OffsetFetch of the groups this coordinator serves."""

    def __init__(
        self,
        config: GroupCoordinatorConfig,
        clock: Clock,
        manager: GroupMetadataManager,
        timers: GroupTimers,
    ) -> None:
        self._config = config
        self._clock = clock
        self._manager = manager
        self._timers = timers

    async def commit_offsets(
        self,
        *,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        generation_id: int,
        offsets: Mapping[TopicPartition, OffsetAndMetadata],
    ) -> dict[TopicPartition, StorageError | None]:
        """Commit ``offsets`` of a group whose status was checked; one error (None:
        committed) per partition."""
        group = self._manager.get_group(group_id)
        if group is None:
            if generation_id >= 0:
                return dict.fromkeys(offsets, illegal_generation(None, generation_id))
            group = self._manager.add_group(
                GroupMetadata(group_id, now_ms=self._clock.milliseconds())
            )
        error = self._validate_offset_commit(group, generation_id, member_id, group_instance_id)
        if error is not None:
            return dict.fromkeys(offsets, error)
        state = group.state
        if state is GroupState.COMPLETING_REBALANCE:
            # The member knows the new generation but has no assignment yet.
            return dict.fromkeys(
                offsets,
                RebalanceInProgressError(f"group {group_id} is completing a rebalance"),
            )
        if state in (GroupState.STABLE, GroupState.PREPARING_REBALANCE) and group.has(member_id):
            self._timers.complete_and_schedule_next_heartbeat_expiration(
                group, group.get(member_id)
            )
        return await self._store_offsets(group, offsets)

    async def commit_transactional_offsets(
        self,
        *,
        group_id: str,
        producer_id: int,
        producer_epoch: int,
        member_id: str,
        group_instance_id: str | None,
        generation_id: int,
        offsets: Mapping[TopicPartition, OffsetAndMetadata],
    ) -> dict[TopicPartition, StorageError | None]:
        """Write ``offsets`` of a group whose status was checked as pending for the
        producer's transaction (KIP-447 checks of the member and generation when given);
        one error (None: written) per partition."""
        created = self._manager.get_group(group_id) is None
        group = self._manager.add_group(GroupMetadata(group_id, now_ms=self._clock.milliseconds()))
        error = self._validate_offset_commit(
            group, generation_id, member_id, group_instance_id, is_transactional=True
        )
        if error is not None:
            if created and not group.has_offsets:
                self._manager.remove_group(group_id)  # nothing of it was ever written
            return dict.fromkeys(offsets, error)
        return await self._store_offsets(group, offsets, producer=(producer_id, producer_epoch))

    def _validate_offset_commit(
        self,
        group: GroupMetadata,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        *,
        is_transactional: bool = False,
    ) -> StorageError | None:
        """Kafka's ``validateOffsetCommit``."""
        if group.is_in(GroupState.DEAD):
            return dead_group_error(group)
        if generation_id < 0 and group.is_in(GroupState.EMPTY):
            return None  # the admin client or a consumer without group management
        if generation_id >= 0 or member_id != UNKNOWN_MEMBER_ID or group_instance_id is not None:
            operation = "txn-offset-commit" if is_transactional else "offset-commit"
            error = validate_current_member(group, member_id, group_instance_id, operation)
            if error is not None:
                return error
            if generation_id != group.generation_id:
                return illegal_generation(group, generation_id)
            return None
        if not is_transactional and not group.is_in(GroupState.EMPTY):
            return UnknownMemberIdError(
                f"group {group.group_id} has members: only they may commit offsets"
            )
        return None

    async def _store_offsets(
        self,
        group: GroupMetadata,
        offsets: Mapping[TopicPartition, OffsetAndMetadata],
        *,
        producer: tuple[int, int] | None = None,
    ) -> dict[TopicPartition, StorageError | None]:
        results: dict[TopicPartition, StorageError | None] = {}
        accepted: dict[TopicPartition, OffsetAndMetadata] = {}
        limit = self._config.offset_metadata_max_bytes
        for tp, committed in offsets.items():
            if len(committed.metadata) > limit:
                results[tp] = OffsetMetadataTooLargeError(
                    f"group {group.group_id}: metadata of {tp} is {len(committed.metadata)}"
                    f" characters, more than offset.metadata.max.bytes={limit}"
                )
            else:
                accepted[tp] = committed
        if accepted:
            if producer is None:
                error = await self._manager.store_offsets(group, accepted)
            else:
                error = await self._manager.store_txn_offsets(
                    group, accepted, producer_id=producer[0], producer_epoch=producer[1]
                )
            for tp in accepted:
                results[tp] = error
        return {tp: results[tp] for tp in offsets}

    def fetch_offsets(
        self,
        *,
        group_id: str,
        partitions: Sequence[TopicPartition] | None,
        require_stable: bool = False,
    ) -> OffsetFetchResult:
        """Committed offsets of ``partitions``, or of every partition when None; with
        ``require_stable`` a partition whose commit is under way or pending answers
        UNSTABLE_OFFSET_COMMIT instead (Kafka's ``getOffsets``)."""
        group = self._manager.get_group(group_id)
        if group is None or group.is_in(GroupState.DEAD):
            return OffsetFetchResult(offsets=dict.fromkeys(partitions or ()))
        known = group.offsets
        wanted = list(known) if partitions is None else list(partitions)
        unstable: dict[TopicPartition, StorageError] = {}
        if require_stable:
            for tp in wanted:
                if group.has_pending_offset_commits_for(tp):
                    unstable[tp] = UnstableOffsetCommitError(
                        f"group {group_id}: the offset of {tp} waits for a transaction or a"
                        " commit under way; fetch it again"
                    )
        return OffsetFetchResult(
            offsets={tp: None if tp in unstable else known.get(tp) for tp in wanted},
            partition_errors=unstable,
        )
