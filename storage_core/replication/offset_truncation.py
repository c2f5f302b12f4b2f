"""Where a follower truncates its log, from the leader's epoch answer (KIP-101, KIP-279, KIP-320).

Kafka's ``AbstractFetcherThread.getOffsetTruncationState``. The follower sends its latest
leader epoch (OffsetForLeaderEpoch) or its last fetched epoch (Fetch); the leader answers
``(epoch, end offset)``: the largest epoch it knows at or below the one asked, and where that
epoch ends in its log (its log end offset for its current epoch). The follower keeps what
both logs agree on:

* the leader knows no such epoch (end offset UNDEFINED): the high watermark, the only offset
  known to be committed (Kafka's pre-KIP-101 rule, kept for this case only);
* no epoch in the answer (epoch UNDEFINED, an old leader): the leader's end offset, or the
  log end offset if lower;
* the follower has the leader's epoch: ``min(leader's end, follower's end of that epoch, LEO)``;
  done;
* the follower does not have the leader's epoch: truncate to where the follower's largest
  epoch below it ends and ask again with the new latest epoch (KIP-279: one more round per
  epoch the logs disagree on);
* the follower has no epoch at or below the answer: the leader's end offset (or the LEO).

Pure: no I/O, no locks; ``follower_epochs`` is a copy of the follower's leader-epoch cache.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from storage_core.log.leader_epoch_cache import (
    UNDEFINED_EPOCH,
    UNDEFINED_EPOCH_OFFSET,
    EpochEntry,
    end_offset_for_entries,
)


@dataclass(frozen=True, slots=True, kw_only=True)
class EpochEndOffset:
    """The leader's answer: ``epoch`` ends at ``end_offset`` (exclusive) in its log."""

    epoch: int
    end_offset: int

    @property
    def is_undefined(self) -> bool:
        return self.epoch == UNDEFINED_EPOCH or self.end_offset == UNDEFINED_EPOCH_OFFSET


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetTruncationState:
    """Truncate the log to ``offset`` (exclusive end); ``truncation_completed`` is False while
    another OffsetForLeaderEpoch round is needed."""

    offset: int
    truncation_completed: bool

    def __post_init__(self) -> None:
        if self.offset < 0:
            raise ValueError(f"truncation offset must be >= 0, got {self.offset}")


def end_offset_for_epoch(
    follower_epochs: Sequence[EpochEntry], epoch: int, log_end_offset: int
) -> EpochEndOffset | None:
    """The follower's own ``(epoch, end offset)`` for ``epoch`` (Kafka's
    ``UnifiedLog.endOffsetForEpoch``): the largest epoch it has at or below ``epoch``; None
    when it has nothing to say (no epochs, or all above)."""
    found_epoch, found_offset = end_offset_for_entries(follower_epochs, epoch, log_end_offset)
    if found_offset == UNDEFINED_EPOCH_OFFSET:
        return None
    return EpochEndOffset(epoch=found_epoch, end_offset=found_offset)


def offset_truncation_state(
    leader: EpochEndOffset,
    *,
    follower_epochs: Sequence[EpochEntry],
    log_end_offset: int,
    high_watermark: int,
) -> OffsetTruncationState:
    """Kafka's ``getOffsetTruncationState`` (rules in the module docstring)."""
    if leader.end_offset == UNDEFINED_EPOCH_OFFSET:
        return OffsetTruncationState(
            offset=min(high_watermark, log_end_offset), truncation_completed=True
        )
    if leader.epoch == UNDEFINED_EPOCH:
        return OffsetTruncationState(
            offset=min(leader.end_offset, log_end_offset), truncation_completed=True
        )
    follower = end_offset_for_epoch(follower_epochs, leader.epoch, log_end_offset)
    if follower is None:
        return OffsetTruncationState(
            offset=min(leader.end_offset, log_end_offset), truncation_completed=True
        )
    if follower.epoch != leader.epoch:
        # The leader's epoch is unknown here: keep what the follower's largest earlier epoch
        # covers, then ask again about that epoch.
        return OffsetTruncationState(
            offset=min(follower.end_offset, log_end_offset), truncation_completed=False
        )
    return OffsetTruncationState(
        offset=min(follower.end_offset, leader.end_offset, log_end_offset),
        truncation_completed=True,
    )
