"""Packing planned segment copies into Spark work units balanced by bytes (Gobblin-style).

A work unit is what one Spark task does. Segments of one partition form a *chain*: they
must be copied oldest first by one task, because ``candidate_segments`` plans from the
highest remote offset, and a later segment committed before an earlier one would leave a
hole that no later run fills. So chains are the indivisible items, and they are packed
greedily, largest first, into the unit with the fewest bytes so far (LPT: every unit ends
within the largest chain of the best balance)::

    chains by bytes, descending:  [p1: 90] [p2: 60] [p3: 50] [p4: 10]
    2 units:                      unit 0 = p1 + p4 (100)    unit 1 = p2 + p3 (110)

Within a unit, chains are ordered by partition and each chain by base offset. A
``bytes_per_second_quota`` bounds the run: the units run in parallel, so each gets an equal
share (``quota / units``) and throttles to it (``throttle_delay_s``); each unit's
``estimated_seconds`` follows.
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar

K = TypeVar("K", bound=Hashable)

# A plan never makes more work units than this (one Spark task each).
WORK_UNITS_MAX = 10_000


@dataclass(frozen=True, slots=True, kw_only=True)
class PlannedSegment:
    """One closed segment to copy, as the driver planned it (plain, picklable data).

    ``log_start_offset`` and ``high_watermark`` are the leader's at planning time; the
    executor re-reads the directory (in the leader's log dirs) with them and publishes as
    ``leader_id``. Offsets: ``base_offset`` (inclusive), ``next_base_offset`` (exclusive).
    ``leader_host`` is the leader's host in Metadata (``None``: unknown).
    """

    partition: str  # "<topic>-<n>", the chain key
    topic: str
    partition_index: int
    topic_id: str
    directory: str
    base_offset: int
    next_base_offset: int
    size_bytes: int
    leader_epoch: int
    log_start_offset: int
    high_watermark: int
    leader_id: int
    leader_host: str | None = None

    def __post_init__(self) -> None:
        if self.next_base_offset <= self.base_offset:
            raise ValueError(
                f"{self.partition}: segment next base offset {self.next_base_offset} must be"
                f" above its base offset {self.base_offset}"
            )
        if self.size_bytes < 0:
            raise ValueError(f"{self.partition}: segment size must be >= 0")

    @property
    def end_offset(self) -> int:
        """The last offset of the segment (inclusive)."""
        return self.next_base_offset - 1


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkUnit:
    """What one Spark task copies: whole chains, oldest segment first within each."""

    index: int
    segments: tuple[PlannedSegment, ...]
    size_bytes: int
    bytes_per_second: float | None  # this unit's share of the quota; None: unthrottled

    @property
    def partitions(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(s.partition for s in self.segments))

    @property
    def leader_hosts(self) -> tuple[str, ...]:
        """The hosts of its partitions' leaders (sorted): where its reads are local. Recorded
        in the plan only: PySpark's ``parallelize`` takes no preferred locations."""
        return tuple(sorted({s.leader_host for s in self.segments if s.leader_host is not None}))

    @property
    def estimated_seconds(self) -> float | None:
        if self.bytes_per_second is None:
            return None
        return self.size_bytes / self.bytes_per_second


def balance_by_bytes(items: Iterable[tuple[K, int]], num_units: int) -> list[list[K]]:
    """LPT packing of ``(key, bytes)`` items into at most ``num_units`` non-empty bins,
    each bin's keys sorted. Deterministic: ties go to the lower bin and the smaller key."""
    if num_units < 1:
        raise ValueError(f"num_units must be >= 1, got {num_units}")
    ordered = sorted(items, key=lambda kv: (-kv[1], str(kv[0])))
    count = min(num_units, len(ordered), WORK_UNITS_MAX)
    if count == 0:
        return []
    heap = [(0, index) for index in range(count)]
    bins: list[list[K]] = [[] for _ in range(count)]
    for key, size in ordered:
        load, index = heapq.heappop(heap)
        bins[index].append(key)
        heapq.heappush(heap, (load + size, index))
    return [sorted(b, key=str) for b in bins if b]


def plan_work_units(
    segments: Sequence[PlannedSegment],
    num_units: int,
    bytes_per_second_quota: float | None = None,
) -> list[WorkUnit]:
    """Pack ``segments`` into at most ``num_units`` units (see the module docstring)."""
    if bytes_per_second_quota is not None and bytes_per_second_quota <= 0:
        raise ValueError(f"bytes_per_second_quota must be > 0, got {bytes_per_second_quota}")
    chains: dict[str, list[PlannedSegment]] = {}
    for segment in segments:
        chains.setdefault(segment.partition, []).append(segment)
    for partition, chain in chains.items():
        chain.sort(key=lambda s: s.base_offset)
        if len({s.base_offset for s in chain}) != len(chain):
            raise ValueError(f"{partition}: a segment is planned twice")
    sizes = [(p, sum(s.size_bytes for s in chain)) for p, chain in chains.items()]
    bins = balance_by_bytes(sizes, num_units)
    share = None if bytes_per_second_quota is None else bytes_per_second_quota / max(len(bins), 1)
    units = []
    for index, keys in enumerate(bins):
        unit_segments = tuple(s for key in keys for s in chains[key])
        units.append(
            WorkUnit(
                index=index,
                segments=unit_segments,
                size_bytes=sum(s.size_bytes for s in unit_segments),
                bytes_per_second=share,
            )
        )
    return units


def throttle_delay_s(
    size_bytes_done: int, elapsed_s: float, bytes_per_second: float | None
) -> float:
    """How long to sleep so that ``size_bytes_done`` in ``elapsed_s`` stays within the rate."""
    if bytes_per_second is None:
        return 0.0
    return max(0.0, size_bytes_done / bytes_per_second - elapsed_s)
