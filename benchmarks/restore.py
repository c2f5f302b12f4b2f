"""Restoring a topic from the bucket against copying it there, on the same data.

One broker process, the remote tier in a directory beside its log dir (``LocalTieredStorage``,
the chunked format with zstd and AES-256-GCM, nothing fsynced). A topic gets ``--total-mib``
of 1 KiB random records in 4 MiB segments, then:

  copy           every segment copied with the operations library (the copy job's path per
                 segment: chunked, compressed, encrypted, uploaded, metadata published),
                 timed over the copies alone
  restore        ``python -m jobs.restore_topic`` into another name (in process): the bucket
                 scanned and checked, the target created, every segment's objects copied
                 inside the store under the target's topic id and its metadata published,
                 the replica started after them; timed from the job's start to its end
  restore, checked  the same with ``--verify-checksums`` (every object read and CRC-checked)
  first record   a new broker (new log dir and metadata, the same bucket): the time from
                 ``python -m jobs.restore_cluster``'s start to the first record of the
                 restored topic fetched

Rates are segments and MiB (the segments' ``.log`` bytes) per second; ``restore / copy`` is
the ratio of the MiB/s in the same run.

    python benchmarks/restore.py [--total-mib 64] [--dir bench-data]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import lean_client
from jobs import restore_cluster, restore_topic, topic_manifests
from storage_core.records import SimpleRecord, build_batch
from storage_core.tiered.rsm_loader import load_remote_storage_manager
from tests.broker_process import BrokerProcess
from tests.chunked_support import encryption_settings, write_key_pair
from tests.integration import raw_wire
from tests.tiered_broker_support import (
    LATEST,
    client_rlmm,
    copy_eligible_segments,
    list_offset,
    raw_fetch,
    wait_until,
)

RECORD_BYTES = 1024
BATCH_BYTES = 64 * 1024
SEGMENT_BYTES = 4 * 1024 * 1024
SOURCE, TARGET = "source", "restored"
TIMEOUT_S = 300.0


def broker_overrides(work_dir: Path) -> dict[str, str]:
    keys = work_dir / "keys"
    keys.mkdir(exist_ok=True)
    ring = encryption_settings({"bench": write_key_pair(keys, "bench")}, "bench")
    return {
        "remote.log.storage.system.enable": "true",
        "remote.log.storage.manager.class.name": "LocalTieredStorage",
        "rsm.config.local.storage.dir": str(work_dir / "remote-tier"),
        "rsm.config.local.fsync": "false",
        "rsm.config.compression.enabled": "true",
        **ring,
        "remote.log.metadata.topic.num.partitions": "1",
        "remote.log.manager.task.interval.ms": "500",
        "log.retention.check.interval.ms": "500",
        "auto.create.topics.enable": "false",
    }


def produce(port: int, total_mib: int) -> int:
    """Distinct random batches (nothing for zstd to find), acks=1; returns the records."""
    per_batch = max(1, (BATCH_BYTES - 61) // (RECORD_BYTES + 16))
    batches = max(1, total_mib * 1024 * 1024 // BATCH_BYTES)
    for _ in range(batches):
        batch = build_batch(
            [
                SimpleRecord(value=os.urandom(RECORD_BYTES), timestamp=int(time.time() * 1000))
                for _ in range(per_batch)
            ]
        )
        lean_client.produce(port, lean_client.produce_frame(SOURCE, batch, acks=1), 1, in_flight=1)
    return batches * per_batch


def copy_all(broker: BrokerProcess, rsm_config: dict[str, str]) -> tuple[int, int, float]:
    """Copy every closed segment; (segments, .log bytes, seconds of the copies)."""
    rsm = load_remote_storage_manager("LocalTieredStorage", rsm_config)
    try:
        with client_rlmm(broker.bootstrap) as rlmm:
            started = time.perf_counter()
            copied = copy_eligible_segments(
                broker.bootstrap, broker.log_dir / f"{SOURCE}-0", SOURCE, rsm, rlmm
            )
            seconds = time.perf_counter() - started
    finally:
        rsm.close()
    return len(copied), sum(m.segment_size_in_bytes for m in copied), seconds


def job(broker: BrokerProcess, module: object, *extra: str) -> float:
    main = module.main  # type: ignore[attr-defined]
    argv = ["--bootstrap-server", broker.bootstrap, "--broker-config", str(broker.config_path)]
    started = time.perf_counter()
    code = main([*argv, *extra])
    seconds = time.perf_counter() - started
    if code != 0:
        raise SystemExit(f"{module.__name__} {shlex.join(extra)} exited {code}")  # type: ignore[attr-defined]
    return seconds


def first_record_s(broker: BrokerProcess) -> float:
    started = time.perf_counter()
    job(broker, restore_cluster, "--no-offsets")
    wait_until(
        lambda: bool(raw_fetch(broker.port, SOURCE, 0, max_bytes=1, max_wait_ms=1000).records),
        "the first restored record",
        TIMEOUT_S,
    )
    return time.perf_counter() - started


def rates(segments: int, size: int, seconds: float) -> dict[str, float]:
    return {
        "seconds": round(seconds, 2),
        "segments_per_s": round(segments / seconds, 1),
        "mib_per_s": round(size / 1024 / 1024 / seconds, 1),
    }


def run(work_dir: Path, total_mib: int) -> dict[str, object]:
    overrides = broker_overrides(work_dir)
    rsm_config = {k: v for k, v in overrides.items() if k.startswith("rsm.config.")}
    with BrokerProcess(work_dir / "broker", overrides=overrides, log_level="WARNING") as broker:
        raw_wire.create_topic(
            broker.port,
            SOURCE,
            configs={"segment.bytes": str(SEGMENT_BYTES), "remote.storage.enable": "true"},
        )
        records = produce(broker.port, total_mib)
        wait_until(lambda: list_offset(broker.bootstrap, SOURCE, LATEST)[0] == records, "HW")
        segments, size, copy_s = copy_all(broker, rsm_config)
        job(broker, topic_manifests)
        restore_s = job(broker, restore_topic, "--topic", SOURCE, "--target", TARGET)
        checked_s = job(
            broker, restore_topic, "--topic", SOURCE, "--target", f"{TARGET}-checked",
            "--verify-checksums",
        )  # fmt: skip
    with BrokerProcess(work_dir / "new-broker", overrides=overrides, log_level="WARNING") as new:
        first_s = first_record_s(new)
    copy = rates(segments, size, copy_s)
    restore = rates(segments, size, restore_s)
    return {
        "total_mib": total_mib,
        "segments": segments,
        "segment_mib": round(size / 1024 / 1024, 1),
        "copy": copy,
        "restore": restore,
        "restore_checked": rates(segments, size, checked_s),
        "restore_vs_copy": round(restore["mib_per_s"] / copy["mib_per_s"], 2),
        "first_record_after_cluster_restore_s": round(first_s, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--total-mib", type=int, default=64)
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    if args.dir is not None:
        args.dir.mkdir(parents=True, exist_ok=True)
        result = run(Path(tempfile.mkdtemp(prefix="restore-", dir=args.dir)), args.total_mib)
    else:
        with tempfile.TemporaryDirectory(prefix="restore-bench-") as tmp:
            result = run(Path(tmp), args.total_mib)
    print(json.dumps(result, indent=2))
    print(
        f"copy {result['copy']['mib_per_s']} MiB/s, restore {result['restore']['mib_per_s']}"  # type: ignore[index]
        f" MiB/s ({result['restore_vs_copy']}x), with checksums"
        f" {result['restore_checked']['mib_per_s']} MiB/s; first record after a cluster"  # type: ignore[index]
        f" restore {result['first_record_after_cluster_restore_s']} s"
    )


if __name__ == "__main__":
    main()
