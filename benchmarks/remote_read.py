"""Consume from the remote tier against consume from the local log, on one broker process.

Four topics get the same records (1 KiB random records stamped now, in 64 KiB batches, lean
Produce requests, 4 MiB segments or ``--segment-mib``): ``local`` keeps its log; the three others
(remote.storage.enable, local.retention.ms=1) are fully offloaded: the RemoteLogManager task
rolls the active segment, every segment is copied with the operations library (as a tiering
job would), and local retention deletes the local copies until the local log start equals the
log end offset. Every fetch of them is then a remote read. They differ in the format of their
copies, all read by the same broker:

  tiered    the plain format (the segment files as they are, no manifest)
  chunked   the chunked format, 4 MiB chunks, neither compressed nor encrypted
  sealed    the chunked format with zstd and AES-256-GCM (random records: zstd finds nothing)

  consume lean      raw-socket Fetch requests, one at a time from offset 0 to the end
                    (``lean_client.fetch``: batch headers checked, records never decoded),
                    partition max bytes 1 MiB and 4 MiB; the ratio is tiered/local MiB/s
  first batch       one Fetch (partition max bytes 1: the first batch, min-one-message) at
                    the start offset of each of up to ``LATENCY_SEGMENTS`` segments, then
                    halfway through each, on a new connection, the last segment first
                    (prefetch runs forward: no sample finds its segment prefetched):
                      cold   broker restarted with ``remote-log-index-cache/`` cleared and an
                             empty chunk cache (inside a segment, its offset index is
                             downloaded first; at its start no index is needed)
                      warm   the same offsets again (index and chunk cached)
                    median and max in ms; the ratio is tiered/local of the medians
  sealed/chunked    the ``sealed`` topic's consume as a ratio of ``chunked``'s in the same run
  cold caches       the first consume after a restart (chunk cache and index cache empty;
                    prefetch reads two chunks ahead); the others are the best of ``--rounds``
                    with a chunk cache that holds every chunk (warm)

The remote tier is ``LocalTieredStorage`` in a directory beside the log dir (same disk); with
``--s3`` it is ``S3RemoteStorageManager`` against a moto server on loopback (moto is a Python
process on the same CPUs: its figures bound nothing about real S3). Nothing is fsynced; the
throughput figures are the best of ``--rounds`` and read warm page caches on both sides, and
"cold" is the broker's caches alone: after each restart every file of the local topic and of
the local store is read once (``warm_page_cache``).

    python benchmarks/remote_read.py [--total-mib 64] [--rounds 2] [--segment-mib 4] [--s3]
        [--dir bench-data]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import lean_client
from storage_core.records import SimpleRecord, build_batch
from storage_core.tiered.local_tiered_storage import LocalTieredStorage
from storage_core.tiered.remote_object_keys import (
    InvalidRemoteObjectKeyError,
    RemoteObjectSuffix,
    parse_object_key,
)
from storage_core.tiered.remote_storage_manager import RemoteStorageManager, remote_object_store
from storage_core.tiered.rsm_loader import load_remote_storage_manager
from storage_core.tiered.s3_remote_storage_manager import S3RemoteStorageManager
from tests.broker_process import BrokerProcess
from tests.chunked_support import encryption_settings, write_key_pair
from tests.integration import raw_wire
from tests.s3_server import AWS_TEST_ENV, S3Server
from tests.tiered_broker_support import (
    EARLIEST_LOCAL,
    LATEST,
    LATEST_TIERED,
    client_rlmm,
    copy_eligible_segments,
    list_offset,
    raw_fetch,
    wait_until,
)

RECORD_BYTES = 1024
BATCH_BYTES = 64 * 1024
SEGMENT_BYTES = 4 * 1024 * 1024
FETCH_BYTES = (1024 * 1024, SEGMENT_BYTES)
LATENCY_SEGMENTS = 8
SAMPLE_PAUSE_S = 0.05  # the previous sample's prefetch (12 MiB at most) is done by then
CHUNK_CACHE_BYTES = 512 * 1024 * 1024  # at least: holds both chunked topics
PREFETCH_BYTES = 8 * 1024 * 1024  # two chunks ahead
OFFLOAD_TIMEOUT_S = 300.0
LOCAL, TIERED, CHUNKED, SEALED = "local", "tiered", "chunked", "sealed"
TIER_DIR = "remote-tier"  # the local store's directory, beside the broker's
REMOTE_TOPICS = (TIERED, CHUNKED, SEALED)
BUCKET = "bench-tiered"


def records_per_batch() -> int:
    return max(1, (BATCH_BYTES - 61) // (RECORD_BYTES + 16))


# ---------------------------------------------------------------------- setup
@contextmanager
def remote_tier(
    work_dir: Path, use_s3: bool
) -> Iterator[tuple[dict[str, str], dict[str, RemoteStorageManager]]]:
    """Broker overrides for the remote tier (with the key ring, to read ``sealed``), and per
    remote topic an RSM of the same store that copies in that topic's format."""
    keys = work_dir / "keys"
    keys.mkdir()
    ring = encryption_settings({"bench": write_key_pair(keys, "bench")}, "bench", enabled=False)
    sealed = {
        **ring,
        "rsm.config.encryption.enabled": "true",
        "rsm.config.compression.enabled": "true",
    }
    if not use_s3:
        storage_dir = work_dir / TIER_DIR
        store = {
            "rsm.config.local.storage.dir": str(storage_dir),
            "rsm.config.local.fsync": "false",
        }
        class_name = "LocalTieredStorage"
        plain: RemoteStorageManager = LocalTieredStorage(storage_dir, fsync=False)
        yield from _tiers(class_name, store, ring, sealed, plain)
        return
    os.environ.update(AWS_TEST_ENV)  # the broker process inherits the credentials
    with S3Server(work_dir / "moto") as s3:
        s3.create_bucket(BUCKET)
        store = {
            "rsm.config.s3.bucket.name": BUCKET,
            "rsm.config.s3.endpoint.url": s3.endpoint_url,
            "rsm.config.s3.path.style.access.enabled": "true",
        }
        plain = S3RemoteStorageManager.from_config(store)
        yield from _tiers("S3RemoteStorageManager", store, ring, sealed, plain)


