"""What a remote read pays on this machine before its own work: the trip to a reader thread
and back, and the first work of a thread that has been asleep.

A fetch of tiered offsets that memory cannot answer goes to the reader pool (a slow store must
never hold the event loop) and its answer comes back to the loop. Each sample follows
``--pause-ms`` of the loop's thread busy, as the ``remote_read`` benchmark's first-batch samples
follow fetches of the local topic, while the reader threads sleep:

  round trip    the loop hands a read that returns at once to ``RemoteLogReader.submit`` and
                awaits it as a fetch does (``delayed_remote_fetch._outcome``); the baseline
                calls it on the loop
  cold parse    a reader thread parses a 4 MiB chunked segment's manifest as a cold read does
                (``SegmentManifest.from_bytes``, its ``segment`` section left unparsed): the
                first parse after the pause, against a second one right after it on the same
                thread (the baseline)

Figures: medians of ``--samples`` in microseconds; the ratio is the figure over its baseline.

    python benchmarks/reader_round_trip.py [--samples 200] [--pause-ms 50]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.segment_manifest import manifest
from storage_core.replication.delayed_remote_fetch import _outcome
from storage_core.tiered.chunked.segment_manifest import SegmentManifest
from storage_core.tiered.in_memory_rlmm import InMemoryRemoteLogMetadataManager
from storage_core.tiered.local_tiered_storage import LocalTieredStorage
from storage_core.tiered.remote_index_cache import RemoteIndexCache
from storage_core.tiered.remote_log_reader import RemoteLogReader

SEGMENT_BYTES = 4 << 20  # the remote_read benchmark's segments
MAX_WAIT_MS = 30_000
Row = dict[str, object]


def spin() -> None:
    json.dumps({"spin": list(range(64))})


def busy(seconds: float) -> None:
    """Keep this thread running, as a loop serving fetches does."""
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        spin()


async def busy_loop(seconds: float) -> None:
    """Keep the event loop running tasks, as one serving fetches does."""
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        spin()
        await asyncio.sleep(0)


def nothing() -> int:
    return 0


def elapsed_us(start_ns: int) -> float:
    return (time.perf_counter_ns() - start_ns) / 1000


async def round_trips(reader: RemoteLogReader, samples: int, pause_s: float) -> list[Row]:
    on_loop, on_thread = [], []
    for _ in range(samples):
        await busy_loop(pause_s)
        start = time.perf_counter_ns()
        nothing()
        on_loop.append(elapsed_us(start))
        await busy_loop(pause_s)
        start = time.perf_counter_ns()
        await _outcome(reader.submit(nothing), MAX_WAIT_MS)
        on_thread.append(elapsed_us(start))
    return [_row("round trip: a read that does nothing", on_thread, on_loop)]


def cold_parses(reader: RemoteLogReader, samples: int, pause_s: float) -> list[Row]:
    content = manifest(SEGMENT_BYTES, packed=True).to_bytes()

    def parse_twice() -> tuple[float, float]:
        timings = []
        for _ in range(2):
            start = time.perf_counter_ns()
            SegmentManifest.from_bytes(content, where="benchmark", describe=False)
            timings.append(elapsed_us(start))
        return timings[0], timings[1]

    first, second = [], []
    for _ in range(samples):
        busy(pause_s)
        after_sleep, right_after = reader.submit(parse_twice).result(MAX_WAIT_MS / 1000)
        first.append(after_sleep)
        second.append(right_after)
    return [_row("cold parse: a 4 MiB segment's manifest", first, second)]


def _row(case: str, values: list[float], baseline: list[float]) -> Row:
    median, base = statistics.median(values), statistics.median(baseline)
    return {
        "case": case,
        "median_us": round(median, 1),
        "p90_us": round(statistics.quantiles(values, n=10)[-1], 1),
        "baseline_median_us": round(base, 1),
        "ratio": round(median / base, 1),
    }


def run(samples: int, pause_ms: float) -> list[Row]:
    with tempfile.TemporaryDirectory() as directory:
        rsm = LocalTieredStorage(Path(directory) / "store", fsync=False)
        cache = RemoteIndexCache(rsm, Path(directory) / "logs", max_size_bytes=1 << 20)
        reader = RemoteLogReader(
            rsm=rsm, rlmm=InMemoryRemoteLogMetadataManager(), index_cache=cache, threads=2
        )
        try:
            pause_s = pause_ms / 1000
            rows = asyncio.run(round_trips(reader, samples, pause_s))
            return rows + cold_parses(reader, samples, pause_s)
        finally:
            reader.close()
            cache.close()
            rsm.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--pause-ms", type=float, default=50.0)
    args = parser.parse_args()
    command = shlex.join([Path(sys.executable).name, *sys.argv])
    print(f"$ {command}", flush=True)
    rows = run(args.samples, args.pause_ms)
    print(f"{'case':<42} {'med us':>8} {'p90 us':>8} {'base med us':>12} {'ratio':>6}")
    for r in rows:
        print(
            f"{r['case']:<42} {r['median_us']:>8} {r['p90_us']:>8}"
            f" {r['baseline_median_us']:>12} {r['ratio']:>6}"
        )
    print(json.dumps({"benchmark": "reader_round_trip", "command": command, "results": rows}))


if __name__ == "__main__":
    main()
