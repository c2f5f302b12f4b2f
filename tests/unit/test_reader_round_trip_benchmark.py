"""The short variant of benchmarks/reader_round_trip.py: a read handed to the reader pool and
awaited as a fetch awaits it comes back with its answer, and both figures are reported."""

from __future__ import annotations

from benchmarks.reader_round_trip import run


def test_the_benchmark_times_a_round_trip_and_a_cold_parse() -> None:
    trip, parse = run(samples=3, pause_ms=1)
    assert trip["case"].startswith("round trip") and parse["case"].startswith("cold parse")
    # Going to a thread and back costs more than a call on the loop, whatever the machine.
    assert trip["median_us"] > trip["baseline_median_us"] > 0
    assert parse["median_us"] > 0 and parse["baseline_median_us"] > 0
