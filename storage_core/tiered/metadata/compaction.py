"""Keeping ``__remote_log_metadata`` bounded by the live segments: the planning (pure).

The topic is an event log with ``cleanup.policy=delete`` and ``retention.ms=-1``: without
help it keeps every event of every segment and partition ever tiered, ~300 bytes a segment,
long after DELETE_SEGMENT_FINISHED or DELETE_PARTITION_FINISHED. Kafka has no answer yet:
time retention on the topic drops events of live segments, and KIP-1266 (open) gives every
record a key and turns on ``cleanup.policy=compact``, which changes the records and needs a
migration of existing topics. Here,
per metadata partition, its leader moves the partition's log start offset (DeleteRecords,
Kafka's own mechanism) past events that no reader needs, and first re-appends, unchanged, the
events of long-lived segments that would otherwise pin the log start. The topic's records
and ``RemoteLogMetadataSerde`` stay as they are: a reader, ours or Kafka's, reads from the log
start as before and rebuilds the same state. ``topic_based_rlmm.metadata_compactor`` runs it.

Things and their histories. Every event belongs to one *thing*: a segment (by
``RemoteLogSegmentId``; its add and its updates) or a partition deletion (by
``TopicIdPartition``; its ``RemotePartitionDeleteMetadata`` events). A thing is *dead* when
its segment reached DELETE_SEGMENT_FINISHED or its partition's deletion reached
DELETE_PARTITION_FINISHED (segments of such a partition included), else *live*. A *start* of a
thing is an offset of its add (COPY_SEGMENT_STARTED metadata; DELETE_PARTITION_MARKED) from
which its remaining events replay through the state machine without a refusal to the same
final state: the original add, and any re-append of it.

The cut. A reader starting at offset ``C`` sees, for every thing, its events at or after
``C``. ``C`` is *allowed* when, for every thing, either all its events are below ``C`` and the
thing is dead, or its first event at or after ``C`` is a start (its first event ever counts
as one: a reader from the log start sees it today). So a reader from ``C`` never meets an
update of a segment it has not seen added (the quality job would flag it) and never misses a
live thing. The planner takes the largest allowed ``C`` at or below ``cut_limit_offset``
(exclusive bound of the records old enough; see the compactor) and above the log start.

Restatement. A segment in COPY_SEGMENT_FINISHED may live for the topic's whole retention
(in a partition kept forever that shares the metadata partition with busy ones) and pins
every cut below its add. When moving the cut past such segments would free at least twice
the records it costs (``RESTATE`` rule in ``plan_metadata_compaction``), the plan lists, for
each live COPY_SEGMENT_FINISHED segment whose latest start is below the limit, the bytes of
its add and of its COPY_SEGMENT_FINISHED update, ordered by the original update's offset (so
that uploads displacing others do so in the same order). Once appended, those offsets are
starts, and a later round (when they are old enough) cuts up to them. Segments copying or
being deleted, and partitions being deleted, are never restated: they finish within minutes.

What a reader with no snapshot sees (the log from the log start ``L`` to its end):

1. Before a restatement: the history as today.
2. After the re-append ``R``, before the cut: history, then ``R``. Each re-appended add is a
   repeat for a reader that applied the history (``RemoteLogMetadataCache`` ignores a
   segment announced again unchanged; Kafka's cache logs and drops it), each update a repeat
   of the current state (idempotent). ``R`` is appended only for segments that no event
   appended since the plan's read touches (``untouched_since_plan``), and only if nothing was
   appended since that check (a compare-and-append on the leader's log end offset, retried
   with a fresh check): a segment whose deletion began, or finished, after the plan is never
   announced again, which readers (whose caches forget deleted segments, as Kafka's do)
   would take for a new, live segment. A deletion appended after ``R`` applies to the
   re-announced segment as to the original.
3. After the cut ``C``: ``L = C``; each live thing's events from one of its starts, each dead
   thing's events entirely or not at all. Before cutting, ``verify_cut`` replays the records
   from the old log start and from ``C`` and compares the partitions' states
   (``RemoteLogMetadataCache.snapshot_state``, with partitions whose deletion finished and
   leader epochs without a live segment left out); the cut is made only if they are equal,
   so no live segment is missing and no deleted one alive. Events appended after the check
   apply to equal states alike.

A reader already part-way (a broker's consumer, a snapshot) that finds its next offset below
the new log start would skip events: ``ConsumerTask`` then drops the affected caches and
rebuilds them from the log start (marked not ready meanwhile). The compactor avoids it by
cutting only records older than ``remote.log.metadata.compaction.min.lag.ms``, past which
every running broker has applied and snapshotted them (snapshots every 30 s).

What is not kept: the highest copied offset of a leader epoch none of whose segments is live
(every segment of it deleted) is forgotten by a reader from ``C``; the log start offset is past
those offsets, so copying does not redo them, but ListOffsets(-5, latest tiered) may then answer
an earlier epoch's highest offset. If the highest offset of an epoch with live segments came
from a deleted one (a later upload removed first), the planner keeps that deleted segment's
events until the epoch has no live segment (``verify_cut`` would refuse the cut).

Thread-safety: pure functions over immutable inputs.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from storage_core.common import TopicIdPartition
from storage_core.tiered.metadata import serde
from storage_core.tiered.metadata.cache import (
    CacheSnapshotState,
    RemoteLogMetadataCache,
    is_same_segment,
)
from storage_core.tiered.metadata.errors import (
    CorruptRemoteLogMetadataError,
    IllegalRemoteLogStateTransitionError,
    RemoteResourceNotFoundError,
)
from storage_core.tiered.metadata.metadata import (
    RemoteLogMetadata,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemotePartitionDeleteMetadata,
)
from storage_core.tiered.metadata.states import RemoteLogSegmentState, RemotePartitionDeleteState

MIN_RESTATE_GAIN_RECORDS = 64
"""A re-append is worth it only if it lets at least this many more records go."""
MAX_RESTATED_SEGMENTS = 50_000
"""Segments re-appended by one plan at most (100,000 records); the rest in later rounds."""

_FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED
_Thing = RemoteLogSegmentId | TopicIdPartition
TopicEvent = (
    RemoteLogSegmentMetadata | RemoteLogSegmentMetadataUpdate | RemotePartitionDeleteMetadata
)
"""The events readers apply (snapshot entries never belong on the topic)."""
_EVENT_TYPES = (
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemotePartitionDeleteMetadata,
)


@dataclass(frozen=True, slots=True, kw_only=True)
class MetadataEntry:
    """One record of a metadata partition: offset, value bytes, and the event decoded from
    them (``None``: undecodable, or a snapshot entry; readers skip it)."""

    offset: int
    value: bytes
    event: TopicEvent | None

    @staticmethod
    def decode(offset: int, value: bytes) -> MetadataEntry:
        try:
            decoded: RemoteLogMetadata | None = serde.deserialize(value)
        except CorruptRemoteLogMetadataError:
            decoded = None
        event = decoded if isinstance(decoded, _EVENT_TYPES) else None
        return MetadataEntry(offset=offset, value=value, event=event)


@dataclass(frozen=True, slots=True, kw_only=True)
class RestatedSegment:
    """A live segment to re-append: the values of its add and of its COPY_SEGMENT_FINISHED."""

    segment_id: RemoteLogSegmentId
    add: bytes
    finished: bytes

    @property
    def topic_id_partition(self) -> TopicIdPartition:
        return self.segment_id.topic_id_partition


@dataclass(frozen=True, slots=True, kw_only=True)
class CompactionPlan:
    """What to do with one metadata partition.

    ``restate``: segments to re-append, in order (empty: none). ``cut_offset``: the new log start
    offset (exclusive bound of what goes), ``None`` when nothing can go. ``records_freed``:
    records below ``cut_offset``. ``live_things``: live segments and partition deletions."""

    restate: tuple[RestatedSegment, ...] = ()
    cut_offset: int | None = None
    records_freed: int = 0
    live_things: int = 0
    restated_segments: int = 0
    reason: str = ""


@dataclass(slots=True)
class _History:
    offsets: list[int] = field(default_factory=list)
    entries: list[MetadataEntry] = field(default_factory=list)
    final: RemoteLogSegmentState | RemotePartitionDeleteState | None = None
    tip: TopicIdPartition | None = None

    def starts(self) -> set[int]:
        """Indexes of the events from which the history replays cleanly to ``final``."""
        found = {0}
        for index, entry in enumerate(self.entries):
            if (
                index
                and _is_add(entry.event)
                and _replay(self.entries[index:])
                == (
                    True,
                    self.final,
                )
            ):
                found.add(index)
        return found


def _is_add(event: TopicEvent | None) -> bool:
    if isinstance(event, RemoteLogSegmentMetadata):
        return event.state is RemoteLogSegmentState.COPY_SEGMENT_STARTED
    if isinstance(event, RemotePartitionDeleteMetadata):
        return event.state is RemotePartitionDeleteState.DELETE_PARTITION_MARKED
    return False


def _replay(
    entries: Sequence[MetadataEntry],
) -> tuple[bool, RemoteLogSegmentState | RemotePartitionDeleteState | None]:
    """(no event refused, final state) of one thing's events, with the cache's rules."""
    clean = True
    segment_state: RemoteLogSegmentState | None = None
    first_add: RemoteLogSegmentMetadata | None = None
    delete_state: RemotePartitionDeleteState | None = None
    for entry in entries:
        event = entry.event
        if isinstance(event, RemoteLogSegmentMetadata):
            if (
                first_add is not None
                and segment_state is not RemoteLogSegmentState.COPY_SEGMENT_STARTED
                and segment_state is not None
                and is_same_segment(first_add, event)
            ):
                continue  # announced again: a repeat
            if RemoteLogSegmentState.is_valid_transition(segment_state, event.state):
                segment_state = event.state
                first_add = first_add or event
            else:
                clean = False
        elif isinstance(event, RemoteLogSegmentMetadataUpdate):
            if segment_state is not None and RemoteLogSegmentState.is_valid_transition(
                segment_state, event.state
            ):
                segment_state = event.state
            else:
                clean = False
        elif isinstance(event, RemotePartitionDeleteMetadata):
            if RemotePartitionDeleteState.is_valid_transition(delete_state, event.state):
                delete_state = event.state
            else:
                clean = False
    return clean, (delete_state if segment_state is None else segment_state)


def _histories(entries: Iterable[MetadataEntry]) -> dict[_Thing, _History]:
    histories: dict[_Thing, _History] = {}
    for entry in entries:
        event = entry.event
        if event is None:
            continue
        thing: _Thing
        if isinstance(event, RemotePartitionDeleteMetadata):
            thing = event.topic_id_partition
        else:
            thing = event.remote_log_segment_id
        history = histories.get(thing)
        if history is None:
            history = histories[thing] = _History(tip=event.topic_id_partition)
        history.offsets.append(entry.offset)
        history.entries.append(entry)
    for history in histories.values():
        history.final = _replay(history.entries)[1]
    return histories


def _dead_things(histories: dict[_Thing, _History]) -> set[_Thing]:
    """Segments DELETE_SEGMENT_FINISHED, partition deletions DELETE_PARTITION_FINISHED, and
    every segment of such a partition."""
    finished_partitions = {
        thing
        for thing, history in histories.items()
        if isinstance(thing, TopicIdPartition)
        and history.final is RemotePartitionDeleteState.DELETE_PARTITION_FINISHED
    }
    dead = {
        thing
        for thing, history in histories.items()
        if history.final is RemoteLogSegmentState.DELETE_SEGMENT_FINISHED
        or history.tip in finished_partitions
    }
    return dead - _defining_highest_offsets(histories, dead)


def _copied(history: _History) -> RemoteLogSegmentMetadata | None:
    """The segment's metadata if it ever reached COPY_SEGMENT_FINISHED."""
    add = history.entries[0].event
    if not isinstance(add, RemoteLogSegmentMetadata):
        return None
    for entry in history.entries:
        event = entry.event
        if isinstance(event, RemoteLogSegmentMetadataUpdate) and event.state is _FINISHED:
            return add
    return None


