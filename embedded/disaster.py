"""The demo's whole-cluster disaster: what the bucket holds, the wipe, and the restore checked.

The bucket (the remote tier, ``LocalTieredStorage`` in the chunked format) is read back as a
restore reads it (``storage_core.tiered.recovery``: every segment manifest checked against its
objects, the segments of one leader-epoch lineage per partition), so the demo says from the
bucket itself which acknowledged records a restore can bring back and which lived only on the
brokers' disks (KIP-405 copies closed segments only: the active segments never reach it).

The wipe removes what a lost cluster loses: ZooKeeper's data and every broker's log dir. The
remote tier stays, and so do the security material (a new cluster is given the same
certificates and passwords), Airflow's directory, the logs and the reports.

The restore is what an operator runs on the new, empty cluster: ``python -m
jobs.restore_cluster`` as User:pipeline, with the pipeline's client settings and the remote
tier's settings on the command line. Then every restored record is read back and checked, a
consumer group resumes from its restored offset, and a producer's next record lands at the
restored next offset.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.structs import OffsetAndMetadata

from embedded.cluster import EmbeddedCluster
from embedded.cluster_security import DEMO_CLIENT, DEMO_GROUP, PIPELINE
from embedded.partition_view import PartitionView
from embedded.processes import run_to_completion
from embedded.workload import POLL_TIMEOUT_MS, record_value
from storage_core.common import Uuid
from storage_core.tiered.recovery.bucket_inventory import BucketStore, scan_bucket
from storage_core.tiered.recovery.bucket_inventory import bucket_store as recovered_store
from storage_core.tiered.recovery.offsets_restore import newest_backup
from storage_core.tiered.recovery.restore_plan import PartitionRestorePlan, plan_partition
from storage_core.tiered.recovery.topic_manifest import TopicManifest
from storage_core.tiered.remote_object_keys import topic_manifest_key
from storage_core.tiered.rsm_loader import load_remote_storage_manager

JOB_TIMEOUT_S = 300.0
GROUP_POLLS_MAX = 30
PRODUCE_TIMEOUT_S = 30.0


class DisasterCheckError(RuntimeError):
    """A check of the disaster's steps failed; the message says which and why."""


# -- the bucket -----------------------------------------------------------------------------


def bucket_store(cluster: EmbeddedCluster) -> BucketStore:
    """The cluster's remote tier as stored (manifests and objects), as a restore reads it."""
    return recovered_store(load_remote_storage_manager("LocalTieredStorage", cluster.rsm_config()))


def read_topic_manifest(cluster: EmbeddedCluster, topic: str, topic_id: Uuid) -> TopicManifest:
    store = bucket_store(cluster)
    try:
        key = topic_manifest_key(store.prefix, topic, topic_id)
        try:
            data = store.get_object(key)
        except Exception as exc:  # any store error: the manifest is not readable
            raise DisasterCheckError(
                f"the bucket has no topic manifest of {topic} ({topic_id}) at {key}: the"
                f" tiering DAG's topic_manifests task writes it ({exc})"
            ) from exc
        return TopicManifest.from_bytes(data, where=key)
    finally:
        store.close()


def backed_up_offsets(cluster: EmbeddedCluster, group_id: str, topic: str) -> dict[int, int]:
    """``group_id``'s offsets in ``topic`` in the newest consumer offsets backup of the bucket
    (partition -> committed offset); empty when the backup does not hold the group."""
    store = bucket_store(cluster)
    try:
        found = newest_backup(store)
    finally:
        store.close()
    if found is None:
        raise DisasterCheckError(f"the bucket {cluster.remote_dir} holds no offsets backup")
    return {
        committed.partition: committed.committed_offset
        for group in found[1].groups
        if group.group_id == group_id
        for offsets in group.topics
        if offsets.topic == topic
        for committed in offsets.partitions
    }


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionHolding:
    """One partition before the disaster: what the brokers acknowledged and what the bucket
    holds. Offsets: ``[bucket_start, bucket_next)`` is in the bucket, ``[bucket_next,
    high_watermark)`` only on the brokers' disks."""

    partition: int
    log_start_offset: int
    high_watermark: int
    highest_tiered_offset: int
    bucket_start: int
    bucket_next: int
    segments: int
    stored_bytes: int

    @property
    def in_bucket(self) -> int:
        return self.bucket_next - self.bucket_start

    @property
    def only_on_disks(self) -> int:
        return self.high_watermark - self.bucket_next

    def line(self, topic: str) -> str:
        return (
            f"{topic}-{self.partition}: acknowledged {self.log_start_offset}..."
            f"{self.high_watermark - 1}; bucket: {self.segments} segments, offsets"
            f" {self.bucket_start}..{self.bucket_next - 1} (remote log start"
            f" {self.bucket_start}, highest tiered {self.highest_tiered_offset}):"
            f" {self.in_bucket} records in the bucket, {self.only_on_disks} only on the disks"
        )

    def as_json(self) -> dict[str, int]:
        return {
            "log_start_offset": self.log_start_offset,
            "high_watermark": self.high_watermark,
            "highest_tiered_offset": self.highest_tiered_offset,
            "remote_log_start_offset": self.bucket_start,
            "next_offset": self.bucket_next,
            "segments": self.segments,
            "bytes": self.stored_bytes,
            "records_in_bucket": self.in_bucket,
            "records_only_on_disks": self.only_on_disks,
        }


