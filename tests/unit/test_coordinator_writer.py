"""Append errors of ``__consumer_offsets`` writes become the errors Kafka's coordinator answers."""

from __future__ import annotations

import pytest

from storage_core.coordinator.group.coordinator_writer import (
    map_commit_error,
    map_group_write_error,
)
from storage_core.errors import StorageError


def failed(code: str) -> StorageError:
    """An append error with Kafka error ``code``, as the replication layer raises them."""
    error_type = type("AppendError", (StorageError,), {"error_code": code})
    return error_type(f"append failed with {code}")


@pytest.mark.parametrize(
    ("append_error", "commit_answer", "group_answer"),
    [
        ("unknown_topic_or_partition", "coordinator_not_available", "coordinator_not_available"),
        ("not_enough_replicas", "coordinator_not_available", "coordinator_not_available"),
        (
            "not_enough_replicas_after_append",
            "coordinator_not_available",
            "coordinator_not_available",
        ),
        ("request_timed_out", "coordinator_not_available", "coordinator_not_available"),
        ("not_leader_or_follower", "not_coordinator", "not_coordinator"),
        ("kafka_storage_error", "not_coordinator", "not_coordinator"),
        ("message_too_large", "invalid_commit_offset_size", "unknown_server_error"),
        ("record_list_too_large", "invalid_commit_offset_size", "unknown_server_error"),
        ("invalid_fetch_size", "invalid_commit_offset_size", "unknown_server_error"),
        ("invalid_record", "unknown_server_error", "unknown_server_error"),
        ("corrupt_message", "unknown_server_error", "unknown_server_error"),
    ],
)
def test_append_errors_are_mapped_as_kafka_maps_them(
    append_error: str, commit_answer: str, group_answer: str
) -> None:
    assert map_commit_error("g", failed(append_error)).error_code == commit_answer
    assert map_group_write_error("g", failed(append_error)).error_code == group_answer
