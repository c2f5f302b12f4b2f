"""A committed offset (Kafka's ``OffsetAndMetadata``), as the group cache, the pending
transactional commits and ``__consumer_offsets`` records hold it."""

from __future__ import annotations

from dataclasses import dataclass

NO_LEADER_EPOCH = -1
NO_TIMESTAMP = -1


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetAndMetadata:
    """A committed offset (Kafka's ``OffsetAndMetadata``); -1 means "none" for the epoch and
    the expire timestamp."""

    offset: int
    leader_epoch: int = NO_LEADER_EPOCH
    metadata: str = ""
    commit_timestamp_ms: int
    expire_timestamp_ms: int = NO_TIMESTAMP

    def __post_init__(self) -> None:
        if self.leader_epoch < NO_LEADER_EPOCH:
            raise ValueError(f"leader epoch {self.leader_epoch} must be >= -1")
