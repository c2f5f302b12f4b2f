"""Partition reassignment rules of the controller (KIP-455, Kafka's ZooKeeper-mode
``KafkaController``): which requests are valid, what assignment a request leads to, and when a
reassignment is complete. Pure: the controller passes what it knows and writes the results.

    RS = the replicas written while reassigning = TRS + ORS (target first)
    ORS = origin replicas = RS - AR        TRS = target replicas = RS - RR
    AR = adding replicas = RS - ORS         RR = removing replicas = RS - TRS

A reassignment is complete once every target replica is in the ISR; then the leader moves to a
target replica if needed, RR leave the ISR and their brokers delete their replicas, and the
assignment becomes TRS with no AR or RR. Cancelling (no target) reassigns to ORS.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from storage_core.zk.zk_data import LeaderAndIsr, ReplicaAssignment

MAX_REPLICAS_PER_PARTITION = 1000  # a limit on everything; Kafka's own bound is Short.MAX_VALUE


@dataclass(frozen=True, slots=True, kw_only=True)
class ReassignmentOutcome:
    """One partition's answer to AlterPartitionReassignments: an error name (Kafka's, lower
    case) with its message, or no error."""

    error: str | None = None
    message: str | None = None


ACCEPTED = ReassignmentOutcome()
UNKNOWN_PARTITION = ReassignmentOutcome(
    error="unknown_topic_or_partition", message="The partition does not exist."
)
NO_REASSIGNMENT_IN_PROGRESS = ReassignmentOutcome(
    error="no_reassignment_in_progress",
    message="No partition reassignment is in progress for this topic-partition.",
)


def _invalid(message: str) -> ReassignmentOutcome:
    return ReassignmentOutcome(error="invalid_replica_assignment", message=message)


def validate_replicas(
    current: ReplicaAssignment,
    target: Sequence[int],
    live_brokers: Collection[int],
    *,
    allow_replication_factor_change: bool = True,
) -> ReassignmentOutcome | None:
    """The error of a target replica list, or None when it is valid (Kafka's
    ``validateReplicas``): not empty, no duplicates, no negative ids, every replica it adds on
    a live broker; with ``allow_replication_factor_change`` false (KIP-860), as many replicas
    as the partition has now."""
    if not target:
        return _invalid("Empty replica list specified in partition reassignment.")
    if len(target) > MAX_REPLICAS_PER_PARTITION:
        return _invalid(
            f"{len(target)} replicas specified in partition reassignment; at most"
            f" {MAX_REPLICAS_PER_PARTITION} are allowed."
        )
    if len(set(target)) != len(target):
        return _invalid(
            f"Duplicate replica ids in partition reassignment replica list: {list(target)}"
        )
    if any(r < 0 for r in target):
        return _invalid(f"Invalid broker id in replica list: {list(target)}")
    adding = current.reassign_to(target).adding_replicas
    if not set(adding) <= set(live_brokers):
        return _invalid(
            "Replica assignment has brokers that are not alive. Replica list:"
            f" {list(adding)}, live broker list: {sorted(live_brokers)}"
        )
    origin = current.origin_replicas
    if not allow_replication_factor_change and len(target) != len(origin):
        return ReassignmentOutcome(
            error="invalid_replication_factor",
            message=f"The replication factor is changed from {len(origin)} to {len(target)}",
        )
    return None


def build_reassignment(
    current: ReplicaAssignment, target: Sequence[int] | None
) -> ReplicaAssignment | None:
    """The assignment a request leads to (Kafka's ``maybeBuildReassignment``); ``target`` None
    cancels: back to the origin replicas. None when there is nothing to cancel."""
    if target is not None:
        return current.reassign_to(target)
    if current.is_being_reassigned:
        return current.reassign_to(current.origin_replicas)
    return None


def is_reassignment_complete(assignment: ReplicaAssignment, state: LeaderAndIsr | None) -> bool:
    """Nothing is reassigning, or every target replica is in the ISR."""
    if not assignment.is_being_reassigned:
        return True
    return state is not None and set(assignment.target_replicas) <= set(state.isr)


def leader_must_move(
    target_replicas: Sequence[int], state: LeaderAndIsr, live_brokers: Collection[int]
) -> bool:
    """At completion, the leader moves when it is not a target replica or is not alive (Kafka's
    ``moveReassignedPartitionLeaderIfRequired``); otherwise only its epoch is bumped."""
    return state.leader not in target_replicas or state.leader not in live_brokers
