"""plan_work_units: Gobblin-style packing of segment copies by bytes, chains kept whole."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jobs.planning.work_units import (
    PlannedSegment,
    balance_by_bytes,
    plan_work_units,
    throttle_delay_s,
)


def seg(partition: str, base: int, size: int, count: int = 10) -> PlannedSegment:
    return PlannedSegment(
        partition=partition,
        topic=partition.rsplit("-", 1)[0],
        partition_index=int(partition.rsplit("-", 1)[1]),
        topic_id="fQZ8ZtKuRjqUmbdf4t1OyQ",
        directory=f"/logs/{partition}",
        base_offset=base,
        next_base_offset=base + count,
        size_bytes=size,
        leader_epoch=0,
        log_start_offset=0,
        high_watermark=1000,
        leader_id=1,
    )


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


def test_throttle_delay() -> None:
    assert throttle_delay_s(1000, 0.5, None) == 0.0
    assert throttle_delay_s(1000, 0.5, 1000.0) == pytest.approx(0.5)
    assert throttle_delay_s(1000, 2.0, 1000.0) == 0.0


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
    import dataclasses  # noqa: PLC0415

    chains = [
        dataclasses.replace(seg("a-0", 0, 100), leader_host="broker-b"),
        dataclasses.replace(seg("b-0", 0, 100), leader_host="broker-a"),
        seg("c-0", 0, 100),  # leader host unknown
    ]
    (unit,) = plan_work_units(chains, 1, None)
    assert unit.leader_hosts == ("broker-a", "broker-b")
