"""In-memory remote log metadata of one partition (Kafka's ``RemoteLogMetadataCache``).

The cache holds every segment that has not reached DELETE_SEGMENT_FINISHED, and per leader
epoch a ``RemoteLogLeaderEpochState`` that maps start offsets to the segments readers may use.
What each method sees, by segment state (Kafka's table)::

    method / segment state              COPY_STARTED  COPY_FINISHED  DELETE_STARTED  DELETE_FINISHED
    remote_log_segment_metadata(e, o)        no            yes            no              no
    list_remote_log_segments(e)              yes           yes            yes             no
    list_all_remote_log_segments()           yes           yes            yes             no
    highest_offset_for_epoch(e)          (only segments that reached COPY_SEGMENT_FINISHED count;
                                          the value never decreases, deletions included)

Events are applied with Kafka's rules, with these deliberate differences:

- The COPY_SEGMENT_STARTED metadata of a segment the cache holds in a later state, announced
  again unchanged (``is_same_segment``), is a repeat and changes nothing: the metadata topic's
  compaction (``compaction``) re-appends live segments' events so that older ones can go.
  Kafka's cache logs and drops it, with the same outcome.
- An event the state machine forbids raises ``IllegalRemoteLogStateTransitionError`` (Kafka
  logs it and drops it); the cache is unchanged. An update naming an unknown segment raises
  ``RemoteResourceNotFoundError`` once the cache is initialized, and is dropped before (the
  segment was already gone when the snapshot it was restored from was taken), as in Kafka.
- When a segment finishing its copy takes over a start offset still mapped to another segment
  (in Kafka that mapping is overwritten and the other segment silently drops out of the
  per-epoch listing), the other segment is kept as unreferenced, so it stays listed for
  cleanup. Lookups are unchanged.
- The cache also tracks the partition's deletion state (Kafka keeps it beside the cache in
  ``RemotePartitionMetadataStore``), with ``RemotePartitionDeleteState``'s transitions.

Thread-safety: every public method takes the cache's lock; values handed out are immutable.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field

from storage_core.common import TopicIdPartition, Uuid
from storage_core.tiered.metadata.errors import (
    IllegalRemoteLogStateTransitionError,
    RemoteResourceNotFoundError,
)
from storage_core.tiered.metadata.metadata import (
    RemoteLogMetadata,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataSnapshot,
    RemoteLogSegmentMetadataUpdate,
    RemotePartitionDeleteMetadata,
)
from storage_core.tiered.metadata.segment_listing import RemoteLogSegmentsSummary, SegmentListing
from storage_core.tiered.metadata.states import RemoteLogSegmentState, RemotePartitionDeleteState


def is_same_segment(a: RemoteLogSegmentMetadata, b: RemoteLogSegmentMetadata) -> bool:
    """Whether ``a`` and ``b`` describe the same copy of a segment: equal id, offsets,
    epochs, size, max timestamp and transaction index flag (state, broker, event time and
    custom metadata may differ: updates change them)."""
    return (
        a.remote_log_segment_id == b.remote_log_segment_id
        and a.start_offset == b.start_offset
        and a.end_offset == b.end_offset
        and dict(a.segment_leader_epochs) == dict(b.segment_leader_epochs)
        and a.segment_size_in_bytes == b.segment_size_in_bytes
        and a.max_timestamp_ms == b.max_timestamp_ms
        and a.txn_idx_empty == b.txn_idx_empty
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class EpochSnapshotState:
    """One leader epoch of a cache snapshot: its highest copied offset (inclusive; ``None``
    if none) and its referenced ``(start offset, segment uuid)`` pairs, by offset."""

    leader_epoch: int
    highest_log_offset: int | None
    referenced: list[tuple[int, Uuid]] = field(default_factory=list)


@dataclass(frozen=True, slots=True, kw_only=True)
class CacheSnapshotState:
    """The whole state of one partition's cache, as written in its snapshot file."""

    segments: list[RemoteLogSegmentMetadataSnapshot]
    epochs: list[EpochSnapshotState]
    partition_delete_metadata: RemotePartitionDeleteMetadata | None = None