def _tiers(
    class_name: str,
    store: dict[str, str],
    ring: dict[str, str],
    sealed: dict[str, str],
    plain: RemoteStorageManager,
) -> Iterator[tuple[dict[str, str], dict[str, RemoteStorageManager]]]:
    copiers = {
        TIERED: plain,
        CHUNKED: load_remote_storage_manager(class_name, store),
        SEALED: load_remote_storage_manager(class_name, {**store, **sealed}),
    }
    try:
        yield {"remote.log.storage.manager.class.name": class_name, **store, **ring}, copiers
    finally:
        for rsm in copiers.values():
            rsm.close()


def create_topics(port: int, segment_bytes: int = SEGMENT_BYTES) -> None:
    raw_wire.create_topic(port, LOCAL, configs={"segment.bytes": str(segment_bytes)})
    for topic in REMOTE_TOPICS:
        raw_wire.create_topic(
            port,
            topic,
            configs={
                "segment.bytes": str(segment_bytes),
                "remote.storage.enable": "true",
                # Time, not size: size retention always keeps the newest closed segment.
                "local.retention.ms": "1",
            },
        )


def produce_both(port: int, total_mib: int) -> int:
    """The same batches to both topics; returns the record count of each."""
    per_batch = records_per_batch()
    batch = build_batch(
        [SimpleRecord(value=os.urandom(RECORD_BYTES), timestamp=int(time.time() * 1000))]
        * per_batch
    )
    batches = max(1, total_mib * 1024 * 1024 // len(batch))
    for topic in (LOCAL, *REMOTE_TOPICS):
        frame = lean_client.produce_frame(topic, batch, acks=1)
        lean_client.produce(port, frame, batches, in_flight=5)
    return batches * per_batch


def offload(
    broker: BrokerProcess, topic: str, rsm: RemoteStorageManager, total_records: int
) -> int:
    """Copy every segment of ``topic`` until the local log is empty; returns segments copied."""
    partition_dir = broker.log_dir / f"{topic}-0"
    copied = 0
    deadline = time.monotonic() + OFFLOAD_TIMEOUT_S
    with client_rlmm(broker.bootstrap) as rlmm:
        while list_offset(broker.bootstrap, topic, LATEST_TIERED)[0] < total_records - 1:
            if time.monotonic() > deadline:
                raise SystemExit(f"{topic}: not offloaded within {OFFLOAD_TIMEOUT_S}s")
            # The RLM task rolls the active segment (it breaches local.retention.ms).
            copied += len(copy_eligible_segments(broker.bootstrap, partition_dir, topic, rsm, rlmm))
            time.sleep(0.2)
    wait_until(
        lambda: list_offset(broker.bootstrap, topic, EARLIEST_LOCAL)[0] == total_records,
        "local retention to delete every copied segment",
        OFFLOAD_TIMEOUT_S,
    )
    return copied


def segment_offsets(broker: BrokerProcess) -> dict[str, list[int]]:
    """Start offsets of up to ``LATENCY_SEGMENTS`` of the local topic's closed segments, and
    the offset halfway through each."""
    names = sorted(p.name for p in (broker.log_dir / f"{LOCAL}-0").glob("*.log"))
    return _spread([int(name.split(".")[0]) for name in names])


def remote_segment_offsets(rsm: RemoteStorageManager, topic: str) -> dict[str, list[int]]:
    """The same for a remote topic's segments, from its ``.log`` objects: the RemoteLogManager
    rolled its active segment whenever local retention found it old, so its segments do not
    start where the local topic's do."""
    store = remote_object_store(rsm, "listing the benchmark's segments")
    bases = []
    for info in store.list_objects():
        try:
            key = parse_object_key(info.key, store.prefix)
        except InvalidRemoteObjectKeyError:
            continue  # not a segment's object (a topic manifest)
        if key.segment.topic == topic and key.suffix is RemoteObjectSuffix.LOG:
            bases.append(key.segment.start_offset)
    return _spread(sorted(bases))


def _spread(bases: list[int]) -> dict[str, list[int]]:
    step = max(1, (len(bases) - 1) // LATENCY_SEGMENTS)
    chosen = list(range(len(bases) - 1))[::step][:LATENCY_SEGMENTS]
    return {
        "start": [bases[i] for i in chosen],
        "middle": [(bases[i] + bases[i + 1]) // 2 for i in chosen],
    }


# ---------------------------------------------------------------------- measurements
def lean_consume(port: int, topic: str, total_records: int, max_bytes: int) -> float:
    buffer = lean_client.fetch_buffer(max_bytes)
    start = time.perf_counter()
    totals = lean_client.fetch(port, topic, total_records, max_bytes=max_bytes, buffer=buffer)
    elapsed = time.perf_counter() - start
    if totals.records != total_records:
        raise SystemExit(f"{topic}: fetched {totals.records} of {total_records} records")
    return elapsed


def first_batch_ms(port: int, topic: str, offsets: list[int]) -> list[float]:
    """Last segment first: a reader's prefetch runs forward into the next segments, so in
    ascending order each sample would find its chunk already read (or being read) by the
    sample before, and measure no cold read. A pause before each sample lets the previous
    one's prefetch end: each sample is one reader arriving at a broker that serves others but
    reads nothing ahead. The pause is spent fetching from the local topic: on this machine an
    idle pause makes the next request slower by about its own length (after 0.2 s idle a
    local fetch takes 10-12 ms, not 1)."""
    out = []
    for offset in sorted(offsets, reverse=True):
        _serve_local(port, SAMPLE_PAUSE_S)
        start = time.perf_counter()
        result = raw_fetch(port, topic, offset, max_bytes=1, max_wait_ms=30_000)
        out.append((time.perf_counter() - start) * 1000)
        if result.error_code != 0 or not result.records:
            raise SystemExit(f"{topic} at {offset}: {result.error_code!r}, no records")
    return out


def _serve_local(port: int, seconds: float) -> None:
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        raw_fetch(port, LOCAL, 0, max_bytes=1)


def restart_cold(broker: BrokerProcess, total_records: int) -> None:
    """Restart the broker with an empty remote index cache; back once it knows the tier, the
    files of both sides in the page cache (``warm_page_cache``)."""
    broker.stop()
    shutil.rmtree(broker.log_dir / "remote-log-index-cache", ignore_errors=True)
    broker.start()
    warm_page_cache([broker.log_dir / f"{LOCAL}-0", broker.log_dir.parent.parent / TIER_DIR])
    for topic in REMOTE_TOPICS:
        wait_until(
            lambda topic=topic: (
                list_offset(broker.bootstrap, topic, LATEST_TIERED)[0] == total_records - 1
            ),
            f"{topic}: remote metadata after the restart",
            60,
        )


def warm_page_cache(directories: list[Path]) -> None:
    """Read every file under ``directories``: "cold" is the broker's caches, and both sides
    read from the page cache. Machines may page out what was not read for a while (this one
    pages out pages idle for 60 s): a file's first read then took 108-125 us here instead of
    4-7, paid by whichever side's files had waited longer."""
    for directory in directories:
        for path in directory.rglob("*") if directory.is_dir() else ():
            if path.is_file():
                with path.open("rb") as file:
                    while file.read(1 << 20):
                        pass


# ---------------------------------------------------------------------- the run
Row = dict[str, object]


def mib_s(size: int, seconds: float) -> float:
    return round(size / (1024 * 1024) / seconds, 1)


def run(
    work_dir: Path,
    total_mib: int,
    rounds: int,
    use_s3: bool,
    segment_bytes: int = SEGMENT_BYTES,
) -> list[Row]:
    rows: list[Row] = []
    # Warm reads hit: the cache holds both chunked topics.
    cache_bytes = max(CHUNK_CACHE_BYTES, 3 * total_mib << 20)
    with remote_tier(work_dir, use_s3) as (overrides, copiers):
        broker_overrides = {
            "remote.log.storage.system.enable": "true",
            "remote.log.metadata.topic.num.partitions": "1",
            "remote.log.manager.task.interval.ms": "200",
            "log.retention.check.interval.ms": "200",
            "rsm.config.fetch.chunk.cache.size": str(cache_bytes),
            "rsm.config.fetch.chunk.cache.prefetch.max.size": str(PREFETCH_BYTES),
            **overrides,
        }
        with BrokerProcess(work_dir / "broker", overrides=broker_overrides) as broker:
            create_topics(broker.port, segment_bytes)
            total_records = produce_both(broker.port, total_mib)
            log_bytes = sum(p.stat().st_size for p in (broker.log_dir / f"{LOCAL}-0").glob("*.log"))
            if list_offset(broker.bootstrap, LOCAL, LATEST)[0] != total_records:
                raise SystemExit(f"{LOCAL}: not every record was appended")
            for topic, rsm in copiers.items():
                offload(broker, topic, rsm, total_records)
            offsets = {LOCAL: segment_offsets(broker)} | {
                topic: remote_segment_offsets(rsm, topic) for topic, rsm in copiers.items()
            }

            # Cold: a restarted broker (empty chunk and index caches) reads each topic once.
            restart_cold(broker, total_records)
            cold_s = {
                topic: lean_consume(broker.port, topic, total_records, FETCH_BYTES[0])
                for topic in (LOCAL, *REMOTE_TOPICS)
            }
            local_cold = mib_s(log_bytes, cold_s[LOCAL])
            for topic, seconds in cold_s.items():
                rows.append(
                    {
                        "case": "consume lean, 1 MiB, cold caches",
                        "topic": topic,
                        "mib_s": mib_s(log_bytes, seconds),
                        "records_s": round(total_records / seconds),
                        "baseline_mib_s": local_cold,
                        "ratio": round(mib_s(log_bytes, seconds) / local_cold, 3),
                    }
                )

            for where in ("start", "middle"):
                # Cold: a restarted broker, no index and no chunk of these segments cached.
                restart_cold(broker, total_records)
                samples = {
                    f"{topic}, cold caches": first_batch_ms(
                        broker.port, topic, offsets[topic][where]
                    )
                    for topic in REMOTE_TOPICS
                }
                samples.update(
                    {
                        f"{topic}, warm caches": first_batch_ms(
                            broker.port, topic, offsets[topic][where]
                        )
                        for topic in REMOTE_TOPICS
                    }
                )
                local_at = offsets[LOCAL][where]
                samples["local (first)"] = first_batch_ms(broker.port, LOCAL, local_at)
                samples["local"] = first_batch_ms(broker.port, LOCAL, local_at)
                base = statistics.median(samples["local"])
                for case, values in samples.items():
                    rows.append(
                        {
                            "case": f"first batch at a segment's {where}, {case}",
                            "topic": case.split(",")[0].split(" ")[0],
                            "median_ms": round(statistics.median(values), 2),
                            "max_ms": round(max(values), 2),
                            "samples": len(values),
                            "baseline_median_ms": round(base, 2),
                            "ratio": round(statistics.median(values) / base, 2),
                        }
                    )

            for max_bytes in FETCH_BYTES:
                best = dict.fromkeys((LOCAL, *REMOTE_TOPICS), float("inf"))
                for _ in range(rounds):
                    for topic in best:
                        elapsed = lean_consume(broker.port, topic, total_records, max_bytes)
                        best[topic] = min(best[topic], elapsed)
                local_mib_s = mib_s(log_bytes, best[LOCAL])
                case = f"consume lean, max_bytes {max_bytes // (1024 * 1024)} MiB"
                for topic in best:
                    rows.append(
                        {
                            "case": case,
                            "topic": topic,
                            "mib_s": mib_s(log_bytes, best[topic]),
                            "records_s": round(total_records / best[topic]),
                            "baseline_mib_s": local_mib_s,
                            "ratio": round(mib_s(log_bytes, best[topic]) / local_mib_s, 3),
                        }
                    )
                rows.append(
                    {
                        "case": f"{case}, sealed/chunked",
                        "topic": SEALED,
                        "mib_s": mib_s(log_bytes, best[SEALED]),
                        "records_s": round(total_records / best[SEALED]),
                        "baseline_mib_s": mib_s(log_bytes, best[CHUNKED]),
                        "ratio": round(best[CHUNKED] / best[SEALED], 3),
                    }
                )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--total-mib", type=int, default=64, help="record bytes per topic")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--s3", action="store_true", help="remote tier in a moto S3 server")
    parser.add_argument(
        "--segment-mib", type=int, default=SEGMENT_BYTES >> 20, help="segment.bytes of every topic"
    )
    parser.add_argument("--dir", type=Path, default=Path("bench-data"))
    args = parser.parse_args()
    command = shlex.join([Path(sys.executable).name, *sys.argv])
    print(f"$ {command}", flush=True)
    shutil.rmtree(args.dir, ignore_errors=True)
    args.dir.mkdir(parents=True)
    try:
        rows = run(args.dir.resolve(), args.total_mib, args.rounds, args.s3, args.segment_mib << 20)
    finally:
        shutil.rmtree(args.dir, ignore_errors=True)
    tier = "S3 (moto)" if args.s3 else "LocalTieredStorage"
    print(f"remote tier: {tier}; baseline: the local topic in the same run")
    print(f"{'case':<60} {'topic':<7} {'MiB/s':>8} {'rec/s':>9} {'base MiB/s':>11} {'ratio':>6}")
    for r in rows:
        if "mib_s" in r:
            print(
                f"{r['case']:<60} {r['topic']:<7} {r['mib_s']:>8} {r['records_s']:>9}"
                f" {r['baseline_mib_s']:>11} {r['ratio']:>6}"
            )
    print(f"{'case':<60} {'topic':<7} {'med ms':>8} {'max ms':>9} {'base med ms':>11} {'ratio':>6}")
    for r in rows:
        if "median_ms" in r:
            print(
                f"{r['case']:<60} {r['topic']:<7} {r['median_ms']:>8} {r['max_ms']:>9}"
                f" {r['baseline_median_ms']:>11} {r['ratio']:>6}"
            )
    print(json.dumps({"benchmark": "remote_read", "command": command, "results": rows}))


if __name__ == "__main__":
    main()
