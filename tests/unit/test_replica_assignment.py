"""Replica placement gives what Kafka's AdminUtils gives (vectors from Kafka's
AdminRackAwareTest) and keeps its three goals for any broker set."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from storage_core.controller.replica_assignment import (
    BrokerMetadata,
    RackAssignmentError,
    assign_replicas_to_brokers,
    rack_alternated_broker_list,
)
from storage_core.errors import InvalidPartitionsError, InvalidReplicationFactorError


def _brokers(rack_of: dict[int, str | None]) -> list[BrokerMetadata]:
    return [BrokerMetadata(broker_id=b, rack=r) for b, r in rack_of.items()]


def test_rack_unaware_matches_kafka() -> None:
    brokers = _brokers(dict.fromkeys(range(5)))
    assignment = assign_replicas_to_brokers(brokers, 10, 3, fixed_start_index=0)
    assert assignment == {
        0: (0, 1, 2),
        1: (1, 2, 3),
        2: (2, 3, 4),
        3: (3, 4, 0),
        4: (4, 0, 1),
        5: (0, 2, 3),
        6: (1, 3, 4),
        7: (2, 4, 0),
        8: (3, 0, 1),
        9: (4, 1, 2),
    }


def test_rack_alternated_list_and_rack_aware_assignment_match_kafka() -> None:
    rack_of = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}
    assert rack_alternated_broker_list(rack_of) == [0, 3, 1, 5, 4, 2]
    without_5 = {b: r for b, r in rack_of.items() if b != 5}
    assert rack_alternated_broker_list(without_5) == [0, 3, 1, 4, 2]
    assignment = assign_replicas_to_brokers(
        _brokers(dict(rack_of)), 7, 3, fixed_start_index=0, start_partition_id=0
    )
    assert assignment == {
        0: (0, 3, 1),
        1: (3, 1, 5),
        2: (1, 5, 4),
        3: (5, 4, 2),
        4: (4, 2, 0),
        5: (2, 0, 3),
        6: (0, 4, 2),
    }


@pytest.mark.parametrize("seed", range(20))
def test_random_start_spreads_leaders_and_replicas_evenly(seed: int) -> None:
    brokers = _brokers(dict.fromkeys([1, 2, 3]))
    assignment = assign_replicas_to_brokers(brokers, 6, 3, rng=random.Random(seed))
    assert sorted(assignment) == list(range(6))
    assert all(sorted(r) == [1, 2, 3] for r in assignment.values())
    leaders = Counter(r[0] for r in assignment.values())
    assert set(leaders.values()) == {2}


def test_rack_aware_puts_each_replica_on_another_rack() -> None:
    rack_of: dict[int, str | None] = {0: "a", 1: "b", 2: "b", 3: "c", 4: "c", 5: "a"}
    assignment = assign_replicas_to_brokers(_brokers(rack_of), 12, 3, rng=random.Random(7))
    for replicas in assignment.values():
        assert len({rack_of[b] for b in replicas}) == 3


def test_partitions_added_to_a_topic_are_numbered_after_it() -> None:
    brokers = _brokers(dict.fromkeys(range(3)))
    added = assign_replicas_to_brokers(brokers, 2, 2, fixed_start_index=0, start_partition_id=6)
    assert sorted(added) == [6, 7]


def test_bad_requests_are_refused_with_kafkas_messages() -> None:
    brokers = _brokers(dict.fromkeys(range(3)))
    with pytest.raises(InvalidPartitionsError, match="larger than 0"):
        assign_replicas_to_brokers(brokers, 0, 1)
    with pytest.raises(InvalidReplicationFactorError, match="larger than 0"):
        assign_replicas_to_brokers(brokers, 1, 0)
    with pytest.raises(InvalidReplicationFactorError, match="larger than available brokers: 3"):
        assign_replicas_to_brokers(brokers, 1, 4)
    with pytest.raises(RackAssignmentError, match=r"without a rack: \[1\]"):
        assign_replicas_to_brokers(_brokers({0: "a", 1: None}), 1, 2)
