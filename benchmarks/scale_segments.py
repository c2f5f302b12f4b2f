"""Segment scale: a broker process with tiered storage (``LocalTieredStorage`` in a
directory, ``__remote_log_metadata`` of one partition) whose partition ``tiered-0`` holds S
remote segments; a fresh broker for each size S (10^3, 10^4, 10^5 by default).

The S remote segments are NOT produced and uploaded one by one: that would take hours here.
``tiered-0`` gets S records produced into one segment (offsets 0 .. S-1, inclusive), which
is then declared remote as S segments of one offset each by publishing their metadata
events, as copies would (COPY_SEGMENT_STARTED then COPY_SEGMENT_FINISHED per segment,
serialised by storage_core's ``RemoteLogMetadataSerde``, one record each with a null key as
``ProducerPublisher`` writes them, in batches through storage_core's ``KafkaProducer``), until
the broker's ListOffsets (latest tiered) shows them all; no objects exist for them. The
output says so. After them come real 16 KiB segments of produced records, copied for real
(uploaded, published) by the steps below, so every figure is of a partition that holds S
remote segments.

Steps at each size (``--only`` picks some):

  copy      a client-mode RLMM started and caught up with the metadata topic (what every
            copy job does first: per remote segment), ``candidate_segments`` (planning), then
            ``copy_segment`` of ``copies`` segments (upload to the directory, STARTED and
            FINISHED published and applied): the median per segment
  quality   the quality job's pure part: every ``__remote_log_metadata`` record read and
            decoded (``read_metadata_records``) and its tables built (``build_remote_segments``,
            ``build_partition_offsets``, no objects listed): per remote segment
  bytes     the ``__remote_log_metadata`` log files' bytes per remote segment
  restart   SIGTERM, then start until a Fetch of the first really copied offset (held only by
            the remote tier once local retention deleted it) returns records; once with the
            broker's RLMM snapshots and committed offsets, once with them deleted (the whole
            metadata topic replayed)

And on the first broker (``fds``): its open descriptors as the topic ``local`` (not tiered)
grows to each of ``--local-segments`` closed segments, and the descriptors added per closed
segment; then (``churn``) cycles of history beside the remote segments, and the metadata
partition's records and bytes per live segment after each (``benchmarks/scale_churn.py``).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from benchmarks.scale_churn import churn
from benchmarks.scale_support import cpu_of, median, open_descriptors, wait_for
from jobs.quality import read_metadata_records
from jobs.tables.partition_offsets import build_partition_offsets
from jobs.tables.remote_segments import build_remote_segments
from storage_core.client import KafkaCluster
from storage_core.client.admin import KafkaAdminClient
from storage_core.client.admin_requests import AlterConfigOp
from storage_core.client.producer import ACKS_ALL, KafkaProducer
from storage_core.common import TopicIdPartition, TopicPartition
from storage_core.log.log_config import LogConfig
from storage_core.protocol.config_resource import AlterConfigOpType, ConfigResourceType
from storage_core.records import SimpleRecord
from storage_core.tiered.local_tiered_storage import LocalTieredStorage
from storage_core.tiered.metadata import RemoteLogSegmentState, serde
from storage_core.tiered.metadata.partitioner import RemoteLogMetadataTopicPartitioner
from storage_core.tiered.metadata.snapshot_file import REMOTE_LOG_SNAPSHOT_FILE_NAME
from storage_core.tiered.operations.copy import candidate_segments, copy_segment
from storage_core.tiered.operations.fencing import LeaderEpochFence
from storage_core.tiered.operations.log_view import LogView
from storage_core.tiered.topic_based_rlmm.committed_offsets import COMMITTED_OFFSETS_FILE_NAME
from storage_core.tiered.topic_based_rlmm.config import REMOTE_LOG_METADATA_TOPIC_NAME
from tests.broker_process import BrokerProcess
from tests.remote_log_metadata_events import copy_started, state_update
from tests.tiered_broker_support import (
    EARLIEST_LOCAL,
    LATEST,
    LATEST_TIERED,
    client_rlmm,
    list_offset,
    raw_fetch,
)

STEPS = ("copy", "quality", "bytes", "restart", "fds", "churn")
BUILT_BY_EVENTS = (
    "the S remote segments were built by publishing their metadata events"
    " (COPY_SEGMENT_STARTED + FINISHED each, one offset each, storage_core's serde, batched"
    " through its KafkaProducer as ProducerPublisher records) over S produced records; no"
    " objects uploaded for them. The copies measured after them are real"
)
TIERED, LOCAL = "tiered", "local"
PREFIX_RECORDS_PER_SEND = 2_000
EVENTS_PER_SEND = 2_000
PREFIX_SEGMENT_BYTES = 1 << 30  # the S records stay in one segment until it shrinks
SEGMENT_BYTES = 16 * 1024
TIERED_BATCH_RECORDS = 20
LOCAL_RECORD_BYTES = 10 * 1024  # one produce, one segment of LOCAL
START_TIMEOUT_S = 600.0
APPLY_TIMEOUT_S = 900.0


@contextmanager
def tiered_broker(directory: Path) -> Iterator[BrokerProcess]:
    with BrokerProcess(
        directory,
        overrides={
            "remote.log.storage.system.enable": "true",
            "remote.log.storage.manager.class.name": "LocalTieredStorage",
            "rsm.config.local.storage.dir": str(directory / "remote-tier"),
            "rsm.config.local.fsync": "false",
            "remote.log.metadata.topic.num.partitions": "1",
            "remote.log.metadata.topic.replication.factor": "1",
            "remote.log.manager.task.interval.ms": "200",
            "log.retention.check.interval.ms": "200",
        },
        log_level="WARNING",
    ) as broker:
        yield broker


def set_segment_bytes(admin: KafkaAdminClient, topic: str, segment_bytes: int) -> None:
    admin.incremental_alter_configs(
        ConfigResourceType.TOPIC,
        topic,
        [AlterConfigOp(name="segment.bytes", op=AlterConfigOpType.SET, value=str(segment_bytes))],
    )


def fill_tiered(cluster: KafkaCluster, remote_segments: int, real_segments: int) -> None:
    """``tiered-0``: ``remote_segments`` records in segment 0, then about ``real_segments``
    closed segments of ``SEGMENT_BYTES``."""
    admin = KafkaAdminClient(cluster)
    admin.create_topic(
        TIERED,
        num_partitions=1,
        replication_factor=1,
        configs={
            "remote.storage.enable": "true",
            "segment.bytes": str(PREFIX_SEGMENT_BYTES),
            "local.retention.bytes": str(SEGMENT_BYTES),
            "retention.ms": "-1",
            "retention.bytes": "-1",
        },
    )
    producer = KafkaProducer(cluster, acks=ACKS_ALL)
    for first in range(0, remote_segments, PREFIX_RECORDS_PER_SEND):
        count = min(PREFIX_RECORDS_PER_SEND, remote_segments - first)
        producer.send(TIERED, 0, [SimpleRecord(key=None, value=b"r") for _ in range(count)])
    set_segment_bytes(admin, TIERED, SEGMENT_BYTES)
    batches = real_segments * SEGMENT_BYTES // (TIERED_BATCH_RECORDS * 150) + 4
    for b in range(batches):
        records = [
            SimpleRecord(key=None, value=f"record-{b:06d}-{i:03d}-".encode() * 6)
            for i in range(TIERED_BATCH_RECORDS)
        ]
        producer.send(TIERED, 0, records)


def topic_id_partition(log_dir: Path, topic: str) -> TopicIdPartition:
    view = LogView.read(log_dir / f"{topic}-0", high_watermark=0)
    if view.topic_id is None:
        raise RuntimeError(f"{topic}-0 has no partition.metadata yet")
    return TopicIdPartition(view.topic_id, TopicPartition(topic, 0))


def publish_remote_segments(cluster: KafkaCluster, tip: TopicIdPartition, count: int) -> None:
    """Remote segments [i, i] for i in 0 .. count - 1 of ``tip``, STARTED then FINISHED."""
    metadata_partition = RemoteLogMetadataTopicPartitioner(1).metadata_partition(tip)
    producer = KafkaProducer(cluster, acks=ACKS_ALL)
    now_ms = int(time.time() * 1000)
    pending: list[SimpleRecord] = []
    for offset in range(count):
        segment = copy_started(tip, offset, offset, {0: offset})
        finished = state_update(segment, RemoteLogSegmentState.COPY_SEGMENT_FINISHED)
        for event in (segment, finished):
            pending.append(SimpleRecord(key=None, value=serde.serialize(event), timestamp=now_ms))
        if len(pending) >= EVENTS_PER_SEND:
            producer.send(REMOTE_LOG_METADATA_TOPIC_NAME, metadata_partition, pending)
            pending = []
    if pending:
        producer.send(REMOTE_LOG_METADATA_TOPIC_NAME, metadata_partition, pending)


def metadata_bytes(log_dir: Path) -> int:
    return sum(
        f.stat().st_size
        for d in log_dir.glob(f"{REMOTE_LOG_METADATA_TOPIC_NAME}-*")
        for f in d.glob("*.log")
    )


def copy_more(broker: BrokerProcess, copies: int) -> dict[str, Any]:
    """Start a client RLMM, plan, copy ``copies`` segments of ``tiered-0`` (timed apart)."""
    directory = broker.log_dir / f"{TIERED}-0"
    rsm = LocalTieredStorage(broker.directory / "remote-tier", fsync=False)
    cpu_before_s = cpu_of([broker_pid(broker)], own=True)
    started = time.monotonic()
    with client_rlmm(broker.bootstrap) as rlmm:
        tip = topic_id_partition(broker.log_dir, TIERED)
        list(rlmm.list_remote_log_segments(tip))  # tracked, read to the end of the topic
        caught_up_s = time.monotonic() - started
        catch_up_cpu_s = cpu_of([broker_pid(broker)], own=True) - cpu_before_s
        high_watermark, _ = list_offset(broker.bootstrap, TIERED, LATEST)
        planned_at = time.monotonic()
        view = LogView.read(directory, high_watermark=high_watermark)
        epoch = view.latest_epoch
        if epoch is None:
            raise RuntimeError(f"{directory}: no leader epoch")
        segments = candidate_segments(
            view, rlmm, config=LogConfig(remote_storage_enable=True, segment_bytes=SEGMENT_BYTES)
        )
        plan_s = time.monotonic() - planned_at
        if len(segments) < copies:
            raise RuntimeError(f"{TIERED}-0 has {len(segments)} segments to copy, {copies} wanted")
        fence = LeaderEpochFence(planned_leader_epoch=epoch, current_leader_epoch=lambda: epoch)
        samples = []
        for segment in segments[:copies]:
            began = time.monotonic()
            copy_segment(view, segment, rsm=rsm, rlmm=rlmm, fence=fence, broker_id=0)
            samples.append(time.monotonic() - began)
    return {
        "rlmm_catch_up_s": round(caught_up_s, 3),
        "rlmm_catch_up_cpu_s": round(catch_up_cpu_s, 3),
        "plan_s": round(plan_s, 4),
        "copy_ms_per_segment": round(median(samples) * 1000, 2),
        "copy_ms_min": round(min(samples) * 1000, 2),
        "copy_ms_samples": [round(s * 1000, 1) for s in samples],
    }


def broker_pid(broker: BrokerProcess) -> int:
    if broker.process is None:
        raise RuntimeError("the broker is not running")
    return broker.process.pid


def quality(broker: BrokerProcess, segments: int) -> dict[str, Any]:
    cpu_before_s = cpu_of([broker_pid(broker)], own=True)
    started = time.monotonic()
    with KafkaCluster(broker.bootstrap) as cluster:
        records = read_metadata_records(cluster)
    read_s = time.monotonic() - started
    now_ms = int(time.time() * 1000)
    built_at = time.monotonic()
    rows = build_remote_segments(records, [], [], now_ms=now_ms)
    build_partition_offsets([], records, rows, now_ms=now_ms)
    build_s = time.monotonic() - built_at
    cpu_s = cpu_of([broker_pid(broker)], own=True) - cpu_before_s
    return {
        "quality_cpu_us_per_segment": round(cpu_s * 1e6 / segments, 1),
        "quality_read_s": round(read_s, 3),
        "quality_build_s": round(build_s, 3),
        "quality_us_per_segment": round((read_s + build_s) * 1e6 / segments, 1),
        "quality_rows": len(rows),
    }


def serving(broker: BrokerProcess, offset: int) -> bool:
    answer = raw_fetch(broker.port, TIERED, offset, max_wait_ms=500, timeout_s=10)
    return int(answer.error_code) == 0 and bool(answer.records)


def restart_once(
    broker: BrokerProcess, offset: int, *, keep_snapshots: bool
) -> tuple[float, float]:
    """(seconds, the new broker process's CPU seconds) until ``offset`` is served."""
    broker.stop()
    if not keep_snapshots:
        for snapshot in broker.log_dir.glob(f"*/{REMOTE_LOG_SNAPSHOT_FILE_NAME}"):
            snapshot.unlink()
        (broker.log_dir / COMMITTED_OFFSETS_FILE_NAME).unlink(missing_ok=True)
    started = time.monotonic()
    broker.start(timeout_s=START_TIMEOUT_S)
    wait_for(lambda: serving(broker, offset), f"tiered offset {offset} served", START_TIMEOUT_S)
    return time.monotonic() - started, cpu_of([broker_pid(broker)])


def restart(broker: BrokerProcess, remote_segments: int) -> dict[str, Any]:
    """The first really copied offset is ``remote_segments``; served once local retention
    deleted it locally."""
    wait_for(
        lambda: list_offset(broker.bootstrap, TIERED, EARLIEST_LOCAL)[0] > remote_segments,
        f"{TIERED}-0's first copied segment deleted locally",
        120,
    )
    with_s, with_cpu_s = restart_once(broker, remote_segments, keep_snapshots=True)
    without_s, _ = restart_once(broker, remote_segments, keep_snapshots=False)
    return {
        "restart_serving_s": round(with_s, 3),
        "restart_serving_ms_per_1000_segments": round(with_s * 1e6 / remote_segments, 2),
        "restart_cpu_ms_per_1000_segments": round(with_cpu_s * 1e6 / remote_segments, 2),
        "restart_no_snapshot_serving_s": round(without_s, 3),
    }


def local_closed_segments(log_dir: Path) -> int:
    return max(0, len(list((log_dir / f"{LOCAL}-0").glob("*.log"))) - 1)


def local_descriptors(broker: BrokerProcess, sizes: Sequence[int]) -> dict[str, Any]:
    """Descriptors as ``local`` grows to each of ``sizes`` closed segments."""
    pid = broker_pid(broker)
    seen: dict[int, int] = {}
    with KafkaCluster(broker.bootstrap) as cluster:
        KafkaAdminClient(cluster).create_topic(
            LOCAL,
            num_partitions=1,
            replication_factor=1,
            configs={"segment.bytes": str(SEGMENT_BYTES), "retention.ms": "-1"},
        )
        producer = KafkaProducer(cluster, acks=ACKS_ALL)
        value = b"x" * LOCAL_RECORD_BYTES
        for size in sorted(sizes):
            while local_closed_segments(broker.log_dir) < size:
                producer.send(LOCAL, 0, [SimpleRecord(key=None, value=value)])
            seen[size] = open_descriptors(pid)
    low, high = min(seen), max(seen)
    slope = (seen[high] - seen[low]) / (high - low) if high > low else None
    return {
        "descriptors_by_local_segments": {str(k): v for k, v in sorted(seen.items())},
        "descriptors_per_closed_segment": None if slope is None else round(slope, 3),
    }


def measure_size(
    directory: Path,
    size: int,
    *,
    only: set[str],
    copies: int,
    local_segments: Sequence[int],
    churn_cycles: int = 0,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the row of ``size`` remote segments, the descriptors and churn figures if asked)."""
    row: dict[str, Any] = {"segments": size}
    notes: dict[str, Any] = {}
    with tiered_broker(directory) as broker:
        built_at = time.monotonic()
        with KafkaCluster(broker.bootstrap) as cluster:
            fill_tiered(cluster, size, copies + copies // 4 + 3)  # the estimate is ~10% short
            tip = topic_id_partition(broker.log_dir, TIERED)
            publish_remote_segments(cluster, tip, size)
        wait_for(
            lambda: list_offset(broker.bootstrap, TIERED, LATEST_TIERED)[0] == size - 1,
            f"the broker's RLMM applying {size} remote segments",
            APPLY_TIMEOUT_S,
        )
        row["build_s"] = round(time.monotonic() - built_at, 1)
        if only & {"copy", "restart"}:
            row.update(copy_more(broker, copies))
            row["rlmm_catch_up_us_per_segment"] = round(row["rlmm_catch_up_s"] * 1e6 / size, 1)
            row["rlmm_catch_up_cpu_us_per_segment"] = round(
                row["rlmm_catch_up_cpu_s"] * 1e6 / size, 1
            )
        if "quality" in only:
            row.update(quality(broker, size))
        if "bytes" in only:
            remote = size + (copies if only & {"copy", "restart"} else 0)
            row["metadata_bytes"] = metadata_bytes(broker.log_dir)
            row["metadata_bytes_per_segment"] = round(row["metadata_bytes"] / remote, 1)
        if "restart" in only:
            row.update(restart(broker, size))
        if "fds" in only and local_segments:
            notes.update(local_descriptors(broker, local_segments))

    if "churn" in only and churn_cycles:
        notes.update(churn_beside(directory / "churn", size, cycles=churn_cycles))
    return row, notes


def churn_beside(directory: Path, size: int, *, cycles: int) -> dict[str, Any]:
    """The churn step on a broker of its own holding only the ``size`` published segments:
    the copy step's first real copy overlaps them (it covers offsets they hold), and segments
    superseded by an overlapping upload pin the metadata until they are deleted."""
    with tiered_broker(directory) as broker:
        with KafkaCluster(broker.bootstrap) as cluster:
            fill_tiered(cluster, size, 0)
            publish_remote_segments(cluster, topic_id_partition(broker.log_dir, TIERED), size)
        wait_for(
            lambda: list_offset(broker.bootstrap, TIERED, LATEST_TIERED)[0] == size - 1,
            f"the broker's RLMM applying {size} remote segments",
            APPLY_TIMEOUT_S,
        )
        return churn(broker, size, cycles=cycles)
