"""GroupMetadata: the state machine table, members, protocols and leader election."""

from __future__ import annotations

import pytest

from storage_core.coordinator.group.errors import IllegalGroupStateTransitionError
from storage_core.coordinator.group.group_metadata import (
    GroupMetadata,
    GroupState,
    is_valid_transition,
)
from storage_core.coordinator.group.member_metadata import JoinGroupResult, MemberMetadata

E, P, C, S, D = (
    GroupState.EMPTY,
    GroupState.PREPARING_REBALANCE,
    GroupState.COMPLETING_REBALANCE,
    GroupState.STABLE,
    GroupState.DEAD,
)
ALLOWED = {
    (E, P),
    (P, C),
    (P, E),
    (C, S),
    (C, P),
    (S, P),
    (E, D),
    (P, D),
    (C, D),
    (S, D),
}


def member(member_id: str, *protocols: str, rebalance_timeout_ms: int = 30_000) -> MemberMetadata:
    return MemberMetadata(
        member_id=member_id,
        group_instance_id=None,
        client_id=member_id.split("-", maxsplit=1)[0],
        client_host="/127.0.0.1",
        rebalance_timeout_ms=rebalance_timeout_ms,
        session_timeout_ms=10_000,
        protocol_type="consumer",
        supported_protocols=[(p, f"{member_id}:{p}".encode()) for p in protocols or ("range",)],
    )


def noop(_result: JoinGroupResult) -> None:
    return None


@pytest.mark.parametrize("current", list(GroupState))
@pytest.mark.parametrize("target", list(GroupState))
def test_transition_table(current: GroupState, target: GroupState) -> None:
    expected = current is target or (current, target) in ALLOWED
    assert is_valid_transition(current, target) is expected
    group = GroupMetadata("g", now_ms=0, initial_state=current)
    if expected:
        group.transition_to(target, now_ms=5)
        assert group.state is target
    else:
        with pytest.raises(IllegalGroupStateTransitionError, match=current.value):
            group.transition_to(target, now_ms=5)
        assert group.state is current


def test_repeating_the_state_changes_nothing() -> None:
    group = GroupMetadata("g", now_ms=1)
    group.transition_to(GroupState.EMPTY, now_ms=99)
    assert group.current_state_timestamp_ms == 1


def test_state_names_are_kafkas() -> None:
    assert [s.value for s in GroupState] == [
        "Empty",
        "PreparingRebalance",
        "CompletingRebalance",
        "Stable",
        "Dead",
    ]


def test_first_member_sets_protocol_type_and_leads() -> None:
    group = GroupMetadata("g", now_ms=0)
    group.add(member("a-1"), noop)
    group.add(member("b-1"), noop)
    assert group.protocol_type == "consumer"
    assert group.leader_id == "a-1"
    assert group.num_members_awaiting_join == 2
    assert group.has_all_members_joined()


def test_removing_the_leader_hands_leadership_to_the_next_member() -> None:
    group = GroupMetadata("g", now_ms=0)
    group.add(member("a-1"))
    group.add(member("b-1"))
    group.remove("a-1")
    assert group.leader_id == "b-1"
    group.remove("b-1")
    assert group.leader_id is None
    assert group.remove("nobody") is None


def test_pending_members_block_join_completion() -> None:
    group = GroupMetadata("g", now_ms=0)
    group.add(member("a-1"), noop)
    group.add_pending_member("b-2")
    assert not group.has_all_members_joined()
    assert group.remove_pending_member("b-2")
    assert group.has_all_members_joined()


def test_protocol_selection_prefers_the_common_choice() -> None:
    group = GroupMetadata("g", now_ms=0, initial_state=GroupState.PREPARING_REBALANCE)
    group.add(member("a-1", "roundrobin", "range"))
    group.add(member("b-1", "range", "roundrobin"))
    group.add(member("c-1", "range", "sticky"))
    assert group.candidate_protocols() == ["range"]
    assert group.select_protocol() == "range"
    assert group.supports_protocols("consumer", ["range"])
    assert not group.supports_protocols("consumer", ["roundrobin"])
    assert not group.supports_protocols("connect", ["range"])


def test_votes_decide_between_common_protocols() -> None:
    group = GroupMetadata("g", now_ms=0)
    group.add(member("a-1", "range", "roundrobin"))
    group.add(member("b-1", "roundrobin", "range"))
    group.add(member("c-1", "roundrobin", "range"))
    assert group.select_protocol() == "roundrobin"


