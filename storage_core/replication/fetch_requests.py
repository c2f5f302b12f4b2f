"""The partitions of a follower's next Fetch, built from its fetch states (the part of
Kafka's ``ReplicaFetcherThread.buildFetch`` that picks the partitions ready to fetch).

In a fetch session (``fetch_session_handler``) a partition whose fetch did not change is not
sent, but it is still considered every round: with thousands of partitions this loop runs
every ``replica.fetch.wait.max.ms`` while nothing happens. So an unchanged partition (the same
``PartitionFetchState`` object: its last fetch brought nothing) reuses the request object and
the log it was built with, which the session then recognises by identity; only its log start
offset is read again (local retention may move it). A partition leaves its fetcher before it
leaves the broker, so a log looked up once stays the partition's while its state is unchanged.

Thread-safety: used under the fetcher thread's lock.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from storage_core.common import TopicPartition
from storage_core.log.log import Log
from storage_core.replication.fetch_state import PartitionFetchState, ReplicaState
from storage_core.replication.leader_end_point import FetchPartitionRequest

_SLACK_ENTRIES = 64


class FetchRequestBuilder:
    """The last request built per partition, with the state and log it was built from."""

    def __init__(self, *, truncation_on_fetch: bool) -> None:
        self._truncation_on_fetch = truncation_on_fetch
        self._built: dict[
            TopicPartition, tuple[PartitionFetchState, FetchPartitionRequest, Log]
        ] = {}

    def build(
        self,
        states: Mapping[TopicPartition, PartitionFetchState],
        now_ms: int,
        log_of: Callable[[TopicPartition], Log | None],
    ) -> dict[TopicPartition, FetchPartitionRequest]:
        """The requests of the partitions in ``Fetching`` and not backing off, in the order
        of ``states``; ``log_of`` answers None for a partition it has marked failed."""
        built = self._built
        if len(built) > 2 * len(states) + _SLACK_ENTRIES:  # forget removed partitions
            self._built = built = {tp: built[tp] for tp in states if tp in built}
        requests: dict[TopicPartition, FetchPartitionRequest] = {}
        for tp, state in list(states.items()):
            if state.state is not ReplicaState.FETCHING or state.is_delayed(now_ms):
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
        return requests
