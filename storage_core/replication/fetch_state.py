"""A follower's fetch state of one partition (Kafka's ``PartitionFetchState``).

A partition on a fetcher thread is in one of three states, and may be delayed (backing off
after an error) in any::

    add_partitions ──> Truncating ──(truncation complete)──> Fetching
                          ^                                   │    │ ^
                          └── (a new leader epoch: re-added) ─┘    │ │ (aux state built)
                                   (OFFSET_MOVED_TO_TIERED_STORAGE) v │
                                                      BuildingRemoteLogAuxState

``Truncating``: the log may hold records the leader does not have; the thread asks the leader
where its last epoch ends (OffsetForLeaderEpoch) or, without any epoch in the log, truncates to
the high watermark. ``Fetching``: Fetch requests from ``fetch_offset``; a DivergingEpoch in a
response truncates in place and stays in ``Fetching`` (KIP-320, truncation on fetch).
``BuildingRemoteLogAuxState`` (KIP-405): the offset to fetch is only in the leader's remote
tier; the ``TierStateMachine`` restarts the log empty at the leader's local log start offset
with the leader-epoch entries and producer state of the remote segment before it, then the
partition fetches from there. Until the remote metadata is available here it backs off and
tries again.

Values only: every change builds a new state. Time is passed in (monotonic milliseconds) so
that the rules are testable without a clock.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass
from typing import Any

from storage_core.common import TopicPartition, Uuid


class ReplicaState(enum.Enum):
    """Kafka's ``ReplicaState``: where a partition is in the follower's protocol."""

    TRUNCATING = "Truncating"
    FETCHING = "Fetching"
    BUILDING_REMOTE_LOG_AUX_STATE = "BuildingRemoteLogAuxState"


@dataclass(frozen=True, slots=True, kw_only=True)
class InitialFetchState:
    """What the replica manager hands to the fetcher manager for a new follower partition.

    ``init_offset`` is where fetching starts (Kafka's ``initialFetchOffset``: the log end
    offset when the log has a leader epoch, else the high watermark); a negative one means
    "ask the leader" (``fetchOffsetAndTruncate``).
    """

    topic_id: Uuid | None
    leader_id: int
    current_leader_epoch: int
    init_offset: int

    def __post_init__(self) -> None:
        if self.leader_id < 0:
            raise ValueError(f"a follower needs a leader broker id >= 0, got {self.leader_id}")


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionFetchState:
    """Fetch offset, lag and epochs of one partition on one fetcher thread.

    ``fetch_offset``: the next offset to fetch (the follower's log end offset once fetching).
    ``lag``: the leader's high watermark minus the next fetch offset at the last response,
    None before the first one. ``delay_until_ms`` (monotonic, exclusive): no request for the
    partition before then. ``last_fetched_epoch``: the epoch of the last batch in the log
    (None when the log has none), sent as LastFetchedEpoch. ``leader_log_start_offset``: in
    ``BuildingRemoteLogAuxState``, the leader's log start offset from the response that
    answered OFFSET_MOVED_TO_TIERED_STORAGE (the follower's log start offset once built; -1
    when the response did not carry it: the leader is asked).
    """

    topic_id: Uuid | None
    fetch_offset: int
    lag: int | None
    current_leader_epoch: int
    state: ReplicaState
    last_fetched_epoch: int | None
    delay_until_ms: int | None = None
    leader_log_start_offset: int | None = None

    def __post_init__(self) -> None:
        if self.fetch_offset < 0:
            raise ValueError(f"fetch offset must be >= 0, got {self.fetch_offset}")
        if (self.state is ReplicaState.BUILDING_REMOTE_LOG_AUX_STATE) != (
            self.leader_log_start_offset is not None
        ):
            raise ValueError(
                "the leader's log start offset is set in BuildingRemoteLogAuxState and only"
                f" there; got state {self.state.value} with {self.leader_log_start_offset}"
            )

    def is_delayed(self, now_ms: int) -> bool:
        return self.delay_until_ms is not None and now_ms < self.delay_until_ms

    def is_ready_for_fetch(self, now_ms: int) -> bool:
        return self.state is ReplicaState.FETCHING and not self.is_delayed(now_ms)

    def is_truncating(self, now_ms: int) -> bool:
        return self.state is ReplicaState.TRUNCATING and not self.is_delayed(now_ms)

    def is_building_remote_log_aux_state(self, now_ms: int) -> bool:
        return self.state is ReplicaState.BUILDING_REMOTE_LOG_AUX_STATE and not self.is_delayed(
            now_ms
        )

    def building_remote_log_aux_state(self, *, leader_log_start_offset: int) -> PartitionFetchState:
        """After OFFSET_MOVED_TO_TIERED_STORAGE: build from the remote tier before fetching."""
        if leader_log_start_offset < -1:
            raise ValueError(
                "the leader's log start offset must be >= 0, or -1 when the response did not"
                f" carry it; got {leader_log_start_offset}"
            )
        return dataclasses.replace(
            self,
            state=ReplicaState.BUILDING_REMOTE_LOG_AUX_STATE,
            leader_log_start_offset=leader_log_start_offset,
            delay_until_ms=None,
        )

    @property
    def is_replica_in_sync(self) -> bool:
        return self.lag is not None and self.lag <= 0

    def delayed(self, now_ms: int, backoff_ms: int) -> PartitionFetchState:
        """Back off ``backoff_ms``; an already delayed state keeps its deadline (as Kafka)."""
        if self.is_delayed(now_ms):
            return self
        return dataclasses.replace(self, delay_until_ms=now_ms + backoff_ms)

    def fetched(
        self, *, next_offset: int, lag: int, last_fetched_epoch: int | None
    ) -> PartitionFetchState:
        """After appending a response: fetch on from ``next_offset``."""
        return dataclasses.replace(
            self,
            fetch_offset=next_offset,
            lag=lag,
            state=ReplicaState.FETCHING,
            last_fetched_epoch=last_fetched_epoch,
            delay_until_ms=None,
            leader_log_start_offset=None,
        )

    def truncated(
        self, *, offset: int, last_fetched_epoch: int | None, completed: bool
    ) -> PartitionFetchState:
        """After truncating the log to ``offset`` (exclusive end): fetch from there, or truncate
        again when the leader's epoch was unknown to this log (KIP-279, another round)."""
        return dataclasses.replace(
            self,
            fetch_offset=offset,
            state=ReplicaState.FETCHING if completed else ReplicaState.TRUNCATING,
            last_fetched_epoch=last_fetched_epoch,
            leader_log_start_offset=None,
        )

    def __str__(self) -> str:
        return (
            f"FetchState(fetch_offset={self.fetch_offset},"
            f" current_leader_epoch={self.current_leader_epoch},"
            f" last_fetched_epoch={self.last_fetched_epoch}, state={self.state.value},"
            f" lag={self.lag}, delay_until_ms={self.delay_until_ms}"
            + (
                ""
                if self.leader_log_start_offset is None
                else f", leader_log_start_offset={self.leader_log_start_offset}"
            )
            + ")"
        )


class FetchStates(dict[TopicPartition, PartitionFetchState]):
    """A fetcher thread's partition states, in round-robin order, counting their changes:
    ``version`` moves on at every state set or removed, so that what was built from unchanged
    states can be reused (``FetchRequestBuilder``, the fetcher's look for states other than
    fetching). Only ``[] =`` and ``pop`` change it (the thread's only writes)."""

    __slots__ = ("version",)

    def __init__(self) -> None:
        super().__init__()
        self.version = 0

    def __setitem__(self, tp: TopicPartition, state: PartitionFetchState) -> None:
        super().__setitem__(tp, state)
        self.version += 1

    def pop(self, tp: TopicPartition, default: PartitionFetchState | None = None) -> Any:  # type: ignore[override]
        self.version += 1
        return super().pop(tp, default)
