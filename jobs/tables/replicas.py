"""``replicas``: one row per replica of a partition on a broker (schema in ``jobs.tables.schemas``).

``build_replicas`` turns the ``ReplicaState`` values into rows and derives the check columns
by comparing each replica with its partition's leader replica; ``leader_replicas`` gives the
leader replica of each partition (whose leader-epoch lineage the remote segments must lie
on). Pure, like the other builders.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from jobs.tables.inputs import NO_LEADER, PartitionKey, ReplicaState
from jobs.tables.schemas import Row
from storage_core.log.leader_epoch_cache import EpochEntry
from storage_core.tiered.operations.lineage import epoch_entries_in_range

LEADER = "leader"
FOLLOWER = "follower"


def _entries(replica: ReplicaState) -> list[EpochEntry]:
    return [EpochEntry(epoch, start) for epoch, start in replica.leader_epoch_entries]


def entries_text(entries: Sequence[EpochEntry]) -> str:
    """``[epoch@start ...]``, how the reasons show a leader-epoch lineage."""
    return "[" + " ".join(f"{e.epoch}@{e.start_offset}" for e in entries) + "]"


def epochs_divergence(follower: ReplicaState, leader: ReplicaState) -> str | None:
    """How ``follower``'s leader-epoch entries differ from ``leader``'s below the follower's
    log end offset, or ``None`` when they agree (or either replica was not read).

    Both are compared over ``[max(local log starts), follower LEO)``: each side's entries
    covering that range, the first moved up to its start (Kafka's ``epochEntriesInRange``).
    A follower ahead of its leader (entries at or past the leader's LEO) differs too.
    """
    if follower.log_end_offset is None or leader.log_end_offset is None:
        return None
    if follower.local_log_start_offset is None or leader.local_log_start_offset is None:
        return None
    low = max(follower.local_log_start_offset, leader.local_log_start_offset)
    high = follower.log_end_offset
    if low >= high:
        return None
    mine = epoch_entries_in_range(_entries(follower), low, high)
    theirs = epoch_entries_in_range(_entries(leader), low, high)
    if mine == theirs:
        return None
    return (
        f"offsets {low}..{high - 1}: broker {follower.broker_id} has {entries_text(mine)},"
        f" leader {leader.broker_id} has {entries_text(theirs)}"
    )


def leader_replicas(replicas: Iterable[ReplicaState]) -> dict[PartitionKey, ReplicaState]:
    """The leader replica of each partition whose leader's log dir was read, by topic id and
    partition."""
    return {
        (str(r.topic_id), r.partition): r
        for r in replicas
        if r.is_leader and r.topic_id is not None and r.log_end_offset is not None
    }


def _base_row(replica: ReplicaState) -> Row:
    return {
        "topic": replica.topic,
        "partition": replica.partition,
        "topic_id": None if replica.topic_id is None else str(replica.topic_id),
        "broker_id": replica.broker_id,
        "role": LEADER if replica.is_leader else FOLLOWER,
        "leader_id": replica.leader_id,
        "leader_epoch": replica.leader_epoch,
        "replicas": list(replica.replicas),
        "isr": list(replica.isr),
        "in_isr": replica.broker_id in replica.isr,
        "log_dir": replica.log_dir,
        "log_start_offset": replica.log_start_offset,
        "local_log_start_offset": replica.local_log_start_offset,
        "high_watermark": replica.high_watermark,
        "high_watermark_source": replica.high_watermark_source,
        "log_end_offset": replica.log_end_offset,
        "leader_epoch_entries": [
            {"epoch": epoch, "start_offset": start} for epoch, start in replica.leader_epoch_entries
        ],
    }


def build_replicas(replicas: Iterable[ReplicaState]) -> list[Row]:
    """The ``replicas`` rows (see ``jobs.tables.schemas``), by topic, partition, broker."""
    states = sorted(replicas, key=lambda r: (r.topic, r.partition, r.broker_id))
    leaders = {(r.topic, r.partition): r for r in states if r.is_leader}
    rows = []
    for replica in states:
        row = _base_row(replica)
        leader = leaders.get((replica.topic, replica.partition))
        partition_hw = None if leader is None else leader.high_watermark
        offline = replica.leader_id == NO_LEADER
        leo = replica.log_end_offset
        row["partition_high_watermark"] = partition_hw
        row["epochs_diverge_from_leader"] = (
            None if leader is None or replica.is_leader else epochs_divergence(replica, leader)
        )
        row["isr_log_end_below_high_watermark"] = (
            row["in_isr"] and leo is not None and partition_hw is not None and leo < partition_hw
        )
        row["partition_offline"] = offline
        row["under_replicated"] = not offline and not row["in_isr"]
        rows.append(row)
    return rows
