"""The pure parts of the follower fetchers: Kafka's fetcher id, partial batches at the end of a
fetch response, and the fetch-state transitions."""

from __future__ import annotations

import pytest

from storage_core.common import TopicPartition
from storage_core.records.memory_records_builder import build_batch
from storage_core.records.record import SimpleRecord
from storage_core.replication.fetch_state import (
    InitialFetchState,
    PartitionFetchState,
    ReplicaState,
)
from storage_core.replication.follower_log import complete_batches
from storage_core.replication.replica_fetcher_manager import fetcher_id_for, java_string_hash


def test_java_string_hash_matches_java() -> None:
    # Values printed by java.lang.String#hashCode (OpenJDK).
    assert java_string_hash("") == 0
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("polygenelubricants") == -(2**31)
    assert java_string_hash("orders") == -1008770331
    assert java_string_hash("\u00e9t\u00e9") == 227742  # UTF-16 code units, not bytes
    assert java_string_hash("\U0001f600") == 1772899  # a surrogate pair counts twice


def test_fetcher_id_is_kafkas() -> None:
    # Utils.abs(31 * "orders".hashCode() + p) % 4 for p = 0..5, as Java computes it.
    assert [fetcher_id_for(TopicPartition("orders", p), 4) for p in range(6)] == [3, 0, 1, 2, 3, 0]
    assert {fetcher_id_for(TopicPartition("orders", p), 1) for p in range(50)} == {0}


def test_a_partial_batch_at_the_end_is_left_for_the_next_fetch() -> None:
    first = build_batch([SimpleRecord(value=b"a")], base_offset=0, partition_leader_epoch=0)
    second = build_batch([SimpleRecord(value=b"b" * 100)], base_offset=1, partition_leader_epoch=0)
    assert complete_batches(first + second) == first + second
    assert complete_batches(first + second[:40]) == first
    assert complete_batches(first + second[:5]) == first
    assert complete_batches(second[:-1]) == b""
    assert complete_batches(b"") == b""


def test_fetch_state_transitions() -> None:
    state = PartitionFetchState(
        topic_id=None,
        fetch_offset=10,
        lag=None,
        current_leader_epoch=3,
        state=ReplicaState.TRUNCATING,
        last_fetched_epoch=None,
    )
    assert state.is_truncating(0) and not state.is_ready_for_fetch(0)

    delayed = state.delayed(1_000, 500)
    assert delayed.is_delayed(1_499) and not delayed.is_truncating(1_499)
    assert delayed.delayed(1_200, 500).delay_until_ms == 1_500  # the deadline is kept
    assert delayed.is_truncating(1_500)

    again = delayed.truncated(offset=8, last_fetched_epoch=2, completed=False)
    assert again.state is ReplicaState.TRUNCATING and again.fetch_offset == 8
    done = again.truncated(offset=5, last_fetched_epoch=1, completed=True)
    assert done.state is ReplicaState.FETCHING and done.last_fetched_epoch == 1

    fetched = done.fetched(next_offset=9, lag=0, last_fetched_epoch=3)
    assert fetched.is_ready_for_fetch(0) and fetched.is_replica_in_sync
    assert (fetched.fetch_offset, fetched.delay_until_ms) == (9, None)


def test_fetch_values_refuse_impossible_offsets() -> None:
    with pytest.raises(ValueError, match="fetch offset"):
        PartitionFetchState(
            topic_id=None,
            fetch_offset=-1,
            lag=None,
            current_leader_epoch=0,
            state=ReplicaState.FETCHING,
            last_fetched_epoch=None,
        )
    with pytest.raises(ValueError, match="leader broker id"):
        InitialFetchState(topic_id=None, leader_id=-1, current_leader_epoch=0, init_offset=0)
