"""Immutable KIP-405 metadata values with Kafka's names (server.log.remote.storage).

- ``RemoteLogSegmentId``: a topic partition (with its topic id) and one ``Uuid`` per copy
  attempt of a segment.
- ``RemoteLogSegmentMetadata``: what is known about one remote segment; always published
  first in COPY_SEGMENT_STARTED and changed by ``create_with_updates``.
- ``RemoteLogSegmentMetadataUpdate``: a state change of a segment.
- ``RemotePartitionDeleteMetadata``: a state change of the deletion of a partition.
- ``RemoteLogSegmentMetadataSnapshot``: a segment's metadata without its partition, as kept
  in a snapshot file of one partition's cache.

All are frozen, slotted, keyword-only dataclasses that validate when built and raise
``ValueError`` naming the broken rule. Changing one means building a new one.
"""

from __future__ import annotations

import types
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import TypeAlias

from storage_core.common import TopicIdPartition, TopicPartition, Uuid
from storage_core.tiered.metadata.states import RemoteLogSegmentState, RemotePartitionDeleteState

INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1


def _check_int(value: int, minimum: int, maximum: int, what: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{what} must be an int, got {value!r}")
    if not minimum <= value <= maximum:
        raise ValueError(f"{what} = {value} is outside [{minimum}, {maximum}] (inclusive)")


def _check_custom_metadata(value: bytes | None) -> None:
    if value is not None and not isinstance(value, bytes):
        raise ValueError(f"custom_metadata must be bytes or None, got {type(value).__name__}")


def _frozen_leader_epochs(
    epochs: Mapping[int, int], start_offset: int, end_offset: int
) -> Mapping[int, int]:
    """Validate ``epoch -> start offset`` and return a read-only copy in epoch order."""
    if not epochs:
        raise ValueError("segment_leader_epochs can not be empty")
    previous_epoch: int | None = None
    previous_offset = start_offset
    for epoch, epoch_start_offset in epochs.items():
        _check_int(epoch, 0, INT32_MAX, "segment leader epoch")
        _check_int(epoch_start_offset, 0, INT64_MAX, f"start offset of leader epoch {epoch}")
        if previous_epoch is not None and epoch <= previous_epoch:
            raise ValueError(
                f"segment_leader_epochs must be in strictly increasing epoch order,"
                f" found epoch {epoch} after {previous_epoch}"
            )
        if not start_offset <= epoch_start_offset <= end_offset:
            raise ValueError(
                f"start offset {epoch_start_offset} of leader epoch {epoch} is outside the"
                f" segment [{start_offset}, {end_offset}] (inclusive)"
            )
        if epoch_start_offset < previous_offset:
            raise ValueError(
                f"start offset {epoch_start_offset} of leader epoch {epoch} is below"
                f" {previous_offset}, the start offset of the previous epoch"
            )
        previous_epoch, previous_offset = epoch, epoch_start_offset
    return types.MappingProxyType(dict(epochs))


@dataclass(frozen=True, slots=True, kw_only=True, order=True)
class RemoteLogSegmentId:
    """One copy attempt of a segment of ``topic_id_partition``; ``id`` is fresh per attempt."""

    topic_id_partition: TopicIdPartition
    id: Uuid

    def __post_init__(self) -> None:
        if not isinstance(self.topic_id_partition, TopicIdPartition):
            raise ValueError("topic_id_partition must be a TopicIdPartition")
        if not isinstance(self.id, Uuid):
            raise ValueError("id must be a Uuid")
        _check_int(self.topic_id_partition.topic_partition.partition, 0, INT32_MAX, "partition")

    @staticmethod
    def generate_new(topic_id_partition: TopicIdPartition) -> RemoteLogSegmentId:
        """A new id for a new copy attempt (Kafka's ``RemoteLogSegmentId.generateNew``)."""
        return RemoteLogSegmentId(topic_id_partition=topic_id_partition, id=Uuid.random())

    def __str__(self) -> str:
        return f"{self.topic_id_partition}:{self.id}"


@dataclass(frozen=True, slots=True, kw_only=True)
class RemoteLogSegmentMetadataUpdate:
    """A state change of the segment ``remote_log_segment_id`` published by ``broker_id``."""

    remote_log_segment_id: RemoteLogSegmentId
    event_timestamp_ms: int
    state: RemoteLogSegmentState
    broker_id: int
    custom_metadata: bytes | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.remote_log_segment_id, RemoteLogSegmentId):
            raise ValueError("remote_log_segment_id must be a RemoteLogSegmentId")
        if not isinstance(self.state, RemoteLogSegmentState):
            raise ValueError(f"state must be a RemoteLogSegmentState, got {self.state!r}")
        _check_int(self.event_timestamp_ms, INT64_MIN, INT64_MAX, "event_timestamp_ms")
        _check_int(self.broker_id, INT32_MIN, INT32_MAX, "broker_id")
        _check_custom_metadata(self.custom_metadata)

    @property
    def topic_id_partition(self) -> TopicIdPartition:
        return self.remote_log_segment_id.topic_id_partition


