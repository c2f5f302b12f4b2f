"""What the reconcile job does, planned from a metadata listing and an object listing. Pure.

Inputs: every live segment per partition (the segments a ``RemoteLogMetadataCache`` lists:
any state but DELETE_SEGMENT_FINISHED), every object of the store (``list_objects``), the
time, the copy deadline. Actions, each with its reason::

    segment state / object                        action
    COPY_SEGMENT_STARTED, older than the deadline ROLL_BACK_COPY   DELETE_SEGMENT_STARTED,
                                                                   objects, ..._FINISHED
    COPY_SEGMENT_STARTED, within the deadline     (kept: a copy may be running)
    COPY_SEGMENT_FINISHED                         (kept: readers use it)
    COPY_SEGMENT_FINISHED, its .log, .index or    LOST_SEGMENT     reported only, never
      .timeindex object not listed (and FINISHED                   acted on: the records
      longer than the orphan grace before listing)                 are gone from the store
    COPY_SEGMENT_FINISHED chunked, its manifest   DAMAGED_SEGMENT  reported only, never
      not listed or its objects' sizes not adding                  acted on: readers get
      up to the stored size of its copy (the same                  KAFKA_STORAGE_ERROR
      grace; ``jobs.planning.chunked_objects``)
    DELETE_SEGMENT_STARTED, older than the grace  RETRY_DELETE     objects, ..._FINISHED
    DELETE_SEGMENT_STARTED, within the grace      (kept: a deletion may be running)
    object of no listed segment, older than the   DELETE_ORPHANS   the objects only (no
      orphan grace (unknown id, DELETE_FINISHED)                   metadata to change)
    object of no listed segment, younger          (kept, counted: wait for the next run)
    object of a partition the metadata never      (kept, counted: unknown_partition_objects;
      mentions (another cluster's, or one that     never deleted here: they are what a
      was lost: restore_topic reads them)          restore from the bucket reads)
    topic manifest, consumer offsets backup       (kept, counted apart: topic_manifest_keys,
      (``remote_object_keys``)                     offsets_backup_keys; never deleted here)
    any other key that is not ours                (kept, counted as foreign)

A lost segment is never rolled back or deleted here: its metadata is the only record that
the data existed, and deleting it would hide the loss (and move no log start offset). The
operator restores the objects, or accepts the loss (see ``jobs.reconcile --help``).

Live objects are those of segments in COPY_SEGMENT_FINISHED and of COPY_SEGMENT_STARTED within
the deadline. Objects of segments rolled back or retried go with their segment's action.

Safety of the orphan rule rests on the order of the inputs: the job lists the objects
**before** it reads the metadata. A copy publishes COPY_SEGMENT_STARTED before its first
object, so every object listed belongs to a segment the later metadata read knows (unless it
is really dead). The orphan grace (default: the copy deadline) guards against clocks and
stores that list late.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from jobs.planning.chunked_objects import chunked_objects_problem, chunked_stored_size
from storage_core.common import TopicIdPartition, Uuid
from storage_core.tiered.metadata.metadata import RemoteLogSegmentMetadata
from storage_core.tiered.metadata.states import RemoteLogSegmentState
from storage_core.tiered.remote_object_keys import (
    InvalidRemoteObjectKeyError,
    RemoteObjectSuffix,
    parse_object_key,
    parse_offsets_backup_key,
    parse_topic_manifest_key,
)
from storage_core.tiered.remote_storage_manager import RemoteObjectInfo

# Default wait before a DELETE_SEGMENT_STARTED is retried (a deletion may be running now).
DELETE_RETRY_GRACE_MS_DEFAULT = 60_000
# At most this many orphan keys per action (S3's DeleteObjects takes 1000 per request).
ORPHAN_KEYS_PER_ACTION_MAX = 1000


class ReconcileActionKind(enum.Enum):
    ROLL_BACK_COPY = "roll_back_copy"
    RETRY_DELETE = "retry_delete"
    DELETE_ORPHANS = "delete_orphans"
    LOST_SEGMENT = "lost_segment"  # reported, never executed
    DAMAGED_SEGMENT = "damaged_segment"  # reported, never executed


# What a reader needs of every COPY_SEGMENT_FINISHED segment.
REQUIRED_SUFFIXES = (
    RemoteObjectSuffix.LOG,
    RemoteObjectSuffix.OFFSET_INDEX,
    RemoteObjectSuffix.TIME_INDEX,
)


@dataclass(frozen=True, slots=True, kw_only=True)
class ReconcileAction:
    """One thing to do. Segment actions carry the segment's metadata as listed; orphan
    actions the keys of one dead segment id (or of one partition's unparseable leftovers).
    ``keys`` and ``size_bytes`` are the listed objects the action removes."""

    kind: ReconcileActionKind
    topic_id_partition: TopicIdPartition
    segment_id: Uuid
    reason: str
    segment: RemoteLogSegmentMetadata | None = None
    keys: tuple[str, ...] = ()
    size_bytes: int = 0

    def __post_init__(self) -> None:
        is_segment_action = self.kind is not ReconcileActionKind.DELETE_ORPHANS
        if is_segment_action != (self.segment is not None):
            raise ValueError(
                f"{self.kind.name} action needs a segment exactly when it is not DELETE_ORPHANS"
            )
        if self.kind is ReconcileActionKind.DELETE_ORPHANS and not self.keys:
            raise ValueError("a DELETE_ORPHANS action needs at least one key")
        if self.size_bytes < 0:
            raise ValueError(f"size_bytes must be >= 0, got {self.size_bytes}")


@dataclass(frozen=True, slots=True, kw_only=True)
class ReconcilePlan:
    """The actions, in order (roll backs, retries, orphans; each by partition and offset),
    plus what was seen and deliberately kept. ``lost`` holds the LOST_SEGMENT reports (by
    partition and offset), which are not actions: nothing is executed for them; ``damaged``
    the DAMAGED_SEGMENT reports likewise."""

    actions: tuple[ReconcileAction, ...]
    lost: tuple[ReconcileAction, ...]
    live_segments: int
    copies_in_progress: int
    deletes_in_progress: int
    young_orphan_objects: int
    foreign_keys: tuple[str, ...]
    unknown_partition_objects: int = 0
    damaged: tuple[ReconcileAction, ...] = ()
    topic_manifest_keys: tuple[str, ...] = ()
    offsets_backup_keys: tuple[str, ...] = ()

    def of_kind(self, kind: ReconcileActionKind) -> list[ReconcileAction]:
        return [action for action in self.actions if action.kind is kind]


def plan_reconcile(
    listing_by_partition: Mapping[TopicIdPartition, Sequence[RemoteLogSegmentMetadata]],
    objects: Iterable[RemoteObjectInfo],
    *,
    now_ms: int,
    copy_deadline_ms: int,
    key_prefix: str = "",
    delete_retry_grace_ms: int = DELETE_RETRY_GRACE_MS_DEFAULT,
    orphan_grace_ms: int | None = None,
    listed_at_ms: int | None = None,
) -> ReconcilePlan:
    """The plan of the module docstring. ``orphan_grace_ms`` defaults to ``copy_deadline_ms``;
    ``listed_at_ms`` (when the object listing began) defaults to ``now_ms``.

    Ages compare ``now_ms`` with a segment's latest event time and an object's last-modified
    time (both ms since the epoch): older means ``now_ms - time > bound`` (exclusive).
    """
    if copy_deadline_ms <= 0:
        raise ValueError(f"copy_deadline_ms must be positive, got {copy_deadline_ms}")
    if delete_retry_grace_ms < 0:
        raise ValueError(f"delete_retry_grace_ms must be >= 0, got {delete_retry_grace_ms}")
    orphan_grace = copy_deadline_ms if orphan_grace_ms is None else orphan_grace_ms
    if orphan_grace < 0:
        raise ValueError(f"orphan_grace_ms must be >= 0, got {orphan_grace}")

    listed_at = now_ms if listed_at_ms is None else listed_at_ms
    objects_by_segment: dict[Uuid, list[RemoteObjectInfo]] = {}
    partition_of_segment: dict[Uuid, TopicIdPartition] = {}
    foreign: list[str] = []
    topic_manifests: list[str] = []
    offsets_backups: list[str] = []
    for info in objects:
        try:
            parsed = parse_object_key(info.key, key_prefix)
        except InvalidRemoteObjectKeyError:
            bucket_manifest_kind(info.key, key_prefix, topic_manifests, offsets_backups, foreign)
            continue
        segment_id = parsed.segment.segment_id
        objects_by_segment.setdefault(segment_id, []).append(info)
        partition_of_segment[segment_id] = parsed.segment.topic_id_partition

    lost: list[ReconcileAction] = []
    damaged: list[ReconcileAction] = []
    roll_backs: list[ReconcileAction] = []
    retries: list[ReconcileAction] = []
    listed_ids: set[Uuid] = set()
    live = in_progress_copies = in_progress_deletes = 0
    for tip in sorted(listing_by_partition, key=_partition_order):
        for metadata in sorted(listing_by_partition[tip], key=_segment_order):
            segment_id = metadata.remote_log_segment_id.id
            listed_ids.add(segment_id)
            age_ms = now_ms - metadata.event_timestamp_ms
            state = metadata.state
            found = objects_by_segment.get(segment_id, [])
            if state is RemoteLogSegmentState.COPY_SEGMENT_FINISHED:
                live += 1
                missing = missing_required_objects(metadata, found, key_prefix)
                # Finished well before the listing began: every object was there to list.
                settled = listed_at - metadata.event_timestamp_ms > orphan_grace
                problem = chunked_objects_problem(
                    chunked_stored_size(metadata.custom_metadata),
                    {parse_object_key(i.key, key_prefix).suffix.value: i.size_bytes for i in found},
                )
                if problem is not None and settled and not missing:
                    damaged.append(
                        _segment_action(
                            ReconcileActionKind.DAMAGED_SEGMENT,
                            metadata,
                            found,
                            f"COPY_SEGMENT_FINISHED but {problem}; restore the objects or"
                            " accept the loss",
                        )
                    )
                if missing and settled:
                    lost.append(
                        _segment_action(
                            ReconcileActionKind.LOST_SEGMENT,
                            metadata,
                            found,
                            f"COPY_SEGMENT_FINISHED but its {', '.join(missing)} object(s) are"
                            " missing from the store: the records of these offsets are lost"
                            " from the remote tier; restore the objects or accept the loss",
                        )
                    )
            elif state is RemoteLogSegmentState.COPY_SEGMENT_STARTED:
                if age_ms > copy_deadline_ms:
                    roll_backs.append(
                        _segment_action(
                            ReconcileActionKind.ROLL_BACK_COPY,
                            metadata,
                            found,
                            f"COPY_SEGMENT_STARTED {age_ms} ms ago, past the copy deadline of"
                            f" {copy_deadline_ms} ms: the copy is dead or late and may never"
                            " commit",
                        )
                    )
                else:
                    in_progress_copies += 1
            elif state is RemoteLogSegmentState.DELETE_SEGMENT_STARTED:
                if age_ms > delete_retry_grace_ms:
                    retries.append(
                        _segment_action(
                            ReconcileActionKind.RETRY_DELETE,
                            metadata,
                            found,
                            f"DELETE_SEGMENT_STARTED {age_ms} ms ago and not finished",
                        )
                    )
                else:
                    in_progress_deletes += 1
            # DELETE_SEGMENT_FINISHED is never listed by a cache; nothing to do for it.

    orphans: list[ReconcileAction] = []
    young = unknown_partition_objects = 0
    for segment_id in sorted(
        (s for s in objects_by_segment if s not in listed_ids),
        key=lambda s: (_partition_order(partition_of_segment[s]), str(s)),
    ):
        infos = sorted(objects_by_segment[segment_id], key=lambda info: info.key)
        tip = partition_of_segment[segment_id]
        if tip not in listing_by_partition:
            # A cluster that lost its metadata (or a new one on the same bucket) sees every
            # object as an orphan: these are the bucket's history, never deleted here.
            unknown_partition_objects += len(infos)
            continue
        old = [info for info in infos if now_ms - info.last_modified_ms > orphan_grace]
        young += len(infos) - len(old)
        for start in range(0, len(old), ORPHAN_KEYS_PER_ACTION_MAX):
            chunk = old[start : start + ORPHAN_KEYS_PER_ACTION_MAX]
            orphans.append(
                ReconcileAction(
                    kind=ReconcileActionKind.DELETE_ORPHANS,
                    topic_id_partition=tip,
                    segment_id=segment_id,
                    reason=(
                        f"no live metadata references segment {segment_id}; objects older"
                        f" than {orphan_grace} ms"
                    ),
                    keys=tuple(info.key for info in chunk),
                    size_bytes=sum(info.size_bytes for info in chunk),
                )
            )
    return ReconcilePlan(
        actions=(*roll_backs, *retries, *orphans),
        lost=tuple(lost),
        damaged=tuple(damaged),
        live_segments=live,
        copies_in_progress=in_progress_copies,
        deletes_in_progress=in_progress_deletes,
        young_orphan_objects=young,
        unknown_partition_objects=unknown_partition_objects,
        foreign_keys=tuple(sorted(foreign)),
        topic_manifest_keys=tuple(sorted(topic_manifests)),
        offsets_backup_keys=tuple(sorted(offsets_backups)),
    )


def bucket_manifest_kind(
    key: str,
    key_prefix: str,
    topic_manifests: list[str],
    offsets_backups: list[str],
    foreign: list[str],
) -> None:
    """Append ``key`` (not a segment object) to the list of its kind."""
    for parse, found in (
        (parse_topic_manifest_key, topic_manifests),
        (parse_offsets_backup_key, offsets_backups),
    ):
        try:
            parse(key, key_prefix)
        except InvalidRemoteObjectKeyError:
            continue
        found.append(key)
        return
    foreign.append(key)


def missing_required_objects(
    metadata: RemoteLogSegmentMetadata, found: Sequence[RemoteObjectInfo], key_prefix: str
) -> list[str]:
    """The suffixes of ``REQUIRED_SUFFIXES`` with no listed object (``[]`` if complete)."""
    present = {parse_object_key(info.key, key_prefix).suffix for info in found}
    return [f".{suffix.value}" for suffix in REQUIRED_SUFFIXES if suffix not in present]


def _segment_action(
    kind: ReconcileActionKind,
    metadata: RemoteLogSegmentMetadata,
    found: Sequence[RemoteObjectInfo],
    reason: str,
) -> ReconcileAction:
    return ReconcileAction(
        kind=kind,
        topic_id_partition=metadata.topic_id_partition,
        segment_id=metadata.remote_log_segment_id.id,
        reason=reason,
        segment=metadata,
        keys=tuple(sorted(info.key for info in found)),
        size_bytes=sum(info.size_bytes for info in found),
    )


def _partition_order(tip: TopicIdPartition) -> tuple[str, int, str]:
    return (tip.topic_partition.topic, tip.topic_partition.partition, str(tip.topic_id))


def _segment_order(metadata: RemoteLogSegmentMetadata) -> tuple[int, int, str]:
    return (metadata.start_offset, metadata.end_offset, str(metadata.remote_log_segment_id.id))
