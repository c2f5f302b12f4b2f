"""Leader-epoch lineage decisions of the remote tier, as pure functions (Kafka's RLM rules).

The lineage of a partition is its ``leader-epoch-checkpoint``: entries ``(epoch, start
offset)`` with both strictly increasing, epoch ``e`` covering ``[start(e), start(next))``
(the last one up to the log end offset). A remote segment carries its own entries (its
``segment_leader_epochs``) for the epochs with records inside it.

- ``epoch_entries_in_range``: the entries of one segment (Kafka's ``epochEntriesInRange``).
- ``leader_epoch_checkpoint_bytes``: entries as a ``leader-epoch-checkpoint`` file.
- ``end_offset_for``: Kafka's ``LeaderEpochFileCache.endOffsetFor``.
- ``find_highest_remote_offset``: Kafka's ``RemoteLogManager.findHighestRemoteOffset``.
- ``check_remote_segment_lineage``: Kafka's ``isRemoteSegmentWithinLeaderEpochs``, with the
  "false" answer split into what a read-only snapshot can and cannot prove (below).
"""

from __future__ import annotations

import bisect
import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from storage_core.log.checkpoints import CHECKPOINT_VERSION
from storage_core.log.leader_epoch_cache import EpochEntry

NO_PARTITION_LEADER_EPOCH = -1


@dataclass(frozen=True, slots=True)
class OffsetAndEpoch:
    """An offset (inclusive) and the leader epoch it was written in; ``(-1, -1)`` for none."""

    offset: int
    leader_epoch: int


NO_REMOTE_OFFSET = OffsetAndEpoch(-1, NO_PARTITION_LEADER_EPOCH)


def epoch_entries_in_range(
    entries: Sequence[EpochEntry], start_offset: int, end_offset: int
) -> list[EpochEntry]:
    """The entries covering ``[start_offset, end_offset)`` (end exclusive), the first one
    moved up to ``start_offset`` (Kafka's ``epochEntriesInRange``)."""
    starts = [entry.start_offset for entry in entries]
    first = bisect.bisect_right(starts, start_offset)
    out = list(entries[first:])
    if first > 0:
        out.insert(0, EpochEntry(entries[first - 1].epoch, start_offset))
    return [entry for entry in out if entry.start_offset < end_offset]


def leader_epoch_checkpoint_bytes(entries: Sequence[EpochEntry]) -> bytes:
    """``entries`` in the ``leader-epoch-checkpoint`` format (``0\\n<N>\\n<epoch> <offset>``)."""
    lines = [str(CHECKPOINT_VERSION), str(len(entries))]
    lines.extend(f"{entry.epoch} {entry.start_offset}" for entry in entries)
    return "".join(f"{line}\n" for line in lines).encode("ascii")


def end_offset_for(
    entries: Sequence[EpochEntry], requested_epoch: int, log_end_offset: int
) -> tuple[int, int]:
    """``(epoch, end offset)`` of ``requested_epoch`` (Kafka's ``endOffsetFor``): the log end
    offset for the latest epoch, else the start of the next known epoch (exclusive end),
    with the largest known epoch <= the requested one; ``(-1, -1)`` when none is above."""
    if requested_epoch == NO_PARTITION_LEADER_EPOCH:
        return NO_PARTITION_LEADER_EPOCH, -1
    if entries and entries[-1].epoch == requested_epoch:
        return requested_epoch, log_end_offset
    epochs = [entry.epoch for entry in entries]
    higher = bisect.bisect_right(epochs, requested_epoch)
    if higher == len(entries):
        return NO_PARTITION_LEADER_EPOCH, -1
    if higher == 0:
        return requested_epoch, entries[0].start_offset
    return entries[higher - 1].epoch, entries[higher].start_offset


def find_highest_remote_offset(
    entries: Sequence[EpochEntry],
    log_end_offset: int,
    highest_offset_for_epoch: Callable[[int], int | None],
) -> OffsetAndEpoch:
    """The highest offset copied in this lineage (Kafka's ``findHighestRemoteOffset``).

    Walks the epochs newest to oldest and stops at the first one with a copied offset; that
    offset is capped below the epoch's end in this lineage (a previous leader may have
    copied more of the epoch than this lineage kept). ``NO_REMOTE_OFFSET`` if none.
    """
    for entry in reversed(entries):
        highest = highest_offset_for_epoch(entry.epoch)
        if highest is None:
            continue
        epoch, end_offset = end_offset_for(entries, entry.epoch, log_end_offset)
        if end_offset <= highest:
            return OffsetAndEpoch(end_offset - 1, epoch)
        return OffsetAndEpoch(highest, entry.epoch)
    return NO_REMOTE_OFFSET


