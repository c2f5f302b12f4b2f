"""The embedded-default demonstration of the log engine.

Writes a three-partition topic with every compression codec and two leader epochs, crashes
(no clean shutdown, a torn half-written batch, a lost index file), recovers, checks that every
acknowledged record is back, applies local retention, and prints the log dir and a segment dump.
Exit status 0 means every check held.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from pathlib import Path

from storage_core.common import TopicPartition, Uuid
from storage_core.errors import StorageError
from storage_core.log import log_file_utils as files
from storage_core.log.log_config import LogConfig
from storage_core.log.log_manager import LogManager
from storage_core.records import CompressionType, SimpleRecord, build_batch
from storage_core.tools.describe_log_dir import describe_log_dir
from storage_core.tools.dump_log import dump_path, format_row

TOPIC = "demo-events"
PARTITIONS = 3
RECORDS_PER_BATCH = 100
DEMO_MARKER = ".storage-core-demo"
CODECS = list(CompressionType)


def _prepare_dir(directory: Path) -> Path:
    """A fresh demo dir; refuses to wipe a non-empty directory the demo did not create."""
    if directory.exists() and any(directory.iterdir()):
        if not (directory / DEMO_MARKER).exists():
            raise StorageError(
                f"{directory} is not empty and was not created by the demo; choose another --dir"
            )
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    (directory / DEMO_MARKER).write_text("created by storage-core demo\n")
    return directory


def _manager(log_dirs: list[Path], config: LogConfig) -> LogManager:
    manager = LogManager(log_dirs, config)
    manager.startup(background_tasks=False)
    return manager


def run_demo(directory: Path, *, record_count: int = 30_000) -> int:
    if record_count < RECORDS_PER_BATCH * PARTITIONS:
        raise StorageError(f"--records must be at least {RECORDS_PER_BATCH * PARTITIONS}")
    root = _prepare_dir(directory)
    log_dirs = [root / "log-dir-1", root / "log-dir-2"]
    config = LogConfig(segment_bytes=32 * 1024, index_interval_bytes=4096)
    topic_id = Uuid.random()
    now_ms = int(time.time() * 1000)  # recent timestamps, so retention.ms (7 days) keeps them

    print(
        f"1. Writing {record_count} records to {TOPIC} ({PARTITIONS} partitions, {len(log_dirs)}"
        " log dirs), all compression codecs, leader epochs 0 and 1"
    )
    manager = _manager(log_dirs, config)
    digests = {p: hashlib.sha256() for p in range(PARTITIONS)}
    counts = dict.fromkeys(range(PARTITIONS), 0)
    batches = record_count // RECORDS_PER_BATCH
    for n in range(batches):
        partition = n % PARTITIONS
        log = manager.get_or_create_log(TopicPartition(TOPIC, partition), topic_id=topic_id)
        records = []
        for i in range(RECORDS_PER_BATCH):
            value = json.dumps({"event": n * RECORDS_PER_BATCH + i, "kind": "demo"}).encode()
            digests[partition].update(value)
            records.append(
                SimpleRecord(key=f"user-{i % 17}".encode(), value=value, timestamp=now_ms + n)
            )
        batch = build_batch(records, compression=CODECS[n % len(CODECS)])
        log.append_as_leader(batch, leader_epoch=0 if n < batches // 2 else 1)
        log.update_high_watermark(log.log_end_offset)
        counts[partition] += RECORDS_PER_BATCH
    for log in manager.all_logs().values():
        log.flush()
    manager.checkpoint_recovery_points()
    manager.checkpoint_high_watermarks()

    print(
        "2. Crashing: no clean shutdown, a torn batch at the end of partition 0, and a lost"
        " index file in partition 1"
    )
    log0 = manager.get_log(TopicPartition(TOPIC, 0))
    log1 = manager.get_log(TopicPartition(TOPIC, 1))
    if log0 is None or log1 is None:
        raise StorageError("demo partitions were not created")
    torn_path = log0.active_segment.path
    lost_index = files.offset_index_file(log1.dir, log1.segments[0].base_offset)
    for log in manager.all_logs().values():
        log.close()  # files closed, but no clean-shutdown marker is written
    torn = build_batch([SimpleRecord(value=b"never acknowledged" * 100)])
    with open(torn_path, "ab") as out:
        out.write(torn[: len(torn) // 2])
    os.remove(lost_index)

    print("3. Restarting: recovery validates unflushed segments and rebuilds missing indexes")
    manager = _manager(log_dirs, config)
    ok = True
    for partition in range(PARTITIONS):
        recovered = manager.get_log(TopicPartition(TOPIC, partition))
        if recovered is None:
            raise StorageError(f"partition {partition} was lost")
        digest = hashlib.sha256()
        seen = 0
        for stored in recovered.read_batches(recovered.log_start_offset):
            for record in stored.records():
                digest.update(record.value or b"")
                seen += 1
        same = digest.hexdigest() == digests[partition].hexdigest() and seen == counts[partition]
        ok &= same
        print(
            f"   {TOPIC}-{partition}: {seen} records, recovered_segments="
            f"{recovered.recovered_segments}, truncated_bytes={recovered.truncated_bytes_on_load},"
            f" every acknowledged record intact: {same}"
        )

    print("4. Local retention: retention.bytes=96 KiB per partition")
    retained = config.with_overrides({"retention.bytes": 96 * 1024})
    manager.update_topic_config(TOPIC, retained)
    deleted = manager.cleanup_logs()
    for tp, log in sorted(manager.all_logs().items()):
        print(
            f"   {tp}: deleted down to log_start_offset={log.log_start_offset},"
            f" size_bytes={log.size_in_bytes}"
        )
    print(f"   segments deleted: {deleted}")
    manager.shutdown()

    print("5. The log dirs after a clean shutdown")
    for log_dir in log_dirs:
        summary = describe_log_dir(log_dir)
        for p in summary["partitions"]:
            print(
                f"   {log_dir.name}/{p['partition']}: offsets {p['log_start_offset']}.."
                f"{p['log_end_offset']} segments={len(p['segments'])}"
                f" size_bytes={p['size_bytes']} epochs={p['leader_epochs']}"
            )

    first_log = sorted((log_dirs[0] / f"{TOPIC}-0").glob("*.log"))[0]
    print(f"6. storage-core dump-log {first_log} (first batches)")
    for i, row in enumerate(dump_path(first_log)):
        if i > 4:
            break
        print("   " + format_row(row))
    print("Demo " + ("succeeded" if ok else "FAILED: records differ after recovery"))
    return 0 if ok else 1
