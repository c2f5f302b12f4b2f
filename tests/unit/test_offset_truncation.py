"""Truncation planning of a follower (KIP-101, KIP-279), with the cases of the HW / leader-epoch
article (seed 003): high-watermark truncation loses a committed record or leaves the replicas
diverged; the epoch exchange keeps the one and repairs the other.

A replica here is a list of record epochs (offset = index) and a high watermark; its epoch
cache is derived from the records as the log derives it from the batches. The leader answers
as ``OffsetForLeaderEpoch`` does (``end_offset_for_entries`` over its own cache).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from storage_core.log.leader_epoch_cache import (
    UNDEFINED_EPOCH,
    UNDEFINED_EPOCH_OFFSET,
    EpochEntry,
    end_offset_for_entries,
)
from storage_core.replication.offset_truncation import (
    EpochEndOffset,
    OffsetTruncationState,
    end_offset_for_epoch,
    offset_truncation_state,
)


@dataclass
class Replica:
    """Records as (epoch, value) by offset, and the replica's high watermark."""

    records: list[tuple[int, str]] = field(default_factory=list)
    high_watermark: int = 0

    @property
    def log_end_offset(self) -> int:
        return len(self.records)

    def epochs(self) -> list[EpochEntry]:
        entries: list[EpochEntry] = []
        for offset, (epoch, _value) in enumerate(self.records):
            if not entries or epoch > entries[-1].epoch:
                entries.append(EpochEntry(epoch, offset))
        return entries

    @property
    def latest_epoch(self) -> int | None:
        entries = self.epochs()
        return entries[-1].epoch if entries else None

    def answer(self, requested_epoch: int) -> EpochEndOffset:
        """What this replica, as leader, answers to OffsetForLeaderEpoch."""
        epoch, end = end_offset_for_entries(self.epochs(), requested_epoch, self.log_end_offset)
        return EpochEndOffset(epoch=epoch, end_offset=end)

    def truncate_to(self, offset: int) -> None:
        del self.records[offset:]
        self.high_watermark = min(self.high_watermark, offset)

    def fetch_from(self, leader: Replica) -> None:
        self.records += leader.records[self.log_end_offset :]
        self.high_watermark = min(leader.high_watermark, self.log_end_offset)


def truncate_with_epochs(follower: Replica, leader: Replica) -> list[OffsetTruncationState]:
    """The Truncating phase: OffsetForLeaderEpoch rounds until truncation is complete."""
    rounds: list[OffsetTruncationState] = []
    while True:
        epoch = follower.latest_epoch
        if epoch is None:  # no epoch in the log: the high watermark (Kafka does the same)
            follower.truncate_to(follower.high_watermark)
            return rounds
        state = offset_truncation_state(
            leader.answer(epoch),
            follower_epochs=follower.epochs(),
            log_end_offset=follower.log_end_offset,
            high_watermark=follower.high_watermark,
        )
        rounds.append(state)
        follower.truncate_to(state.offset)
        if state.truncation_completed:
            return rounds
        if len(rounds) > 10:
            raise AssertionError(f"truncation does not converge: {rounds}")


# ---------------------------------------------------------------- seed 003: HW truncation
def test_hw_truncation_loses_a_committed_record_that_epochs_keep() -> None:
    """ "HW机制之丢失消息": A (leader) and B hold m0, m1; A's HW is 2, B's still 1 (the HW
    reaches a follower one fetch later). B restarts, then A dies and B leads."""

    def start() -> tuple[Replica, Replica]:
        a = Replica([(0, "m0"), (0, "m1")], high_watermark=2)
        b = Replica([(0, "m0"), (0, "m1")], high_watermark=1)
        return a, b

    a, b = start()
    b.truncate_to(b.high_watermark)  # pre-KIP-101: a restarted follower cuts to its HW
    assert b.records == [(0, "m0")]  # m1, acknowledged at HW 2, is gone if A dies now

    a, b = start()
    rounds = truncate_with_epochs(b, a)
    assert rounds == [OffsetTruncationState(offset=2, truncation_completed=True)]
    assert b.records == a.records  # m1 survives a failover to B


def test_hw_truncation_leaves_replicas_diverged_and_epochs_repair_it() -> None:
    """ "HW机制之数据不一致": A has m0, m1 (HW 2), B has m0 (HW 1). Both crash; B comes back
    first, leads at epoch 1 and writes m at offset 1 (HW 2). A returns as follower."""
    a = Replica([(0, "m0"), (0, "m1")], high_watermark=2)
    b = Replica([(0, "m0"), (1, "m")], high_watermark=2)

    hw_rule = Replica(list(a.records), a.high_watermark)
    hw_rule.truncate_to(hw_rule.high_watermark)  # HW 2 = LEO 2: nothing cut
    hw_rule.fetch_from(b)
    assert hw_rule.records[1] != b.records[1]  # offset 1 differs forever

    rounds = truncate_with_epochs(a, b)
    # A asks for epoch 0; B answers that epoch 0 ends at 1 (where epoch 1 starts).
    assert b.answer(0) == EpochEndOffset(epoch=0, end_offset=1)
    assert rounds == [OffsetTruncationState(offset=1, truncation_completed=True)]
    a.fetch_from(b)
    assert a.records == b.records