def test_empty_group_accepts_any_protocol_type_but_needs_one() -> None:
    group = GroupMetadata("g", now_ms=0)
    assert group.supports_protocols("connect", ["x"])
    assert not group.supports_protocols("", ["x"])
    assert not group.supports_protocols("consumer", [])


def test_next_generation_with_and_without_members() -> None:
    group = GroupMetadata("g", now_ms=0)
    group.transition_to(GroupState.PREPARING_REBALANCE, now_ms=1)
    group.add(member("a-1", "range"), noop)
    group.init_next_generation(now_ms=2)
    assert (group.state, group.generation_id, group.protocol_name) == (C, 1, "range")
    assert [m.member_id for m in group.current_member_metadata()] == ["a-1"]
    assert group.current_member_metadata()[0].metadata == b"a-1:range"
    group.transition_to(GroupState.PREPARING_REBALANCE, now_ms=3)
    group.remove("a-1")
    group.init_next_generation(now_ms=4)
    assert (group.state, group.generation_id, group.protocol_name) == (E, 2, None)


def test_leader_moves_to_a_member_that_rejoined() -> None:
    group = GroupMetadata("g", now_ms=0)
    group.add(member("a-1"))
    group.add(member("b-1"), noop)
    assert group.leader_id == "a-1"
    assert group.maybe_elect_new_joined_leader()
    assert group.leader_id == "b-1"
    assert [m.member_id for m in group.not_yet_rejoined_members()] == ["a-1"]


def test_join_callback_fires_once_and_updates_the_count() -> None:
    answers: list[JoinGroupResult] = []
    group = GroupMetadata("g", now_ms=0)
    a = member("a-1")
    group.add(a, answers.append)
    result = JoinGroupResult(member_id="a-1", generation_id=1)
    group.maybe_invoke_join_callback(a, result)
    group.maybe_invoke_join_callback(a, result)
    assert answers == [result]
    assert group.num_members_awaiting_join == 0
    assert not a.is_awaiting_join


def test_update_member_replaces_protocols_and_counts() -> None:
    group = GroupMetadata("g", now_ms=0)
    a = member("a-1", "range")
    group.add(a)
    group.update_member(
        a, [("sticky", b"x")], rebalance_timeout_ms=5, session_timeout_ms=6, callback=noop
    )
    assert group.candidate_protocols() == ["sticky"]
    assert group.num_members_awaiting_join == 1
    assert (a.rebalance_timeout_ms, a.session_timeout_ms) == (5, 6)
    assert a.matches([("sticky", b"x")])
    assert not a.matches([("sticky", b"y")])


def test_rebalance_timeout_is_the_largest_of_the_members() -> None:
    group = GroupMetadata("g", now_ms=0)
    assert group.rebalance_timeout_ms() == 0
    group.add(member("a-1", rebalance_timeout_ms=1000))
    group.add(member("b-1", rebalance_timeout_ms=7000))
    assert group.rebalance_timeout_ms() == 7000


def test_summary_shows_metadata_only_when_stable() -> None:
    group = GroupMetadata("g", now_ms=0)
    group.transition_to(GroupState.PREPARING_REBALANCE, now_ms=1)
    a = member("a-1", "range")
    group.add(a, noop)
    group.init_next_generation(now_ms=2)
    a.assignment = b"assigned"
    summary = group.summary()
    assert (summary.state, summary.protocol, summary.members[0].metadata) == (C, "", b"")
    group.transition_to(GroupState.STABLE, now_ms=3)
    summary = group.summary()
    assert (summary.protocol_type, summary.protocol) == ("consumer", "range")
    assert summary.members[0].metadata == b"a-1:range"
    assert summary.members[0].assignment == b"assigned"


def test_a_member_needs_an_id_and_a_protocol() -> None:
    with pytest.raises(ValueError, match="non-empty member id"):
        member("")
    with pytest.raises(ValueError, match="supports no protocol"):
        MemberMetadata(
            member_id="a",
            group_instance_id=None,
            client_id="a",
            client_host="h",
            rebalance_timeout_ms=1,
            session_timeout_ms=1,
            protocol_type="consumer",
            supported_protocols=[],
        )