def filtered_leader_epoch_map(epochs: Mapping[int, int]) -> dict[int, int]:
    """``epochs`` without the epochs that hold no record (same start offset as the next one;
    Kafka's ``buildFilteredLeaderEpochMap``), in epoch order."""
    ordered = sorted(epochs.items())
    return {
        epoch: start
        for i, (epoch, start) in enumerate(ordered)
        if i + 1 == len(ordered) or ordered[i + 1][1] != start
    }


class LineageCheck(enum.Enum):
    """Where a remote segment stands against a lineage read from a snapshot of the log.

    Kafka's ``isRemoteSegmentWithinLeaderEpochs`` answers true (``ON_LINEAGE``) or false;
    false is split here so that a job acting on a snapshot deletes only what it can prove:

    - ``OFF_LINEAGE``: conflicts with the lineage inside the range the snapshot knows (an
      epoch the lineage skipped, or an epoch's offsets past where the lineage ended it):
      written by a leader whose records were truncated away (unclean election).
    - ``BEFORE_LINEAGE``: all its epochs end before the lineage's first epoch (the lineage
      was truncated by the log start offset).
    - ``BEYOND_VIEW``: reaches past what the snapshot knows (an epoch above its latest one,
      or offsets at or above its log end offset); it may be on the current lineage.
    """

    ON_LINEAGE = "on the leader-epoch lineage"
    OFF_LINEAGE = "off the leader-epoch lineage"
    BEFORE_LINEAGE = "before the first epoch of the lineage"
    BEYOND_VIEW = "beyond the known lineage"


def check_remote_segment_lineage(
    segment_leader_epochs: Mapping[int, int],
    segment_end_offset: int,
    *,
    leader_epochs: Mapping[int, int],
    log_end_offset: int,
) -> LineageCheck:
    """Kafka's ``isRemoteSegmentWithinLeaderEpochs`` (see ``LineageCheck``).

    ``leader_epochs`` is the lineage as ``epoch -> start offset`` (already filtered of empty
    epochs); ``segment_end_offset`` is inclusive, ``log_end_offset`` exclusive.
    """
    if not leader_epochs:
        return LineageCheck.BEYOND_VIEW
    lineage = sorted(leader_epochs.items())
    lineage_epochs = [epoch for epoch, _ in lineage]
    segment = filtered_leader_epoch_map(segment_leader_epochs)
    segment_epochs = list(segment)
    segment_last_epoch = segment_epochs[-1]
    if segment_last_epoch < lineage_epochs[0]:
        return LineageCheck.BEFORE_LINEAGE
    if segment_last_epoch > lineage_epochs[-1]:
        return LineageCheck.BEYOND_VIEW
    # Overlapping uploads: a segment may start in an epoch the lineage already dropped by
    # its log start offset; the check starts at its first epoch still in the lineage.
    segment_first_epoch = segment_epochs[bisect.bisect_left(segment_epochs, lineage_epochs[0])]
    for i, epoch in enumerate(segment_epochs):
        if epoch < segment_first_epoch:
            continue
        if epoch not in leader_epochs:
            return LineageCheck.OFF_LINEAGE
        lineage_index = lineage_epochs.index(epoch)
        if (
            epoch == segment_first_epoch
            and lineage_index > 0
            and segment[epoch] < leader_epochs[epoch]
        ):
            return LineageCheck.OFF_LINEAGE
        lineage_next = lineage[lineage_index + 1] if lineage_index + 1 < len(lineage) else None
        if epoch == segment_last_epoch:
            if lineage_next is not None and segment_end_offset > lineage_next[1] - 1:
                return LineageCheck.OFF_LINEAGE
        else:
            next_epoch = segment_epochs[i + 1]
            if lineage_next != (next_epoch, segment[next_epoch]):
                return LineageCheck.OFF_LINEAGE
    if segment_end_offset >= log_end_offset:
        return LineageCheck.BEYOND_VIEW
    return LineageCheck.ON_LINEAGE
