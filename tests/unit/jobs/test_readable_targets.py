"""A leader that dies between Metadata and the read of a partition's view: that partition is
skipped (reason naming the leader and the error, counted), the others go on; errors that are
not about leadership or reachability fail the run as before."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest
from kio.schema.errors import ErrorCode

from jobs.common.discovery import readable_targets
from jobs.common.summary import RunSummary
from storage_core.client.errors import (
    BrokerResponseError,
    BrokerUnreachableError,
    ConnectionClosedError,
    RequestTimeoutError,
)
from storage_core.common import TopicPartition, Uuid
from storage_core.errors import CorruptRecordError, UnknownTopicOrPartitionError
from storage_core.log.log_config import LogConfig
from storage_core.tiered.operations import LogView, PartitionTarget

VIEW = cast(LogView, object())


def target(partition: int, leader_id: int) -> PartitionTarget:
    return PartitionTarget(
        directory=Path(f"/b{leader_id}/orders-{partition}"),
        topic_partition=TopicPartition("orders", partition),
        topic_id=Uuid.from_bytes(bytes(range(16))),
        leader_epoch=4,
        config=LogConfig(),
        leader_id=leader_id,
        leader_host="host-2" if leader_id == 2 else "host-1",
    )


def read_all(
    targets: list[PartitionTarget], failing: dict[int, Exception]
) -> tuple[list[str], list[int], RunSummary]:
    """The partitions read, the partitions ``read`` was called for, the summary."""
    asked: list[int] = []
    summary = RunSummary(job="copy_segments", dry_run=False)

    def read(t: PartitionTarget) -> LogView:
        asked.append(t.topic_partition.partition)
        error = failing.get(t.topic_partition.partition)
        if error is not None:
            raise error
        return VIEW

    read_ok = [
        str(t.topic_partition)
        for t, view in readable_targets(targets, read, job="copy_segments", summary=summary)
        if view is VIEW
    ]
    return read_ok, asked, summary


def test_a_dead_leader_skips_its_partitions_and_the_others_go_on() -> None:
    dead = BrokerUnreachableError("cannot connect to 127.0.0.1:9093: Connection refused")
    targets = [target(0, 1), target(1, 2), target(2, 1), target(3, 2)]
    read_ok, asked, summary = read_all(targets, {1: dead})
    assert read_ok == ["orders-0", "orders-2"]
    assert asked == [0, 1, 2]  # orders-3's leader is known dead: not asked again
    assert summary.counts["partitions_skipped"] == 2
    entries: list[dict[str, Any]] = summary.partitions
    assert [(e["partition"], e["status"]) for e in entries] == [
        ("orders-1", "skipped"),
        ("orders-3", "skipped"),
    ]
    assert entries[0]["reason"] == (
        "leader broker 2 at host-2 (leader epoch 4) did not answer while the partition was"
        " planned: BrokerUnreachableError: cannot connect to 127.0.0.1:9093: Connection"
        " refused; the next run plans it from its new leader"
    )


@pytest.mark.parametrize(
    "error",
    [
        ConnectionClosedError("the broker closed the connection"),
        RequestTimeoutError("no answer within 30000 ms"),
        BrokerResponseError(ErrorCode.not_leader_or_follower, resource="partition orders-1"),
        BrokerResponseError(ErrorCode.leader_not_available, resource="partition orders-1"),
    ],
)
def test_leadership_and_reachability_errors_skip(error: Exception) -> None:
    read_ok, _, summary = read_all([target(0, 1), target(1, 2)], {1: error})
    assert read_ok == ["orders-0"]
    (entry,) = summary.partitions
    assert entry["status"] == "skipped" and type(error).__name__ in entry["reason"]
    assert "leader broker 2" in entry["reason"]


@pytest.mark.parametrize(
    "error",
    [
        CorruptRecordError("/b2/orders-1/00000000000000000000.log: CRC mismatch"),
        UnknownTopicOrPartitionError("/b2/orders-1 holds topic id X, the cluster's has Y"),
        BrokerResponseError(ErrorCode.unknown_topic_or_partition, resource="partition orders-1"),
    ],
)
def test_other_errors_still_fail_the_run(error: Exception) -> None:
    with pytest.raises(type(error)):
        read_all([target(0, 1), target(1, 2)], {1: error})
