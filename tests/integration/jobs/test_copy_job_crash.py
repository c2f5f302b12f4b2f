"""Crash tests of ``jobs.copy_segments`` against a broker process with a local-directory store:
a run SIGKILLed mid-upload, and a run stopped by ``--run-timeout-s``. After either,
``reconcile`` then ``copy_segments`` leave every eligible segment tiered exactly once, nothing
orphaned, and every record readable from offset 0.

Killed mid-upload (``test_copy_run_killed_mid_upload_...``)::

    3 partitions x 6-8 closed segments, local.retention.bytes=0 (a closed segment is deleted
    locally as soon as a FINISHED copy covers it; the broker rolls the active segment)
    copy_segments, 1.5 s per copy        remote: [F][F][S] ... (S: .log written, no indexes)
    SIGKILL driver + JVM                 the driver's processes (Python workers too) all gone
    while it is dead                     local log start <= end of FINISHED copies + 1, the
                                         local files hold every offset from there on
    reconcile --copy-deadline-s 6        S -> DELETE_SEGMENT_FINISHED, their objects gone
    copy_segments                        remote: [F][F][F]...[F] from 0 to the last record
    copy_segments --dry-run              plans nothing
    the store                            the objects of FINISHED segments, all of them, only
    consume from 0 (kafka-python)        every record, offsets and values (from the remote tier)

Timed out (``test_run_timeout_...``): a 60 s copy, ``--run-timeout-s 8``: exit 1 well
within the bound, the summary and stderr name the timeout, no process of the run survives,
and reconcile + copy_segments converge as above.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kafka import KafkaConsumer as ReferenceConsumer
from kafka import KafkaProducer
from kafka import TopicPartition as ReferenceTopicPartition
from pyspark.sql import SparkSession

from embedded.processes import process_table
from jobs import copy_segments, reconcile
from storage_core.client import KafkaAdminClient, KafkaCluster
from storage_core.client.consumer import KafkaConsumer
from storage_core.common import TopicIdPartition, TopicPartition
from storage_core.tiered.metadata import serde
from storage_core.tiered.metadata.metadata import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
)
from storage_core.tiered.metadata.states import RemoteLogSegmentState
from storage_core.tiered.remote_object_keys import (
    InvalidRemoteObjectKeyError,
    RemoteObjectSuffix,
    parse_object_key,
)
from storage_core.tiered.topic_based_rlmm import REMOTE_LOG_METADATA_TOPIC_NAME
from tests.broker_process import BrokerProcess
from tests.integration.jobs.tiered_cluster import (
    BROKER_SETTINGS,
    SEGMENT_BYTES,
    TieredCluster,
    local_store_settings,
)
from tests.tiered_broker_support import client_rlmm, local_offsets, wait_until

pytestmark = pytest.mark.timeout(300)

REPO = Path(__file__).resolve().parents[3]
PARTITIONS = 3
RECORDS = 150
EARLIEST_LOCAL = -4
SLOW_STORE = "tests.integration.jobs.slow_storage.SlowCopyLocalTieredStorage"
COPY_SLEEP_MS = 1500
# The copy runs' deadline per segment; reconcile's copy deadline is never below it.
COPY_TIMEOUT_S = 6.0
# A dead run's processes (the JVM, then its Python workers) are gone within this.
PROCESSES_GONE_WITHIN_S = 30.0
STARTED = RemoteLogSegmentState.COPY_SEGMENT_STARTED
FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED
REQUIRED_SUFFIXES = {
    RemoteObjectSuffix.LOG,
    RemoteObjectSuffix.OFFSET_INDEX,
    RemoteObjectSuffix.TIME_INDEX,
    RemoteObjectSuffix.LEADER_EPOCH_CHECKPOINT,
}
Records = dict[int, list[bytes]]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[TieredCluster]:
    settings = local_store_settings(tmp_path / "remote")
    with BrokerProcess(tmp_path / "broker", overrides={**BROKER_SETTINGS, **settings}) as broker:
        yield TieredCluster(broker, settings)


# ---------------------------------------------------------------------------- the topic
def value_of(topic: str, partition: int, i: int) -> bytes:
    return f"{topic}-{partition}-{i:05d}-".encode() * 6


def tiered_topic(cluster: TieredCluster, topic: str) -> tuple[list[TopicIdPartition], Records]:
    """A remote-enabled topic whose records all sit in closed segments, none copied yet."""
    with KafkaCluster(cluster.bootstrap) as kafka:
        created = KafkaAdminClient(kafka).create_topic(
            topic,
            num_partitions=PARTITIONS,
            replication_factor=1,
            configs={
                "remote.storage.enable": "true",
                "segment.bytes": str(SEGMENT_BYTES),
                "local.retention.bytes": "0",
            },
        )
    assert created.topic_id is not None
    tips = [TopicIdPartition(created.topic_id, TopicPartition(topic, p)) for p in range(PARTITIONS)]
    # batches well below segment.bytes (a bigger one is refused as too large)
    producer = KafkaProducer(
        bootstrap_servers=cluster.bootstrap, acks="all", linger_ms=0, batch_size=1024
    )
    try:
        futures = {
            p: [producer.send(topic, value_of(topic, p, i), partition=p) for i in range(RECORDS)]
            for p in range(PARTITIONS)
        }
        producer.flush()
        for sent in futures.values():
            assert [f.get(timeout=10).offset for f in sent] == list(range(RECORDS))
    finally:
        producer.close()
    # The broker rolls an active segment that breaches local retention (by size: only with
    # local.retention.bytes=0, as Kafka): then every record
    # is in a closed segment below the high watermark, i.e. eligible for a copy.
    for tip in tips:
        wait_until(
            lambda tip=tip: active_segment_base(cluster, tip) == RECORDS,
            f"{tip.topic_partition}'s active segment to be rolled",
        )
    return tips, {p: [value_of(topic, p, i) for i in range(RECORDS)] for p in range(PARTITIONS)}


def local_offsets_of(directory: Path) -> list[int]:
    """``local_offsets``, again if local retention deleted a file while it was read."""
    for _attempt in range(10):
        try:
            return local_offsets(directory)
        except FileNotFoundError:
            time.sleep(0.1)
    return local_offsets(directory)


def partition_dir(cluster: TieredCluster, tip: TopicIdPartition) -> Path:
    tp = tip.topic_partition
    return cluster.broker.log_dir / f"{tp.topic}-{tp.partition}"


def active_segment_base(cluster: TieredCluster, tip: TopicIdPartition) -> int:
    return max(int(p.stem) for p in partition_dir(cluster, tip).glob("*.log"))


# ---------------------------------------------------------------------------- the metadata
def segment_events(
    bootstrap: str,
) -> dict[RemoteLogSegmentId, list[RemoteLogSegmentState]]:
    """Every state each segment id went through, read from ``__remote_log_metadata`` itself
    (not through a metadata cache, which forgets DELETE_SEGMENT_FINISHED segments)."""
    history: dict[RemoteLogSegmentId, list[RemoteLogSegmentState]] = {}
    with KafkaCluster(bootstrap) as kafka:
        described = kafka.refresh_metadata([REMOTE_LOG_METADATA_TOPIC_NAME]).topic(
            REMOTE_LOG_METADATA_TOPIC_NAME
        )
        assert described is not None
        consumer = KafkaConsumer(kafka, max_wait_ms=0, min_bytes=0)
        for partition in sorted(p.partition for p in described.partitions):
            offset = consumer.earliest_offset(REMOTE_LOG_METADATA_TOPIC_NAME, partition)
            end = consumer.latest_offset(REMOTE_LOG_METADATA_TOPIC_NAME, partition)
            while offset < end:
                fetched = consumer.fetch(REMOTE_LOG_METADATA_TOPIC_NAME, partition, offset)
                assert fetched.next_offset > offset
                offset = fetched.next_offset
                for record in fetched.records:
                    assert record.value is not None
                    event = serde.deserialize(record.value)
                    if isinstance(event, RemoteLogSegmentMetadata | RemoteLogSegmentMetadataUpdate):
                        history.setdefault(event.remote_log_segment_id, []).append(event.state)
    return history


def listed(cluster: TieredCluster, tips: list[TopicIdPartition]) -> list[RemoteLogSegmentMetadata]:
    with client_rlmm(cluster.bootstrap) as rlmm:
        return [m for tip in tips for m in rlmm.list_remote_log_segments(tip)]


def finished_end_offset(segments: list[RemoteLogSegmentMetadata], tip: TopicIdPartition) -> int:
    """The last offset (inclusive) of the FINISHED copies of ``tip`` from 0 on, -1 if none."""
    end = -1
    ours = [m for m in segments if m.topic_id_partition == tip and m.state is FINISHED]
    for metadata in sorted(ours, key=lambda m: m.start_offset):
        assert metadata.start_offset == end + 1, ours
        end = metadata.end_offset
    return end


# ---------------------------------------------------------------------------- the jobs
def start_copy_job(
    cluster: TieredCluster, tmp_path: Path, name: str, *extra: str
) -> tuple[subprocess.Popen[bytes], Path]:
    """``python -m jobs.copy_segments`` in its own session (the driver leads the group)."""
    log = tmp_path / f"{name}.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "jobs.copy_segments",
                *cluster.job_args(
                    "--lock-dir",
                    str(tmp_path / "locks"),
                    "--summary-path",
                    str(tmp_path / f"{name}.json"),
                    "--remote-storage-manager",
                    SLOW_STORE,
                    "--copy-timeout-s",
                    str(COPY_TIMEOUT_S),
                    *extra,
                ),
            ],
            cwd=REPO,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, "PYTHONPATH": str(REPO), "PYSPARK_PYTHON": sys.executable},
            start_new_session=True,
        )
    return process, log


def descendants(pid: int) -> dict[int, str]:
    """The live processes under ``pid`` and their command lines (Spark's Python daemon leads
    a process group of its own, so the driver's group is not all of them)."""
    table = process_table()
    found: dict[int, str] = {}
    frontier = [pid]
    while frontier:
        parent = frontier.pop()
        for child in [p for p, entry in table.items() if entry.parent == parent]:
            found[child] = command_line(child)
            frontier.append(child)
    return found


def command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def assert_all_gone(processes: dict[int, str], log: Path) -> None:
    """Every one of ``processes`` exits on its own (none is signalled here) within the bound;
    whatever is left is killed and fails the test."""
    pids = set(processes)
    try:
        wait_until(
            lambda: not pids & set(process_table()),
            "the run's processes to exit",
            PROCESSES_GONE_WITHIN_S,
        )
    finally:
        left = pids & set(process_table())
        for pid in left:
            os.kill(pid, signal.SIGKILL)
    assert not left, ({p: processes[p] for p in left}, log.read_text()[-3000:])


def run_in_process(
    main: Callable[[list[str]], int], cluster: TieredCluster, summary: Path, *extra: str
) -> tuple[int, dict]:
    code = main(cluster.job_args("--summary-path", str(summary), *extra))
    return code, json.loads(summary.read_text())


def wait_until_older_than(segments: list[RemoteLogSegmentMetadata], age_s: float) -> None:
    """Sleep until every STARTED event of ``segments`` is older than ``age_s``."""
    newest_ms = max(m.event_timestamp_ms for m in segments)
    delay_s = newest_ms / 1000 + age_s + 0.5 - time.time()
    if delay_s > 0:
        time.sleep(delay_s)


def reconcile_and_copy(
    cluster: TieredCluster, tmp_path: Path, topic: str, stale: list[RemoteLogSegmentMetadata]
) -> None:
    """What an operator does after a dead run: reconcile, then copy again (in process, on
    the shared session)."""
    wait_until_older_than(stale, COPY_TIMEOUT_S)
    code, done = run_in_process(
        reconcile.main,
        cluster,
        tmp_path / "reconcile.json",
        "--copy-deadline-s",
        str(COPY_TIMEOUT_S),
        "--lock-dir",
        str(tmp_path / "locks"),
    )
    assert code == 0, done
    assert done["counts"]["copies_rolled_back"] == len(stale), done
    rolled_back = {
        a["segment_id"] for a in done["details"]["actions"] if a["action"] == "roll_back_copy"
    }
    assert rolled_back == {str(m.remote_log_segment_id.id) for m in stale}

    code, copied = run_in_process(
        copy_segments.main,
        cluster,
        tmp_path / "copy.json",
        "--topic",
        topic,
        "--lock-dir",
        str(tmp_path / "locks"),
    )
    assert code == 0, copied
    assert copied["counts"]["segments_failed"] == 0
    assert copied["counts"]["segments_copied"] == copied["counts"]["segments_planned"] > 0


# ---------------------------------------------------------------------------- the oracle
def assert_converged(
    cluster: TieredCluster,
    tmp_path: Path,
    tips: list[TopicIdPartition],
    records: Records,
    stale: list[RemoteLogSegmentMetadata],
) -> None:
    topic = tips[0].topic_partition.topic
    # A rerun finds nothing eligible.
    code, again = run_in_process(
        copy_segments.main,
        cluster,
        tmp_path / "again.json",
        "--topic",
        topic,
        "--dry-run",
        "--lock-dir",
        str(tmp_path / "locks"),
    )
    assert code == 0, again
    assert again["counts"].get("segments_planned", 0) == 0, again

    # Every eligible segment (here: every record, all in closed segments) FINISHED exactly
    # once: the FINISHED copies of each partition cover the log from its start (0, nothing
    # expired) to the last record without gap or overlap.
    with KafkaCluster(cluster.bootstrap) as kafka:
        consumer = KafkaConsumer(kafka)
        assert [consumer.earliest_offset(topic, p) for p in range(PARTITIONS)] == [0] * PARTITIONS
    live = listed(cluster, tips)
    assert all(m.state is FINISHED for m in live), [(m.start_offset, m.state) for m in live]
    for tip in tips:
        assert finished_end_offset(live, tip) == RECORDS - 1, tip

    # The metadata topic itself: the rolled-back attempts ended DELETE_SEGMENT_FINISHED,
    # nothing is left in a STARTED state, the live segments are those FINISHED.
    history = segment_events(cluster.bootstrap)
    for metadata in stale:
        assert history[metadata.remote_log_segment_id] == [
            STARTED,
            RemoteLogSegmentState.DELETE_SEGMENT_STARTED,
            RemoteLogSegmentState.DELETE_SEGMENT_FINISHED,
        ]
    ours = {sid: states for sid, states in history.items() if sid.topic_id_partition in tips}
    assert {sid for sid, states in ours.items() if states[-1] is FINISHED} == {
        m.remote_log_segment_id for m in live
    }
    assert all(
        states[-1] in (FINISHED, RemoteLogSegmentState.DELETE_SEGMENT_FINISHED)
        for states in ours.values()
    ), ours

    # The store, file by file: only objects of live segments (no orphans, no temp files),
    # and every FINISHED segment's objects, its .log of the size the metadata says.
    store = Path(cluster.store_settings["rsm.config.local.storage.dir"])
    found: dict[RemoteLogSegmentId, dict[RemoteObjectSuffix, int]] = {}
    live_ids = {m.remote_log_segment_id.id: m.remote_log_segment_id for m in live}
    for path in sorted(p for p in store.rglob("*") if p.is_file()):
        key = path.relative_to(store).as_posix()
        if key.endswith("/topic-manifest.json"):
            continue  # the broker writes the topic's manifest beside its segments
        try:
            parsed = parse_object_key(key)
        except InvalidRemoteObjectKeyError:
            pytest.fail(f"{key} is no object of a segment (a leftover temp file?)")
        segment_id = live_ids.get(parsed.segment.segment_id)
        assert segment_id is not None, f"{key} is an orphan: no live metadata names it"
        found.setdefault(segment_id, {})[parsed.suffix] = path.stat().st_size
    for metadata in live:
        objects = found.get(metadata.remote_log_segment_id, {})
        assert set(objects) >= REQUIRED_SUFFIXES, (metadata, objects)
        assert objects[RemoteObjectSuffix.LOG] == metadata.segment_size_in_bytes

    # The broker deletes local segments that are remote (local.retention.bytes keeps the
    # newest closed one): offset 0 of every partition is read from the remote tier.
    with KafkaCluster(cluster.bootstrap) as kafka:
        consumer = KafkaConsumer(kafka)
        wait_until(
            lambda: all(
                consumer.list_offset(topic, p, EARLIEST_LOCAL).offset > 0 for p in range(PARTITIONS)
            ),
            "local retention to delete copied segments of every partition",
        )
    assert consume_all(cluster.bootstrap, topic) == {
        p: list(enumerate(values)) for p, values in records.items()
    }


def consume_all(bootstrap: str, topic: str) -> dict[int, list[tuple[int, bytes]]]:
    """Every record of each partition from offset 0, with kafka-python."""
    consumer = ReferenceConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        consumer_timeout_ms=20_000,
        max_partition_fetch_bytes=8192,
    )
    out: dict[int, list[tuple[int, bytes]]] = {}
    try:
        for p in range(PARTITIONS):
            tp = ReferenceTopicPartition(topic, p)
            consumer.assign([tp])
            consumer.seek(tp, 0)
            got: list[tuple[int, bytes]] = []
            for message in consumer:
                got.append((message.offset, message.value))
                if len(got) == RECORDS:
                    break
            out[p] = got
    finally:
        consumer.close()
    return out


