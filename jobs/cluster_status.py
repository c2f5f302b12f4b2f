"""cluster_status: a snapshot of the cluster and of the tiering of its partitions, written as
the run summary the status page reads. Read-only.

    python -m jobs.cluster_status --bootstrap-server HOST:PORT[,HOST:PORT...]
        (--broker-log-dirs ID=DIR[,DIR] ... | --log-dir DIR [--broker-id N] | --broker-config PATH)
        [--topic NAME] [--summary-path PATH] [--dag-id ID --run-id ID --task-id ID]

The cluster (``details.cluster``, see ``jobs.planning.cluster_view``): the brokers (id,
host:port), the controller, and per partition of every topic its leader, leader epoch,
replicas, ISR and offline replicas, with the under-replicated and offline partitions listed.

Per remote-enabled partition (``partitions``; KIP-405 names; offsets inclusive unless said),
read through its leader: ListOffsets, and the leader's log dir (``--broker-log-dirs``; the
single-broker form is the one-entry map)::

    log_start_offset        ListOffsets -2 (the whole partition's start)
    local_log_start_offset  Lx: the first local segment's base offset
    high_watermark          ListOffsets -1 (exclusive)
    highest_tiered_offset   ListOffsets -5 (-1 when nothing is tiered)
    local_bytes/segments    the leader's local segment files (the active one included)
    remote_bytes/segments   the COPY_SEGMENT_FINISHED remote segments (the RLMM)
    copy_lag_bytes/segments closed local segments holding offsets above the highest tiered one
    active_segment_base_offset  the active segment's first offset
    leader, leader_epoch, replicas, isr, offline_replicas, under_replicated
    last_stable_offset      ListOffsets -1 at isolation level 1 (exclusive; below the HW while
                            a transaction is open or its marker not yet replicated)
    open_transactions       DescribeProducers: producers with an open transaction, and
    oldest_open_transaction_start_offset / _age_ms   the oldest one's first offset and the time
                            since its producer last wrote; each in open_transaction_producers
                            (``storage_core.tools.open_transactions``). Producers that
                            cannot be read (DescribeProducers needs Read on the topic) are
                            ``open_transactions: null`` with ``transactions_error``

A leaderless partition is listed with ``status: offline``; a partition whose leader's log dirs
are not given, or whose offsets cannot be read, is an error (exit 1). Counts: ``partitions``,
``brokers``, ``under_replicated_partitions``, ``offline_partitions``, ``errors``,
``open_transactions`` (over the partitions listed); bytes:
``remote``, ``local``, ``copy_lag``. ``--dag-id``/``--run-id``/``--task-id`` name the run that
wrote the snapshot (the status page shows them).

Per remote-enabled topic (``details.topics``, by name), its topic manifest as the bucket holds
it now, read (``get_object``, never written) from the store of the broker config
(``--broker-config``, or ``--remote-storage-manager``/``--rsm-config``)::

    topic_id                the topic's id (Metadata), null when the cluster gives none
    manifest_key            <prefix>/<topic>-<topicId>/topic-manifest.json
    manifest_written_at_ms  its writtenAtMs; null when there is none (or it is unreadable)
    manifest_error          why it could not be read: unreadable, another topic id, the store
                            failing, no store given; null when read or simply absent

The bucket is read rather than the ``topic_manifests`` job's last summary: it is what a
restore would find, whichever run (scheduled, manual, or one whose summary is gone) wrote it,
and a run that failed or was missed shows as an old time here, not as a newer claim. A manifest
that cannot be read is not an error of the snapshot (exit 0): the page says why.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode

from jobs.common import (
    JobArgs,
    RunSummary,
    job_parser,
    log_line,
    log_partition,
    parse_job_args,
    run_job,
)
from jobs.common.clients import kafka_cluster, remote_log_metadata_client
from jobs.common.discovery import broker_log_dirs
from jobs.planning.cluster_view import cluster_view, partition_replication
from storage_core.client import KafkaAdminClient
from storage_core.client.consumer import KafkaConsumer
from storage_core.client.metadata import TopicMetadata
from storage_core.common import TopicPartition, Uuid
from storage_core.errors import StorageError
from storage_core.tiered.metadata.states import RemoteLogSegmentState
from storage_core.tiered.operations import topic_log_config
from storage_core.tiered.operations.discovery import found_partition_dirs
from storage_core.tiered.operations.log_view import LogView
from storage_core.tiered.recovery.topic_manifest import TopicManifest, TopicManifestError
from storage_core.tiered.remote_log_metadata_manager import RemoteLogMetadataManager
from storage_core.tiered.remote_object_keys import topic_manifest_key
from storage_core.tiered.remote_storage_manager import (
    RemoteObjectStore,
    RemoteResourceNotFoundError,
    remote_object_store,
)
from storage_core.tiered.rsm_loader import load_remote_storage_manager
from storage_core.tools.open_transactions import partition_transactions, status_fields

JOB = "cluster_status"
LATEST_TIERED = -5
PROVENANCE = ("dag_id", "run_id", "task_id")


def build_parser() -> argparse.ArgumentParser:
    parser = job_parser(JOB, __doc__)
    own = parser.add_argument_group("cluster_status")
    for name in PROVENANCE:
        own.add_argument(
            f"--{name.replace('_', '-')}",
            default=None,
            help=f"the {name.split('_')[0]} that runs this snapshot (shown on the status page)",
        )
    return parser


def remote_enabled_topics(admin: KafkaAdminClient, topics: list[TopicMetadata]) -> set[str]:
    return {t.name for t in topics if topic_log_config(admin, t.name).remote_storage_enable}


def tiering_fields(
    consumer: KafkaConsumer,
    rlmm: RemoteLogMetadataManager,
    tp: TopicPartition,
    directory: Path,
) -> dict[str, Any]:
    """Offsets (from the leader) and local/remote sizes of one partition."""
    log_start = consumer.earliest_offset(tp.topic, tp.partition)
    high_watermark = consumer.latest_offset(tp.topic, tp.partition)
    tiered = consumer.list_offset(tp.topic, tp.partition, LATEST_TIERED).offset
    view = LogView.read(directory, high_watermark=high_watermark, log_start_offset=log_start)
    remote_bytes = remote_segments = 0
    if view.topic_id is not None:
        for segment in rlmm.list_remote_log_segments(view.topic_id_partition):
            if segment.state is RemoteLogSegmentState.COPY_SEGMENT_FINISHED:
                remote_bytes += segment.segment_size_in_bytes
                remote_segments += 1
    lagging = [s for s in view.segments if not s.is_active and s.end_offset > tiered]
    active = [s.base_offset for s in view.segments if s.is_active]
    return {
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


def transaction_fields(admin: KafkaAdminClient, tp: TopicPartition) -> dict[str, Any]:
    """The LSO and open transactions of one partition, with ``transactions_error`` for what
    its leader could not say (the tiering figures are still worth showing)."""
    found, warnings = partition_transactions(admin, tp.topic, [tp.partition])
    fields = status_fields(found[0], int(time.time() * 1000)) if found else {}
    if warnings:
        fields["transactions_error"] = "; ".join(warnings)
    return fields


def manifest_fields(store: RemoteObjectStore, topic: str, topic_id: Uuid | None) -> dict[str, Any]:
    """``topic``'s manifest as the bucket holds it (see the module docstring)."""
    if topic_id is None:
        return {"manifest_error": "the cluster reports no topic id (Metadata v10 or later)"}
    key = topic_manifest_key(store.prefix, topic, topic_id)
    fields: dict[str, Any] = {"manifest_key": key}
    try:
        manifest = TopicManifest.from_bytes(store.get_object(key), where=key)
    except RemoteResourceNotFoundError:
        return fields
    except TopicManifestError as exc:  # the store failing goes up: the next would fail alike
        return fields | {"manifest_error": f"{type(exc).__name__}: {exc}"}
    if manifest.topic_id != topic_id or manifest.topic != topic:
        return fields | {
            "manifest_error": f"{key} names {manifest.topic} {manifest.topic_id}, not this topic"
        }
    return fields | {"manifest_written_at_ms": manifest.written_at_ms}