@dataclass(frozen=True, slots=True, kw_only=True)
class RemoteLogSegmentMetadata:
    """Metadata of one remote segment.

    Offsets: ``start_offset`` (inclusive) >= 0 and ``end_offset`` (inclusive) >=
    ``start_offset``. ``segment_leader_epochs`` maps each leader epoch with records in the
    segment to the offset of its first record, in strictly increasing epoch order, with
    non-decreasing start offsets inside ``[start_offset, end_offset]`` (inclusive); it is
    never empty. ``custom_metadata`` is opaque bytes from the remote storage manager.
    """

    remote_log_segment_id: RemoteLogSegmentId
    start_offset: int
    end_offset: int
    max_timestamp_ms: int
    broker_id: int
    event_timestamp_ms: int
    segment_size_in_bytes: int
    segment_leader_epochs: Mapping[int, int] = field(hash=False)
    custom_metadata: bytes | None = None
    state: RemoteLogSegmentState = RemoteLogSegmentState.COPY_SEGMENT_STARTED
    txn_idx_empty: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.remote_log_segment_id, RemoteLogSegmentId):
            raise ValueError("remote_log_segment_id must be a RemoteLogSegmentId")
        if not isinstance(self.state, RemoteLogSegmentState):
            raise ValueError(f"state must be a RemoteLogSegmentState, got {self.state!r}")
        _check_int(self.start_offset, 0, INT64_MAX, "start_offset")
        _check_int(self.end_offset, INT64_MIN, INT64_MAX, "end_offset")
        if self.end_offset < self.start_offset:
            raise ValueError(
                f"end_offset {self.end_offset} is below start_offset {self.start_offset}"
            )
        _check_int(self.max_timestamp_ms, INT64_MIN, INT64_MAX, "max_timestamp_ms")
        _check_int(self.broker_id, INT32_MIN, INT32_MAX, "broker_id")
        _check_int(self.event_timestamp_ms, INT64_MIN, INT64_MAX, "event_timestamp_ms")
        _check_int(self.segment_size_in_bytes, 0, INT32_MAX, "segment_size_in_bytes")
        _check_custom_metadata(self.custom_metadata)
        if not isinstance(self.txn_idx_empty, bool):
            raise ValueError("txn_idx_empty must be a bool")
        object.__setattr__(
            self,
            "segment_leader_epochs",
            _frozen_leader_epochs(self.segment_leader_epochs, self.start_offset, self.end_offset),
        )

    @property
    def topic_id_partition(self) -> TopicIdPartition:
        return self.remote_log_segment_id.topic_id_partition

    def create_with_updates(
        self, update: RemoteLogSegmentMetadataUpdate
    ) -> RemoteLogSegmentMetadata:
        """Kafka's ``createWithUpdates``: this segment with the update's state, broker id,
        event time and custom metadata. Does not check the transition (the cache does)."""
        if update.remote_log_segment_id != self.remote_log_segment_id:
            raise ValueError(
                f"update for segment {update.remote_log_segment_id} can not be applied to"
                f" segment {self.remote_log_segment_id}"
            )
        return RemoteLogSegmentMetadata(
            remote_log_segment_id=self.remote_log_segment_id,
            start_offset=self.start_offset,
            end_offset=self.end_offset,
            max_timestamp_ms=self.max_timestamp_ms,
            broker_id=update.broker_id,
            event_timestamp_ms=update.event_timestamp_ms,
            segment_size_in_bytes=self.segment_size_in_bytes,
            segment_leader_epochs=self.segment_leader_epochs,
            custom_metadata=update.custom_metadata,
            state=update.state,
            txn_idx_empty=self.txn_idx_empty,
        )

    def epoch_end_offset(self, leader_epoch: int) -> int:
        """Last offset (inclusive) of ``leader_epoch`` inside this segment: the next epoch's
        start offset - 1, or the segment's end offset for its last epoch."""
        following = [
            start for epoch, start in self.segment_leader_epochs.items() if epoch > leader_epoch
        ]
        return following[0] - 1 if following else self.end_offset