# ---------------------------------------------------------------------------- the tests
def test_copy_run_killed_mid_upload_is_reconciled_and_copied_again(
    spark: SparkSession, cluster: TieredCluster, tmp_path: Path
) -> None:
    topic = "copy-killed"
    tips, records = tiered_topic(cluster, topic)

    worker, log = start_copy_job(
        cluster,
        tmp_path,
        "killed",
        "--topic",
        topic,
        "--rsm-config",
        f"slow.copy.sleep.ms={COPY_SLEEP_MS}",
    )
    seen: dict[int, str] = {}
    try:
        with client_rlmm(cluster.bootstrap) as rlmm:

            def mid_run() -> bool:
                seen.update(descendants(worker.pid))
                if worker.poll() is not None:
                    return True
                states = [m.state for tip in tips for m in rlmm.list_remote_log_segments(tip)]
                return states.count(FINISHED) >= 2 and STARTED in states

            wait_until(mid_run, "two copies FINISHED and one in flight", 120)
        assert worker.poll() is None, log.read_text()[-4000:]
        seen |= descendants(worker.pid)
        # What a crash of the driver's host kills: the driver and its JVM (one group).
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait()
    finally:
        if worker.poll() is None:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait()
    assert worker.returncode == -signal.SIGKILL
    assert any("java" in command for command in seen.values()), seen
    # Spark's Python workers (another group) must not outlive the JVM: they would go on
    # copying with nobody to report to.
    assert_all_gone(seen, log)

    # Mid-run: some copies FINISHED, some left STARTED with part of their objects written.
    segments = listed(cluster, tips)
    stale = [m for m in segments if m.state is STARTED]
    finished = [m for m in segments if m.state is FINISHED]
    planned = sum(
        int(line.split(" segments=")[1].split()[0])
        for line in log.read_text().splitlines()
        if line.startswith(f"partition={topic}-") and " event=planned " in line
    )
    assert stale and finished and len(finished) < planned, (len(stale), len(finished), planned)
    store_keys = cluster.object_keys()
    for metadata in stale:
        assert any(str(metadata.remote_log_segment_id.id) in key for key in store_keys)

    # While the job is dead the broker deletes only local segments that FINISHED copies
    # cover: the local log start never passes their end + 1, and what is local is whole.
    ends = {tip: finished_end_offset(segments, tip) for tip in tips}
    with KafkaCluster(cluster.bootstrap) as kafka:
        consumer = KafkaConsumer(kafka)

        def local_starts() -> dict[TopicIdPartition, int]:
            return {
                tip: consumer.list_offset(
                    topic, tip.topic_partition.partition, EARLIEST_LOCAL
                ).offset
                for tip in tips
            }

        wait_until(
            lambda: any(local_starts()[tip] > 0 for tip in tips if ends[tip] >= 0),
            "local retention to delete a copied segment",
        )
        for _sample in range(10):
            starts = local_starts()
            for tip in tips:
                assert starts[tip] <= ends[tip] + 1, (tip, starts[tip], ends[tip])
                held = local_offsets_of(partition_dir(cluster, tip))
                assert held[0] <= ends[tip] + 1 and held == list(range(held[0], RECORDS))
            time.sleep(0.3)

    reconcile_and_copy(cluster, tmp_path, topic, stale)
    assert_converged(cluster, tmp_path, tips, records, stale)


