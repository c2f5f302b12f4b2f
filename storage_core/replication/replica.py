"""Kafka's ``Replica`` (``kafka.cluster.Replica``): a follower's position as its leader sees it.

The leader's ``Partition`` keeps one ``ReplicaState`` per follower, updated from each of the
follower's fetches (its fetch offset is its log end offset); a follower is caught up when it
fetched at the leader's log end offset within ``replica.lag.time.max.ms``.

A follower's incremental fetch session (KIP-227) does not look at an idle partition at every
fetch (``server/handlers/fetch_sessions``): once it finds the follower at the log end with
nothing to answer, it hands the partition's state its ``QuietFetches``, and each later fetch
of the session counts as a fetch at the log end, recorded only when the partition moves (an
append, under the partition's lock, before the log end moves away from the follower) or
when a fetch of it is recorded. So an idle follower's caught-up time stays as recent as its
last fetch, as in Kafka, with no work per idle partition and fetch.

Thread-safety: none of its own; guarded by the ``Partition``'s lock.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol


class QuietFetches(Protocol):
    """A follower's fetch session while a partition is quiet in it (see the module
    docstring)."""

    @property
    def quiet_fetch_ms(self) -> int:
        """When the session last fetched with the partition in it; -1 once it left."""
        ...


@dataclass(slots=True)
class ReplicaState:
    """A follower's position as the leader sees it (Kafka's ``Replica``/``ReplicaState``)."""

    broker_id: int
    log_end_offset: int = -1
    log_start_offset: int = -1
    # the leader's LEO when this follower last fetched, and when that was
    last_fetch_leader_log_end_offset: int = 0
    last_fetch_time_ms: int = 0
    # the last time this follower's fetch offset reached the leader's LEO of the time
    last_caught_up_time_ms: int = 0
    # the follower's session while this partition is quiet in it (leader's LEO reached)
    quiet_fetches: QuietFetches | None = field(default=None, compare=False, repr=False)

    def is_caught_up(self, leader_end_offset: int, now_ms: int, max_lag_ms: int) -> bool:
        return (
            leader_end_offset == self.log_end_offset
            or now_ms - self.last_caught_up_time_ms <= max_lag_ms
        )

    def update_fetch_state(
        self, fetch_offset: int, log_start_offset: int, fetch_time_ms: int, leader_end_offset: int
    ) -> None:
        """Kafka's ``updateFetchStateOrThrow``: a fetch at the leader's LEO catches the follower
        up now; a fetch at the LEO the leader had at the previous fetch caught it up then."""
        self.record_quiet_fetches()
        if fetch_offset >= leader_end_offset:
            self.last_caught_up_time_ms = max(self.last_caught_up_time_ms, fetch_time_ms)
        elif fetch_offset >= self.last_fetch_leader_log_end_offset:
            self.last_caught_up_time_ms = max(self.last_caught_up_time_ms, self.last_fetch_time_ms)
        self.log_start_offset = log_start_offset
        self.log_end_offset = fetch_offset
        self.last_fetch_leader_log_end_offset = max(
            leader_end_offset, self.last_fetch_leader_log_end_offset
        )
        self.last_fetch_time_ms = fetch_time_ms

    def last_quiet_fetch_ms(self) -> int | None:
        """When the follower last fetched at the leader's log end in a session where this
        partition is quiet; None when it is not."""
        quiet = self.quiet_fetches
        return None if quiet is None else quiet.quiet_fetch_ms

    def record_quiet_fetches(self, fetched_ms: int | None = None) -> None:
        """Record the last quiet fetch (``fetched_ms``, read before the log end moved, or the
        session's now) as a fetch at the leader's log end, which the follower's LEO is; then
        fetches are recorded one by one again."""
        if fetched_ms is None:
            fetched_ms = self.last_quiet_fetch_ms()
        self.quiet_fetches = None
        if fetched_ms is None or fetched_ms < 0:
            return
        self.last_caught_up_time_ms = max(self.last_caught_up_time_ms, fetched_ms)
        self.last_fetch_time_ms = max(self.last_fetch_time_ms, fetched_ms)
        self.last_fetch_leader_log_end_offset = max(
            self.last_fetch_leader_log_end_offset, self.log_end_offset
        )
