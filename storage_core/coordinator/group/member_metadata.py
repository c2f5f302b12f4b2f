"""One member of a classic group (Kafka's ``MemberMetadata``) and the answers it waits for.

``MemberMetadata`` holds a member's identity, timeouts, protocols and assignment, and the
callbacks of its parked JoinGroup / SyncGroup; ``JoinGroupResult`` and ``SyncGroupResult``
are what those callbacks are answered with (Kafka's ``JoinGroupResult`` / ``SyncGroupResult``
of ``GroupCoordinator``); ``MemberSummary`` is the member in DescribeGroups.

Thread safety: none. The coordinator mutates members only from its asyncio loop.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from storage_core.errors import StorageError

# The member id of a member that has not been given one yet (Kafka's UNKNOWN_MEMBER_ID).
UNKNOWN_MEMBER_ID = ""
NO_GENERATION = -1


# ====================================================================== values
@dataclass(frozen=True, slots=True, kw_only=True)
class JoinedMember:
    """One member as the leader sees it in its JoinGroup response."""

    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class JoinGroupResult:
    """The answer to one JoinGroup; ``members`` is non-empty for the leader only."""

    member_id: str
    generation_id: int = NO_GENERATION
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str = ""
    members: tuple[JoinedMember, ...] = ()
    skip_assignment: bool = False
    error: StorageError | None = None

    @staticmethod
    def failed(member_id: str, error: StorageError) -> JoinGroupResult:
        return JoinGroupResult(member_id=member_id, error=error)


@dataclass(frozen=True, slots=True, kw_only=True)
class SyncGroupResult:
    """The answer to one SyncGroup: the member's assignment, or an error."""

    assignment: bytes = b""
    protocol_type: str | None = None
    protocol_name: str | None = None
    error: StorageError | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class MemberSummary:
    """One member in DescribeGroups (metadata and assignment are empty unless Stable)."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


JoinCallback = Callable[[JoinGroupResult], None]
SyncCallback = Callable[[SyncGroupResult], None]


# ====================================================================== members
class MemberMetadata:
    """One member of a group: identity, timeouts, protocols, assignment and pending answers.

    ``supported_protocols`` are (name, metadata) pairs in the member's order of preference.
    ``awaiting_join_callback`` / ``awaiting_sync_callback`` are set while a JoinGroup or
    SyncGroup of the member waits for the rebalance to progress. ``heartbeat_deadline_ms``
    is when the member expires unless it heartbeats (or is waiting in a rebalance).
    """

    __slots__ = (
        "assignment",
        "awaiting_join_callback",
        "awaiting_sync_callback",
        "client_host",
        "client_id",
        "group_instance_id",
        "heartbeat_deadline_ms",
        "is_new",
        "member_id",
        "protocol_type",
        "rebalance_timeout_ms",
        "session_timeout_ms",
        "supported_protocols",
    )

    def __init__(
        self,
        *,
        member_id: str,
        group_instance_id: str | None,
        client_id: str,
        client_host: str,
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        protocol_type: str,
        supported_protocols: Sequence[tuple[str, bytes]],
    ) -> None:
        if not member_id:
            raise ValueError("a member needs a non-empty member id")
        if not supported_protocols:
            raise ValueError(f"member {member_id} supports no protocol")
        self.member_id = member_id
        self.group_instance_id = group_instance_id
        self.client_id = client_id
        self.client_host = client_host
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.session_timeout_ms = session_timeout_ms
        self.protocol_type = protocol_type
        self.supported_protocols: tuple[tuple[str, bytes], ...] = tuple(supported_protocols)
        self.assignment = b""
        self.awaiting_join_callback: JoinCallback | None = None
        self.awaiting_sync_callback: SyncCallback | None = None
        self.is_new = False
        self.heartbeat_deadline_ms = 0

    @property
    def is_awaiting_join(self) -> bool:
        return self.awaiting_join_callback is not None

    @property
    def is_awaiting_sync(self) -> bool:
        return self.awaiting_sync_callback is not None

    @property
    def protocol_names(self) -> list[str]:
        return [name for name, _metadata in self.supported_protocols]

    def metadata(self, protocol: str) -> bytes:
        """The member's metadata for ``protocol`` (its subscription, for consumers)."""
        for name, metadata in self.supported_protocols:
            if name == protocol:
                return metadata
        raise ValueError(f"member {self.member_id} does not support protocol {protocol!r}")

    def matches(self, protocols: Sequence[tuple[str, bytes]]) -> bool:
        """True when a rejoin brings exactly the protocols (and metadata) already known."""
        return tuple(protocols) == self.supported_protocols

    def vote(self, candidates: Iterable[str]) -> str:
        """The member's most preferred protocol among ``candidates``."""
        allowed = set(candidates)
        for name in self.protocol_names:
            if name in allowed:
                return name
        raise ValueError(f"member {self.member_id} supports none of {sorted(allowed)}")

    def should_keep_alive(self) -> bool:
        """A missed heartbeat is forgiven while the member waits inside a rebalance.

        Members that joined before (not new) may stop heartbeating while their JoinGroup is
        parked, and every member may while its SyncGroup waits for the leader.
        """
        if self.is_awaiting_join:
            return not self.is_new
        return self.is_awaiting_sync

    def summary(self, protocol: str | None) -> MemberSummary:
        return MemberSummary(
            member_id=self.member_id,
            group_instance_id=self.group_instance_id,
            client_id=self.client_id,
            client_host=self.client_host,
            metadata=self.metadata(protocol) if protocol is not None else b"",
            assignment=self.assignment if protocol is not None else b"",
        )

    def __repr__(self) -> str:
        return (
            f"MemberMetadata({self.member_id}, client_id={self.client_id},"
            f" protocols={self.protocol_names})"
        )