def test_run_timeout_stops_the_run_and_leaves_nothing_half_committed(
    spark: SparkSession, cluster: TieredCluster, tmp_path: Path
) -> None:
    topic = "copy-timed-out"
    tips, records = tiered_topic(cluster, topic)
    run_timeout_s = 8.0

    started = time.monotonic()
    worker, log = start_copy_job(
        cluster,
        tmp_path,
        "timed-out",
        "--topic",
        topic,
        "--rsm-config",
        "slow.copy.sleep.ms=60000",
        "--run-timeout-s",
        str(run_timeout_s),
    )
    seen: dict[int, str] = {}
    try:
        while worker.poll() is None and time.monotonic() - started < run_timeout_s + 120:
            seen |= descendants(worker.pid)
            time.sleep(0.2)
        elapsed_s = time.monotonic() - started
    finally:
        if worker.poll() is None:
            os.killpg(worker.pid, signal.SIGKILL)
        worker.wait()
    output = log.read_text()
    assert elapsed_s < run_timeout_s + 60, (elapsed_s, output[-4000:])
    assert worker.returncode == 1, output[-4000:]
    assert f"copy_segments: error: the copies passed --run-timeout-s={run_timeout_s:g}" in output
    summary = json.loads((tmp_path / "timed-out.json").read_text())
    assert summary["status"] == "failed"
    assert any("--run-timeout-s" in e["error"] for e in summary["errors"]), summary["errors"]
    assert_all_gone(seen, log)

    # The timeout interrupted copies mid-upload: nothing FINISHED, the attempts STARTED.
    segments = listed(cluster, tips)
    stale = [m for m in segments if m.state is STARTED]
    assert stale and len(stale) == len(segments), [(m.start_offset, m.state) for m in segments]
    reconcile_and_copy(cluster, tmp_path, topic, stale)
    assert_converged(cluster, tmp_path, tips, records, stale)
