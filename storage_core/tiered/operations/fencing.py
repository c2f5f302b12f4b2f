"""``LeaderEpochFence``: a tiering job publishes only while its leader epoch is current.

A job is planned at leader epoch ``E`` (the epoch of the leader whose log dir it read).
Before each event that adds or removes data of the partition (COPY_SEGMENT_STARTED,
COPY_SEGMENT_FINISHED, DELETE_SEGMENT_STARTED of an expired segment) it asks the current
epoch, and once that is above ``E`` the job stops with ``StaleLeaderEpochError``.
Partition deletion is not fenced (the topic is gone, there is no leader). Rolling back what
the job itself uploaded under its own fresh segment id is never fenced: it touches nothing a
new leader relies on.

The check and the publish are two steps, so a leader change between them is still
possible; the new leader's expiry then finds the segment off its lineage (or a duplicate of
a range it copies again), which is the same window Kafka's RLM has.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from storage_core.client.cluster import KafkaCluster
from storage_core.common import TopicPartition
from storage_core.errors import UnknownTopicOrPartitionError
from storage_core.tiered.operations.discovery import PartitionTarget
from storage_core.tiered.operations.errors import StaleLeaderEpochError


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaderEpochFence:
    """``planned_leader_epoch``: the epoch the job was planned at; ``current_leader_epoch``:
    reads the partition's leader epoch now (from the controller or the broker)."""

    planned_leader_epoch: int
    current_leader_epoch: Callable[[], int]

    def check(self, topic_partition: TopicPartition, action: str) -> None:
        """Raise ``StaleLeaderEpochError`` if the leader epoch moved past the planned one."""
        current = self.current_leader_epoch()
        if current > self.planned_leader_epoch:
            raise StaleLeaderEpochError(
                f"partition {topic_partition}: refusing to {action}: planned at leader epoch"
                f" {self.planned_leader_epoch}, the current leader epoch is {current};"
                " re-plan from the new leader's log dir"
            )


def current_leader_epoch(cluster: KafkaCluster, tp: TopicPartition) -> Callable[[], int]:
    """Reads the partition's leader epoch from fresh Metadata (for ``LeaderEpochFence``)."""

    def read() -> int:
        described = cluster.refresh_metadata([tp.topic]).topic(tp.topic)
        partition = None if described is None else described.partition(tp.partition)
        if partition is None:
            raise UnknownTopicOrPartitionError(f"partition {tp} is gone from the cluster")
        return partition.leader_epoch

    return read


def fence_for(cluster: KafkaCluster, target: PartitionTarget) -> LeaderEpochFence:
    """The fence of ``target``: its planned leader epoch against fresh Metadata."""
    return LeaderEpochFence(
        planned_leader_epoch=target.leader_epoch,
        current_leader_epoch=current_leader_epoch(cluster, target.topic_partition),
    )