def _defining_highest_offsets(histories: dict[_Thing, _History], dead: set[_Thing]) -> set[_Thing]:
    """Deleted segments whose end of a leader epoch is beyond every live segment's end of it,
    in an epoch that still has a live segment: the highest copied offset of that epoch
    (which never decreases) comes from them, and a reader without their events would answer
    lower. They stay until that epoch has no live segment."""
    live_ends: dict[tuple[TopicIdPartition, int], int] = {}
    dead_copied: list[tuple[_Thing, RemoteLogSegmentMetadata]] = []
    for thing, history in histories.items():
        metadata = _copied(history)
        if metadata is None:
            continue
        if thing in dead:
            dead_copied.append((thing, metadata))
            continue
        for epoch in metadata.segment_leader_epochs:
            key = (metadata.topic_id_partition, epoch)
            live_ends[key] = max(live_ends.get(key, -1), metadata.epoch_end_offset(epoch))
    return {
        thing
        for thing, metadata in dead_copied
        if any(
            (metadata.topic_id_partition, epoch) in live_ends
            and metadata.epoch_end_offset(epoch) > live_ends[(metadata.topic_id_partition, epoch)]
            for epoch in metadata.segment_leader_epochs
        )
    }


def _largest_allowed_cut(
    histories: dict[_Thing, _History],
    dead: set[_Thing],
    *,
    log_start_offset: int,
    cut_limit_offset: int,
) -> int | None:
    """The largest allowed cut in (log_start_offset, cut_limit_offset], or ``None``."""
    forbidden: list[tuple[int, int]] = []  # (a, b]: cuts a < C <= b are not allowed
    for thing, history in histories.items():
        offsets = history.offsets
        starts = history.starts()
        for index in range(1, len(offsets)):
            if index not in starts:
                forbidden.append((offsets[index - 1], offsets[index]))
        if thing not in dead:
            forbidden.append((offsets[-1], cut_limit_offset + 1))
    forbidden.sort()
    merged: list[tuple[int, int]] = []  # disjoint, not touching, ascending
    for low, high in forbidden:
        if merged and low <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], high))
        else:
            merged.append((low, high))
    cut = cut_limit_offset
    for low, high in reversed(merged):
        if low < cut <= high:
            cut = low  # not inside another interval: they do not touch
            break
        if high < cut:
            break
    return cut if cut > log_start_offset else None


