"""topic_manifests: write the topic manifest of every remote-enabled topic to the remote tier,
so that the bucket alone says which topic each ``<topic>-<topicId>`` directory holds.

    python -m jobs.topic_manifests --bootstrap-server HOST:PORT
        (--broker-config server.properties | --remote-storage-manager NAME --rsm-config K=V ...)
        [--topic NAME] [--dry-run] [--summary-path PATH]

Per remote-enabled topic (only ``--topic`` when given: it must exist and be remote-enabled),
read: its id, partitions and replicas (Metadata), its configs (DescribeConfigs: those of source
TOPIC_CONFIG are kept, never a sensitive one), and each partition's segments in the remote log
metadata (``__remote_log_metadata``; only COPY_SEGMENT_FINISHED ones count). Then write
``<prefix>/<topic>-<topicId>/topic-manifest.json`` (``storage_core.tiered.recovery.topic_manifest``
has the format) with ``put_object``: the previous manifest of the topic is replaced whole, a
reader never sees half of one. The store is the broker config's remote storage manager (or
``--remote-storage-manager``/``--rsm-config``), as for the other jobs.

One ``partition=<topic>-<n> event=manifest ...`` line per partition and one ``written
topic=... key=...`` line per topic (``planned ...`` with ``--dry-run``, which writes nothing).
No remote-enabled topic is fine: nothing is written. A store that cannot be reached fails the
run (exit 1) naming it; a topic whose manifest could not be built is an error of the run
(exit 1) and the others are still written. Counts: ``topics``, ``partitions``, ``remote_segments``,
``objects_written``, ``errors``; bytes: ``written``; ``details.manifests``: per topic its key,
topic id and partition count.

One run per cluster at a time (``--lock-dir``, ``--lock-wait-s``).
"""

from __future__ import annotations

import argparse

from jobs.common import (
    JobArgs,
    RunSummary,
    cluster_lock_key,
    exclusive_run,
    job_parser,
    log_line,
    log_partition,
    parse_job_args,
    run_job,
)
from jobs.common.clients import kafka_cluster, remote_log_metadata_client
from jobs.common.remote_topics import RemoteEnabledTopic, remote_enabled_topics
from jobs.planning.bucket_manifests import topic_manifest
from storage_core.clock import SYSTEM_CLOCK
from storage_core.common import TopicIdPartition, TopicPartition, Uuid
from storage_core.errors import StorageError
from storage_core.tiered.metadata.metadata import RemoteLogSegmentMetadata
from storage_core.tiered.recovery.topic_manifest import TopicManifest
from storage_core.tiered.remote_log_metadata_manager import RemoteLogMetadataManager
from storage_core.tiered.remote_object_keys import topic_manifest_key
from storage_core.tiered.remote_storage_manager import RemoteObjectStore, remote_object_store
from storage_core.tiered.rsm_loader import load_remote_storage_manager

JOB = "topic_manifests"


def build_parser() -> argparse.ArgumentParser:
    return job_parser(JOB, __doc__)


def segments_of(
    rlmm: RemoteLogMetadataManager, topic: RemoteEnabledTopic, topic_id: Uuid
) -> dict[int, list[RemoteLogSegmentMetadata]]:
    """Every segment the remote log metadata lists for each partition of ``topic``."""
    partitions = sorted(p.partition for p in topic.metadata.partitions)
    tips = {p: TopicIdPartition(topic_id, TopicPartition(topic.name, p)) for p in partitions}
    return {p: list(rlmm.list_remote_log_segments(tip)) for p, tip in tips.items()}


def write_manifests(args: JobArgs, summary: RunSummary) -> None:
    with exclusive_run(args, [cluster_lock_key(args.bootstrap_server)], summary) as ours:
        if not ours:
            return
        rsm = load_remote_storage_manager(args.rsm_class_name, dict(args.rsm_config))
        try:
            store = remote_object_store(rsm, JOB)
            _write_manifests(args, summary, store)
        finally:
            rsm.close()


def _write_manifests(args: JobArgs, summary: RunSummary, store: RemoteObjectStore) -> None:
    summary.count("topics", 0)
    summary.count("partitions", 0)
    summary.count("objects_written", 0)
    summary.add_bytes("written", 0)
    manifests: list[dict[str, object]] = []
    with kafka_cluster(args) as cluster:
        topics = remote_enabled_topics(cluster, args.topic)
        if not topics:
            log_line("nothing", {"job": JOB, "reason": "no remote-enabled topic"})
            return
        with remote_log_metadata_client(args) as rlmm:
            for topic in topics:
                summary.count("topics")
                try:
                    manifest = build(rlmm, topic)
                except (StorageError, ValueError) as exc:
                    summary.error(f"topic {topic.name!r}: {type(exc).__name__}: {exc}")
                    continue
                key = topic_manifest_key(store.prefix, manifest.topic, manifest.topic_id)
                report(manifest, key, summary)
                data = manifest.to_bytes()
                if not args.dry_run:
                    # A store that fails here fails the run: the next topics would fail alike.
                    store.put_object(key, data)
                    summary.count("objects_written")
                    summary.add_bytes("written", len(data))
                log_line(
                    "planned" if args.dry_run else "written",
                    {
                        "job": JOB,
                        "topic": manifest.topic,
                        "topic_id": str(manifest.topic_id),
                        "key": key,
                        "bytes": len(data),
                    },
                )
                manifests.append(
                    {
                        "topic": manifest.topic,
                        "topic_id": str(manifest.topic_id),
                        "key": key,
                        "partitions": manifest.partition_count,
                        "written_at_ms": manifest.written_at_ms,
                    }
                )
    summary.details["manifests"] = manifests


def build(rlmm: RemoteLogMetadataManager, topic: RemoteEnabledTopic) -> TopicManifest:
    topic_id = topic.metadata.topic_id
    if topic_id is None:
        raise ValueError("the cluster reports no topic id for it (Metadata v10 or later needed)")
    return topic_manifest(
        topic=topic.name,
        topic_id=topic_id,
        replication_factor=topic.replication_factor,
        configs=topic.configs,
        segments_by_partition=segments_of(rlmm, topic, topic_id),
        written_at_ms=SYSTEM_CLOCK.milliseconds(),
    )


def report(manifest: TopicManifest, key: str, summary: RunSummary) -> None:
    for p in manifest.partitions:
        tp = TopicPartition(manifest.topic, p.partition)
        fields = {
            "remote_log_start_offset": p.remote_log_start_offset,
            "remote_log_end_offset": p.remote_log_end_offset,
            "remote_segments": p.remote_segments,
            "remote_bytes": p.remote_bytes,
        }
        summary.count("partitions")
        summary.count("remote_segments", p.remote_segments)
        summary.partition(tp, "planned" if summary.dry_run else "ok", key=key, **fields)
        shown: dict[str, object] = {k: "-" if v is None else v for k, v in fields.items()}
        log_partition("manifest", tp, job=JOB, **shown)  # type: ignore[arg-type]


def main(argv: list[str] | None = None) -> int:
    args = parse_job_args(build_parser(), argv, job=JOB)
    return run_job(args, lambda summary: write_manifests(args, summary))


if __name__ == "__main__":
    import sys

    sys.exit(main())
