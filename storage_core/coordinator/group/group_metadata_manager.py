"""The group cache and its persistence in ``__consumer_offsets`` (``GroupMetadataManager``).

Each group lives in one partition of ``__consumer_offsets`` (``offsets_records.partition_for``).
Writes are one record batch v2 per request, appended through the broker's replica manager with
acks=-1 (``coordinator_writer``); a request is answered, and the cache changed, only once every
in-sync replica has the batch:

* a commit writes one offset commit record per partition (key v1, value v3);
* a transactional commit (TxnOffsetCommit) writes the same records in a transactional batch
  of its producer (id, epoch, sequence 0, as Kafka's); its offsets stay pending for that
  producer until the transaction's marker is written on the partition
  (``handle_txn_completion``): commit makes them committed, abort drops them (``txn_offsets``);
* the end of a rebalance writes one group metadata record (key v2, value v3) holding the
  generation, the protocol, the leader and each member with its assignment; a rebalance that
  leaves the group without members writes the group with an empty member list;
* deleting offsets (OffsetDelete) writes a tombstone (null value) per offset; deleting a group
  (DeleteGroups, or OffsetDelete of the last offsets of an Empty group) writes tombstones for
  every offset and, if the group ever had a generation (a group record may exist), one for
  the group record after them, as Kafka's ``cleanupGroupMetadata`` does;
* a topic's deletion (``remove_deleted_partitions``, Kafka's ``onPartitionsDeleted``) writes,
  in every group holding offsets of its partitions, a tombstone per such offset, and for a
  group left Empty without offsets the group record's tombstone too (the group is Dead).

Loading a partition replays every batch from the log start (``offsets_replay``): the last
record of each key wins, a null value (tombstone) deletes the key, transactional offsets are
decided by their markers and stay pending without one. Groups with members come back Stable
(their members must heartbeat within their session timeout), groups without come back Empty,
and offsets committed without group management (no group record) make an Empty group.

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
import functools
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
    map_txn_commit_error,
)
from storage_core.coordinator.group.errors import (
    InvalidCommitOffsetSizeError,
)
from storage_core.coordinator.group.group_metadata import (
    GroupMetadata,
    GroupState,
)
from storage_core.coordinator.group.group_records import (
    group_from_record,
    group_record,
    offset_records,
)
from storage_core.coordinator.group.offset_and_metadata import (
    OffsetAndMetadata,
)
from storage_core.coordinator.group.offsets_records import (
    OFFSETS_TOPIC_NAME,
    GroupMetadataKey,
    OffsetCommitKey,
    encode_group_metadata_value,
    encode_key,
    partition_for,
)
from storage_core.coordinator.group.offsets_replay import replay_offsets_partition
from storage_core.coordinator.group.txn_offsets import OpenGroupsForProducer
from storage_core.errors import StorageError
from storage_core.log.log import Log
from storage_core.log.producer_append_info import AppendOrigin
from storage_core.records import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, SimpleRecord, build_batch

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
        self._open_groups = OpenGroupsForProducer()
        # partition -> markers told while it was loading: (producer id, commit?)
        self._completions_while_loading: dict[int, list[tuple[int, bool]]] = {}
        # partition -> partitions of deleted topics told while it was loading
        self._deletions_while_loading: dict[int, set[TopicPartition]] = {}

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
        self._completions_while_loading.pop(partition, None)
        self._deletions_while_loading.pop(partition, None)
        dropped = [g for g in self._groups.values() if self.partition_for(g.group_id) == partition]
        for group in dropped:
            del self._groups[group.group_id]
            self._open_groups.remove_group(group.group_id)
        return dropped

    # ------------------------------------------------------------------ loading
    def begin_loading(self, partition: int) -> None:
        """Mark ``partition`` as loading before its replay starts on another thread: what is
        told meanwhile (markers, deleted topics) waits for its groups (``complete_deferred``)."""
        self._partition_states[partition] = PartitionLoadState.LOADING

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
            replayed = replay_offsets_partition(self._get_offsets_log(partition))
            for group_id in replayed.group_ids():
                value = replayed.groups.get(group_id)
                committed = replayed.committed.get(group_id, {})
                pending = replayed.pending.get(group_id, {})
                if value is None and not committed and not pending:
                    continue
                group = (
                    GroupMetadata(group_id, now_ms=now)
                    if value is None
                    else group_from_record(group_id, value, now_ms=now)
                )
                group.committed = dict(committed)
                for producer_id, offsets in pending.items():
                    for tp, commit in offsets.items():
                        group.pending_txn_offsets.put_loaded(producer_id, tp, commit)
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
            for producer_id in group.pending_txn_offsets.producer_ids:
                self._open_groups.add(producer_id, group.group_id)
        self._partition_states[partition] = PartitionLoadState.LOADED
        logger.info(
            "loaded group metadata partition=%s groups=%d offsets=%d pending_txn_groups=%d",
            name,
            len(loaded),
            sum(len(g.committed) for g in loaded),
            sum(1 for g in loaded if g.pending_txn_offsets),
        )
        return loaded

    # ------------------------------------------------------------------ writing
    def store_group(
        self, group: GroupMetadata, assignments: Mapping[str, bytes]
    ) -> asyncio.Task[StorageError | None]:
        """Write ``group`` as it is now with ``assignments`` (member id -> assignment); the
        task ends with None once every in-sync replica has it, else the mapped append error."""
        key = encode_key(GroupMetadataKey(group=group.group_id))
        value = encode_group_metadata_value(group_record(group, assignments))

        async def write() -> StorageError | None:
            error, _append_offset = await self._append(group.group_id, [(key, value)])
            return None if error is None else map_group_write_error(group.group_id, error)

        return self._in_order(group.group_id, write)

    def store_offsets(
        self, group: GroupMetadata, offsets: Mapping[TopicPartition, OffsetAndMetadata]
    ) -> asyncio.Task[StorageError | None]:
        """Write ``offsets``; they become the group's committed offsets (what OffsetFetch
        answers) only once every in-sync replica has them, and not at all if the write fails
        or the group died meanwhile (Kafka's pending offset commits)."""
        records = offset_records(group.group_id, offsets)
        pending = dict(offsets)

        async def write() -> StorageError | None:
            error = _check_size(group.group_id, records)
            if error is not None or not records:
                return error
            group.prepare_offset_commit(pending)
            error, append_offset = await self._append(group.group_id, records)
            if error is not None:
                group.fail_pending_offset_write(pending)
                return map_commit_error(group.group_id, error)
            if not group.is_in(GroupState.DEAD):
                group.on_offset_commit_append(pending, append_offset)
            return None

        return self._in_order(group.group_id, write)

    def store_txn_offsets(
        self,
        group: GroupMetadata,
        offsets: Mapping[TopicPartition, OffsetAndMetadata],
        *,
        producer_id: int,
        producer_epoch: int,
    ) -> asyncio.Task[StorageError | None]:
        """Write ``offsets`` as a transactional batch of the producer; once every in-sync
        replica has it they are pending for ``producer_id`` (OffsetFetch does not answer
        them) until ``handle_txn_completion`` decides them. A failed write leaves nothing
        pending (Kafka's ``failPendingTxnOffsetCommit``); the producer retries."""
        records = offset_records(group.group_id, offsets)
        pending = dict(offsets)
        group_id = group.group_id

        async def write() -> StorageError | None:
            error = _check_size(group_id, records)
            if error is not None or not records:
                return error
            # Prepared when the write starts, not when asked for: a completion of this
            # producer's previous transaction queued before it must not take these.
            self._open_groups.add(producer_id, group_id)
            group.pending_txn_offsets.prepare(producer_id, pending)
            error, append_offset = await self._append(
                group_id, records, producer_id=producer_id, producer_epoch=producer_epoch
            )
            if error is not None:
                group.pending_txn_offsets.fail(producer_id, pending)
                if not group.pending_txn_offsets.has_producer(producer_id):
                    self._open_groups.remove(producer_id, group_id)
                return map_txn_commit_error(group_id, error)
            group.pending_txn_offsets.on_append(producer_id, pending, append_offset)
            return None

        return self._in_order(group_id, write)

    def handle_txn_completion(
        self, producer_id: int, partitions: Iterable[int], *, is_commit: bool
    ) -> None:
        """The producer's transaction marker is written on these ``__consumer_offsets``
        partitions: decide its pending offsets in their groups (Kafka's
        ``handleTxnCompletion``). A group whose own writes are under way is decided after
        them (its TxnOffsetCommit may still wait for its acknowledgement), otherwise now."""
        completed = set(partitions)
        for partition in completed:
            if self._partition_states.get(partition) is PartitionLoadState.LOADING:
                # Its replay may have read past the end before this marker: decided again
                # once its groups are in (``complete_deferred``; twice changes nothing).
                self._completions_while_loading.setdefault(partition, []).append(
                    (producer_id, is_commit)
                )
        for group_id in self._open_groups.groups_of(producer_id):
            if self.partition_for(group_id) not in completed:
                continue
            group = self._groups.get(group_id)
            if group is None or group.is_in(GroupState.DEAD):
                self._open_groups.remove(producer_id, group_id)
                logger.info(
                    "transaction marker for a group no longer here group=%s producer_id=%d:"
                    " its new coordinator decides it from the log",
                    group_id,
                    producer_id,
                )
                continue

            if group_id in self._last_writes:
                self._in_order(
                    group_id,
                    functools.partial(
                        self._complete_txn_after_writes, group, producer_id, is_commit=is_commit
                    ),
                )
            else:
                self._complete_txn(group, producer_id, is_commit=is_commit)

    async def _complete_txn_after_writes(
        self, group: GroupMetadata, producer_id: int, *, is_commit: bool
    ) -> None:
        self._complete_txn(group, producer_id, is_commit=is_commit)

    def complete_deferred(self, partition: int) -> None:
        """Decide what markers told while ``partition`` was loading decide, now that its
        groups are in the cache; on the coordinator's loop."""
        for producer_id, is_commit in self._completions_while_loading.pop(partition, []):
            self.handle_txn_completion(producer_id, [partition], is_commit=is_commit)
        deleted = self._deletions_while_loading.pop(partition, set())
        if deleted and self._partition_states.get(partition) is PartitionLoadState.LOADED:
            self.remove_deleted_partitions(
                deleted,
                groups=[
                    g for g in self._groups.values() if self.partition_for(g.group_id) == partition
                ],
            )

    def _complete_txn(self, group: GroupMetadata, producer_id: int, *, is_commit: bool) -> None:
        self._open_groups.remove(producer_id, group.group_id)
        if group.is_in(GroupState.DEAD):
            return
        changed = group.complete_pending_txn_offset_commit(producer_id, is_commit=is_commit)
        logger.debug(
            "transactional offsets decided group=%s producer_id=%d commit=%s committed=%d",
            group.group_id,
            producer_id,
            is_commit,
            len(changed),
        )

    def remove_deleted_partitions(
        self,
        partitions: Iterable[TopicPartition],
        *,
        groups: Iterable[GroupMetadata] | None = None,
    ) -> list[asyncio.Task[tuple[int, StorageError | None]]]:
        """``partitions`` belong to deleted topics (Kafka's ``onPartitionsDeleted``): every
        group here holding their offsets (committed, or pending in a transaction) loses them
        through tombstones, and a group left Empty without offsets is deleted (Dead, out of
        the cache, the tombstone of its group record written if it ever had a generation),
        as Kafka's ``cleanupGroupMetadata``. Groups without such offsets are left alone.

        A partition still loading applies them once its groups are in (its replay may have
        read the offsets before the tombstones of the previous leader, if any). One task per
        group touched; each ends with how many offsets it removed and the write's error.
        The tombstones are what keeps the offsets deleted: a coordinator loading the
        partition later replays them.
        """
        deleted = frozenset(partitions)
        if not deleted:
            return []
        if groups is None:
            for partition, state in self._partition_states.items():
                if state is PartitionLoadState.LOADING:
                    self._deletions_while_loading.setdefault(partition, set()).update(deleted)
            groups = self._groups.values()

        def of_deleted_topics(group: GroupMetadata) -> list[TopicPartition]:
            # Checked once the group's earlier writes are applied: a commit under way when
            # the topic was deleted is in by then.
            held = set(group.committed) | group.pending_txn_offsets.partitions()
            return sorted(held & deleted)

        return [
            self.cleanup_group_metadata(group, of_deleted_topics)
            for group in list(groups)
            if not group.is_in(GroupState.DEAD)
            and (
                any(tp in deleted for tp in group.committed)
                or any(tp in deleted for tp in group.pending_txn_offsets.partitions())
                or any(tp in deleted for tp in group.pending_offset_commits)
            )
        ]

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
        # Partitions with a committed or a pending transactional offset get a tombstone:
        # replaying it drops the pending offsets too, as deleting them here does.
        known = set(group.committed) | group.pending_txn_offsets.partitions()
        existing = list(dict.fromkeys(tp for tp in partitions if tp in known))
        group_gone = (
            group.is_in(GroupState.EMPTY)
            and known.issubset(existing)
            and not group.pending_offset_commits
        )
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
            error, _append_offset = await self._append(group.group_id, chunk)
            if error is not None:
                return removed, map_group_write_error(group.group_id, error)
            done = existing[start : start + MAX_RECORDS_PER_BATCH]
            removed += len(group.remove_offsets(done))
        if group_gone and group.is_in(GroupState.EMPTY) and not group.has_offsets:
            group.transition_to(GroupState.DEAD, now_ms=self._clock.milliseconds())
            self._open_groups.remove_group(group.group_id)
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
        self,
        group_id: str,
        records: Sequence[tuple[bytes, bytes | None]],
        *,
        producer_id: int = NO_PRODUCER_ID,
        producer_epoch: int = NO_PRODUCER_EPOCH,
    ) -> tuple[StorageError | None, int]:
        """Append one batch to the group's partition with acks=-1, transactional when a
        producer id is given; (None, the batch's base offset) once committed, else
        (the error, -1)."""
        tp = TopicPartition(OFFSETS_TOPIC_NAME, self.partition_for(group_id))
        now = self._clock.milliseconds()
        transactional = producer_id != NO_PRODUCER_ID
        batch = build_batch(
            [SimpleRecord(key=key, value=value, timestamp=now) for key, value in records],
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            base_sequence=0 if transactional else -1,
            is_transactional=transactional,
        )
        try:
            results = await self._replica_manager.append_records(
                {tp: batch},
                required_acks=REQUIRED_ACKS_ALL,
                timeout_ms=self._offset_commit_timeout_ms,
                origin=AppendOrigin.COORDINATOR,
            )
        except StorageError as exc:
            return exc, -1
        result = results.get(tp)
        if result is None:
            return StorageError(f"the append to {tp} returned no result for it"), -1
        if result.error is not None:
            return result.error, -1
        if result.info is None:
            return StorageError(f"the append to {tp} returned no offset"), -1
        return None, result.info.first_offset


def _check_size(group_id: str, records: Sequence[object]) -> StorageError | None:
    if len(records) > MAX_RECORDS_PER_BATCH:
        return InvalidCommitOffsetSizeError(
            f"group {group_id}: {len(records)} offsets in one commit, more than"
            f" {MAX_RECORDS_PER_BATCH}; commit fewer partitions per request"
        )
    return None
