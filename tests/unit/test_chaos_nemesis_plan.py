"""The nemesis schedule: the same seed gives the same faults, and each block of four rounds
meets every kind of fault."""

from __future__ import annotations

from tests.chaos.cluster import SESSION_TIMEOUT_MS
from tests.chaos.nemesis import ALL_KINDS, PAUSE_HOLD_S, FaultKind, plan


def test_same_seed_same_schedule_other_seed_other_schedule() -> None:
    assert plan(7, 12, 3) == plan(7, 12, 3)
    assert plan(7, 12, 3) != plan(8, 12, 3)


def test_every_block_of_four_rounds_holds_every_kind() -> None:
    faults = plan(123, 10, 3)
    assert [f.round for f in faults] == list(range(10))
    for start in (0, 4):
        assert {f.kind for f in faults[start : start + 4]} == set(ALL_KINDS)
    assert all(0 <= f.partition < 3 for f in faults)


def test_a_pause_outlasts_the_session() -> None:
    pauses = [f for f in plan(1, 4, 1) if f.kind is FaultKind.PAUSE]
    assert pauses and all(f.hold_s == PAUSE_HOLD_S > SESSION_TIMEOUT_MS / 1000 for f in pauses)
