"""The coordinator's deadlines: Kafka's ``DelayedJoin`` / ``InitialDelayedJoin`` and
``DelayedHeartbeat`` on one heap (Kafka keeps them in its join and heartbeat purgatories).

* A JOIN timer is the deadline of a group's pending rebalance (``DelayedJoin``): when it
  fires, the coordinator completes the join phase if it is due.
* A HEARTBEAT timer is a member's session deadline (``DelayedHeartbeat``): when it fires and
  the member has not heartbeaten since (its ``heartbeat_deadline_ms`` is still this one) and
  does not wait inside a rebalance, the member is removed.
* A PENDING_MEMBER timer is the deadline of a member id handed out with MEMBER_ID_REQUIRED
  (``DelayedHeartbeat`` with ``isPending``): the pending member is forgotten.

Timers are never cancelled: a stale one (a later heartbeat moved the deadline, the group is
gone) does nothing when it fires. ``start`` runs a task that fires them on the coordinator's
loop; tests fire them with the coordinator's ``expire_deadlines``.

Thread safety: none; used on the coordinator's asyncio loop (or before it starts).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import heapq
import itertools
import logging
from collections.abc import Callable
from dataclasses import dataclass

from storage_core.clock import Clock
from storage_core.coordinator.group.group_metadata import GroupMetadata
from storage_core.coordinator.group.member_metadata import MemberMetadata

# The lines logged here keep the name they had when the coordinator held its timers.
logger = logging.getLogger("storage_core.coordinator.group.group_coordinator")


@dataclass(frozen=True, slots=True, kw_only=True)
class DelayedJoin:
    """A rebalance waiting for members (Kafka's ``DelayedJoin`` / ``InitialDelayedJoin``).

    ``initial``: the group was Empty; wait the whole delay and extend it while new members
    keep arriving, by at most ``remaining_ms`` more in total.
    """

    deadline_ms: int
    initial: bool
    remaining_ms: int = 0


class TimerKind(enum.Enum):
    JOIN = "join"
    HEARTBEAT = "heartbeat"
    PENDING_MEMBER = "pending_member"


@dataclass(frozen=True, slots=True, order=True)
class Timer:
    deadline_ms: int
    sequence: int
    kind: TimerKind
    group_id: str
    member_id: str


class GroupTimers:
    """The deadline heap, the pending rebalance of each group, and the task that fires them."""

    def __init__(self, clock: Clock, max_timer_wait_ms: int) -> None:
        self._clock = clock
        self._max_timer_wait_ms = max_timer_wait_ms
        self._delayed_joins: dict[str, DelayedJoin] = {}
        self._timers: list[Timer] = []
        self._timer_sequence = itertools.count()
        self._timer_task: asyncio.Task[None] | None = None
        self._timer_wakeup: asyncio.Event | None = None

    # ================================================================== DelayedJoin
    def delayed_join(self, group_id: str) -> DelayedJoin | None:
        return self._delayed_joins.get(group_id)

    def set_delayed_join(self, group: GroupMetadata, delayed: DelayedJoin) -> None:
        self._delayed_joins[group.group_id] = delayed
        self.schedule(delayed.deadline_ms, TimerKind.JOIN, group.group_id, "")

    def remove_delayed_join(self, group_id: str) -> None:
        self._delayed_joins.pop(group_id, None)

    # ================================================================== DelayedHeartbeat
    def complete_and_schedule_next_heartbeat_expiration(
        self, group: GroupMetadata, member: MemberMetadata, timeout_ms: int | None = None
    ) -> None:
        deadline_ms = self._clock.milliseconds() + (
            member.session_timeout_ms if timeout_ms is None else timeout_ms
        )
        member.heartbeat_deadline_ms = deadline_ms
        self.schedule(deadline_ms, TimerKind.HEARTBEAT, group.group_id, member.member_id)

    # ================================================================== the heap
    def schedule(self, deadline_ms: int, kind: TimerKind, group_id: str, member_id: str) -> None:
        earliest = self._timers[0].deadline_ms if self._timers else None
        heapq.heappush(
            self._timers,
            Timer(deadline_ms, next(self._timer_sequence), kind, group_id, member_id),
        )
        if self._timer_wakeup is not None and (earliest is None or deadline_ms < earliest):
            self._timer_wakeup.set()

    @property
    def pending_timers(self) -> int:
        """Scheduled timers, stale ones included (they are dropped when they fire)."""
        return len(self._timers)

    def pop_due(self, now_ms: int) -> Timer | None:
        """The earliest timer whose deadline is ``now_ms`` or before, taken off the heap."""
        if self._timers and self._timers[0].deadline_ms <= now_ms:
            return heapq.heappop(self._timers)
        return None

    def clear(self) -> None:
        self._delayed_joins.clear()
        self._timers.clear()

    # ================================================================== the task
    def start(self, expire_deadlines: Callable[[], object]) -> None:
        """Fire due timers with ``expire_deadlines`` on the running loop until ``stop``."""
        self._timer_wakeup = asyncio.Event()
        self._timer_task = asyncio.create_task(
            self._run_timers(expire_deadlines), name="group-coordinator"
        )

    async def stop(self) -> None:
        task, self._timer_task = self._timer_task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run_timers(self, expire_deadlines: Callable[[], object]) -> None:
        wakeup = self._timer_wakeup
        if wakeup is None:
            raise RuntimeError("the timer task needs the wake-up event made by startup()")
        while True:
            try:
                expire_deadlines()
            except Exception:
                logger.exception("group coordinator timer failed; continuing")
            wait_ms = self._max_timer_wait_ms
            if self._timers:
                wait_ms = min(
                    wait_ms, max(self._timers[0].deadline_ms - self._clock.milliseconds(), 0)
                )
            wakeup.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wakeup.wait(), timeout=wait_ms / 1000)
