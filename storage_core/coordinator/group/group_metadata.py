"""State of one classic consumer group (Kafka's ``GroupMetadata``; its members are in
``member_metadata``).

The group state machine (``is_valid_transition`` is the only table of allowed moves)::

                join            all members joined          leader's SyncGroup
     Empty -----------> PreparingRebalance ------------> CompletingRebalance -----------> Stable
       ^                 |      ^    ^   or rebalance timeout   |                            |
       |  nobody         |      |    |                          |                            |
       |  rejoined       |      |    +--- join, leave, expiry --+                            |
       +-----------------+      +--------- join (new member / leader / new metadata),        |
                                           leave, session expiry ---------------------------+

     any state ---> Dead     (the group is deleted or its offsets partition is unloaded)

* Empty: no members; offsets may still be committed (by members-less "simple" consumers).
* PreparingRebalance: waiting for every known member to send JoinGroup again.
* CompletingRebalance: a new generation exists; waiting for the leader's assignment.
* Stable: assignments handed out; members heartbeat.
* Dead: the group is gone; requests get COORDINATOR_NOT_AVAILABLE / UNKNOWN_MEMBER_ID.

Repeating the current state is accepted and changes nothing.

Thread safety: none. The coordinator mutates groups only from its asyncio loop.
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from storage_core.common import TopicPartition
from storage_core.coordinator.group.consumer_protocol import (
    CONSUMER_PROTOCOL_TYPE,
    subscribed_topics,
)
from storage_core.coordinator.group.errors import (
    FencedInstanceIdError,
    IllegalGroupStateTransitionError,
)
from storage_core.coordinator.group.member_metadata import (
    JoinCallback,
    JoinedMember,
    JoinGroupResult,
    MemberMetadata,
    MemberSummary,
    SyncGroupResult,
)
from storage_core.coordinator.group.offset_and_metadata import (
    OffsetAndMetadata,
)
from storage_core.coordinator.group.txn_offsets import (
    CommitRecordMetadataAndOffset,
    PendingTxnOffsetCommits,
    materialize,
)


class GroupState(enum.Enum):
    """The five states of a classic group; ``value`` is the name Kafka reports."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


_VALID_PREVIOUS_STATES: dict[GroupState, frozenset[GroupState]] = {
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.PREPARING_REBALANCE: frozenset(
        {GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY}
    ),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.DEAD: frozenset(GroupState),
}


def is_valid_transition(current: GroupState, target: GroupState) -> bool:
    """True when a group in ``current`` may move to ``target`` (staying put is always fine)."""
    return current is target or current in _VALID_PREVIOUS_STATES[target]


