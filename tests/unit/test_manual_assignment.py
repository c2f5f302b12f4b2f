"""Kafka's checks of manual replica assignments on a cluster of three registered brokers."""

from __future__ import annotations

import pytest

from storage_core.controller.manual_assignment import (
    InvalidReplicaAssignmentError,
    validate_added_partitions_assignment,
    validate_new_topic_assignment,
)

BROKERS = (1, 2, 3)


def test_a_valid_assignment_keeps_partition_order_and_preferred_leaders() -> None:
    assert validate_new_topic_assignment([(1, [3, 1]), (0, [2, 3])], brokers=BROKERS) == (
        (2, 3),
        (3, 1),
    )


@pytest.mark.parametrize(
    ("assignment", "message"),
    [
        ([(0, [1, 2]), (1, [3])], "includes a partition with 1 replica(s), but this is not"),
        ([(0, [1]), (0, [2])], "Found multiple manual partition assignments for partition 0"),
        ([(1, [1])], "partitions should be a consecutive 0-based integer sequence"),
        ([(0, [2, 9])], "includes broker 9, but no such broker is registered."),
        ([(0, [2, 1, 2])], "includes the broker 2 more than once."),
    ],
)
def test_kafkas_rules_for_new_topics(assignment: list[tuple[int, list[int]]], message: str) -> None:
    with pytest.raises(
        InvalidReplicaAssignmentError, match=message.replace("(", r"\(").replace(")", r"\)")
    ):
        validate_new_topic_assignment(assignment, brokers=BROKERS)


def test_added_partitions_match_the_topics_replication_factor_and_count() -> None:
    assert validate_added_partitions_assignment(
        [[1, 2], [2, 3]], added=2, replication_factor=2, brokers=BROKERS
    ) == ((1, 2), (2, 3))
    with pytest.raises(InvalidReplicaAssignmentError, match="but only 1 assignment"):
        validate_added_partitions_assignment(
            [[1, 2]], added=2, replication_factor=2, brokers=BROKERS
        )
    with pytest.raises(InvalidReplicaAssignmentError, match="which have 2 replica"):
        validate_added_partitions_assignment([[1]], added=1, replication_factor=2, brokers=BROKERS)
