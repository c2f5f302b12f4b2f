"""Kafka's ``Replica`` (``kafka.cluster.Replica``): a follower's position as its leader sees it.

The leader's ``Partition`` keeps one ``ReplicaState`` per follower, updated from each of the
follower's fetches (its fetch offset is its log end offset); a follower is caught up when it
fetched at the leader's log end offset within ``replica.lag.time.max.ms``.

Thread-safety: none of its own; guarded by the ``Partition``'s lock.
"""

from __future__ import annotations

from dataclasses import dataclass


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
