"""Leader election rules of the controller, as Kafka's ``Election`` and
``PartitionLeaderElectionAlgorithms`` (ZooKeeper mode). Pure: the controller passes what it
knows (assignment, current state, live brokers) and writes the result to ZooKeeper with a
conditional update; every new leader is the old leader epoch + 1.

    strategy             candidate: first replica in assignment order that is    new ISR
    offline              live and in the ISR; else, if unclean election is        live ISR,
                         enabled, live (a data-loss risk: the caller logs it)     or [leader]
    preferred replica    the first replica only, if live and in the ISR          unchanged
    reassignment         (of the target replicas) live and in the ISR             unchanged
    controlled shutdown  live, in the ISR and not shutting down                   ISR - stopping

No candidate: no election (the partition stays offline, or keeps its leader for the preferred
and controlled-shutdown cases). A broker going offline leaves every ISR it is in, except the
last member, which stays so that the partition's last in-sync replica is remembered (Kafka's
``doRemoveReplicasFromIsr``); a leader going offline leaves the partition without a leader.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from storage_core.zk.zk_data import NO_LEADER, LeaderAndIsr


class ElectionStrategy(enum.Enum):
    OFFLINE = "offline"
    PREFERRED_REPLICA = "preferred_replica"
    REASSIGNMENT = "reassignment"
    CONTROLLED_SHUTDOWN = "controlled_shutdown"


@dataclass(frozen=True, slots=True, kw_only=True)
class ElectionResult:
    """The state to write (None: no leader could be elected) and whether the new leader was
    out of the ISR (an unclean election: records acknowledged by the old ISR may be lost)."""

    new_state: LeaderAndIsr | None
    unclean: bool = False


def _bump(
    state: LeaderAndIsr, leader: int, isr: Sequence[int], controller_epoch: int
) -> LeaderAndIsr:
    return LeaderAndIsr(
        leader=leader,
        leader_epoch=state.leader_epoch + 1,
        isr=tuple(isr),
        controller_epoch=controller_epoch,
        zk_version=state.zk_version,
    )


def elect_offline_leader(
    assignment: Sequence[int],
    state: LeaderAndIsr,
    live_brokers: Collection[int],
    *,
    unclean_leader_election_enable: bool,
    controller_epoch: int,
) -> ElectionResult:
    """A new or offline partition: the first live replica in the ISR, else (unclean) the first
    live replica with an ISR of itself alone."""
    clean = next((b for b in assignment if b in live_brokers and b in state.isr), None)
    if clean is not None:
        isr = [b for b in state.isr if b in live_brokers]
        return ElectionResult(new_state=_bump(state, clean, isr, controller_epoch))
    if unclean_leader_election_enable:
        unclean = next((b for b in assignment if b in live_brokers), None)
        if unclean is not None:
            return ElectionResult(
                new_state=_bump(state, unclean, [unclean], controller_epoch), unclean=True
            )
    return ElectionResult(new_state=None)


def elect_preferred_leader(
    assignment: Sequence[int],
    state: LeaderAndIsr,
    live_brokers: Collection[int],
    *,
    controller_epoch: int,
) -> ElectionResult:
    """The preferred replica (first of the assignment) if it is live and in the ISR."""
    if assignment and assignment[0] in live_brokers and assignment[0] in state.isr:
        return ElectionResult(new_state=_bump(state, assignment[0], state.isr, controller_epoch))
    return ElectionResult(new_state=None)


def elect_reassignment_leader(
    target_replicas: Sequence[int],
    state: LeaderAndIsr,
    live_brokers: Collection[int],
    *,
    controller_epoch: int,
) -> ElectionResult:
    """During a reassignment: the first target replica that is live and in the ISR."""
    leader = next((b for b in target_replicas if b in live_brokers and b in state.isr), None)
    if leader is None:
        return ElectionResult(new_state=None)
    return ElectionResult(new_state=_bump(state, leader, state.isr, controller_epoch))


def elect_controlled_shutdown_leader(
    assignment: Sequence[int],
    state: LeaderAndIsr,
    live_brokers: Collection[int],
    shutting_down: Collection[int],
    *,
    controller_epoch: int,
) -> ElectionResult:
    """The leader is shutting down: the first live ISR member that is not; the brokers
    shutting down leave the ISR."""
    leader = next(
        (b for b in assignment if b in live_brokers and b in state.isr and b not in shutting_down),
        None,
    )
    if leader is None:
        return ElectionResult(new_state=None)
    isr = [b for b in state.isr if b not in shutting_down]
    return ElectionResult(new_state=_bump(state, leader, isr, controller_epoch))


def remove_replica_from_isr(
    state: LeaderAndIsr, replica: int, *, controller_epoch: int
) -> LeaderAndIsr | None:
    """The state once ``replica``'s broker is offline, or None when it is not in the ISR (no
    change). The last ISR member stays; a leader that leaves leaves no leader."""
    if replica not in state.isr:
        return None
    leader = NO_LEADER if state.leader == replica else state.leader
    isr = state.isr if len(state.isr) == 1 else tuple(b for b in state.isr if b != replica)
    if leader == state.leader and isr == state.isr:
        return None  # already offline with its last in-sync replica remembered
    return _bump(state, leader, isr, controller_epoch)


def initial_leader_and_isr(
    assignment: Sequence[int],
    live_brokers: Collection[int],
    *,
    controller_epoch: int,
    leader_epoch: int = 0,
) -> LeaderAndIsr | None:
    """A new partition: its live assigned replicas form the ISR and the first leads at
    ``leader_epoch`` (0 but for a restored topic). None when no assigned replica is alive: as
    in Kafka, the partition stays new (no state znode) until the controller retries."""
    live = [b for b in assignment if b in live_brokers]
    if not live:
        return None
    return LeaderAndIsr(
        leader=live[0],
        leader_epoch=leader_epoch,
        isr=tuple(live),
        controller_epoch=controller_epoch,
    )