def bucket_holdings(
    cluster: EmbeddedCluster, topic: str, topic_id: Uuid, views: list[PartitionView]
) -> list[PartitionHolding]:
    """Per partition, what a restore of ``topic`` would bring back (the bucket read and each
    manifest checked, as ``jobs.restore_topic`` plans it), checked against the brokers: the
    bucket ends where the brokers say the last copy ended and starts at or below the log
    start. Segments a restore leaves out (second copies, a deposed leader's) are printed."""
    store = bucket_store(cluster)
    try:
        inventory = scan_bucket(store, topic=topic, topic_id=topic_id)
    finally:
        store.close()
    holdings = []
    for view in views:
        found = [
            p
            for tip, p in inventory.partitions.items()
            if tip.topic_partition.partition == view.partition
        ]
        if not found:
            raise DisasterCheckError(f"the bucket holds no segment of {topic}-{view.partition}")
        plan = plan_partition(found[0], allow_gaps=False)
        _check_plan(topic, view, plan)
        holdings.append(
            PartitionHolding(
                partition=view.partition,
                log_start_offset=view.log_start_offset,
                high_watermark=view.high_watermark,
                highest_tiered_offset=view.highest_tiered_offset,
                bucket_start=plan.log_start_offset,
                bucket_next=plan.next_offset,
                segments=len(plan.segments),
                stored_bytes=plan.stored_bytes,
            )
        )
    return holdings


def _check_plan(topic: str, view: PartitionView, plan: PartitionRestorePlan) -> None:
    where = f"{topic}-{view.partition} in the bucket"
    if plan.stopped is not None:
        raise DisasterCheckError(f"{where} cannot be restored: {plan.stopped}")
    for item in plan.left_out:  # a second copy or a deposed leader's: the lineage is whole
        print(
            f"    {where}: segment {item.ref.segment_id} (from offset"
            f" {item.ref.start_offset}) is left out of a restore: {item.reason}",
            flush=True,
        )
    if plan.end_offset != view.highest_tiered_offset:
        raise DisasterCheckError(
            f"{where} ends at {plan.end_offset}, the brokers' highest tiered offset is"
            f" {view.highest_tiered_offset}"
        )
    if plan.log_start_offset > view.log_start_offset:
        raise DisasterCheckError(
            f"{where} starts at {plan.log_start_offset}, above the log start"
            f" {view.log_start_offset}: acknowledged records are missing from it"
        )


# -- the consumer group ---------------------------------------------------------------------


def commit_group_offsets(
    cluster: EmbeddedCluster, topic: str, starts: dict[int, int], records: int
) -> dict[int, int]:
    """``DEMO_GROUP`` reads ``records`` records of each partition from ``starts`` and commits
    the offset after them, as User:demo; returns the committed offsets."""
    consumer = _group_consumer(cluster)
    try:
        committed: dict[int, int] = {}
        for partition, start in sorted(starts.items()):
            tp = TopicPartition(topic, partition)
            consumer.assign([tp])
            consumer.seek(tp, start)
            read = 0
            polls = 0
            while read < records:
                batch = consumer.poll(timeout_ms=POLL_TIMEOUT_MS).get(tp, [])
                polls += 1
                if polls > GROUP_POLLS_MAX:
                    raise DisasterCheckError(
                        f"group {DEMO_GROUP}: read {read} of {records} records of"
                        f" {topic}-{partition} from {start} in {GROUP_POLLS_MAX} polls"
                    )
                for message in batch[: records - read]:
                    if message.value != record_value(topic, partition, message.offset):
                        raise DisasterCheckError(
                            f"group {DEMO_GROUP}: {topic}-{partition} offset {message.offset}"
                            " differs from what was written"
                        )
                read += min(len(batch), records - read)
            offset = start + records
            consumer.commit({tp: OffsetAndMetadata(offset, "", -1)})
            committed[partition] = offset
        return committed
    finally:
        consumer.close()


def group_resumes(
    cluster: EmbeddedCluster, topic: str, partitions: int
) -> dict[int, dict[str, int]]:
    """Where ``DEMO_GROUP`` resumes on each partition: its committed offset and the offset of
    the first record it then gets (checked against what was written)."""
    consumer = _group_consumer(cluster)
    try:
        resumed: dict[int, dict[str, int]] = {}
        for partition in range(partitions):
            tp = TopicPartition(topic, partition)
            consumer.assign([tp])
            committed = consumer.committed(tp)
            if committed is None:
                raise DisasterCheckError(
                    f"group {DEMO_GROUP} has no committed offset on {topic}-{partition}"
                )
            first = None
            for _ in range(GROUP_POLLS_MAX):
                batch = consumer.poll(timeout_ms=POLL_TIMEOUT_MS).get(tp, [])
                if batch:
                    first = batch[0]
                    break
            if first is None:
                raise DisasterCheckError(
                    f"group {DEMO_GROUP} got no record of {topic}-{partition} from its"
                    f" committed offset {committed}"
                )
            if first.value != record_value(topic, partition, first.offset):
                raise DisasterCheckError(
                    f"group {DEMO_GROUP}: {topic}-{partition} offset {first.offset} differs"
                    " from what was written"
                )
            resumed[partition] = {"committed": committed, "first_offset": first.offset}
        return resumed
    finally:
        consumer.close()