def _records_below(entries: Sequence[MetadataEntry], offset: int | None) -> int:
    return 0 if offset is None else sum(1 for e in entries if e.offset < offset)


def plan_metadata_compaction(
    entries: Sequence[MetadataEntry],
    *,
    log_start_offset: int,
    cut_limit_offset: int,
    min_restate_gain_records: int = MIN_RESTATE_GAIN_RECORDS,
) -> CompactionPlan:
    """The plan for one metadata partition's records ``entries`` (every record from
    ``log_start_offset`` on, in offset order); only records below ``cut_limit_offset``
    (exclusive) may go. See the module doc.

    ``RESTATE`` rule: the live COPY_SEGMENT_FINISHED segments whose latest start is below the
    limit are re-appended when the cut that would then be allowed (those segments counted as
    gone) frees at least ``min_restate_gain_records`` and twice as many records as are
    re-appended more than the cut without them: every re-append at least halves what it
    lets go, so the topic stays within a few records per live segment.
    """
    histories = _histories(entries)
    dead = _dead_things(histories)
    live = len(histories) - len(dead)
    cut = _largest_allowed_cut(
        histories, dead, log_start_offset=log_start_offset, cut_limit_offset=cut_limit_offset
    )
    freed = _records_below(entries, cut)
    plan = CompactionPlan(cut_offset=cut, records_freed=freed, live_things=live, reason="cut")
    restatable: dict[_Thing, _History] = {}
    for thing, history in histories.items():
        if thing in dead or history.final is not _FINISHED:
            continue
        if history.offsets[max(history.starts())] < cut_limit_offset:
            restatable[thing] = history
            if len(restatable) == MAX_RESTATED_SEGMENTS:
                break
    if not restatable:
        return plan
    cut_after = _largest_allowed_cut(
        histories,
        dead | restatable.keys(),
        log_start_offset=log_start_offset,
        cut_limit_offset=cut_limit_offset,
    )
    gain = _records_below(entries, cut_after) - freed
    cost = 2 * len(restatable)
    if gain < max(2 * cost, min_restate_gain_records):
        return plan
    restate: list[tuple[int, RestatedSegment]] = []
    for thing, history in restatable.items():
        add = finished = None
        for entry in history.entries[max(history.starts()) :]:
            if _is_add(entry.event) and add is None:
                add = entry
            elif isinstance(entry.event, RemoteLogSegmentMetadataUpdate) and (
                entry.event.state is _FINISHED
            ):
                finished = entry
        if add is not None and finished is not None and isinstance(thing, RemoteLogSegmentId):
            segment = RestatedSegment(segment_id=thing, add=add.value, finished=finished.value)
            restate.append((finished.offset, segment))
    restate.sort(key=lambda item: item[0])
    return CompactionPlan(
        restate=tuple(segment for _offset, segment in restate),
        cut_offset=cut,
        records_freed=freed,
        live_things=live,
        restated_segments=len(restate),
        reason=f"re-appending {len(restate)} segments lets a later cut free {gain} more records",
    )


