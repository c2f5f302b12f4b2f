"""Which of a partition's segments in the bucket a restore brings back (pure: no I/O).

The bucket can hold more than the partition's log: copies of the same local segment made
twice (a copy retried after its metadata was lost), segments of a deposed leader whose log
diverged from the one that won (KIP-405 keeps them until expiry removes them), segments whose
manifest fails its checks. The restored log must be the partition's log as its last leader
had it, so the plan follows one leader-epoch lineage, as Kafka's remote reads do:

1. The lineage is that of the segment with the highest last epoch (the highest end offset
   among those): its manifest holds the partition's leader epochs up to its end ``E``.
2. Segments within that lineage (Kafka's ``isRemoteSegmentWithinLeaderEpochs``: each of their
   epochs is in the lineage, starts where the lineage says, and ends no later) are kept;
   others are left out as off the lineage.
3. From ``E`` down, the chain takes at each step the segment ending right below the chain's
   start (the one reaching lowest when several do); when none ends there, one that overlaps
   the chain's start, as Kafka's remote log does after a leader change (the metadata cache
   serves each offset from one of them). Segments whose offsets the chain already holds are
   left out.
4. When no segment reaches below the chain's start but older ones exist, the offsets between
   are missing: the partition is stopped with the gap named, unless gaps are allowed, in which
   case the chain above the gap is restored (a log is one range of offsets, and the newest
   history is what consumers and producers continue from).
5. A segment failing its checks (a manifest of a newer format version, objects missing or of
   the wrong size, checksums that disagree) was copied whole (its manifest is written last),
   so its records were part of the log: when it starts outside the chain's offsets (below its
   start or above its end: the newest copy, say), restoring without it would silently lose
   them, and the partition is stopped with the segment and its problems named, unless gaps
   are allowed. One starting within the chain's offsets is another copy of what the chain
   holds and is only left out. Segments without a manifest (copies cut short, plain copies
   from before manifests) are only left out: the bucket cannot say what they hold.

The restored partition's log starts at the chain's first offset and its leader epochs are the
lineage's entries from there (Kafka's ``truncateFromStart``); producers continue at ``E + 1``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from storage_core.common import TopicIdPartition
from storage_core.log.leader_epoch_cache import EpochEntry
from storage_core.tiered.metadata import RemoteLogSegmentMetadata
from storage_core.tiered.recovery.bucket_inventory import BucketSegment, PartitionInBucket
from storage_core.tiered.remote_storage_manager import RemoteSegmentRef


@dataclass(frozen=True, slots=True)
class OffsetGap:
    """Offsets ``first`` .. ``last`` (inclusive) that no segment in the bucket holds."""

    first: int
    last: int

    def __str__(self) -> str:
        return f"offsets {self.first}..{self.last}"


@dataclass(frozen=True, slots=True, kw_only=True)
class LeftOut:
    ref: RemoteSegmentRef
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionRestorePlan:
    source: TopicIdPartition
    segments: tuple[BucketSegment, ...]  # in offset order
    leader_epochs: tuple[EpochEntry, ...]  # from the restored log start on
    left_out: tuple[LeftOut, ...] = ()
    gap: OffsetGap | None = None
    stopped: str | None = None  # why nothing of this partition is restored

    @property
    def log_start_offset(self) -> int:
        return self.segments[0].metadata.start_offset if self.segments else 0

    @property
    def end_offset(self) -> int:
        """The last restored offset (inclusive); -1 when nothing is restored."""
        return self.segments[-1].metadata.end_offset if self.segments else -1

    @property
    def next_offset(self) -> int:
        """Where the restored partition's local log starts and producers continue."""
        return self.end_offset + 1 if self.segments else 0

    @property
    def stored_bytes(self) -> int:
        return sum(segment.stored_bytes for segment in self.segments)


def plan_partition(partition: PartitionInBucket, *, allow_gaps: bool) -> PartitionRestorePlan:
    left_out = [
        LeftOut(ref=ref, reason="no manifest (plain format, or a deletion cut short)")
        for ref in partition.without_manifest
    ]
    left_out += [
        LeftOut(ref=segment.ref, reason="; ".join(segment.problems))
        for segment in partition.segments
        if segment.problems
    ]
    readable = partition.readable
    source = partition.topic_id_partition
    damaged = [segment for segment in partition.segments if segment.problems]
    if not readable:
        return PartitionRestorePlan(
            source=source,
            segments=(),
            leader_epochs=(),
            left_out=tuple(left_out),
            stopped=None if not damaged or allow_gaps else _damaged_stop(damaged, None),
        )
    tip = max(readable, key=lambda s: (max(s.metadata.segment_leader_epochs), _end(s)))
    lineage, end = tip.leader_epochs, _end(tip)
    within = []
    for segment in readable:
        if is_within_lineage(segment.metadata, lineage, end):
            within.append(segment)
        else:
            left_out.append(
                LeftOut(
                    ref=segment.ref,
                    reason=f"off the leader-epoch lineage that ends at offset {end} in epoch"
                    f" {lineage[-1].epoch} (a deposed leader's copy)",
                )
            )
    chain, gap = _chain(tip, within)
    chosen = {segment.ref for segment in chain}
    for segment in within:
        if segment.ref not in chosen:
            left_out.append(LeftOut(ref=segment.ref, reason=_why_not_chained(segment, chain, gap)))
    left = tuple(sorted(left_out, key=lambda item: (item.ref.start_offset, str(item.ref))))
    if gap is not None and not allow_gaps:
        return PartitionRestorePlan(
            source=source,
            segments=(),
            leader_epochs=(),
            left_out=left,
            gap=gap,
            stopped=f"{gap} are missing from the bucket (segments hold offsets below and"
            f" {chain[0].metadata.start_offset}..{end} above them): allow gaps to restore"
            f" {chain[0].metadata.start_offset}..{end} only",
        )
    start = chain[0].metadata.start_offset
    lost = [s for s in damaged if not start <= s.ref.start_offset <= end]
    if lost and not allow_gaps:
        return PartitionRestorePlan(
            source=source,
            segments=(),
            leader_epochs=(),
            left_out=left,
            gap=gap,
            stopped=_damaged_stop(lost, (start, end)),
        )
    return PartitionRestorePlan(
        source=source,
        segments=tuple(chain),
        leader_epochs=epochs_from(lineage, start),
        left_out=left,
        gap=gap,
    )


