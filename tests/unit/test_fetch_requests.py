"""The partitions of a follower's next Fetch: an unchanged partition reuses the request object
sent before (the fetch session then sees it unchanged by identity), a moved log start offset
or a new fetch state builds a new one, and partitions not fetching or backing off are left
out."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from storage_core.common import TopicPartition
from storage_core.log.log import Log
from storage_core.log.log_config import LogConfig
from storage_core.log.log_manager import LogManager
from storage_core.replication.fetch_requests import FetchRequestBuilder
from storage_core.replication.fetch_state import PartitionFetchState, ReplicaState
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


def test_unchanged_partitions_reuse_their_request(tmp_path: Path) -> None:
    logs = LogManager([tmp_path], LogConfig())
    logs.startup(background_tasks=False)
    log = logs.get_or_create_log(TP)
    looked_up: list[TopicPartition] = []

    def log_of(tp: TopicPartition) -> Log | None:
        looked_up.append(tp)
        return log

    builder = FetchRequestBuilder(truncation_on_fetch=True)
    states = {TP: state(0), OTHER: state(0, ReplicaState.TRUNCATING)}
    first = builder.build(states, 0, log_of)
    assert list(first) == [TP] and first[TP].last_fetched_epoch == 2
    again = builder.build(states, 0, log_of)
    assert again[TP] is first[TP] and looked_up == [TP]  # the log is not looked up again
    states[TP] = state(5)
    moved = builder.build(states, 0, log_of)
    assert moved[TP] is not first[TP] and moved[TP].fetch_offset == 5
    log.append_as_follower(make_batch(5))
    log.update_high_watermark(5)
    assert builder.build(states, 0, log_of)[TP] is moved[TP]
    # DeleteRecords (or retention) moved the log start: the new one goes in a new request.
    assert log.maybe_increment_log_start_offset(3, "test")
    started = builder.build(states, 0, log_of)
    assert started[TP] is not moved[TP] and started[TP].log_start_offset == 3
    assert builder.build(states, 0, log_of)[TP] is started[TP]
    states[TP] = dataclasses.replace(states[TP], delay_until_ms=100)
    assert builder.build(states, 50, log_of) == {}
    assert list(builder.build(states, 100, log_of)) == [TP]
    logs.shutdown()