def restatement_refused(
    entries: Sequence[MetadataEntry],
    restate: Sequence[RestatedSegment],
    *,
    log_start_offset: int,
) -> str | None:
    """``None`` if re-appending ``restate`` after ``entries`` lets a cut go below the re-append
    with readers from it rebuilding the same states; else why not, and the re-append must not
    be made (each round would append it again, the cut refused every time). A segment that a
    later, overlapping upload of its epoch superseded is such a case: for readers of the
    history its re-announced COPY_SEGMENT_FINISHED maps it again (the epoch's highest offset
    has moved on), for readers from the re-append the later upload supersedes it again."""
    if not restate:
        return None
    next_offset = entries[-1].offset + 1 if entries else log_start_offset
    simulated = list(entries)
    values = [value for segment in restate for value in (segment.add, segment.finished)]
    simulated += [MetadataEntry.decode(next_offset + i, v) for i, v in enumerate(values)]
    plan = plan_metadata_compaction(
        simulated, log_start_offset=log_start_offset, cut_limit_offset=next_offset
    )
    if plan.cut_offset is None:
        return "no cut would be allowed below the re-appended events"
    return verify_cut(simulated, plan.cut_offset)


def untouched_since_plan(
    restate: Iterable[RestatedSegment], appended: Iterable[MetadataEntry]
) -> list[RestatedSegment]:
    """The segments of ``restate`` that no event of ``appended`` (the records appended
    since the plan's read) touches: no event of the segment itself, and no deletion of its
    partition. A touched segment may be deleted by now, and re-announcing it would make it
    alive again for readers, which forget deleted segments."""
    touched_segments: set[RemoteLogSegmentId] = set()
    deleted_partitions: set[TopicIdPartition] = set()
    for entry in appended:
        event = entry.event
        if isinstance(event, RemotePartitionDeleteMetadata):
            deleted_partitions.add(event.topic_id_partition)
        elif event is not None:
            touched_segments.add(event.remote_log_segment_id)
    return [
        segment
        for segment in restate
        if segment.segment_id not in touched_segments
        and segment.topic_id_partition not in deleted_partitions
    ]