class RemoteLogLeaderEpochState:
    """The segments of one leader epoch (Kafka's class of the same name).

    ``offset_to_id``: start offset of the epoch inside a segment -> that segment, for segments
    in COPY_SEGMENT_FINISHED that readers may use (sorted by offset). ``unreferenced``:
    segments of this epoch not in that map (copying, being deleted, or displaced by a later
    upload), listed so that they can be cleaned up. ``highest_log_offset``: the highest last
    offset (inclusive) of this epoch over every segment that reached COPY_SEGMENT_FINISHED;
    ``None`` until one did. Not thread-safe: the owning cache serialises access.
    """

    __slots__ = ("_offsets", "highest_log_offset", "offset_to_id", "unreferenced")

    def __init__(self) -> None:
        self.offset_to_id: dict[int, RemoteLogSegmentId] = {}
        self._offsets: list[int] = []  # sorted keys of offset_to_id
        self.unreferenced: set[RemoteLogSegmentId] = set()
        self.highest_log_offset: int | None = None

    def _put(self, start_offset: int, segment_id: RemoteLogSegmentId) -> None:
        if start_offset not in self.offset_to_id:
            bisect.insort(self._offsets, start_offset)
        self.offset_to_id[start_offset] = segment_id

    def _remove(self, start_offset: int) -> None:
        del self.offset_to_id[start_offset]
        self._offsets.pop(bisect.bisect_left(self._offsets, start_offset))

    def floor_entry(self, offset: int) -> RemoteLogSegmentId | None:
        """The segment mapped at the greatest start offset <= ``offset``, if any."""
        index = bisect.bisect_right(self._offsets, offset)
        return self.offset_to_id[self._offsets[index - 1]] if index else None

    def referenced_segment_ids(self) -> list[RemoteLogSegmentId]:
        return [self.offset_to_id[offset] for offset in self._offsets]

    def handle_segment_with_copy_segment_started_state(
        self, segment_id: RemoteLogSegmentId
    ) -> None:
        self.unreferenced.add(segment_id)

    def handle_segment_with_copy_segment_finished_state(
        self, start_offset: int, segment_id: RemoteLogSegmentId, leader_epoch_end_offset: int
    ) -> None:
        """Map ``start_offset`` to the segment; unmap earlier uploads it supersedes.

        A new leader may upload a segment overlapping what a lagging previous leader uploaded
        for the same epoch (L0 uploaded 0-100, L1 uploads 0-200; or L0 10-90 and L1 5-100).
        Mapped segments starting at or after ``start_offset`` become unreferenced while this
        epoch's highest offset is not beyond the new segment's last offset of the epoch.
        """
        while (
            self._offsets
            and self._offsets[-1] >= start_offset
            and self.highest_log_offset is not None
            and self.highest_log_offset <= leader_epoch_end_offset
        ):
            last_offset = self._offsets[-1]
            self.unreferenced.add(self.offset_to_id[last_offset])
            self._remove(last_offset)
        displaced = self.offset_to_id.get(start_offset)
        if displaced is not None and displaced != segment_id:
            self.unreferenced.add(displaced)  # Kafka drops it from the epoch; kept for cleanup
        self._put(start_offset, segment_id)
        self.unreferenced.discard(segment_id)
        if self.highest_log_offset is None or leader_epoch_end_offset > self.highest_log_offset:
            self.highest_log_offset = leader_epoch_end_offset

    def handle_segment_with_delete_segment_started_state(
        self, start_offset: int, segment_id: RemoteLogSegmentId
    ) -> None:
        if self.offset_to_id.get(start_offset) == segment_id:
            self._remove(start_offset)
        self.unreferenced.add(segment_id)

    def handle_segment_with_delete_segment_finished_state(
        self, segment_id: RemoteLogSegmentId
    ) -> None:
        self.unreferenced.discard(segment_id)

    def all_segment_ids(self) -> list[RemoteLogSegmentId]:
        return [*self.referenced_segment_ids(), *self.unreferenced]


