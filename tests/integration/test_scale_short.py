"""The scale benchmark's short variant (``benchmarks/scale.py --short``): three brokers with 60
and then 180 partitions (replication factor 3, real ZooKeeper), and a tiered broker whose
partition holds 300 and then 3,000 remote segments. It fails when a per-unit cost grows more
than 2x between the two sizes; the failure shows the benchmark's table. Checked, per
partition: the brokers' CPU to create the partitions, to stop a broker and to restart it
until it is back in every ISR, and the descriptors; per remote segment: the fastest of seven
copies, the CPU of the copy job's RLMM catch-up, of the quality job's pure part and of a
restarted broker until it serves a tiered offset, and the metadata bytes.

Those are counts, CPU time (counted by the kernel: a loaded machine stretches it far less
than the wall time, which moved 3.5x between two runs here with a load average of 15 on two
cores) and a minimum (load only adds to a copy's time). The wall times are printed, not
checked, and so is idle CPU (a few seconds of an idle broker are a handful of clock ticks).

``make bench-scale`` runs the full sizes (300 / 1,000 / 3,000 partitions, 10^3 / 10^4 / 10^5
remote segments).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from benchmarks import scale, scale_partitions
from embedded.zookeeper import ZooKeeperEnsemble
from tests import cluster_support

cluster_support.require_java()


def test_per_unit_costs_grow_at_most_2x_between_sizes(tmp_path: Path) -> None:
    figures = tmp_path / "scale-short.json"
    command = [sys.executable, "-m", "benchmarks.scale", "--short", "--json", str(figures)]
    completed = subprocess.run(
        [*command, "--dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert completed.returncode == 0, completed.stdout[-4000:] + completed.stderr[-4000:]
    result = json.loads(figures.read_text())
    table = scale.format_table(result)
    assert not result["errors"], "\n".join(result["errors"]) + f"\n\n{table}"
    for part, rows in (("partitions", scale.PARTITION_ROWS), ("segments", scale.SEGMENT_ROWS)):
        sizes = scale.SHORT[part].split(",")
        assert sorted(result[part], key=int) == sizes, table
        for key, label, _per_unit, checked in rows:
            if checked:
                missing = [s for s in sizes if result[part][s].get(key) is None]
                assert not missing, f"{part}: {label.strip()} not measured at {missing}\n{table}"
    assert not result["growth_failures"], (
        "per-unit costs grew more than 2x between two sizes:\n  "
        + "\n  ".join(result["growth_failures"])
        + f"\n\n{table}"
    )


def _result(per_partition_ms: dict[str, float]) -> dict[str, Any]:
    return {
        "partitions": {
            size: {"create_cpu_ms_per_partition": ms, "descriptors_per_partition": 3.0}
            for size, ms in per_partition_ms.items()
        },
        "segments": {},
    }


@pytest.mark.parametrize(
    ("per_partition_ms", "fails"),
    [
        ({"60": 10.0, "180": 20.0}, False),  # 2x: at the limit
        ({"60": 10.0, "180": 20.5}, True),
        ({"60": 10.0, "180": 4.0}, False),  # cheaper per unit as fixed costs spread
        ({"300": 5.0, "1000": 9.0, "3000": 11.0}, True),  # 300 -> 3,000: 2.2x
    ],
)
def test_growth_beyond_2x_between_any_two_sizes_is_a_failure(
    per_partition_ms: dict[str, float], fails: bool
) -> None:
    failures = scale.growth_failures(_result(per_partition_ms))
    assert bool(failures) is fails, failures
    if fails:
        assert "create_cpu_ms_per_partition" in failures[0]


def test_a_shutdown_that_moves_nothing_is_counted_as_such(tmp_path: Path) -> None:
    """The instrument can see a failing controlled shutdown: with it disabled, every leadership
    of the stopped broker fails over after its session ended, and all are counted not moved."""
    partitions = 30
    with (
        ZooKeeperEnsemble(tmp_path / "zk", size=1) as zookeeper,
        cluster_support.three_brokers(
            zookeeper, tmp_path, {"controlled.shutdown.enable": "false"}
        ) as (brokers, connect),
    ):
        scale_partitions.create(brokers, zookeeper, partitions)
        outcome = scale_partitions.shutdown(brokers, connect, 3, partitions)
    assert outcome["leaderships_held"] > 0, outcome
    assert outcome["leaderships_not_moved"] == outcome["leaderships_held"], outcome
    assert not outcome["session_expired"], outcome