def replay_states(
    entries: Iterable[MetadataEntry], *, from_offset: int = 0
) -> dict[TopicIdPartition, CacheSnapshotState]:
    """Each partition's state as a reader applying ``entries`` from ``from_offset`` on
    builds it (refused events skipped, as readers do), normalized for comparison: partitions
    whose deletion finished and partitions left empty are absent, and only leader epochs
    holding a live segment are kept."""
    caches: dict[TopicIdPartition, RemoteLogMetadataCache] = {}
    for entry in entries:
        if entry.offset < from_offset or entry.event is None:
            continue
        tip = entry.event.topic_id_partition
        cache = caches.get(tip)
        if cache is None:
            cache = caches[tip] = RemoteLogMetadataCache(tip)
        try:
            cache.handle(entry.event)
        except (IllegalRemoteLogStateTransitionError, RemoteResourceNotFoundError):
            continue
    states: dict[TopicIdPartition, CacheSnapshotState] = {}
    for tip, cache in caches.items():
        state = cache.snapshot_state()
        deletion = state.partition_delete_metadata
        if (
            deletion is not None
            and deletion.state is RemotePartitionDeleteState.DELETE_PARTITION_FINISHED
        ):
            continue
        live_epochs = {e for s in state.segments for e in s.segment_leader_epochs}
        epochs = [e for e in state.epochs if e.leader_epoch in live_epochs]
        if not state.segments and deletion is None:
            continue
        states[tip] = CacheSnapshotState(
            segments=state.segments, epochs=epochs, partition_delete_metadata=deletion
        )
    return states


def verify_cut(entries: Sequence[MetadataEntry], cut_offset: int) -> str | None:
    """``None`` if readers from ``cut_offset`` build the same states as readers from the
    first of ``entries``; else what differs (the cut must not be made)."""
    full = replay_states(entries)
    cut = replay_states(entries, from_offset=cut_offset)
    if full == cut:
        return None
    differing = sorted(
        str(tip) for tip in full.keys() | cut.keys() if full.get(tip) != cut.get(tip)
    )
    return (
        f"a reader from offset {cut_offset} would rebuild a different state for"
        f" {len(differing)} partitions ({', '.join(differing[:5])})"
    )
