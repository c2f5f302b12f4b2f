"""The partitions of a follower's next Fetch, built from its fetch states (the part of
Kafka's ``ReplicaFetcherThread.buildFetch`` that picks the partitions ready to fetch).

In a fetch session (``fetch_session_handler``) a partition whose fetch did not change is not
sent, but the follower still builds its wanted partitions every round: with thousands of
partitions that would be a loop over all of them every ``replica.fetch.wait.max.ms`` while
nothing happens. So:

- while the states did not change (``FetchStates.version``), no back-off ended and no log's
  start offset moved in this process (``log_offsets.OFFSET_CHANGES``: the leader's
  DeleteRecords, local retention), the last requests (the same dict object, which the session
  recognises at a glance) are the answer;
- otherwise each unchanged partition (the same ``PartitionFetchState`` object) reuses the
  request object and the log it was built with, reading only its log start offset again. A
  partition leaves its fetcher before it leaves the broker, so a log looked up once stays the
  partition's while its state is unchanged.

The requests returned must not be changed by the caller. Thread-safety: used under the
fetcher thread's lock.
"""

from __future__ import annotations

from collections.abc import Callable

from storage_core.common import TopicPartition
from storage_core.log.log import Log
from storage_core.log.log_offsets import OFFSET_CHANGES
from storage_core.replication.fetch_state import FetchStates, PartitionFetchState, ReplicaState
from storage_core.replication.leader_end_point import FetchPartitionRequest

_SLACK_ENTRIES = 64
_NEVER = float("inf")


class FetchRequestBuilder:
    """The last request built per partition, with the state and log it was built from."""

    def __init__(self, *, truncation_on_fetch: bool) -> None:
        self._truncation_on_fetch = truncation_on_fetch
        self._built: dict[
            TopicPartition, tuple[PartitionFetchState, FetchPartitionRequest, Log]
        ] = {}
        self._last: dict[TopicPartition, FetchPartitionRequest] | None = None
        self._last_version = -1
        self._last_log_start_changes = -1
        self._last_valid_until_ms: float = 0

    def build(
        self,
        states: FetchStates,
        now_ms: int,
        log_of: Callable[[TopicPartition], Log | None],
    ) -> dict[TopicPartition, FetchPartitionRequest]:
        """The requests of the partitions in ``Fetching`` and not backing off, in the order
        of ``states``; ``log_of`` answers None for a partition it has marked failed."""
        log_start_changes = OFFSET_CHANGES.log_start_offsets
        if (
            self._last is not None
            and states.version == self._last_version
            and log_start_changes == self._last_log_start_changes
            and now_ms < self._last_valid_until_ms
        ):
            return self._last
        version = states.version
        valid_until_ms = _NEVER  # until a back-off ends
        built = self._built
        if len(built) > 2 * len(states) + _SLACK_ENTRIES:  # forget removed partitions
            self._built = built = {tp: built[tp] for tp in states if tp in built}
        requests: dict[TopicPartition, FetchPartitionRequest] = {}
        for tp, state in list(states.items()):
            if state.state is not ReplicaState.FETCHING:
                continue
            delay_until_ms = state.delay_until_ms
            if delay_until_ms is not None and now_ms < delay_until_ms:
                valid_until_ms = min(valid_until_ms, delay_until_ms)
                continue
            previous = built.get(tp)
            unchanged = previous is not None and previous[0] is state
            log = previous[2] if previous is not None and unchanged else log_of(tp)
            if log is None:
                continue
            log_start_offset = log.log_start_offset
            if (
                previous is not None
                and unchanged
                and previous[1].log_start_offset == log_start_offset
            ):
                requests[tp] = previous[1]
                continue
            request = FetchPartitionRequest(
                fetch_offset=state.fetch_offset,
                log_start_offset=log_start_offset,
                current_leader_epoch=state.current_leader_epoch,
                last_fetched_epoch=state.last_fetched_epoch if self._truncation_on_fetch else None,
            )
            built[tp] = (state, request, log)
            requests[tp] = request
        # log_of may have marked partitions failed (removing them): that is a change too.
        self._last, self._last_version = requests, states.version
        self._last_log_start_changes = log_start_changes
        self._last_valid_until_ms = valid_until_ms if states.version == version else 0
        return requests
