"""The partitions of a follower's next Fetch: unchanged states give the very requests built
before (the fetch session then sees the session unchanged at a glance), an unchanged partition
reuses its request object, a moved log start offset or a new fetch state builds a new one,
the end of a back-off or a log start offset moved anywhere rebuilds, and partitions not
fetching or backing off are left out."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from storage_core.common import TopicPartition
from storage_core.log.log import Log
from storage_core.log.log_config import LogConfig
from storage_core.log.log_manager import LogManager
from storage_core.replication.fetch_requests import FetchRequestBuilder
from storage_core.replication.fetch_state import FetchStates, PartitionFetchState, ReplicaState
from tests.conftest import make_batch

TP, OTHER = TopicPartition("t", 0), TopicPartition("t", 1)


def state(offset: int, kind: ReplicaState = ReplicaState.FETCHING) -> PartitionFetchState:
    return PartitionFetchState(
        topic_id=None,
        fetch_offset=offset,
        lag=0,
        current_leader_epoch=3,
        state=kind,
        last_fetched_epoch=2,
    )


def test_unchanged_partitions_reuse_their_requests(tmp_path: Path) -> None:
    logs = LogManager([tmp_path], LogConfig())
    logs.startup(background_tasks=False)
    log = logs.get_or_create_log(TP)
    looked_up: list[TopicPartition] = []

    def log_of(tp: TopicPartition) -> Log | None:
        looked_up.append(tp)
        return log

    builder = FetchRequestBuilder(truncation_on_fetch=True)
    states = FetchStates()
    states[TP] = state(0)
    states[OTHER] = state(0, ReplicaState.TRUNCATING)
    first = builder.build(states, 0, log_of)
    assert list(first) == [TP] and first[TP].last_fetched_epoch == 2
    assert builder.build(states, 1, log_of) is first  # nothing changed: the same requests
    states[TP] = state(5)
    moved = builder.build(states, 2, log_of)
    assert moved is not first and moved[TP].fetch_offset == 5
    log.append_as_follower(make_batch(5))
    log.update_high_watermark(5)
    states[TP] = states[TP]  # set again: a new version
    again = builder.build(states, 3, log_of)
    assert again is not moved and again[TP] is moved[TP]  # rebuilt, same request object
    assert looked_up == [TP, TP]  # the log looked up once per new state only
    assert builder.build(states, 3 + 3_600_000, log_of) is again  # idle: nothing to redo
    # DeleteRecords (or retention) moved the log start: the next request carries it.
    assert log.maybe_increment_log_start_offset(3, "test")
    moved_start = builder.build(states, 4, log_of)
    assert moved_start[TP] is not moved[TP] and moved_start[TP].log_start_offset == 3
    assert builder.build(states, 5, log_of) is moved_start
    # A back-off leaves the partition out until it ends, then it is back.
    states[TP] = dataclasses.replace(states[TP], delay_until_ms=10_000)
    assert builder.build(states, 9_000, log_of) == {}
    assert builder.build(states, 9_999, log_of) == {}
    assert list(builder.build(states, 10_000, log_of)) == [TP]
    logs.shutdown()