# ====================================================================== values
@dataclass(frozen=True, slots=True, kw_only=True)
class GroupSummary:
    """A group in DescribeGroups; ``protocol`` is empty unless the group is Stable."""

    state: GroupState
    protocol_type: str
    protocol: str
    members: tuple[MemberSummary, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupOverview:
    """A group in ListGroups."""

    group_id: str
    protocol_type: str
    state: GroupState


# ====================================================================== group
class GroupMetadata:
    """One group: state, generation, members and their protocols, and committed offsets.

    Invariants: ``leader_id`` names a member whenever there are members (None otherwise);
    ``num_members_awaiting_join`` counts members with a join callback; ``_supported`` counts,
    for each protocol name, the members that support it; ``_static_members`` maps the
    ``group.instance.id`` of every static member (KIP-345) to its current member id.
    ``subscribed_topics`` is what a consumer group consumes as of its current generation
    (None: not a consumer group, or not known).

    Offsets: ``committed`` holds each partition's committed offset with the offset of its
    batch in ``__consumer_offsets`` (what OffsetFetch answers); ``pending_offset_commits``
    the plain commits being written, ``pending_txn_offsets`` the transactional ones not
    decided yet (see ``txn_offsets``).
    """

    def __init__(
        self, group_id: str, *, now_ms: int, initial_state: GroupState = GroupState.EMPTY
    ) -> None:
        self.group_id = group_id
        self._state = initial_state
        self.current_state_timestamp_ms = now_ms
        self.generation_id = 0
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.leader_id: str | None = None
        self.new_member_added = False
        self.committed: dict[TopicPartition, CommitRecordMetadataAndOffset] = {}
        self.pending_offset_commits: dict[TopicPartition, OffsetAndMetadata] = {}
        self.pending_txn_offsets = PendingTxnOffsetCommits()
        self._members: dict[str, MemberMetadata] = {}
        self._pending_members: set[str] = set()
        self._static_members: dict[str, str] = {}
        self.subscribed_topics: frozenset[str] | None = None
        self._supported: Counter[str] = Counter()
        self._num_members_awaiting_join = 0

    # ------------------------------------------------------------------ state
    @property
    def state(self) -> GroupState:
        return self._state

    def is_in(self, state: GroupState) -> bool:
        return self._state is state

    def can_rebalance(self) -> bool:
        return self._state in _VALID_PREVIOUS_STATES[GroupState.PREPARING_REBALANCE]

    def transition_to(self, target: GroupState, *, now_ms: int) -> None:
        if not is_valid_transition(self._state, target):
            raise IllegalGroupStateTransitionError(
                f"group {self.group_id}: cannot move from {self._state.value} to {target.value}"
            )
        if self._state is target:
            return
        self._state = target
        self.current_state_timestamp_ms = now_ms

    # ------------------------------------------------------------------ members
    def has(self, member_id: str) -> bool:
        return member_id in self._members

    def get(self, member_id: str) -> MemberMetadata:
        return self._members[member_id]

    @property
    def members(self) -> list[MemberMetadata]:
        """The members in the order they joined."""
        return list(self._members.values())

    @property
    def size(self) -> int:
        return len(self._members)

    @property
    def num_members_awaiting_join(self) -> int:
        return self._num_members_awaiting_join

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def add(self, member: MemberMetadata, callback: JoinCallback | None = None) -> None:
        if member.member_id in self._members:
            raise ValueError(f"group {self.group_id}: member {member.member_id} already exists")
        instance_id = member.group_instance_id
        if instance_id is not None:
            if instance_id in self._static_members:
                raise ValueError(
                    f"group {self.group_id}: static member with group.instance.id"
                    f" {instance_id} is already member {self._static_members[instance_id]}"
                )
            self._static_members[instance_id] = member.member_id
        if not self._members:
            self.protocol_type = member.protocol_type
        if self.leader_id is None:
            self.leader_id = member.member_id
        self._members[member.member_id] = member
        self._supported.update(member.protocol_names)
        member.awaiting_join_callback = callback
        if callback is not None:
            self._num_members_awaiting_join += 1

    def remove(self, member_id: str) -> MemberMetadata | None:
        member = self._members.pop(member_id, None)
        if member is None:
            return None
        self._supported.subtract(member.protocol_names)
        self._supported += Counter()  # drops zero counts
        if member.is_awaiting_join:
            self._num_members_awaiting_join -= 1
        if member.group_instance_id is not None:
            self._static_members.pop(member.group_instance_id, None)
        if self.is_leader(member_id):
            self.leader_id = next(iter(self._members), None)
        return member

    # ------------------------------------------------------------------ static members
    def current_static_member_id(self, group_instance_id: str) -> str | None:
        """The member id that ``group_instance_id`` is mapped to, or None."""
        return self._static_members.get(group_instance_id)

    @property
    def static_member_count(self) -> int:
        return len(self._static_members)

    def replace_static_member(
        self, group_instance_id: str, old_member_id: str, new_member_id: str
    ) -> MemberMetadata:
        """A static member comes back under a new member id: everything else is kept.

        A JoinGroup or SyncGroup of the old member id still waiting is answered
        FENCED_INSTANCE_ID at once.
        """
        member = self._members.pop(old_member_id, None)
        if member is None:
            raise ValueError(
                f"group {self.group_id}: cannot replace member {old_member_id}: no such member"
            )
        fenced = FencedInstanceIdError(
            f"group {self.group_id}: member {old_member_id} was replaced by {new_member_id}"
            f" with the same group.instance.id {group_instance_id}"
        )
        self.maybe_invoke_join_callback(member, JoinGroupResult.failed(old_member_id, fenced))
        self.maybe_invoke_sync_callback(member, SyncGroupResult(error=fenced))
        member.member_id = new_member_id
        self._members[new_member_id] = member
        if self.is_leader(old_member_id):
            self.leader_id = new_member_id
        self._static_members[group_instance_id] = new_member_id
        return member

    def update_member(
        self,
        member: MemberMetadata,
        protocols: Sequence[tuple[str, bytes]],
        *,
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        callback: JoinCallback | None,
    ) -> None:
        self._supported.subtract(member.protocol_names)
        self._supported.update(name for name, _metadata in protocols)
        self._supported += Counter()
        member.supported_protocols = tuple(protocols)
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        if callback is not None and not member.is_awaiting_join:
            self._num_members_awaiting_join += 1
        elif callback is None and member.is_awaiting_join:
            self._num_members_awaiting_join -= 1
        member.awaiting_join_callback = callback

    def maybe_invoke_join_callback(self, member: MemberMetadata, result: JoinGroupResult) -> None:
        callback = member.awaiting_join_callback
        if callback is None:
            return
        member.awaiting_join_callback = None
        self._num_members_awaiting_join -= 1
        callback(result)

    @staticmethod
    def maybe_invoke_sync_callback(member: MemberMetadata, result: SyncGroupResult) -> bool:
        callback = member.awaiting_sync_callback
        if callback is None:
            return False
        member.awaiting_sync_callback = None
        callback(result)
        return True

    # ------------------------------------------------------------------ pending members
    def add_pending_member(self, member_id: str) -> None:
        """KIP-394: a member id handed out with MEMBER_ID_REQUIRED, not yet used to join."""
        self._pending_members.add(member_id)

    def remove_pending_member(self, member_id: str) -> bool:
        if member_id in self._pending_members:
            self._pending_members.discard(member_id)
            return True
        return False

    def has_pending_member(self, member_id: str) -> bool:
        return member_id in self._pending_members

    @property
    def num_pending_members(self) -> int:
        return len(self._pending_members)

    # ------------------------------------------------------------------ rebalance
    def has_all_members_joined(self) -> bool:
        return self.size == self._num_members_awaiting_join and not self._pending_members

    def not_yet_rejoined_members(self) -> list[MemberMetadata]:
        return [m for m in self._members.values() if not m.is_awaiting_join]

    def rebalance_timeout_ms(self) -> int:
        """The longest rebalance timeout of any member: how long a rebalance may wait."""
        return max((m.rebalance_timeout_ms for m in self._members.values()), default=0)

    def supports_protocols(self, protocol_type: str, protocol_names: Iterable[str]) -> bool:
        """Can a member with this protocol type and these protocols join?"""
        names = set(protocol_names)
        if self.is_in(GroupState.EMPTY) or not self._members:
            return bool(protocol_type) and bool(names)
        return self.protocol_type == protocol_type and any(
            self._supported[name] == self.size for name in names
        )

    def candidate_protocols(self) -> list[str]:
        """Protocols every member supports, in the first member's order of preference."""
        first = next(iter(self._members.values()), None)
        if first is None:
            return []
        return [name for name in first.protocol_names if self._supported[name] == self.size]

    def select_protocol(self) -> str:
        """The candidate protocol most members prefer (ties: the first member's preference)."""
        candidates = self.candidate_protocols()
        if not candidates:
            raise ValueError(f"group {self.group_id}: the members share no protocol")
        votes = Counter(member.vote(candidates) for member in self._members.values())
        return max(candidates, key=lambda name: (votes[name], -candidates.index(name)))

    def maybe_elect_new_joined_leader(self) -> bool:
        """Make sure the leader is a member that rejoined; False when nobody rejoined."""
        if self.leader_id is None:
            return False
        leader = self._members.get(self.leader_id)
        if leader is not None and leader.is_awaiting_join:
            return True
        for member in self._members.values():
            if member.is_awaiting_join:
                self.leader_id = member.member_id
                return True
        return False

    def init_next_generation(self, *, now_ms: int) -> None:
        """Start a new generation: CompletingRebalance with members, Empty without."""
        self.generation_id += 1
        if self._members:
            self.protocol_name = self.select_protocol()
            self.update_subscribed_topics()
            self.transition_to(GroupState.COMPLETING_REBALANCE, now_ms=now_ms)
        else:
            self.protocol_name = None
            self.update_subscribed_topics()
            self.transition_to(GroupState.EMPTY, now_ms=now_ms)
        self.current_state_timestamp_ms = now_ms

    # ------------------------------------------------------------------ subscriptions
    @property
    def is_consumer_group(self) -> bool:
        return self.protocol_type == CONSUMER_PROTOCOL_TYPE

    def update_subscribed_topics(self) -> None:
        """Recompute ``subscribed_topics`` (at a new generation and when loaded)."""
        protocol = self.protocol_name
        self.subscribed_topics = subscribed_topics(
            self.protocol_type,
            protocol,
            (m.metadata(protocol) for m in self._members.values())
            if protocol is not None
            else (b"" for _ in self._members),
        )

    def is_subscribed_to_topic(self, topic: str) -> bool:
        """True when the group consumes ``topic``, or when that is not known (to be safe)."""
        topics = self.subscribed_topics
        return topics is None or topic in topics

    # ------------------------------------------------------------------ offsets
    @property
    def offsets(self) -> dict[TopicPartition, OffsetAndMetadata]:
        """The committed offset of each partition that has one."""
        return {tp: commit.offset for tp, commit in self.committed.items()}

    @property
    def has_offsets(self) -> bool:
        """Committed offsets, or commits under way or undecided (Kafka's ``hasOffsets``)."""
        return bool(self.committed or self.pending_offset_commits or self.pending_txn_offsets)

    def has_pending_offset_commits_for(self, tp: TopicPartition) -> bool:
        """A commit of ``tp`` is being written or waits for its transaction (Kafka's
        ``hasPendingOffsetCommitsForTopicPartition``): OffsetFetch with require_stable
        answers UNSTABLE_OFFSET_COMMIT."""
        return tp in self.pending_offset_commits or self.pending_txn_offsets.has_partition(tp)

    def prepare_offset_commit(self, offsets: Mapping[TopicPartition, OffsetAndMetadata]) -> None:
        self.pending_offset_commits.update(offsets)

    def on_offset_commit_append(
        self, offsets: Mapping[TopicPartition, OffsetAndMetadata], append_offset: int
    ) -> None:
        """A plain commit is acknowledged: it replaces each committed offset whose batch
        precedes it (Kafka's ``onOffsetCommitAppend``)."""
        for tp, offset in offsets.items():
            commit = CommitRecordMetadataAndOffset(append_offset=append_offset, offset=offset)
            current = self.committed.get(tp)
            if current is None or current.older_than(commit):
                self.committed[tp] = commit
            if self.pending_offset_commits.get(tp) == offset:
                del self.pending_offset_commits[tp]

    def fail_pending_offset_write(
        self, offsets: Mapping[TopicPartition, OffsetAndMetadata]
    ) -> None:
        for tp, offset in offsets.items():
            if self.pending_offset_commits.get(tp) == offset:
                del self.pending_offset_commits[tp]

    def complete_pending_txn_offset_commit(
        self, producer_id: int, *, is_commit: bool
    ) -> list[TopicPartition]:
        """The transaction's marker is written: its offsets become committed ones (commit)
        or are dropped (abort); returns the partitions whose committed offset changed."""
        decided = self.pending_txn_offsets.complete(producer_id)
        if not is_commit:
            return []
        return materialize(self.committed, decided, group_id=self.group_id, producer_id=producer_id)

    def remove_offsets(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        """Forget the committed and pending offsets of ``partitions``; returns the committed
        ones that existed."""
        removed = {}
        wanted = list(partitions)
        for tp in wanted:
            self.pending_offset_commits.pop(tp, None)
            commit = self.committed.pop(tp, None)
            if commit is not None:
                removed[tp] = commit.offset
        self.pending_txn_offsets.remove_partitions(wanted)
        return removed

    def current_member_metadata(self) -> tuple[JoinedMember, ...]:
        """Every member's metadata for the selected protocol (the leader's JoinGroup answer)."""
        protocol = self.protocol_name
        if protocol is None:
            raise ValueError(f"group {self.group_id}: no protocol selected yet")
        return tuple(
            JoinedMember(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                metadata=m.metadata(protocol),
            )
            for m in self._members.values()
        )

    def all_members_awaiting_sync(self) -> Iterator[MemberMetadata]:
        return (m for m in self._members.values() if m.is_awaiting_sync)

    # ------------------------------------------------------------------ descriptions
    def summary(self) -> GroupSummary:
        stable = self.is_in(GroupState.STABLE)
        protocol = self.protocol_name if stable else None
        return GroupSummary(
            state=self._state,
            protocol_type=self.protocol_type or "",
            protocol=(protocol or "") if stable else "",
            members=tuple(m.summary(protocol) for m in self._members.values()),
        )

    def overview(self) -> GroupOverview:
        return GroupOverview(
            group_id=self.group_id, protocol_type=self.protocol_type or "", state=self._state
        )

    def __repr__(self) -> str:
        return (
            f"GroupMetadata({self.group_id}, state={self._state.value},"
            f" generation={self.generation_id}, members={list(self._members)},"
            f" leader={self.leader_id})"
        )
