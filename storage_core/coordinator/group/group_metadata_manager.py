"""The group cache and its persistence in ``__consumer_offsets`` (``GroupMetadataManager``).

Each group lives in one partition of ``__consumer_offsets`` (``offsets_records.partition_for``).
Writes are one record batch v2 per request, appended through the broker's replica manager with
acks=-1 (``coordinator_writer``); a request is answered, and the cache changed, only once every
in-sync replica has the batch:

* a commit writes one offset commit record per partition (key v1, value v3);
* the end of a rebalance writes one group metadata record (key v2, value v3) holding the
  generation, the protocol, the leader and each member with its assignment; a rebalance that
  leaves the group without members writes the group with an empty member list;
* deleting offsets (OffsetDelete) writes a tombstone (null value) per offset; deleting a group
  (DeleteGroups, or OffsetDelete of the last offsets of an Empty group) writes tombstones for
  every offset and, if the group ever had a generation (a group record may exist), one for
  the group record after them, as Kafka's ``cleanupGroupMetadata`` does.

Loading a partition replays every batch from the log start: the last record of each key wins
and a null value (tombstone) deletes the key. Groups with members come back Stable (their
members must heartbeat within their session timeout), groups without come back Empty, and
offsets committed without group management (no group record) make an Empty group.

The writes of one group run one at a time, in the order they were asked for (the appends
themselves run on I/O threads that keep no order), so the cache of a group always follows its
log. Each write is a task, started when asked for: what it writes is taken then.

Thread safety: none. ``load_partition`` may run on a worker thread before the coordinator is
active; everything else runs on the coordinator's asyncio loop, which must be the replica
manager's.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from storage_core.clock import Clock
from storage_core.common import TopicPartition
from storage_core.coordinator.group.coordinator_writer import (
    REQUIRED_ACKS_ALL,
    ReplicaAppender,
    map_commit_error,
    map_group_write_error,
)
from storage_core.coordinator.group.errors import (
    CorruptCoordinatorRecordError,
    InvalidCommitOffsetSizeError,
)
from storage_core.coordinator.group.group_metadata import (
    GroupMetadata,
    GroupState,
    OffsetAndMetadata,
)
from storage_core.coordinator.group.member_metadata import MemberMetadata
from storage_core.coordinator.group.offsets_records import (
    OFFSETS_TOPIC_NAME,
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
    encode_group_metadata_value,
    encode_key,
    encode_offset_commit_value,
    partition_for,
)
from storage_core.errors import StorageError
from storage_core.log.log import Log
from storage_core.records import SimpleRecord, build_batch

logger = logging.getLogger(__name__)

T = TypeVar("T")

# Batches this large or larger are refused by the log anyway (max.message.bytes); checking
# first gives a clear error instead of a storage one.
MAX_RECORDS_PER_BATCH = 100_000

# Picks the partitions whose offsets a deletion removes, or the error to answer instead.
SelectOffsets = Callable[[GroupMetadata], Iterable[TopicPartition] | StorageError]


class PartitionLoadState(enum.Enum):
    """Where the replay of one ``__consumer_offsets`` partition stands."""

    LOADING = "loading"
    LOADED = "loaded"
    FAILED = "failed"


class GroupMetadataManager:
    """Owns the group cache and reads/writes ``__consumer_offsets``.

    ``get_offsets_log(p)`` returns the ``Log`` of partition ``p`` of ``__consumer_offsets``
    (raising a ``StorageError`` if the broker does not host it); loading reads it. Writes go
    through ``replica_manager`` (see ``coordinator_writer``).
    """

    def __init__(
        self,
        *,
        num_partitions: int,
        get_offsets_log: Callable[[int], Log],
        replica_manager: ReplicaAppender,
        offset_commit_timeout_ms: int,
        clock: Clock,
    ) -> None:
        if num_partitions <= 0:
            raise ValueError(f"offsets.topic.num.partitions must be positive: {num_partitions}")
        if offset_commit_timeout_ms <= 0:
            raise ValueError(
                f"offsets.commit.timeout.ms must be positive: {offset_commit_timeout_ms}"
            )
        self.num_partitions = num_partitions
        self._get_offsets_log = get_offsets_log
        self._replica_manager = replica_manager
        self._offset_commit_timeout_ms = offset_commit_timeout_ms
        self._clock = clock
        self._groups: dict[str, GroupMetadata] = {}
        self._partition_states: dict[int, PartitionLoadState] = {}
        # group id -> its last write asked for (the next one starts after it)
        self._last_writes: dict[str, asyncio.Task[Any]] = {}

    # ------------------------------------------------------------------ groups cache
    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.num_partitions)

    def partition_state(self, partition: int) -> PartitionLoadState | None:
        return self._partition_states.get(partition)

    @property
    def is_any_partition_loading(self) -> bool:
        return PartitionLoadState.LOADING in self._partition_states.values()

    def get_group(self, group_id: str) -> GroupMetadata | None:
        return self._groups.get(group_id)

    def add_group(self, group: GroupMetadata) -> GroupMetadata:
        """Add ``group`` unless one with its id exists; returns the group in the cache."""
        return self._groups.setdefault(group.group_id, group)

    def remove_group(self, group_id: str) -> GroupMetadata | None:
        return self._groups.pop(group_id, None)

    @property
    def groups(self) -> list[GroupMetadata]:
        return list(self._groups.values())

    def unload_partition(self, partition: int) -> list[GroupMetadata]:
        """Drop the partition's groups from the cache (its leadership moved); returns them."""
        self._partition_states.pop(partition, None)
        dropped = [g for g in self._groups.values() if self.partition_for(g.group_id) == partition]
        for group in dropped:
            del self._groups[group.group_id]
        return dropped

    # ------------------------------------------------------------------ loading
    def load_partition(self, partition: int) -> list[GroupMetadata]:
        """Replay partition ``partition`` and install its groups; returns them.

        On a storage or format error the partition is marked FAILED and none of its groups
        is installed (requests for them get NOT_COORDINATOR).
        """
        self._partition_states[partition] = PartitionLoadState.LOADING
        name = f"{OFFSETS_TOPIC_NAME}-{partition}"
        now = self._clock.milliseconds()
        loaded = []
        try:
            offsets, groups = self._replay(partition)
            for group_id in sorted(set(groups) | set(offsets)):
                value = groups.get(group_id)
                group_offsets = offsets.get(group_id, {})
                if value is None and not group_offsets:
                    continue
                group = (
                    GroupMetadata(group_id, now_ms=now)
                    if value is None
                    else group_from_record(group_id, value, now_ms=now)
                )
                group.offsets = group_offsets
                loaded.append(group)
        except StorageError as exc:
            self._partition_states[partition] = PartitionLoadState.FAILED
            logger.error(
                "cannot load group metadata partition=%s error=%s: its groups are not served",
                name,
                exc,
            )
            return []
        for group in loaded:
            self._groups[group.group_id] = group
        self._partition_states[partition] = PartitionLoadState.LOADED
        logger.info(
            "loaded group metadata partition=%s groups=%d offsets=%d",
            name,
            len(loaded),
            sum(len(g.offsets) for g in loaded),
        )
        return loaded

    def _replay(
        self, partition: int
    ) -> tuple[
        dict[str, dict[TopicPartition, OffsetAndMetadata]], dict[str, GroupMetadataValue | None]
    ]:
        log = self._get_offsets_log(partition)
        offsets: dict[str, dict[TopicPartition, OffsetAndMetadata]] = {}
        groups: dict[str, GroupMetadataValue | None] = {}
        for batch in log.read_batches(log.log_start_offset):
            batch.ensure_valid()
            if batch.is_control or batch.is_transactional:
                # Transactional offset commits (TxnOffsetCommit) are not supported here.
                logger.warning(
                    "skipping transactional batch partition=%s offset=%d",
                    log.topic_partition,
                    batch.base_offset,
                )
                continue
            for record in batch.records():
                if record.key is None:
                    raise CorruptCoordinatorRecordError(
                        f"record at offset {record.offset} of {log.topic_partition} has no key"
                    )
                key = decode_key(record.key)
                if isinstance(key, OffsetCommitKey):
                    tp = TopicPartition(key.topic, key.partition)
                    group_offsets = offsets.setdefault(key.group, {})
                    if record.value is None:
                        group_offsets.pop(tp, None)
                    else:
                        value = decode_offset_commit_value(record.value)
                        group_offsets[tp] = OffsetAndMetadata(
                            offset=value.offset,
                            leader_epoch=max(value.leader_epoch, -1),
                            metadata=value.metadata,
                            commit_timestamp_ms=value.commit_timestamp_ms,
                            expire_timestamp_ms=value.expire_timestamp_ms,
                        )
                else:
                    groups[key.group] = (
                        None if record.value is None else decode_group_metadata_value(record.value)
                    )
        return offsets, groups

    # ------------------------------------------------------------------ writing
    def store_group(
        self, group: GroupMetadata, assignments: Mapping[str, bytes]
    ) -> asyncio.Task[StorageError | None]:
        """Write ``group`` as it is now with ``assignments`` (member id -> assignment); the
        task ends with None once every in-sync replica has it, else the mapped append error."""
        key = encode_key(GroupMetadataKey(group=group.group_id))
        value = encode_group_metadata_value(group_record(group, assignments))

        async def write() -> StorageError | None:
            error = await self._append(group.group_id, [(key, value)])
            return None if error is None else map_group_write_error(group.group_id, error)

        return self._in_order(group.group_id, write)

    def store_offsets(
        self, group: GroupMetadata, offsets: Mapping[TopicPartition, OffsetAndMetadata]
    ) -> asyncio.Task[StorageError | None]:
        """Write ``offsets``; they become the group's committed offsets (what OffsetFetch
        answers) only once every in-sync replica has them, and not at all if the write fails
        or the group died meanwhile (Kafka's pending offset commits)."""
        records: list[tuple[bytes, bytes | None]] = []
        for tp, committed in offsets.items():
            key = OffsetCommitKey(group=group.group_id, topic=tp.topic, partition=tp.partition)
            value = OffsetCommitValue(
                offset=committed.offset,
                leader_epoch=committed.leader_epoch,
                metadata=committed.metadata,
                commit_timestamp_ms=committed.commit_timestamp_ms,
                expire_timestamp_ms=committed.expire_timestamp_ms,
            )
            records.append((encode_key(key), encode_offset_commit_value(value)))
        pending = dict(offsets)

        async def write() -> StorageError | None:
            if len(records) > MAX_RECORDS_PER_BATCH:
                return InvalidCommitOffsetSizeError(
                    f"group {group.group_id}: {len(records)} offsets in one commit, more than"
                    f" {MAX_RECORDS_PER_BATCH}; commit fewer partitions per request"
                )
            if not records:
                return None
            error = await self._append(group.group_id, records)
            if error is not None:
                return map_commit_error(group.group_id, error)
            if not group.is_in(GroupState.DEAD):
                group.offsets.update(pending)
            return None

        return self._in_order(group.group_id, write)

    def cleanup_group_metadata(
        self, group: GroupMetadata, select: SelectOffsets
    ) -> asyncio.Task[tuple[int, StorageError | None]]:
        """Delete the committed offsets that ``select`` picks (those the group has) with
        tombstones; an Empty group left without offsets is deleted too (Dead, out of the
        cache).

        ``select`` runs once the group's earlier writes are applied, so that it sees the
        group as its log has it; it returns the partitions, or an error to answer instead.
        The task ends with how many offsets were deleted and None, or the error that stopped
        the write. Memory changes only after the tombstones are acknowledged, so what a
        restart or a new leader replays always matches what was answered.
        """

        async def write() -> tuple[int, StorageError | None]:
            selected = select(group)
            if isinstance(selected, StorageError):
                return 0, selected
            return await self._write_tombstones(group, selected)

        return self._in_order(group.group_id, write)

    async def _write_tombstones(
        self, group: GroupMetadata, partitions: Iterable[TopicPartition]
    ) -> tuple[int, StorageError | None]:
        existing = list(dict.fromkeys(tp for tp in partitions if tp in group.offsets))
        group_gone = group.is_in(GroupState.EMPTY) and len(existing) == len(group.offsets)
        records: list[tuple[bytes, bytes | None]] = [
            (
                encode_key(
                    OffsetCommitKey(group=group.group_id, topic=tp.topic, partition=tp.partition)
                ),
                None,
            )
            for tp in existing
        ]
        if group_gone and group.generation_id > 0:
            records.append((encode_key(GroupMetadataKey(group=group.group_id)), None))
        removed = 0
        for start in range(0, len(records), MAX_RECORDS_PER_BATCH):
            chunk = records[start : start + MAX_RECORDS_PER_BATCH]
            error = await self._append(group.group_id, chunk)
            if error is not None:
                return removed, map_group_write_error(group.group_id, error)
            done = existing[start : start + MAX_RECORDS_PER_BATCH]
            removed += len(group.remove_offsets(done))
        if group_gone and group.is_in(GroupState.EMPTY):
            group.transition_to(GroupState.DEAD, now_ms=self._clock.milliseconds())
            if self._groups.get(group.group_id) is group:
                del self._groups[group.group_id]
        logger.info(
            "deleted group offsets group=%s partition=%s offsets=%d group_deleted=%s",
            group.group_id,
            f"{OFFSETS_TOPIC_NAME}-{self.partition_for(group.group_id)}",
            removed,
            group_gone,
        )
        return removed, None

    def _in_order(self, group_id: str, write: Callable[[], Awaitable[T]]) -> asyncio.Task[T]:
        """Run ``write`` after every write of the group asked for before it (the order is
        fixed here, when the write is asked for): appends go through the replica manager's
        I/O threads, which keep no order, and the cache must follow the log."""
        previous = self._last_writes.get(group_id)

        async def after_previous() -> T:
            if previous is not None:
                await asyncio.wait([previous])  # its outcome is its caller's business
            return await write()

        task = asyncio.get_running_loop().create_task(after_previous())
        self._last_writes[group_id] = task

        def forget(done: asyncio.Task[Any]) -> None:
            if self._last_writes.get(group_id) is done:
                del self._last_writes[group_id]

        task.add_done_callback(forget)
        return task

    async def _append(
        self, group_id: str, records: Sequence[tuple[bytes, bytes | None]]
    ) -> StorageError | None:
        """Append one batch to the group's partition with acks=-1; None once committed."""
        tp = TopicPartition(OFFSETS_TOPIC_NAME, self.partition_for(group_id))
        now = self._clock.milliseconds()
        batch = build_batch(
            [SimpleRecord(key=key, value=value, timestamp=now) for key, value in records]
        )
        try:
            results = await self._replica_manager.append_records(
                {tp: batch},
                required_acks=REQUIRED_ACKS_ALL,
                timeout_ms=self._offset_commit_timeout_ms,
            )
        except StorageError as exc:
            return exc
        result = results.get(tp)
        if result is None:
            return StorageError(f"the append to {tp} returned no result for it")
        return result.error


# ====================================================================== conversions
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
