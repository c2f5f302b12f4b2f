"""Turning per-partition ``ExpiryPlan``s into what ``expire_remote`` prints and runs.

``describe_expiry`` lists what a plan deletes and why (one row per segment, the dry run's
output); ``plan_expiry_units`` packs the partitions with something to delete into work
units balanced by the bytes they free (a partition's deletions stay in one unit: the
library deletes them oldest first and stops the partition on a stale leader epoch).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from jobs.planning.work_units import balance_by_bytes
from storage_core.tiered.operations import ExpiryPlan


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionExpiry:
    """One partition's plan, the leader epoch its deletions are fenced at and the leader
    they are published as (``leader_host``: its host in Metadata, ``None`` when unknown)."""

    partition: str
    topic: str
    partition_index: int
    leader_epoch: int
    plan: ExpiryPlan
    leader_id: int
    leader_host: str | None = None

    @property
    def size_bytes(self) -> int:
        return sum(item.metadata.segment_size_in_bytes for item in self.plan.expired)


def describe_expiry(partition: str, plan: ExpiryPlan) -> list[dict[str, Any]]:
    """What ``plan`` deletes, oldest first per rule: offsets (inclusive), bytes, why."""
    return [
        {
            "partition": partition,
            "segment_id": str(item.metadata.remote_log_segment_id.id),
            "start_offset": item.metadata.start_offset,
            "end_offset": item.metadata.end_offset,
            "bytes": item.metadata.segment_size_in_bytes,
            "state": item.metadata.state.name,
            "reason": item.reason.name,
            "why": item.reason.value,
        }
        for item in plan.expired
    ]


def plan_expiry_units(
    partitions: Sequence[PartitionExpiry], num_units: int
) -> list[list[PartitionExpiry]]:
    """Partitions with deletions, packed by bytes into at most ``num_units`` units."""
    by_name = {p.partition: p for p in partitions if p.plan.expired}
    if len(by_name) != len([p for p in partitions if p.plan.expired]):
        raise ValueError("a partition is planned twice")
    bins = balance_by_bytes(((name, p.size_bytes) for name, p in by_name.items()), num_units)
    return [[by_name[name] for name in names] for names in bins]
