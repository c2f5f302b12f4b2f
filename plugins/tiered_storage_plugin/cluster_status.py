"""A snapshot of the tiering status of every remote-enabled partition in the log dirs, written
as a run summary (``job: tiering_status``) that the status page and its chart read.

Per partition (KIP-405 names; offsets inclusive unless said)::

    log_start_offset        ListOffsets -2 (the whole partition's start)
    local_log_start_offset  Lx: the first local segment's base offset
    high_watermark          ListOffsets -1 (exclusive)
    highest_tiered_offset   ListOffsets -5 (-1 when nothing is tiered)
    local_bytes             bytes of the local segment files
    remote_bytes/segments   the COPY_SEGMENT_FINISHED remote segments (the RLMM)
    local_bytes/segments    the local segment files (the active one included)
    copy_lag_bytes/segments closed local segments holding offsets above the highest tiered one
    leader, leader_epoch    the partition's leader broker id and epoch (Metadata)
    active_segment_base_offset  the active segment's first offset: offsets from there up to
                            the high watermark are not copied until the segment rolls

The summary names the run that wrote it (``dag_id``, ``run_id``, ``task_id``).

Runs in a task (it reads the log dirs and the metadata topic); read-only.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tiered_storage_plugin import paths
from tiered_storage_plugin.hooks import ClusterSettings

JOB = "tiering_status"
LATEST_TIERED = -5
RLMM_CONSUME_WAIT_MS = 30_000


def collect(settings: ClusterSettings) -> list[dict[str, Any]]:
    from storage_core.client import ConfigResourceType, KafkaAdminClient, KafkaCluster
    from storage_core.client.consumer import KafkaConsumer
    from storage_core.errors import StorageError
    from storage_core.tiered.metadata.states import RemoteLogSegmentState
    from storage_core.tiered.operations import partition_dirs
    from storage_core.tiered.operations.log_view import LogView
    from storage_core.tiered.topic_based_rlmm import TopicBasedRemoteLogMetadataManager

    found = [tp_dir for d in settings.log_dirs for tp_dir in partition_dirs(Path(d), None)]
    entries: list[dict[str, Any]] = []
    with KafkaCluster(settings.bootstrap_server) as cluster:
        admin = KafkaAdminClient(cluster)
        consumer = KafkaConsumer(cluster)
        remote_enabled: dict[str, bool] = {}
        views = []
        for tp, directory in found:
            if tp.topic not in remote_enabled:
                try:
                    configs = admin.describe_configs(ConfigResourceType.TOPIC, tp.topic)
                except StorageError:
                    configs = ()
                remote_enabled[tp.topic] = any(
                    c.name == "remote.storage.enable" and (c.value or "").lower() == "true"
                    for c in configs
                )
            if not remote_enabled[tp.topic]:
                continue
            try:
                log_start = consumer.earliest_offset(tp.topic, tp.partition)
                high_watermark = consumer.latest_offset(tp.topic, tp.partition)
                tiered = consumer.list_offset(tp.topic, tp.partition, LATEST_TIERED).offset
            except StorageError as exc:
                entries.append({"partition": str(tp), "status": "error", "error": str(exc)})
                continue
            view = LogView.read(
                directory, high_watermark=high_watermark, log_start_offset=log_start
            )
            views.append((tp, view, log_start, high_watermark, tiered))
        topics = sorted({tp.topic for tp, *_ in views})
        metadata = cluster.metadata(topics) if topics else None
        rlmm = None
        if views:
            rlmm = TopicBasedRemoteLogMetadataManager.for_client(
                settings.bootstrap_server, consume_wait_ms=RLMM_CONSUME_WAIT_MS
            )
        try:
            for tp, view, log_start, high_watermark, tiered in views:
                remote_bytes = remote_segments = 0
                if rlmm is not None and view.topic_id is not None:
                    for segment in rlmm.list_remote_log_segments(view.topic_id_partition):
                        if segment.state is RemoteLogSegmentState.COPY_SEGMENT_FINISHED:
                            remote_bytes += segment.segment_size_in_bytes
                            remote_segments += 1
                lagging = [s for s in view.segments if not s.is_active and s.end_offset > tiered]
                active = [s.base_offset for s in view.segments if s.is_active]
                topic = metadata.topic(tp.topic) if metadata is not None else None
                described = topic.partition(tp.partition) if topic is not None else None
                entries.append(
                    {
                        "partition": str(tp),
                        "status": "ok",
                        "leader": described.leader_id if described is not None else None,
                        "leader_epoch": described.leader_epoch if described is not None else None,
                        "active_segment_base_offset": active[0] if active else None,
                        "log_start_offset": log_start,
                        "local_log_start_offset": view.local_log_start_offset,
                        "high_watermark": high_watermark,
                        "highest_tiered_offset": tiered,
                        "local_bytes": sum(s.size_bytes for s in view.segments),
                        "local_segments": len(view.segments),
                        "remote_bytes": remote_bytes,
                        "remote_segments": remote_segments,
                        "copy_lag_bytes": sum(s.size_bytes for s in lagging),
                        "copy_lag_segments": len(lagging),
                    }
                )
        finally:
            if rlmm is not None:
                rlmm.close()
    return entries


def write_status(context: Mapping[str, Any], settings: ClusterSettings) -> dict[str, Any]:
    """Collect and write ``<run dir>/status/summary.json`` atomically; returns the summary."""
    started = datetime.now(UTC)
    began = time.monotonic()
    partitions = collect(settings)
    dag = context.get("dag")
    ti = context.get("ti")
    summary = {
        "job": JOB,
        "dag_id": dag.dag_id if dag is not None else context.get("dag_id"),
        "run_id": context.get("run_id"),
        "task_id": ti.task_id if ti is not None else context.get("task_id"),
        "status": "error" if any(p["status"] == "error" for p in partitions) else "ok",
        "started": started.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        "finished": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        "duration_s": round(time.monotonic() - began, 3),
        "counts": {"partitions": len(partitions)},
        "bytes": {
            "remote": sum(p.get("remote_bytes", 0) for p in partitions),
            "local": sum(p.get("local_bytes", 0) for p in partitions),
            "copy_lag": sum(p.get("copy_lag_bytes", 0) for p in partitions),
        },
        "errors": [
            {"partition": p["partition"], "error": p["error"]}
            for p in partitions
            if p["status"] == "error"
        ],
        "partitions": partitions,
    }
    target = paths.run_dir(context) / "status" / paths.SUMMARY_FILE
    target.parent.mkdir(parents=True, exist_ok=True)
    from storage_core.atomic_file import write_file_atomically

    write_file_atomically(target, json.dumps(summary, indent=2, sort_keys=True).encode())
    return summary