def _group_consumer(cluster: EmbeddedCluster) -> KafkaConsumer:
    return KafkaConsumer(
        bootstrap_servers=cluster.bootstrap_server,
        group_id=DEMO_GROUP,
        enable_auto_commit=False,
        auto_offset_reset="none",
        fetch_max_wait_ms=500,
        **cluster.security.kafka_python(DEMO_CLIENT),
    )


def produce_next(
    cluster: EmbeddedCluster, topic: str, next_offsets: dict[int, int]
) -> dict[int, int]:
    """One record to each partition (acks=all, idempotent, as User:demo); the offset each
    landed at. Each is the record the workload writes at the offset it should land at, so a
    reader checks it as any other. The new cluster hands out producer ids from 0 again, the
    lost cluster's: the restored partitions carry no producer state for them to meet."""
    producer = KafkaProducer(
        bootstrap_servers=cluster.bootstrap_server,
        acks="all",
        enable_idempotence=True,
        **cluster.security.kafka_python(DEMO_CLIENT),
    )
    try:
        landed = {}
        for partition, offset in sorted(next_offsets.items()):
            value = record_value(topic, partition, offset)
            future = producer.send(topic, value=value, partition=partition)
            landed[partition] = int(future.get(timeout=PRODUCE_TIMEOUT_S).offset)
        return landed
    finally:
        producer.close(timeout=10)


# -- the wipe -------------------------------------------------------------------------------


def wipe(cluster: EmbeddedCluster) -> list[tuple[Path, int, int]]:
    """Remove ZooKeeper's data and every broker's log dir of a stopped cluster; returns each
    removed directory with its files and bytes."""
    lost = [s.data_dir for s in cluster.processes.zookeeper.servers]
    lost += [node.log_dir for node in cluster.brokers]
    removed = []
    for path in lost:
        files, size = directory_size(path)
        shutil.rmtree(path, ignore_errors=False)
        removed.append((path, files, size))
    return removed


def directory_size(path: Path) -> tuple[int, int]:
    """Files and bytes under ``path`` (0, 0 when it does not exist)."""
    files = [p for p in path.rglob("*") if p.is_file()] if path.exists() else []
    return len(files), sum(p.stat().st_size for p in files)


# -- the restore ----------------------------------------------------------------------------


def job_command(cluster: EmbeddedCluster, job: str, summary_path: Path) -> list[str]:
    """``python -m jobs.<job>`` as User:pipeline: the pipeline's client settings
    (``--command-config``), the remote tier's settings, the run locks beside the DAGs'."""
    rsm = [f"--rsm-config={key}={value}" for key, value in cluster.rsm_config().items()]
    return [
        sys.executable,
        "-m",
        f"jobs.{job}",
        "--bootstrap-server",
        cluster.bootstrap_server,
        "--command-config",
        str(cluster.client_config_path(PIPELINE)),
        "--remote-storage-manager",
        "LocalTieredStorage",
        *rsm,
        "--lock-dir",
        str(cluster.directory / "locks"),
        "--summary-path",
        str(summary_path),
    ]


def run_job(
    command: list[str], log_path: Path, summary_path: Path, cwd: Path
) -> tuple[dict[str, Any], float]:
    """Run one job to completion in its own process group (stopped on timeout or Ctrl-C),
    its output in ``log_path``; its summary and seconds. ``DisasterCheckError`` with the end
    of its output when it does not succeed."""
    summary_path.parent.mkdir(parents=True, exist_ok=True)
    name = command[2]
    started = time.monotonic()
    code = run_to_completion(
        name, command, log_path=log_path, env=dict(os.environ), timeout_s=JOB_TIMEOUT_S, cwd=cwd
    )
    seconds = time.monotonic() - started
    if code != 0 or not summary_path.is_file():
        tail = log_path.read_text(errors="replace")[-3000:]
        raise DisasterCheckError(
            f"{name} exited {code}; end of {log_path}:\n{tail}{_summary_errors(summary_path)}"
        )
    summary: dict[str, Any] = json.loads(summary_path.read_text())
    return summary, seconds


def _summary_errors(summary_path: Path) -> str:
    """The errors a failed job recorded in its summary: its log shows what it did, not why
    a step failed."""
    try:
        errors = json.loads(summary_path.read_text()).get("errors") or []
    except (OSError, ValueError):
        return ""
    lines = [
        f"  {e.get('partition') or 'job'}: {e.get('error')}" for e in errors if isinstance(e, dict)
    ]
    return "\nerrors in its summary:\n" + "\n".join(lines) if lines else ""