def topic_fields(args: JobArgs, topics: list[TopicMetadata]) -> dict[str, dict[str, Any]]:
    """Per topic its id and its manifest's fields; a store that cannot be used is said in each
    topic's ``manifest_error``, never raised (the rest of the snapshot stands)."""
    found: dict[str, dict[str, Any]] = {
        t.name: {
            "topic_id": None if t.topic_id is None else str(t.topic_id),
            "manifest_key": None,
            "manifest_written_at_ms": None,
            "manifest_error": None,
        }
        for t in topics
    }
    if not found:
        return found
    if not args.rsm_class_name and not args.rsm_config:
        for fields in found.values():
            fields["manifest_error"] = (
                "not read: the status job was given no remote storage manager"
                " (--broker-config, or --remote-storage-manager and --rsm-config)"
            )
        return found
    try:
        rsm = load_remote_storage_manager(args.rsm_class_name, dict(args.rsm_config))
    except StorageError as exc:
        for fields in found.values():
            fields["manifest_error"] = f"not read: {type(exc).__name__}: {exc}"
        return found
    read: set[str] = set()
    try:
        store = remote_object_store(rsm, JOB)
        for t in topics:
            found[t.name] |= manifest_fields(store, t.name, t.topic_id)
            read.add(t.name)
    except StorageError as exc:
        for name, fields in found.items():
            if name not in read:
                fields["manifest_error"] = f"not read: {type(exc).__name__}: {exc}"
    finally:
        rsm.close()
    for name, fields in sorted(found.items()):
        shown = {"job": JOB, "topic": name, "written_at_ms": fields["manifest_written_at_ms"]}
        if fields["manifest_error"] is not None:
            shown["problem"] = fields["manifest_error"]
        log_line("manifest", {k: "-" if v is None else v for k, v in shown.items()})
    return found


