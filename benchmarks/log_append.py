"""Append and read throughput of the log against raw file I/O of the same bytes, same disk.

For 1 KiB records in batches of 16 KiB and 1 MiB:
  append  = Log.append_as_leader (validation, offset assignment, segment and index writes)
  raw     = os.write of the same batch bytes to a plain file
  read    = Log.read from offset 0 to the end in 1 MiB fetches, as a consumer does
  raw     = os.pread of the same file in 1 MiB chunks
Each figure is the best of several rounds; ratios are append/raw and read/raw. Nothing is
fsynced in either path (both measure the write path into the page cache).

    python benchmarks/log_append.py [--total-mib 256] [--rounds 3] [--dir bench-data]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from storage_core.log.log import Log
from storage_core.log.log_config import LogConfig
from storage_core.records import LOG_OVERHEAD, RecordBatch, SimpleRecord, build_batch

RECORD_BYTES = 1024
# Reads fetch up to 1 MiB at a time, a consumer's default max.partition.fetch.bytes.
FETCH_BYTES = 1024 * 1024


def make_batches(batch_bytes: int, total_bytes: int) -> list[bytes]:
    per_batch = max(1, batch_bytes // (RECORD_BYTES + 16))
    payload = os.urandom(RECORD_BYTES)
    records = [
        SimpleRecord(value=payload, timestamp=1_700_000_000_000 + i) for i in range(per_batch)
    ]
    batch = build_batch(records)
    return [batch] * max(1, total_bytes // len(batch))


def raw_write(path: Path, batches: list[bytes]) -> float:
    start = time.perf_counter()
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC | os.O_APPEND, 0o644)
    try:
        for batch in batches:
            os.write(fd, batch)
    finally:
        os.close(fd)
    return time.perf_counter() - start


def log_append(directory: Path, batches: list[bytes]) -> tuple[float, Log]:
    log = Log(directory, LogConfig())
    start = time.perf_counter()
    for batch in batches:
        log.append_as_leader(batch, leader_epoch=0)
    elapsed = time.perf_counter() - start
    return elapsed, log


def raw_read(path: Path, chunk_bytes: int) -> tuple[float, int]:
    start = time.perf_counter()
    fd = os.open(path, os.O_RDONLY)
    total = 0
    try:
        position = 0
        while True:
            data = os.pread(fd, chunk_bytes, position)
            if not data:
                break
            total += len(data)
            position += len(data)
    finally:
        os.close(fd)
    return time.perf_counter() - start, total


def complete_batches_next_offset(data: bytes) -> int | None:
    """Next offset after the last whole batch of a fetch (a trailing partial one is skipped)."""
    position = 0
    last_start = None
    while position + LOG_OVERHEAD <= len(data):
        size = LOG_OVERHEAD + int.from_bytes(data[position + 8 : position + 12], "big")
        if position + size > len(data):
            break
        last_start = position
        position += size
    if last_start is None:
        return None
    return RecordBatch.from_buffer(data, last_start).next_offset


def log_read(log: Log, chunk_bytes: int) -> tuple[float, int]:
    start = time.perf_counter()
    offset = 0
    total = 0
    end = log.log_end_offset
    while offset < end:
        data = log.read(offset, chunk_bytes).read_bytes()
        total += len(data)
        next_offset = complete_batches_next_offset(data)
        if next_offset is None:
            break
        offset = next_offset
    return time.perf_counter() - start, total


def measure(work_dir: Path, batch_bytes: int, total_bytes: int, rounds: int) -> dict[str, float]:
    batches = make_batches(batch_bytes, total_bytes)
    data_bytes = sum(len(b) for b in batches)
    records = sum(int.from_bytes(b[57:61], "big") for b in batches)
    best = {
        "append": float("inf"),
        "raw_write": float("inf"),
        "read": float("inf"),
        "raw_read": float("inf"),
    }
    for _ in range(rounds):
        shutil.rmtree(work_dir, ignore_errors=True)
        work_dir.mkdir(parents=True)
        # Both writers start with no dirty pages queued for writeback (os.sync, untimed), so
        # neither pays for the other's writeback.
        os.sync()
        best["raw_write"] = min(best["raw_write"], raw_write(work_dir / "raw.bin", batches))
        os.sync()
        elapsed, log = log_append(work_dir / "bench-0", batches)
        best["append"] = min(best["append"], elapsed)
        os.sync()
        read_elapsed, read_total = log_read(log, FETCH_BYTES)
        raw_elapsed, raw_total = raw_read(work_dir / "raw.bin", FETCH_BYTES)
        if read_total < data_bytes or raw_total != data_bytes:
            raise SystemExit(f"read {read_total} / {raw_total} bytes, expected {data_bytes}")
        best["read"] = min(best["read"], read_elapsed)
        best["raw_read"] = min(best["raw_read"], raw_elapsed)
        log.close()
    mib = data_bytes / (1024 * 1024)
    return {
        "batch_bytes": len(batches[0]),
        "data_mib": round(mib, 1),
        "append_mib_s": round(mib / best["append"], 1),
        "append_records_s": round(records / best["append"]),
        "raw_write_mib_s": round(mib / best["raw_write"], 1),
        "append_ratio": round(best["raw_write"] / best["append"], 3),
        "read_mib_s": round(mib / best["read"], 1),
        "read_records_s": round(records / best["read"]),
        "raw_read_mib_s": round(mib / best["raw_read"], 1),
        "read_ratio": round(best["raw_read"] / best["read"], 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--total-mib", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=Path("bench-data"))
    args = parser.parse_args()
    results = []
    try:
        for batch_bytes in (16 * 1024, 1024 * 1024):
            results.append(
                measure(args.dir, batch_bytes, args.total_mib * 1024 * 1024, args.rounds)
            )
    finally:
        shutil.rmtree(args.dir, ignore_errors=True)
    print(
        f"{'batch':>9} {'append MiB/s':>13} {'raw write':>10} {'ratio':>6} "
        f"{'read MiB/s':>11} {'raw read':>9} {'ratio':>6} {'append rec/s':>13}"
    )
    for r in results:
        print(
            f"{r['batch_bytes']:>9} {r['append_mib_s']:>13} {r['raw_write_mib_s']:>10}"
            f" {r['append_ratio']:>6} {r['read_mib_s']:>11} {r['raw_read_mib_s']:>9}"
            f" {r['read_ratio']:>6} {r['append_records_s']:>13}"
        )
    print(json.dumps({"benchmark": "log_append", "results": results}))


if __name__ == "__main__":
    main()
