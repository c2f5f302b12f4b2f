"""Packing planned segment copies into Spark work units balanced by bytes (Gobblin-style).

A work unit is what one Spark task does. Segments of one partition form a *chain*: they
must be copied oldest first by one task, because ``candidate_segments`` plans from the
highest remote offset, and a later segment committed before an earlier one would leave a
hole that no later run fills. So chains are the indivisible items, and they are packed
greedily, largest first, into the unit with the fewest bytes so far (LPT: every unit ends
within the largest chain of the best balance)::

    chains by bytes, descending:  [p1: 90] [p2: 60] [p3: 50] [p4: 10]
    2 units:                      unit 0 = p1 + p4 (100)    unit 1 = p2 + p3 (110)

Leader hosts: when the chains' leaders sit on more than one host, a task should read
the log dirs of its own host, so the chains are grouped by leader host first
(``balance_by_host``): every host (and the chains whose leader host is unknown, as one more
group) gets at least one unit, the remaining units go one at a time to the group with the
most bytes per unit (never more units than it has chains), and each group is packed by LPT
into its own units. A unit then holds one leader host's chains and asks Spark to run on that
host (``WorkUnit.preferred_hosts``)::

    host a: [p1: 90] [p2: 60]   host b: [p3: 50] [p4: 10]   3 units:
    a gets 2 (150 bytes), b gets 1 (60 bytes): unit 0 = p1, unit 1 = p2 (host a),
                                               unit 2 = p3 + p4 (host b)

Locality costs some balance (no unit mixes hosts even when that would even out the bytes).
With fewer units than groups, hosts must share units: the chains are packed by LPT as if the
hosts were one, and a unit prefers its chains' hosts, most bytes first. With one known host
(or none), it is LPT as above and no unit states a preference: there is nothing to choose.

Within a unit, chains are ordered by partition and each chain by base offset. A
``bytes_per_second_quota`` bounds the run (KIP-956's ``remote.log.manager.copy.max.bytes.per.
second``, or the job's argument): the plan gives each unit ``quota / units``, the share when
every unit runs at once; the copy job sets the shares again once it knows how many run at once
(``with_quota_shares``: ``quota / min(units, task slots)``), and each unit paces its uploads to
its share (``storage_core.tiered.quota.copy_quota``); each unit's ``estimated_seconds``
follows.
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import TypeVar

K = TypeVar("K", bound=Hashable)

# A plan never makes more work units than this (one Spark task each).
WORK_UNITS_MAX = 10_000


@dataclass(frozen=True, slots=True, kw_only=True)
class PlannedSegment:
    """One closed segment to copy, as the driver planned it (plain, picklable data).

    ``log_start_offset``, ``high_watermark`` and ``last_stable_offset`` (``None``: the
    HW) are the leader's at planning time; the
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
    last_stable_offset: int | None = None

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
    """What one Spark task copies: whole chains, oldest segment first within each.

    ``preferred_hosts``: where Spark should run it (its leaders' hosts, most bytes first);
    empty when the plan's leaders sit on one host or none (see the module docstring)."""

    index: int
    segments: tuple[PlannedSegment, ...]
    size_bytes: int
    bytes_per_second: float | None  # this unit's share of the quota; None: unthrottled
    preferred_hosts: tuple[str, ...] = ()

    @property
    def partitions(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(s.partition for s in self.segments))

    @property
    def leader_hosts(self) -> tuple[str, ...]:
        """The hosts of its partitions' leaders (sorted): where its reads are local."""
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


def balance_by_host(items: Iterable[tuple[K, str | None, int]], num_units: int) -> list[list[K]]:
    """``(key, host, bytes)`` items into at most ``num_units`` non-empty bins, each bin one
    host's keys where there are at least as many units as hosts (``None``, an unknown host,
    is a group of its own); see the module docstring. Deterministic: the groups in host
    order (unknown last), each packed by ``balance_by_bytes``."""
    if num_units < 1:
        raise ValueError(f"num_units must be >= 1, got {num_units}")
    groups: dict[str | None, list[tuple[K, int]]] = {}
    for key, host, size in items:
        groups.setdefault(host, []).append((key, size))
    count = min(num_units, WORK_UNITS_MAX)
    if len(groups) > count:  # hosts must share units: balance the bytes alone
        return balance_by_bytes(((k, s) for group in groups.values() for k, s in group), count)
    order = sorted(groups, key=lambda host: (host is None, host or ""))
    group_bytes = {host: sum(size for _key, size in groups[host]) for host in order}
    shares = dict.fromkeys(order, 1)
    for _ in range(count - len(order)):
        open_hosts = [host for host in order if shares[host] < len(groups[host])]
        if not open_hosts:
            break
        # the group with the most bytes per unit (ties: the first in host order)
        busiest = max(
            open_hosts, key=lambda host: (group_bytes[host] / shares[host], -order.index(host))
        )
        shares[busiest] += 1
    return [keys for host in order for keys in balance_by_bytes(groups[host], shares[host])]


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
    hosts: dict[str, str | None] = {}
    for partition, chain in chains.items():
        chain.sort(key=lambda s: s.base_offset)
        if len({s.base_offset for s in chain}) != len(chain):
            raise ValueError(f"{partition}: a segment is planned twice")
        chain_hosts = {s.leader_host for s in chain}
        if len(chain_hosts) != 1:
            raise ValueError(
                f"{partition}: segments planned with leader hosts {sorted(map(str, chain_hosts))}:"
                " a partition's segments are planned from one leader; plan it again"
            )
        (hosts[partition],) = chain_hosts
    sizes = {p: sum(s.size_bytes for s in chain) for p, chain in chains.items()}
    located = len({h for h in hosts.values() if h is not None}) > 1
    if located:
        bins = balance_by_host(((p, hosts[p], sizes[p]) for p in chains), num_units)
    else:
        bins = balance_by_bytes(sizes.items(), num_units)
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
                preferred_hosts=preferred_hosts(keys, hosts, sizes) if located else (),
            )
        )
    return units


def preferred_hosts(
    keys: Iterable[str], hosts: dict[str, str | None], sizes: dict[str, int]
) -> tuple[str, ...]:
    """The known hosts of ``keys``' chains, most bytes first (ties: by name)."""
    host_bytes: dict[str, int] = {}
    for key in keys:
        host = hosts[key]
        if host is not None:
            host_bytes[host] = host_bytes.get(host, 0) + sizes[key]
    return tuple(sorted(host_bytes, key=lambda host: (-host_bytes[host], host)))


def with_quota_shares(
    units: Sequence[WorkUnit], bytes_per_second_quota: float | None, concurrent_units: int
) -> list[WorkUnit]:
    """``units``, each with ``quota / concurrent_units`` (None: unthrottled): the units that
    run at the same time share the quota, so the run as a whole holds it."""
    if concurrent_units < 1:
        raise ValueError(f"concurrent_units must be >= 1, got {concurrent_units}")
    if bytes_per_second_quota is not None and bytes_per_second_quota <= 0:
        raise ValueError(f"bytes_per_second_quota must be > 0, got {bytes_per_second_quota}")
    share = None if bytes_per_second_quota is None else bytes_per_second_quota / concurrent_units
    return [replace(unit, bytes_per_second=share) for unit in units]
