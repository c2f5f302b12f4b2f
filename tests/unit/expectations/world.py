"""A small, healthy remote tier as plain inputs of the quality tables, and ways to break it.

Topic ``orders`` partition 0: leader-epoch chain ``[(0, 0), (1, 30)]``, log start 0, local
log start 30, HW = LSO 50, LEO 55. Remote: four COPY_SEGMENT_FINISHED segments ``0..9``,
``10..19``, ``20..29`` (epoch 0) and ``30..39`` (epoch 1) with all their objects; one
COPY_SEGMENT_STARTED copy of ``40..44`` a minute old; one segment ``0..9`` of an older copy
rolled back to DELETE_SEGMENT_FINISHED with no objects left. Topic ``gone`` partition 0 was
deleted: MARKED -> STARTED -> FINISHED, its one segment DELETE_SEGMENT_FINISHED.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from jobs.tables import (
    MetadataRecord,
    PartitionState,
    ReplicaState,
    build_partition_offsets,
    build_remote_segments,
)
from jobs.tables.inputs import PartitionKey
from jobs.tables.schemas import Row
from storage_core.common import TopicIdPartition, TopicPartition, Uuid
from storage_core.tiered.metadata.metadata import (
    RemoteLogMetadata,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemotePartitionDeleteMetadata,
)
from storage_core.tiered.metadata.states import RemoteLogSegmentState as S
from storage_core.tiered.metadata.states import RemotePartitionDeleteState as D
from storage_core.tiered.remote_object_keys import RemoteObjectSuffix, segment_key
from storage_core.tiered.remote_storage_manager import RemoteObjectInfo, RemoteSegmentRef

NOW_MS = 1_800_000_000_000
MINUTE_MS = 60_000
DAY_MS = 24 * 60 * MINUTE_MS
SEGMENT_BYTES = 1000
ORDERS = TopicIdPartition(Uuid(1, 1), TopicPartition("orders", 0))
GONE = TopicIdPartition(Uuid(2, 2), TopicPartition("gone", 0))


def segment_id(n: int) -> Uuid:
    return Uuid(100, n)


@dataclass
class World:
    """Mutable inputs; ``tables()`` builds both tables from them."""

    events: list[tuple[int, RemoteLogMetadata]] = field(default_factory=list)
    objects: list[RemoteObjectInfo] = field(default_factory=list)
    partitions: list[PartitionState] = field(default_factory=list)

    # ------------------------------------------------------------------ building
    def segment(
        self,
        n: int,
        start: int,
        end: int,
        *,
        epochs: dict[int, int] | None = None,
        states: tuple[S, ...] = (S.COPY_SEGMENT_STARTED, S.COPY_SEGMENT_FINISHED),
        at_ms: int = NOW_MS - DAY_MS,
        max_timestamp_ms: int = NOW_MS - DAY_MS,
        tip: TopicIdPartition = ORDERS,
        with_objects: bool = True,
        size: int = SEGMENT_BYTES,
    ) -> None:
        sid = RemoteLogSegmentId(topic_id_partition=tip, id=segment_id(n))
        self.events.append(
            (
                at_ms,
                RemoteLogSegmentMetadata(
                    remote_log_segment_id=sid,
                    start_offset=start,
                    end_offset=end,
                    max_timestamp_ms=max_timestamp_ms,
                    broker_id=0,
                    event_timestamp_ms=at_ms,
                    segment_size_in_bytes=size,
                    segment_leader_epochs=epochs if epochs is not None else {0: start},
                    txn_idx_empty=True,
                ),
            )
        )
        for i, state in enumerate(states[1:], start=1):
            self.update(n, state, at_ms=at_ms + i, tip=tip)
        if with_objects:
            self.add_objects(n, start, tip=tip, log_size=size)

    def update(self, n: int, state: S, *, at_ms: int, tip: TopicIdPartition = ORDERS) -> None:
        sid = RemoteLogSegmentId(topic_id_partition=tip, id=segment_id(n))
        self.events.append(
            (
                at_ms,
                RemoteLogSegmentMetadataUpdate(
                    remote_log_segment_id=sid, event_timestamp_ms=at_ms, state=state, broker_id=0
                ),
            )
        )

    def delete_event(self, state: D, *, at_ms: int, tip: TopicIdPartition = GONE) -> None:
        self.events.append(
            (
                at_ms,
                RemotePartitionDeleteMetadata(
                    topic_id_partition=tip, state=state, event_timestamp_ms=at_ms, broker_id=0
                ),
            )
        )

    def add_objects(
        self, n: int, start: int, *, tip: TopicIdPartition = ORDERS, log_size: int = SEGMENT_BYTES
    ) -> None:
        ref = RemoteSegmentRef(
            topic=tip.topic_partition.topic,
            topic_id=tip.topic_id,
            partition=tip.topic_partition.partition,
            segment_id=segment_id(n),
            start_offset=start,
        )
        for suffix in (
            RemoteObjectSuffix.LOG,
            RemoteObjectSuffix.OFFSET_INDEX,
            RemoteObjectSuffix.TIME_INDEX,
            RemoteObjectSuffix.LEADER_EPOCH_CHECKPOINT,
        ):
            size = log_size if suffix is RemoteObjectSuffix.LOG else 24
            self.objects.append(
                RemoteObjectInfo(
                    key=segment_key("", ref, suffix), size_bytes=size, last_modified_ms=NOW_MS
                )
            )

    def drop_segment(self, n: int) -> None:
        """Forget every event and object of segment ``n``."""
        sid = str(segment_id(n))
        self.events = [
            (t, e)
            for t, e in self.events
            if not (
                isinstance(e, RemoteLogSegmentMetadata | RemoteLogSegmentMetadataUpdate)
                and str(e.remote_log_segment_id.id) == sid
            )
        ]
        self.objects = [o for o in self.objects if sid not in o.key]

    def set_partition(self, **changes: object) -> None:
        self.partitions = [replace(self.partitions[0], **changes), *self.partitions[1:]]

    # ------------------------------------------------------------------ tables
    def records(self) -> list[MetadataRecord]:
        return [
            MetadataRecord(partition=0, offset=i, timestamp_ms=t, event=e)
            for i, (t, e) in enumerate(self.events)
        ]

    def tables(
        self, *, leaders: Mapping[PartitionKey, ReplicaState] | None = None
    ) -> tuple[list[Row], list[Row]]:
        segments = build_remote_segments(
            self.records(), self.objects, self.partitions, now_ms=NOW_MS, leaders=leaders
        )
        partitions = build_partition_offsets(
            self.partitions, self.records(), segments, now_ms=NOW_MS
        )
        return segments, partitions


def healthy_world() -> World:
    world = World()
    world.partitions.append(
        PartitionState(
            topic="orders",
            partition=0,
            topic_id=ORDERS.topic_id,
            log_start_offset=0,
            local_log_start_offset=30,
            high_watermark=50,
            last_stable_offset=50,
            log_end_offset=55,
            highest_remote_offset=39,
            leader_epoch_chain=((0, 0), (1, 30)),
            retention_ms=7 * DAY_MS,
            retention_bytes=10 * SEGMENT_BYTES,
            segment_bytes=SEGMENT_BYTES,
        )
    )
    world.segment(1, 0, 9)
    world.segment(2, 10, 19)
    world.segment(3, 20, 29)
    world.segment(4, 30, 39, epochs={1: 30})
    world.segment(
        5, 40, 44, epochs={1: 40}, states=(S.COPY_SEGMENT_STARTED,), at_ms=NOW_MS - MINUTE_MS
    )
    world.segment(
        6,
        0,
        9,
        states=(S.COPY_SEGMENT_STARTED, S.DELETE_SEGMENT_STARTED, S.DELETE_SEGMENT_FINISHED),
        with_objects=False,
    )
    world.delete_event(D.DELETE_PARTITION_MARKED, at_ms=NOW_MS - 3 * DAY_MS)
    world.delete_event(D.DELETE_PARTITION_STARTED, at_ms=NOW_MS - 3 * DAY_MS + 1)
    world.segment(
        7,
        0,
        99,
        tip=GONE,
        states=(
            S.COPY_SEGMENT_STARTED,
            S.COPY_SEGMENT_FINISHED,
            S.DELETE_SEGMENT_STARTED,
            S.DELETE_SEGMENT_FINISHED,
        ),
        at_ms=NOW_MS - 5 * DAY_MS,
        with_objects=False,
    )
    world.delete_event(D.DELETE_PARTITION_FINISHED, at_ms=NOW_MS - 3 * DAY_MS + 2)
    return world


def row_of(rows: list[Row], n: int) -> Row:
    sid = str(segment_id(n))
    return next(r for r in rows if r["segment_id"] == sid)