class RemoteLogMetadataCache:
    """Remote segments and deletion state of ``topic_id_partition``; see the module doc."""

    def __init__(self, topic_id_partition: TopicIdPartition) -> None:
        self.topic_id_partition = topic_id_partition
        self._lock = threading.RLock()
        self._id_to_segment_metadata: dict[RemoteLogSegmentId, RemoteLogSegmentMetadata] = {}
        self._listing = SegmentListing()  # the same segments, in listing order
        self._leader_epoch_entries: dict[int, RemoteLogLeaderEpochState] = {}
        self._partition_delete_metadata: RemotePartitionDeleteMetadata | None = None
        self._initialized = False

    # ------------------------------------------------------------------ lifecycle

    def mark_initialized(self) -> None:
        """The cache caught up with the metadata topic; unknown segments are errors from now."""
        with self._lock:
            self._initialized = True

    def is_initialized(self) -> bool:
        with self._lock:
            return self._initialized

    # ------------------------------------------------------------------ reads

    def remote_log_segment_metadata(
        self, leader_epoch: int, offset: int
    ) -> RemoteLogSegmentMetadata | None:
        """The COPY_SEGMENT_FINISHED segment holding ``offset`` written in ``leader_epoch``."""
        with self._lock:
            epoch_state = self._leader_epoch_entries.get(leader_epoch)
            if epoch_state is None:
                return None
            segment_id = epoch_state.floor_entry(offset)
            if segment_id is None:
                return None
            metadata = self._id_to_segment_metadata[segment_id]
            if offset > metadata.epoch_end_offset(leader_epoch):
                return None
            return metadata

    def highest_offset_for_epoch(self, leader_epoch: int) -> int | None:
        """Highest offset (inclusive) of ``leader_epoch`` ever copied (COPY_SEGMENT_FINISHED)."""
        with self._lock:
            epoch_state = self._leader_epoch_entries.get(leader_epoch)
            return None if epoch_state is None else epoch_state.highest_log_offset

    def list_remote_log_segments(
        self, leader_epoch: int | None = None
    ) -> list[RemoteLogSegmentMetadata]:
        """Segments not DELETE_SEGMENT_FINISHED, sorted by start offset: all of them, or
        those with records of ``leader_epoch``."""
        if leader_epoch is None:
            return self.list_all_remote_log_segments()
        with self._lock:
            epoch_state = self._leader_epoch_entries.get(leader_epoch)
            if epoch_state is None:
                return []
            return self._sorted(epoch_state.all_segment_ids())

    def list_all_remote_log_segments(self) -> list[RemoteLogSegmentMetadata]:
        """Every segment not DELETE_SEGMENT_FINISHED, sorted by start offset."""
        with self._lock:
            return self._listing.segments()

    def remote_log_segments_summary(self) -> RemoteLogSegmentsSummary:
        """What ``list_all_remote_log_segments`` holds, summed up (see
        ``RemoteLogSegmentsSummary``); computed once per change, not per call."""
        with self._lock:
            return self._listing.summary()

    def remote_partition_delete_metadata(self) -> RemotePartitionDeleteMetadata | None:
        """The partition's latest deletion event, or ``None`` if it was never marked."""
        with self._lock:
            return self._partition_delete_metadata

    def leader_epochs(self) -> list[int]:
        """Leader epochs the cache has state for, ascending."""
        with self._lock:
            return sorted(self._leader_epoch_entries)

    def _sorted(self, ids: Iterable[RemoteLogSegmentId]) -> list[RemoteLogSegmentMetadata]:
        segments = []
        for segment_id in ids:
            metadata = self._id_to_segment_metadata.get(segment_id)
            if metadata is None:
                raise RemoteResourceNotFoundError(
                    f"No remote log segment metadata found for {segment_id}"
                )
            segments.append(metadata)
        segments.sort(key=lambda m: (m.start_offset, m.end_offset, m.remote_log_segment_id))
        return segments

    # ------------------------------------------------------------------ events

    def handle(self, event: RemoteLogMetadata) -> None:
        """Apply one event read from ``__remote_log_metadata`` for this partition."""
        if isinstance(event, RemoteLogSegmentMetadata):
            self.add_copy_in_progress_segment(event)
        elif isinstance(event, RemoteLogSegmentMetadataUpdate):
            self.update_remote_log_segment_metadata(event)
        elif isinstance(event, RemotePartitionDeleteMetadata):
            self.put_remote_partition_delete_metadata(event)
        else:
            raise TypeError(f"{type(event).__name__} is not an event of the metadata topic")

    def add_copy_in_progress_segment(self, metadata: RemoteLogSegmentMetadata) -> None:
        """Track a segment whose copy started; readers do not see it until it finishes."""
        self._check_partition(metadata.topic_id_partition)
        if metadata.state is not RemoteLogSegmentState.COPY_SEGMENT_STARTED:
            raise IllegalRemoteLogStateTransitionError(
                f"segment {metadata.remote_log_segment_id} is added with state"
                f" {metadata.state.name}; new segments start in COPY_SEGMENT_STARTED"
                " (publish an update for later states)"
            )
        with self._lock:
            segment_id = metadata.remote_log_segment_id
            existing = self._id_to_segment_metadata.get(segment_id)
            if (
                existing is not None
                and existing.state is not RemoteLogSegmentState.COPY_SEGMENT_STARTED
                and is_same_segment(existing, metadata)
            ):
                return  # announced again (a restatement of the metadata topic): a repeat
            self._check_transition(existing, metadata.state, segment_id)
            for epoch in metadata.segment_leader_epochs:
                self._epoch_state(epoch).handle_segment_with_copy_segment_started_state(segment_id)
            self._id_to_segment_metadata[segment_id] = metadata
            self._listing.put(metadata, existing)

    def update_remote_log_segment_metadata(self, update: RemoteLogSegmentMetadataUpdate) -> None:
        """Apply a state change of a segment already in the cache."""
        self._check_partition(update.topic_id_partition)
        with self._lock:
            segment_id = update.remote_log_segment_id
            existing = self._id_to_segment_metadata.get(segment_id)
            if existing is None:
                if not self._initialized:
                    return  # its metadata was gone before the snapshot we started from
                raise RemoteResourceNotFoundError(
                    f"No remote log segment metadata found for {segment_id}"
                    f" (update to {update.state.name}); publish its COPY_SEGMENT_STARTED first"
                )
            self._check_transition(existing, update.state, segment_id)
            if update.state is RemoteLogSegmentState.COPY_SEGMENT_STARTED:
                raise IllegalRemoteLogStateTransitionError(
                    f"an update of segment {segment_id} can not carry COPY_SEGMENT_STARTED;"
                    " add the segment's metadata instead"
                )
            self._apply(existing.create_with_updates(update))

    def put_remote_partition_delete_metadata(self, metadata: RemotePartitionDeleteMetadata) -> None:
        """Record a deletion state change of the partition."""
        self._check_partition(metadata.topic_id_partition)
        with self._lock:
            current = self._partition_delete_metadata
            current_state = None if current is None else current.state
            if not RemotePartitionDeleteState.is_valid_transition(current_state, metadata.state):
                raise IllegalRemoteLogStateTransitionError(
                    f"partition {self.topic_id_partition} can not move from deletion state"
                    f" {'(none)' if current_state is None else current_state.name} to"
                    f" {metadata.state.name}"
                )
            self._partition_delete_metadata = metadata

    def _apply(self, metadata: RemoteLogSegmentMetadata) -> None:
        """Index ``metadata`` (state COPY_SEGMENT_FINISHED or later) under every epoch."""
        segment_id = metadata.remote_log_segment_id
        for epoch, start_offset in metadata.segment_leader_epochs.items():
            epoch_state = self._epoch_state(epoch)
            if metadata.state is RemoteLogSegmentState.COPY_SEGMENT_FINISHED:
                epoch_state.handle_segment_with_copy_segment_finished_state(
                    start_offset, segment_id, metadata.epoch_end_offset(epoch)
                )
            elif metadata.state is RemoteLogSegmentState.DELETE_SEGMENT_STARTED:
                epoch_state.handle_segment_with_delete_segment_started_state(
                    start_offset, segment_id
                )
            else:
                epoch_state.handle_segment_with_delete_segment_finished_state(segment_id)
        if metadata.state is RemoteLogSegmentState.DELETE_SEGMENT_FINISHED:
            self._listing.remove(self._id_to_segment_metadata.pop(segment_id))
        else:
            self._listing.put(metadata, self._id_to_segment_metadata.get(segment_id))
            self._id_to_segment_metadata[segment_id] = metadata

    def _epoch_state(self, leader_epoch: int) -> RemoteLogLeaderEpochState:
        epoch_state = self._leader_epoch_entries.get(leader_epoch)
        if epoch_state is None:
            epoch_state = self._leader_epoch_entries[leader_epoch] = RemoteLogLeaderEpochState()
        return epoch_state

    def _check_partition(self, topic_id_partition: TopicIdPartition) -> None:
        if topic_id_partition != self.topic_id_partition:
            raise ValueError(
                f"event for partition {topic_id_partition} given to the cache of"
                f" {self.topic_id_partition}"
            )

    @staticmethod
    def _check_transition(
        existing: RemoteLogSegmentMetadata | None,
        target: RemoteLogSegmentState,
        segment_id: RemoteLogSegmentId,
    ) -> None:
        source = None if existing is None else existing.state
        if not RemoteLogSegmentState.is_valid_transition(source, target):
            raise IllegalRemoteLogStateTransitionError(
                f"segment {segment_id} can not move from"
                f" {'(none)' if source is None else source.name} to {target.name}"
            )

    # ------------------------------------------------------------------ snapshots

    def snapshot_state(self) -> CacheSnapshotState:
        """Everything needed to rebuild this cache exactly (see ``restore``)."""
        with self._lock:
            return CacheSnapshotState(
                segments=[
                    RemoteLogSegmentMetadataSnapshot.create(m) for m in self._listing.segments()
                ],
                epochs=[
                    EpochSnapshotState(
                        leader_epoch=epoch,
                        highest_log_offset=state.highest_log_offset,
                        referenced=[
                            (offset, state.offset_to_id[offset].id) for offset in state._offsets
                        ],
                    )
                    for epoch, state in sorted(self._leader_epoch_entries.items())
                ],
                partition_delete_metadata=self._partition_delete_metadata,
            )

    @staticmethod
    def restore(
        topic_id_partition: TopicIdPartition, state: CacheSnapshotState
    ) -> RemoteLogMetadataCache:
        """A cache equal to the one ``state`` was taken from (not yet initialized).

        Raises ``ValueError`` if ``state`` is inconsistent (a referenced segment that is not
        COPY_SEGMENT_FINISHED, or does not hold that epoch at that offset).
        """
        cache = RemoteLogMetadataCache(topic_id_partition)
        by_uuid: dict[Uuid, RemoteLogSegmentMetadata] = {}
        for entry in state.segments:
            metadata = entry.to_metadata(topic_id_partition)
            if metadata.state is RemoteLogSegmentState.DELETE_SEGMENT_FINISHED:
                raise ValueError(f"snapshot holds deleted segment {metadata.remote_log_segment_id}")
            if entry.segment_id in by_uuid:
                raise ValueError(f"snapshot holds segment {entry.segment_id} twice")
            by_uuid[entry.segment_id] = metadata
            cache._id_to_segment_metadata[metadata.remote_log_segment_id] = metadata
            for epoch in metadata.segment_leader_epochs:
                cache._epoch_state(epoch).unreferenced.add(metadata.remote_log_segment_id)
        for epoch_entry in state.epochs:
            epoch_state = cache._epoch_state(epoch_entry.leader_epoch)
            epoch_state.highest_log_offset = epoch_entry.highest_log_offset
            for start_offset, segment_uuid in epoch_entry.referenced:
                referenced = by_uuid.get(segment_uuid)
                if (
                    referenced is None
                    or referenced.state is not RemoteLogSegmentState.COPY_SEGMENT_FINISHED
                    or referenced.segment_leader_epochs.get(epoch_entry.leader_epoch)
                    != start_offset
                ):
                    raise ValueError(
                        f"snapshot maps epoch {epoch_entry.leader_epoch} offset {start_offset}"
                        f" to segment {segment_uuid}, which is not a copied segment of that epoch"
                        " starting there"
                    )
                epoch_state._put(start_offset, referenced.remote_log_segment_id)
                epoch_state.unreferenced.discard(referenced.remote_log_segment_id)
        cache._listing = SegmentListing.of(list(cache._id_to_segment_metadata.values()))
        cache._partition_delete_metadata = state.partition_delete_metadata
        return cache
