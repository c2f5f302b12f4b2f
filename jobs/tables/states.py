"""Replaying a state history against the KIP-405 state machines (pure).

A history is every event of one segment (or one partition deletion) in log order, as
``{"state": NAME, "timestamp_ms": T}`` entries. Replaying it the way the RLMM cache applies
events gives the current state (refused transitions are skipped, as the cache skips them),
when that state was entered, and the first transition the state machine refuses.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from storage_core.tiered.metadata.states import RemoteLogSegmentState, RemotePartitionDeleteState

NO_STATE = "(none)"

S = TypeVar("S", RemoteLogSegmentState, RemotePartitionDeleteState)


@dataclass(frozen=True, slots=True, kw_only=True)
class Replay:
    """Result of a replay: ``current_state`` (``None`` if no event was accepted), when it was
    entered (ms; repeats of the same state do not move it), and the first refused transition
    as ``"SOURCE -> TARGET"`` (``None`` if every event was valid)."""

    current_state: str | None
    entered_ms: int | None
    invalid_transition: str | None


def _replay(
    history: Sequence[dict[str, Any]],
    parse: Callable[[str], S | None],
    is_valid: Callable[[S | None, S], bool],
) -> Replay:
    current: S | None = None
    entered_ms: int | None = None
    invalid: str | None = None
    for entry in history:
        name = str(entry["state"])
        target = parse(name)
        source_name = NO_STATE if current is None else current.name
        if target is None or not is_valid(current, target):
            if invalid is None:
                invalid = f"{source_name} -> {name}"
            continue
        if target is not current:
            entered_ms = int(entry["timestamp_ms"])
        current = target
    return Replay(
        current_state=None if current is None else current.name,
        entered_ms=entered_ms,
        invalid_transition=invalid,
    )


def _segment_state(name: str) -> RemoteLogSegmentState | None:
    return RemoteLogSegmentState.__members__.get(name)


def _delete_state(name: str) -> RemotePartitionDeleteState | None:
    return RemotePartitionDeleteState.__members__.get(name)


def replay_segment_states(history: Sequence[dict[str, Any]]) -> Replay:
    """Replay a segment's history through ``RemoteLogSegmentState.is_valid_transition``."""
    return _replay(history, _segment_state, RemoteLogSegmentState.is_valid_transition)


def replay_delete_states(history: Sequence[dict[str, Any]]) -> Replay:
    """Replay a partition deletion's history (``RemotePartitionDeleteState``)."""
    return _replay(history, _delete_state, RemotePartitionDeleteState.is_valid_transition)


SEGMENT_STARTED_STATES = frozenset(
    {
        RemoteLogSegmentState.COPY_SEGMENT_STARTED.name,
        RemoteLogSegmentState.DELETE_SEGMENT_STARTED.name,
    }
)
DELETE_PENDING_STATES = frozenset(
    {
        RemotePartitionDeleteState.DELETE_PARTITION_MARKED.name,
        RemotePartitionDeleteState.DELETE_PARTITION_STARTED.name,
    }
)
