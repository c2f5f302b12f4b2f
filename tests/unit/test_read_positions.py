"""ReadPositions: where remote reads ended, bounded, least recently used dropped first."""

from __future__ import annotations

import pytest

from storage_core.common import Uuid
from storage_core.tiered.read_positions import ReadPositions


def test_a_read_finds_where_the_previous_one_ended_and_the_oldest_entries_go() -> None:
    a, b = Uuid.random(), Uuid.random()
    positions = ReadPositions(capacity=2)
    positions.remember(a, 10, 4096)
    positions.remember(b, 10, 512)
    assert positions.position(a, 10) == 4096  # per segment
    assert positions.position(a, 10) == 4096  # kept: a retried fetch finds it again
    assert positions.position(a, 11) is None  # only the exact next offset
    positions.remember(b, 20, 1024)  # a was used last: b's older entry goes
    assert (positions.position(b, 10), positions.position(b, 20)) == (None, 1024)
    assert positions.position(a, 10) == 4096
    assert (len(positions), positions.hits) == (2, 4)
    with pytest.raises(ValueError, match="capacity"):
        ReadPositions(capacity=0)
