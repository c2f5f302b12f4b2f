"""plan_work_units: Gobblin-style packing of segment copies by bytes, chains kept whole."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jobs.planning.work_units import (
    WorkUnit,
    balance_by_bytes,
    plan_work_units,
    with_quota_shares,
)
from tests.planned_segments import on, seg


def test_chains_are_packed_largest_first_into_the_lightest_unit() -> None:
    segments = [
        seg("a-0", 0, 50),
        seg("a-0", 10, 40),  # a-0: 90
        seg("b-0", 0, 60),
        seg("c-0", 0, 50),
        seg("d-0", 0, 10),
    ]
    units = plan_work_units(segments, 2)
    assert [u.partitions for u in units] == [("a-0", "d-0"), ("b-0", "c-0")]
    assert [u.size_bytes for u in units] == [100, 110]
    assert all(u.bytes_per_second is None and u.estimated_seconds is None for u in units)


def test_a_partition_stays_in_one_unit_oldest_segment_first() -> None:
    segments = [seg("a-0", 20, 5), seg("a-0", 0, 5), seg("a-0", 10, 5), seg("b-0", 0, 100)]
    units = plan_work_units(segments, 4)
    assert len(units) == 2  # never more units than partitions
    (a_unit,) = [u for u in units if "a-0" in u.partitions]
    assert [s.base_offset for s in a_unit.segments] == [0, 10, 20]


def test_the_quota_is_shared_by_the_units_running_in_parallel() -> None:
    units = plan_work_units([seg("a-0", 0, 300), seg("b-0", 0, 100)], 8, 200.0)
    assert [u.bytes_per_second for u in units] == [100.0, 100.0]
    assert [u.estimated_seconds for u in units] == [3.0, 1.0]


def test_nothing_to_copy_is_no_unit_and_bad_arguments_are_refused() -> None:
    assert plan_work_units([], 4) == []
    with pytest.raises(ValueError, match="num_units"):
        plan_work_units([seg("a-0", 0, 1)], 0)
    with pytest.raises(ValueError, match="quota"):
        plan_work_units([seg("a-0", 0, 1)], 1, 0)
    with pytest.raises(ValueError, match="planned twice"):
        plan_work_units([seg("a-0", 0, 1), seg("a-0", 0, 1)], 1)
    with pytest.raises(ValueError, match="next base offset"):
        seg("a-0", 5, 1, count=0)


def test_quota_shares_over_the_units_running_at_once() -> None:
    units = plan_work_units([seg(f"t-{p}", 0, 10, 100) for p in range(4)], 4, 400.0)
    assert [u.bytes_per_second for u in units] == [100.0] * 4  # the plan: all at once
    two_slots = with_quota_shares(units, 400.0, 2)  # Spark runs two tasks at a time
    assert [u.bytes_per_second for u in two_slots] == [200.0] * 4
    assert [u.segments for u in two_slots] == [u.segments for u in units]
    assert all(u.bytes_per_second is None for u in with_quota_shares(units, None, 2))
    with pytest.raises(ValueError, match="concurrent_units"):
        with_quota_shares(units, 400.0, 0)


@given(
    sizes=st.lists(st.integers(min_value=0, max_value=10_000), min_size=0, max_size=40),
    num_units=st.integers(min_value=1, max_value=8),
)
def test_every_segment_lands_once_and_the_balance_is_within_one_chain(
    sizes: list[int], num_units: int
) -> None:
    segments = [seg(f"t-{i % 13}", (i // 13) * 10, size) for i, size in enumerate(sizes)]
    units = plan_work_units(segments, num_units)
    placed = [(s.partition, s.base_offset) for u in units for s in u.segments]
    assert sorted(placed) == sorted((s.partition, s.base_offset) for s in segments)
    assert len(units) <= num_units
    chain_bytes: dict[str, int] = {}
    for s in segments:
        chain_bytes[s.partition] = chain_bytes.get(s.partition, 0) + s.size_bytes
    if units:
        loads = [u.size_bytes for u in units]
        # LPT: the heaviest unit exceeds the lightest by at most the largest chain
        assert max(loads) - min(loads) <= max(chain_bytes.values())
    for unit in units:
        for partition in unit.partitions:
            offsets = [s.base_offset for s in unit.segments if s.partition == partition]
            assert offsets == sorted(offsets)
            assert sum(1 for u in units if partition in u.partitions) == 1


def test_balance_by_bytes_is_deterministic() -> None:
    items = [("x", 5), ("y", 5), ("z", 5)]
    assert balance_by_bytes(items, 2) == [["x", "z"], ["y"]]
    assert balance_by_bytes(items, 2) == balance_by_bytes(list(reversed(items)), 2)


def test_a_unit_records_the_hosts_of_its_partitions_leaders() -> None:
    chains = [
        dataclasses.replace(seg("a-0", 0, 100), leader_host="broker-b"),
        dataclasses.replace(seg("b-0", 0, 100), leader_host="broker-a"),
        seg("c-0", 0, 100),  # leader host unknown
    ]
    (unit,) = plan_work_units(chains, 1, None)
    assert unit.leader_hosts == ("broker-a", "broker-b")


# ---------------------------------------------------------------------- by leader host
def layout(units: list[WorkUnit]) -> list[tuple[tuple[str, ...], tuple[str, ...], int]]:
    return [(u.preferred_hosts, u.partitions, u.size_bytes) for u in units]


def test_units_follow_leader_hosts_and_share_units_by_bytes() -> None:
    # the module docstring's picture: host a has 150 bytes, host b 60
    segments = [on("a", "p-1", 90), on("a", "p-2", 60), on("b", "p-3", 50), on("b", "p-4", 10)]
    units = plan_work_units(segments, 3)
    assert layout(units) == [
        (("a",), ("p-1",), 90),
        (("a",), ("p-2",), 60),
        (("b",), ("p-3", "p-4"), 60),
    ]
    assert [u.index for u in units] == [0, 1, 2]


def test_uneven_hosts_get_units_by_bytes_per_unit() -> None:
    heavy = [on("h1", f"big-{i}", 100) for i in range(6)]
    light = [on("h2", "small-0", 30), on("h3", "small-1", 20), on("h3", "small-2", 20)]
    units = plan_work_units(heavy + light, 6)
    by_host: dict[str, list[int]] = {}
    for unit in units:
        (host,) = unit.preferred_hosts  # no unit mixes hosts
        assert {s.leader_host for s in unit.segments} == {host}
        by_host.setdefault(host, []).append(unit.size_bytes)
    # 600 bytes on h1 take the 3 spare units (4 units of 150 bytes against 30 and 40)
    assert by_host == {"h1": [200, 200, 100, 100], "h2": [30], "h3": [40]}


def test_a_host_never_gets_more_units_than_chains() -> None:
    segments = [on("a", "one-0", 1000), on("b", "x-0", 10), on("b", "x-1", 10), on("b", "x-2", 10)]
    units = plan_work_units(segments, 8)
    assert layout(units) == [
        (("a",), ("one-0",), 1000),
        (("b",), ("x-0",), 10),
        (("b",), ("x-1",), 10),
        (("b",), ("x-2",), 10),
    ]


def test_chains_of_an_unknown_leader_host_are_a_group_without_a_preference() -> None:
    segments = [on("a", "p-0", 50), on("b", "p-1", 50), on(None, "p-2", 40), on(None, "p-3", 40)]
    units = plan_work_units(segments, 4)
    assert layout(units) == [
        (("a",), ("p-0",), 50),
        (("b",), ("p-1",), 50),
        ((), ("p-2",), 40),
        ((), ("p-3",), 40),
    ]


def test_more_hosts_than_units_share_units_balanced_by_bytes() -> None:
    segments = [on("a", "p-0", 90), on("b", "p-1", 60), on("c", "p-2", 50), on("d", "p-3", 10)]
    units = plan_work_units(segments, 2)
    # as LPT with one host: the bytes decide; each unit prefers its hosts, most bytes first
    assert layout(units) == [(("a", "d"), ("p-0", "p-3"), 100), (("b", "c"), ("p-1", "p-2"), 110)]


def test_one_leader_host_is_plain_lpt_without_a_preference() -> None:
    segments = [on("h", "a-0", 50), on("h", "a-0", 40, base=10), on("h", "b-0", 60)]
    segments += [on("h", "c-0", 50), on("h", "d-0", 10)]
    units = plan_work_units(segments, 2)
    assert layout(units) == [((), ("a-0", "d-0"), 100), ((), ("b-0", "c-0"), 110)]
    assert [u.leader_hosts for u in units] == [("h",), ("h",)]  # still recorded


def test_a_chain_on_a_host_stays_whole_and_in_order() -> None:
    segments = [on("a", "p-0", 5, base=20), on("a", "p-0", 5, base=0), on("b", "q-0", 100)]
    segments += [on("a", "p-0", 5, base=10)]
    units = plan_work_units(segments, 4)
    (unit,) = [u for u in units if "p-0" in u.partitions]
    assert [s.base_offset for s in unit.segments] == [0, 10, 20]
    assert unit.preferred_hosts == ("a",)
    with pytest.raises(ValueError, match="leader hosts"):
        plan_work_units([on("a", "p-0", 5), on("b", "p-0", 5, base=10)], 2)


@given(
    chains=st.lists(
        st.tuples(st.sampled_from(["a", "b", "c", None]), st.integers(0, 10_000)),
        min_size=0,
        max_size=30,
    ),
    num_units=st.integers(min_value=1, max_value=8),
)
def test_by_host_every_segment_lands_once_and_units_keep_one_host_when_they_can(
    chains: list[tuple[str | None, int]], num_units: int
) -> None:
    segments = [on(host, f"t-{i}", size) for i, (host, size) in enumerate(chains)]
    units = plan_work_units(segments, num_units)
    placed = sorted(s.partition for u in units for s in u.segments)
    assert placed == sorted(s.partition for s in segments)
    assert len(units) <= num_units
    groups = {host for host, _size in chains}
    if len({h for h in groups if h is not None}) > 1 and len(groups) <= num_units:
        for unit in units:
            assert len({s.leader_host for s in unit.segments}) == 1
            assert unit.preferred_hosts == tuple(
                h for h in {s.leader_host for s in unit.segments} if h is not None
            )
        assert {s.leader_host for u in units for s in u.segments} == groups