def snapshot(args: JobArgs, summary: RunSummary) -> None:
    for name in PROVENANCE:
        value = args.options.get(name)
        if value:
            summary.details[name] = str(value)
    with kafka_cluster(args) as cluster:
        metadata = cluster.refresh_metadata([args.topic] if args.topic else None)
        named = metadata.topic(args.topic) if args.topic else None
        if named is not None:
            # a topic named but not described (no Describe ACL, unknown): say so, never an
            # empty snapshot
            named.raise_for_error()
        view = cluster_view(metadata, topic=args.topic)
        summary.details["cluster"] = view
        summary.count("brokers", len(view["brokers"]))
        summary.count("under_replicated_partitions", len(view["under_replicated_partitions"]))
        summary.count("offline_partitions", len(view["offline_partitions"]))
        for name in view["under_replicated_partitions"]:
            log_partition("under_replicated", name, job=JOB)
        dirs_by_broker = broker_log_dirs(args, cluster)
        found = found_partition_dirs(dirs_by_broker, args.topic)
        topics = [t for t in metadata.topics if not t.is_internal and t.error == ErrorCode.none]
        admin = KafkaAdminClient(cluster)
        enabled = remote_enabled_topics(admin, topics)
        targets = [
            (TopicPartition(t.name, p.partition), p)
            for t in sorted(topics, key=lambda t: t.name)
            if t.name in enabled
            for p in sorted(t.partitions, key=lambda p: p.partition)
        ]
        summary.count("partitions", len(targets))
        summary.details["topics"] = topic_fields(
            args, [t for t in sorted(topics, key=lambda t: t.name) if t.name in enabled]
        )
        if not targets:
            return
        consumer = KafkaConsumer(cluster)
        with remote_log_metadata_client(args) as rlmm:
            for tp, described in targets:
                replication = partition_replication(str(tp), described)
                del replication["partition"]
                leader = replication["leader"]
                if leader is None:
                    summary.partition(tp, "offline", **replication)
                    log_partition("offline", tp, job=JOB, replicas=replication["replicas"])
                    continue
                dirs = dirs_by_broker.get(leader)
                directory = found.get(leader, {}).get(tp)
                if directory is None:
                    where = (
                        f"broker {leader}'s log dirs are not given: add"
                        f" --broker-log-dirs {leader}=DIR"
                        if dirs is None
                        else f"no {tp} directory in broker {leader}'s log dirs"
                        f" {', '.join(str(d) for d in dirs)}"
                    )
                    fail(summary, tp, f"leader {leader} of {tp}: {where}", replication)
                    continue
                try:
                    fields = tiering_fields(consumer, rlmm, tp, directory)
                except StorageError as exc:
                    fail(summary, tp, f"{type(exc).__name__}: {exc}", replication)
                    continue
                fields |= transaction_fields(admin, tp)
                summary.partition(tp, "ok", **replication, **fields)
                summary.count("open_transactions", fields.get("open_transactions") or 0)
                summary.add_bytes("remote", fields["remote_bytes"])
                summary.add_bytes("local", fields["local_bytes"])
                summary.add_bytes("copy_lag", fields["copy_lag_bytes"])
                log_partition(
                    "status",
                    tp,
                    job=JOB,
                    leader=leader,
                    leader_epoch=replication["leader_epoch"],
                    high_watermark=fields["high_watermark"],
                    highest_tiered_offset=fields["highest_tiered_offset"],
                    last_stable_offset=fields.get("last_stable_offset"),
                    open_transactions=fields.get("open_transactions"),
                )
                if "transactions_error" in fields:
                    log_partition(
                        "transactions_unknown", tp, job=JOB, error=fields["transactions_error"]
                    )


def fail(summary: RunSummary, tp: TopicPartition, message: str, fields: dict[str, Any]) -> None:
    summary.error(message, tp)
    summary.partition(tp, "error", error=message, **fields)
    log_partition("error", tp, job=JOB, error=message)


def main(argv: list[str] | None = None) -> int:
    args = parse_job_args(build_parser(), argv, job=JOB)
    return run_job(args, lambda summary: snapshot(args, summary))


if __name__ == "__main__":
    import sys

    sys.exit(main())
