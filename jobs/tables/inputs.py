"""Plain inputs of the quality tables: what the quality job gathers from the cluster.

- ``MetadataRecord``: one decoded ``__remote_log_metadata`` record with where and when it was
  appended (the record's timestamp is its publish time).
- ``RemoteObjectInfo`` (from ``storage_core``): one listed object, its key and size.
- ``PartitionState``: one partition's offsets, leader-epoch chain and retention configs.
- ``ReplicaState``: one replica of a partition on one broker: the partition's leadership
  (Metadata) and what the broker's log dir holds.
- ``CopyOffsets``: the HW and LSO one segment's copy was planned with (the copy run's
  ``copied-segments.json``, ``jobs.common.copied_segments``).

All frozen values; the builders never do I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from storage_core.common import Uuid
from storage_core.tiered.metadata.metadata import RemoteLogMetadata
from storage_core.tiered.remote_storage_manager import RemoteObjectInfo

__all__ = [
    "CopyOffsets",
    "MetadataRecord",
    "PartitionKey",
    "PartitionState",
    "RemoteObjectInfo",
    "ReplicaState",
]

# (topic id text, partition): a partition of one incarnation of a topic.
PartitionKey = tuple[str, int]


@dataclass(frozen=True, slots=True, kw_only=True)
class CopyOffsets:
    """The offsets one copied segment was planned with (both exclusive)."""

    high_watermark_at_copy: int
    last_stable_offset_at_copy: int


@dataclass(frozen=True, slots=True, kw_only=True)
class MetadataRecord:
    """A record of ``__remote_log_metadata``: its partition, offset, append time and event."""

    partition: int
    offset: int
    timestamp_ms: int
    event: RemoteLogMetadata


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionState:
    """One partition as the quality job saw it (KIP-405 names in the comments).

    Offsets: ``log_start_offset`` (inclusive), ``local_log_start_offset`` Lx (inclusive),
    ``high_watermark`` / ``last_stable_offset`` Ly / ``log_end_offset`` Lz (exclusive),
    ``highest_remote_offset`` the broker's ListOffsets -5 answer (inclusive; -1 none, ``None``
    not asked). ``leader_epoch_chain`` is ``(epoch, start offset)`` pairs, oldest first.
    """

    topic: str
    partition: int
    topic_id: Uuid
    log_start_offset: int
    local_log_start_offset: int
    high_watermark: int
    last_stable_offset: int
    log_end_offset: int
    highest_remote_offset: int | None
    leader_epoch_chain: tuple[tuple[int, int], ...]
    retention_ms: int
    retention_bytes: int
    segment_bytes: int

    @property
    def key(self) -> PartitionKey:
        return (str(self.topic_id), self.partition)


NO_LEADER = -1  # Metadata's leader id of a partition without a leader


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplicaState:
    """One replica of a partition on one broker, as the quality job saw it.

    Partition facts from Metadata: ``leader_id`` (``NO_LEADER``: none), ``leader_epoch``,
    ``replicas`` (the assignment) and ``isr``. Replica facts from the broker's log dir (all
    ``None`` when ``log_dir`` is ``None``: the broker's log dirs hold no directory of the
    partition): offsets as in ``PartitionState``; ``high_watermark_source`` says where the HW
    came from (``LIST_OFFSETS``: the leader's answer to ListOffsets -1, ``CHECKPOINT``: the
    log dir's ``replication-offset-checkpoint``); ``leader_epoch_entries`` the replica's
    ``leader-epoch-checkpoint`` as ``(epoch, start offset)`` pairs, oldest first.
    """

    topic: str
    partition: int
    topic_id: Uuid | None
    broker_id: int
    leader_id: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    log_dir: str | None
    log_start_offset: int | None = None
    local_log_start_offset: int | None = None
    high_watermark: int | None = None
    high_watermark_source: str | None = None
    log_end_offset: int | None = None
    leader_epoch_entries: tuple[tuple[int, int], ...] = ()

    @property
    def is_leader(self) -> bool:
        return self.broker_id == self.leader_id
