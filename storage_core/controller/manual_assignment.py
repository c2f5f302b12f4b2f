"""Manual replica assignments of CreateTopics and CreatePartitions, checked as Kafka's
controller checks them (``ReplicationControlManager.validateManualPartitionAssignment``).

An assignment lists, per partition, the broker ids of its replicas, preferred leader first.
It is valid when every partition has at least one replica, no broker appears twice in one
partition, every broker is registered, every partition has the same number of replicas (and,
when partitions are added, as many as the topic's existing partitions), and the partitions of a
new topic are numbered 0..n-1 (inclusive, exclusive) with none listed twice.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence

from storage_core.errors import StorageError

MAX_REPLICAS_PER_PARTITION = 1000  # a limit on everything; Kafka's own bound is Short.MAX_VALUE


class InvalidReplicaAssignmentError(StorageError):
    """A manual replica assignment Kafka would refuse; the message names the broken rule."""

    error_code = "invalid_replica_assignment"


def validate_manual_partition_assignment(
    replicas: Sequence[int], *, replication_factor: int | None, brokers: Collection[int]
) -> None:
    """One partition's replicas; ``replication_factor`` None means "any count"."""
    if not replicas:
        raise InvalidReplicaAssignmentError(
            "The manual partition assignment includes an empty replica list."
        )
    if len(replicas) > MAX_REPLICAS_PER_PARTITION:
        raise InvalidReplicaAssignmentError(
            f"The manual partition assignment includes a partition with {len(replicas)}"
            f" replica(s); at most {MAX_REPLICAS_PER_PARTITION} are allowed."
        )
    previous: int | None = None
    for broker_id in sorted(replicas):
        if broker_id not in brokers:
            raise InvalidReplicaAssignmentError(
                f"The manual partition assignment includes broker {broker_id}, but no such"
                " broker is registered."
            )
        if broker_id == previous:
            raise InvalidReplicaAssignmentError(
                f"The manual partition assignment includes the broker {broker_id} more than once."
            )
        previous = broker_id
    if replication_factor is not None and len(replicas) != replication_factor:
        raise InvalidReplicaAssignmentError(
            f"The manual partition assignment includes a partition with {len(replicas)}"
            " replica(s), but this is not consistent with previous partitions, which have"
            f" {replication_factor} replica(s)."
        )


def validate_new_topic_assignment(
    assignments: Iterable[tuple[int, Sequence[int]]], *, brokers: Collection[int]
) -> tuple[tuple[int, ...], ...]:
    """``(partition index, replicas)`` pairs of a new topic -> replicas by partition 0..n-1."""
    by_partition: dict[int, tuple[int, ...]] = {}
    replication_factor: int | None = None
    for partition, replicas in assignments:
        if partition in by_partition:
            raise InvalidReplicaAssignmentError(
                f"Found multiple manual partition assignments for partition {partition}"
            )
        validate_manual_partition_assignment(
            replicas, replication_factor=replication_factor, brokers=brokers
        )
        replication_factor = len(replicas)
        by_partition[partition] = tuple(replicas)
    if any(p not in by_partition for p in range(len(by_partition))):
        raise InvalidReplicaAssignmentError(
            "partitions should be a consecutive 0-based integer sequence"
        )
    return tuple(by_partition[p] for p in range(len(by_partition)))


def validate_added_partitions_assignment(
    assignments: Sequence[Sequence[int]],
    *,
    added: int,
    replication_factor: int,
    brokers: Collection[int],
) -> tuple[tuple[int, ...], ...]:
    """The replicas of the partitions CreatePartitions adds, in partition order."""
    if len(assignments) != added:
        raise InvalidReplicaAssignmentError(
            f"Attempted to add {added} additional partition(s), but only"
            f" {len(assignments)} assignment(s) were specified."
        )
    for replicas in assignments:
        validate_manual_partition_assignment(
            replicas, replication_factor=replication_factor, brokers=brokers
        )
    return tuple(tuple(replicas) for replicas in assignments)