def _damaged_stop(lost: Sequence[BucketSegment], restorable: tuple[int, int] | None) -> str:
    """Why a partition stops: segments whose manifests were written (their copies finished)
    fail their checks, and no segment restored holds their offsets."""
    named = "; ".join(
        f"segment {s.ref.segment_id} from offset {s.ref.start_offset}: {'; '.join(s.problems)}"
        for s in sorted(lost, key=lambda s: s.ref.start_offset)
    )
    then = (
        "nothing else is readable"
        if restorable is None
        else f"allow gaps to restore {restorable[0]}..{restorable[1]} only"
    )
    return (
        f"{len(lost)} segment(s) outside the offsets the readable segments hold fail their"
        f" checks ({named}); restoring without them would lose their records: repair them"
        f" in the bucket, or {then}"
    )


def plan_partitions(
    partitions: Mapping[TopicIdPartition, PartitionInBucket], *, allow_gaps: bool
) -> dict[TopicIdPartition, PartitionRestorePlan]:
    return {
        tip: plan_partition(partition, allow_gaps=allow_gaps)
        for tip, partition in sorted(partitions.items(), key=lambda item: str(item[0]))
    }


def is_within_lineage(
    metadata: RemoteLogSegmentMetadata, lineage: Sequence[EpochEntry], end_offset: int
) -> bool:
    """Kafka's ``isRemoteSegmentWithinLeaderEpochs`` against a lineage ending at
    ``end_offset``: every epoch of the segment is in the lineage, starts where the lineage
    says (the first may have started earlier, in an older segment), and ends no later."""
    if metadata.end_offset > end_offset:
        return False
    starts = {entry.epoch: entry.start_offset for entry in lineage}
    ends = {
        entry.epoch: (lineage[i + 1].start_offset - 1 if i + 1 < len(lineage) else end_offset)
        for i, entry in enumerate(lineage)
    }
    epochs = sorted(metadata.segment_leader_epochs.items())
    for i, (epoch, start) in enumerate(epochs):
        if epoch not in starts:
            return False
        if (starts[epoch] > start) if i == 0 else (starts[epoch] != start):
            return False
        last_in_segment = epochs[i + 1][1] - 1 if i + 1 < len(epochs) else metadata.end_offset
        if last_in_segment > ends[epoch]:
            return False
    return True


def epochs_from(lineage: Sequence[EpochEntry], start_offset: int) -> tuple[EpochEntry, ...]:
    """The lineage's entries for a log starting at ``start_offset`` (Kafka's
    ``truncateFromStart``: entries wholly below it go, the one holding it starts there)."""
    kept = [
        entry
        for i, entry in enumerate(lineage)
        if i + 1 == len(lineage) or lineage[i + 1].start_offset > start_offset
    ]
    if kept and kept[0].start_offset < start_offset:
        kept[0] = EpochEntry(kept[0].epoch, start_offset)
    return tuple(kept)


def _end(segment: BucketSegment) -> int:
    return segment.metadata.end_offset


def _start(segment: BucketSegment) -> int:
    return segment.metadata.start_offset


def _chain(
    tip: BucketSegment, within: Sequence[BucketSegment]
) -> tuple[list[BucketSegment], OffsetGap | None]:
    chain = [tip]
    while True:
        start = _start(chain[0])
        if start == 0:
            return chain, None
        adjacent = [s for s in within if _end(s) == start - 1]
        overlapping = [s for s in within if _start(s) < start <= _end(s)]
        candidates = adjacent or overlapping
        if not candidates:
            below = [_end(s) for s in within if _end(s) < start - 1]
            gap = OffsetGap(max(below) + 1, start - 1) if below else None
            return chain, gap
        chain.insert(0, min(candidates, key=lambda s: (_start(s), str(s.ref.segment_id))))


def _why_not_chained(
    segment: BucketSegment, chain: Sequence[BucketSegment], gap: OffsetGap | None
) -> str:
    if gap is not None and _end(segment) < gap.first:
        return f"below the gap at {gap}"
    twins = [
        c
        for c in chain
        if (_start(c), _end(c)) == (_start(segment), _end(segment))
        and c.metadata.segment_leader_epochs == segment.metadata.segment_leader_epochs
    ]
    if twins:
        return f"another copy of the same offsets as segment {twins[0].ref.segment_id}"
    return "its offsets are held by the segments restored"
