"""The controller's election rules, case by case as Kafka's Election and
PartitionLeaderElectionAlgorithms decide them."""

from __future__ import annotations

from storage_core.controller.election import (
    elect_controlled_shutdown_leader,
    elect_offline_leader,
    elect_preferred_leader,
    elect_reassignment_leader,
    initial_leader_and_isr,
    remove_replica_from_isr,
)
from storage_core.zk.zk_data import NO_LEADER, LeaderAndIsr


def _state(leader: int, epoch: int, isr: tuple[int, ...], version: int = 3) -> LeaderAndIsr:
    return LeaderAndIsr(
        leader=leader, leader_epoch=epoch, isr=isr, controller_epoch=1, zk_version=version
    )


def test_offline_election_takes_the_first_live_isr_member_in_assignment_order() -> None:
    state = _state(NO_LEADER, 4, (3, 2))
    result = elect_offline_leader(
        [1, 2, 3], state, {2, 3}, unclean_leader_election_enable=False, controller_epoch=2
    )
    assert result.new_state is not None
    assert (result.new_state.leader, result.new_state.leader_epoch) == (2, 5)
    assert result.new_state.isr == (3, 2)
    assert result.new_state.controller_epoch == 2
    assert result.new_state.zk_version == 3  # the conditional write names the version read
    assert not result.unclean


def test_offline_election_drops_dead_isr_members() -> None:
    result = elect_offline_leader(
        [1, 2, 3],
        _state(1, 0, (1, 2, 3)),
        {2},
        unclean_leader_election_enable=False,
        controller_epoch=1,
    )
    assert result.new_state is not None
    assert (result.new_state.leader, result.new_state.isr) == (2, (2,))


def test_no_live_isr_member_leaves_the_partition_offline_unless_unclean_is_enabled() -> None:
    state = _state(NO_LEADER, 7, (1,))
    clean = elect_offline_leader(
        [1, 2, 3], state, {2, 3}, unclean_leader_election_enable=False, controller_epoch=1
    )
    assert clean.new_state is None
    unclean = elect_offline_leader(
        [1, 2, 3], state, {3, 2}, unclean_leader_election_enable=True, controller_epoch=1
    )
    assert unclean.unclean
    assert unclean.new_state is not None
    assert (unclean.new_state.leader, unclean.new_state.leader_epoch) == (2, 8)
    assert unclean.new_state.isr == (2,)
    nobody = elect_offline_leader(
        [1, 2, 3], state, set(), unclean_leader_election_enable=True, controller_epoch=1
    )
    assert nobody.new_state is None


def test_preferred_replica_election_needs_the_first_replica_live_and_in_sync() -> None:
    state = _state(2, 3, (2, 1))
    result = elect_preferred_leader([1, 2], state, {1, 2}, controller_epoch=1)
    assert result.new_state is not None
    assert (result.new_state.leader, result.new_state.leader_epoch) == (1, 4)
    assert result.new_state.isr == (2, 1)
    assert (
        elect_preferred_leader([1, 2], _state(2, 3, (2,)), {1, 2}, controller_epoch=1).new_state
        is None
    )
    assert elect_preferred_leader([1, 2], state, {2}, controller_epoch=1).new_state is None


def test_reassignment_election_chooses_among_the_target_replicas() -> None:
    state = _state(1, 0, (1, 2, 3))
    result = elect_reassignment_leader([3, 2], state, {1, 2, 3}, controller_epoch=1)
    assert result.new_state is not None
    assert result.new_state.leader == 3
    assert elect_reassignment_leader([4], state, {1, 2, 3, 4}, controller_epoch=1).new_state is None


def test_controlled_shutdown_moves_leadership_off_the_stopping_broker() -> None:
    state = _state(1, 5, (1, 2, 3))
    result = elect_controlled_shutdown_leader([1, 2, 3], state, {1, 2, 3}, {1}, controller_epoch=1)
    assert result.new_state is not None
    assert (result.new_state.leader, result.new_state.leader_epoch) == (2, 6)
    assert result.new_state.isr == (2, 3)
    alone = elect_controlled_shutdown_leader(
        [1, 2], _state(1, 5, (1,)), {1, 2}, {1}, controller_epoch=1
    )
    assert alone.new_state is None


def test_an_offline_broker_leaves_the_isr_but_the_last_member_stays() -> None:
    follower_gone = remove_replica_from_isr(_state(1, 2, (1, 2)), 2, controller_epoch=1)
    assert follower_gone is not None
    assert (follower_gone.leader, follower_gone.isr, follower_gone.leader_epoch) == (1, (1,), 3)
    leader_gone = remove_replica_from_isr(_state(1, 2, (1, 2)), 1, controller_epoch=1)
    assert leader_gone is not None
    assert (leader_gone.leader, leader_gone.isr) == (NO_LEADER, (2,))
    last = remove_replica_from_isr(_state(1, 2, (1,)), 1, controller_epoch=1)
    assert last is not None
    assert (last.leader, last.isr) == (NO_LEADER, (1,))
    assert remove_replica_from_isr(_state(1, 2, (1,)), 3, controller_epoch=1) is None
    # already offline with the replica as its last ISR member: nothing to write
    assert remove_replica_from_isr(_state(NO_LEADER, 3, (1,)), 1, controller_epoch=1) is None


def test_a_new_partition_is_led_by_its_first_live_replica_at_epoch_0() -> None:
    state = initial_leader_and_isr([3, 1, 2], {1, 2}, controller_epoch=4)
    assert state is not None
    assert (state.leader, state.leader_epoch, state.isr, state.controller_epoch) == (
        1,
        0,
        (1, 2),
        4,
    )
    assert initial_leader_and_isr([3], {1, 2}, controller_epoch=4) is None