@dataclass(frozen=True, slots=True, kw_only=True)
class RemotePartitionDeleteMetadata:
    """A state change of the deletion of ``topic_id_partition``'s remote data."""

    topic_id_partition: TopicIdPartition
    state: RemotePartitionDeleteState
    event_timestamp_ms: int
    broker_id: int

    def __post_init__(self) -> None:
        if not isinstance(self.topic_id_partition, TopicIdPartition):
            raise ValueError("topic_id_partition must be a TopicIdPartition")
        if not isinstance(self.state, RemotePartitionDeleteState):
            raise ValueError(f"state must be a RemotePartitionDeleteState, got {self.state!r}")
        _check_int(self.topic_id_partition.topic_partition.partition, 0, INT32_MAX, "partition")
        _check_int(self.event_timestamp_ms, INT64_MIN, INT64_MAX, "event_timestamp_ms")
        _check_int(self.broker_id, INT32_MIN, INT32_MAX, "broker_id")


@dataclass(frozen=True, slots=True, kw_only=True)
class RemoteLogSegmentMetadataSnapshot:
    """Kafka's ``RemoteLogSegmentMetadataSnapshot``: a segment's metadata minus its partition.

    Same fields and rules as ``RemoteLogSegmentMetadata`` with ``segment_id`` for the
    segment's ``Uuid``; the partition is implied by the snapshot file that holds it.
    """

    segment_id: Uuid
    start_offset: int
    end_offset: int
    max_timestamp_ms: int
    broker_id: int
    event_timestamp_ms: int
    segment_size_in_bytes: int
    segment_leader_epochs: Mapping[int, int] = field(hash=False)
    custom_metadata: bytes | None = None
    state: RemoteLogSegmentState = RemoteLogSegmentState.COPY_SEGMENT_STARTED
    txn_idx_empty: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.segment_id, Uuid):
            raise ValueError("segment_id must be a Uuid")
        # The same checks as a full metadata value (built for a throw-away partition).
        checked = self._build_metadata(_ANY_PARTITION)
        object.__setattr__(self, "segment_leader_epochs", checked.segment_leader_epochs)

    @staticmethod
    def create(metadata: RemoteLogSegmentMetadata) -> RemoteLogSegmentMetadataSnapshot:
        """The entry of ``metadata``. Its fields passed every check when ``metadata`` was
        built, so they are not checked again: a checkpoint takes the entry of every segment
        of a partition while holding its cache (10^5 of them)."""
        entry: RemoteLogSegmentMetadataSnapshot = object.__new__(RemoteLogSegmentMetadataSnapshot)
        set_field = object.__setattr__
        set_field(entry, "segment_id", metadata.remote_log_segment_id.id)
        for name in _SHARED_SEGMENT_FIELDS:
            set_field(entry, name, getattr(metadata, name))
        return entry

    def to_metadata(self, topic_id_partition: TopicIdPartition) -> RemoteLogSegmentMetadata:
        """This segment's metadata in ``topic_id_partition``.

        The fields passed every check of ``RemoteLogSegmentMetadata`` when this entry was
        built (``__post_init__``) and can not change since, so they are not checked again: a
        restart restores every segment of a partition through here (10^5 of them in seconds).
        """
        metadata: RemoteLogSegmentMetadata = object.__new__(RemoteLogSegmentMetadata)
        segment_id = RemoteLogSegmentId(topic_id_partition=topic_id_partition, id=self.segment_id)
        set_field = object.__setattr__
        set_field(metadata, "remote_log_segment_id", segment_id)
        for name in _SHARED_SEGMENT_FIELDS:
            set_field(metadata, name, getattr(self, name))
        return metadata

    def _build_metadata(self, topic_id_partition: TopicIdPartition) -> RemoteLogSegmentMetadata:
        return RemoteLogSegmentMetadata(
            remote_log_segment_id=RemoteLogSegmentId(
                topic_id_partition=topic_id_partition, id=self.segment_id
            ),
            start_offset=self.start_offset,
            end_offset=self.end_offset,
            max_timestamp_ms=self.max_timestamp_ms,
            broker_id=self.broker_id,
            event_timestamp_ms=self.event_timestamp_ms,
            segment_size_in_bytes=self.segment_size_in_bytes,
            segment_leader_epochs=self.segment_leader_epochs,
            custom_metadata=self.custom_metadata,
            state=self.state,
            txn_idx_empty=self.txn_idx_empty,
        )


# Any valid partition; only used to run the shared checks of a snapshot entry.
_ANY_PARTITION = TopicIdPartition(Uuid(0, 0), TopicPartition("_", 0))
# Every field of RemoteLogSegmentMetadata but its id, which a snapshot entry holds alike.
_SHARED_SEGMENT_FIELDS = tuple(
    f.name for f in fields(RemoteLogSegmentMetadata) if f.name != "remote_log_segment_id"
)

RemoteLogMetadata: TypeAlias = (
    RemoteLogSegmentMetadata
    | RemoteLogSegmentMetadataUpdate
    | RemotePartitionDeleteMetadata
    | RemoteLogSegmentMetadataSnapshot
)
"""Any value carried by a ``__remote_log_metadata`` record or a snapshot entry."""