# ---------------------------------------------------------------- KIP-279
def test_epochs_unknown_to_the_follower_take_several_rounds() -> None:
    """KIP-279: the follower led epochs 1 and 3 alone; the leader's history went 0 -> 2 -> 4.
    Each answer names an epoch the follower lacks, so it cuts to its largest earlier epoch's
    end and asks again, until the epochs agree."""
    leader = Replica([(0, "a")] * 10 + [(2, "b")] * 15 + [(4, "c")] * 5, high_watermark=30)
    follower = Replica([(0, "a")] * 10 + [(1, "x")] * 10 + [(3, "y")] * 10, high_watermark=10)

    rounds = truncate_with_epochs(follower, leader)

    # Round 1: asks 3, leader answers (2, 25): epoch 2 unknown here, cut to the end of 1 (20).
    # Round 2: asks 1, leader answers (0, 10): epoch 0 known, ends at 10 on both: done.
    assert rounds == [
        OffsetTruncationState(offset=20, truncation_completed=False),
        OffsetTruncationState(offset=10, truncation_completed=True),
    ]
    follower.fetch_from(leader)
    assert follower.records == leader.records


def test_leader_ahead_in_the_same_epoch_truncates_nothing() -> None:
    leader = Replica([(0, "a")] * 3 + [(2, "b")] * 7, high_watermark=10)
    follower = Replica([(0, "a")] * 3 + [(2, "b")] * 4, high_watermark=5)

    assert truncate_with_epochs(follower, leader) == [
        OffsetTruncationState(offset=7, truncation_completed=True)
    ]
    assert follower.log_end_offset == 7


def test_follower_ahead_in_the_leaders_epoch_cuts_to_the_leaders_end() -> None:
    """An old leader that wrote past what the new leader had when it took over."""
    leader = Replica([(0, "a")] * 4 + [(5, "n")] * 2, high_watermark=6)
    follower = Replica([(0, "a")] * 4 + [(0, "lost")] * 3, high_watermark=4)

    assert truncate_with_epochs(follower, leader) == [
        OffsetTruncationState(offset=4, truncation_completed=True)
    ]
    follower.fetch_from(leader)
    assert follower.records == leader.records


def test_truncation_never_goes_past_the_log_end() -> None:
    state = offset_truncation_state(
        EpochEndOffset(epoch=3, end_offset=500),
        follower_epochs=[EpochEntry(3, 100)],
        log_end_offset=120,
        high_watermark=110,
    )
    assert state == OffsetTruncationState(offset=120, truncation_completed=True)


# ---------------------------------------------------------------- undefined answers
def test_an_undefined_end_offset_falls_back_to_the_high_watermark() -> None:
    """The leader has no epoch at or below the one asked: only the HW is known committed."""
    state = offset_truncation_state(
        EpochEndOffset(epoch=UNDEFINED_EPOCH, end_offset=UNDEFINED_EPOCH_OFFSET),
        follower_epochs=[EpochEntry(0, 0), EpochEntry(4, 50)],
        log_end_offset=80,
        high_watermark=42,
    )
    assert state == OffsetTruncationState(offset=42, truncation_completed=True)


def test_an_answer_without_epoch_uses_the_leaders_offset() -> None:
    """OffsetForLeaderEpoch v0 leaders answer an offset only."""
    state = offset_truncation_state(
        EpochEndOffset(epoch=UNDEFINED_EPOCH, end_offset=30),
        follower_epochs=[EpochEntry(0, 0)],
        log_end_offset=80,
        high_watermark=10,
    )
    assert state == OffsetTruncationState(offset=30, truncation_completed=True)


def test_a_follower_without_epochs_at_or_below_the_answer_uses_the_leaders_offset() -> None:
    """No epoch to compare with (an empty cache): the leader's end offset, capped at the LEO."""
    assert end_offset_for_epoch([], 2, 60) is None
    state = offset_truncation_state(
        EpochEndOffset(epoch=2, end_offset=35),
        follower_epochs=[],
        log_end_offset=60,
        high_watermark=20,
    )
    assert state == OffsetTruncationState(offset=35, truncation_completed=True)


def test_answer_below_the_followers_first_epoch_is_compared_at_that_epoch() -> None:
    """The follower's cache starts at epoch 5 (older entries went with the log start): its
    view of epoch 3 ends where epoch 5 starts, 100; the leader says 90."""
    assert end_offset_for_epoch([EpochEntry(5, 100)], 3, 150) == EpochEndOffset(
        epoch=3, end_offset=100
    )
    state = offset_truncation_state(
        EpochEndOffset(epoch=3, end_offset=90),
        follower_epochs=[EpochEntry(5, 100)],
        log_end_offset=150,
        high_watermark=95,
    )
    assert state == OffsetTruncationState(offset=90, truncation_completed=True)


def test_truncation_state_refuses_a_negative_offset() -> None:
    with pytest.raises(ValueError, match="truncation offset"):
        OffsetTruncationState(offset=-1, truncation_completed=True)
