"""backup_consumer_offsets: write where every consumer group is in the remote-enabled topics to
the remote tier, one backup object per run, and keep the newest ``--keep``.

    python -m jobs.backup_consumer_offsets --bootstrap-server HOST:PORT
        (--broker-config server.properties | --remote-storage-manager NAME --rsm-config K=V ...)
        [--keep N] [--topic NAME] [--dry-run] [--summary-path PATH]

Steps: note the time (``takenAtMs``); find the remote-enabled topics (only ``--topic`` when
given); list every group (ListGroups to each broker) and read its committed offsets
(FindCoordinator, OffsetFetch); then read each partition of those topics' high watermark
(ListOffsets latest), so that a group's committed offset is at most the high watermark read
after it. Write ``<prefix>/_consumer-offsets/<20-digit takenAtMs>.json``
(``storage_core.tiered.recovery.offsets_backup`` has the format) with ``put_object``; then,
only once it is written, list the backups under ``<prefix>/_consumer-offsets/`` and delete all
but the newest ``--keep`` (default 30). Nothing else is ever deleted: a key under that prefix
that is not a backup's is left alone, and so is every other object.

No remote-enabled topic, or no group, is fine: the backup then holds what there is (possibly
nothing) and is written all the same, so that its time says when the groups were last looked
at. ``--dry-run`` reads everything, writes and deletes nothing, and prints what it would. A
store or a cluster that cannot be reached fails the run (exit 1) naming it.
Counts: ``topics``, ``partitions``, ``groups`` (with offsets in the topics), ``offsets``,
``objects_written``, ``objects_deleted``; bytes ``written``; ``details.key``, ``details.deleted``.

One run per cluster at a time (``--lock-dir``, ``--lock-wait-s``).
"""

from __future__ import annotations

import argparse

from jobs.common import (
    JobArgs,
    JobArgumentError,
    RunSummary,
    cluster_lock_key,
    exclusive_run,
    job_parser,
    log_line,
    parse_job_args,
    run_job,
)
from jobs.common.clients import kafka_cluster
from jobs.common.remote_topics import remote_enabled_topics
from jobs.planning.bucket_manifests import (
    KEEP_MAX,
    TopicAtBackup,
    backups_to_delete,
    offsets_backup,
)
from storage_core.client.consumer import KafkaConsumer
from storage_core.client.group_offsets import fetch_committed_offsets, list_group_ids
from storage_core.clock import SYSTEM_CLOCK
from storage_core.tiered.remote_object_keys import offsets_backup_key, offsets_backups_prefix
from storage_core.tiered.remote_storage_manager import RemoteObjectStore, remote_object_store
from storage_core.tiered.rsm_loader import load_remote_storage_manager

JOB = "backup_consumer_offsets"
KEEP_DEFAULT = 30


def build_parser() -> argparse.ArgumentParser:
    parser = job_parser(JOB, __doc__)
    own = parser.add_argument_group(JOB)
    own.add_argument(
        "--keep",
        type=int,
        default=KEEP_DEFAULT,
        metavar="N",
        help=f"keep the newest N backups, delete older ones (default {KEEP_DEFAULT},"
        f" 1..{KEEP_MAX})",
    )
    return parser


def keep_of(args: JobArgs) -> int:
    keep = args.int_option("keep")
    if not 1 <= keep <= KEEP_MAX:
        raise JobArgumentError(f"--keep must be within 1..{KEEP_MAX}, got {keep}")
    return keep


def back_up(args: JobArgs, summary: RunSummary) -> None:
    keep = keep_of(args)
    with exclusive_run(args, [cluster_lock_key(args.bootstrap_server)], summary) as ours:
        if not ours:
            return
        rsm = load_remote_storage_manager(args.rsm_class_name, dict(args.rsm_config))
        try:
            _back_up(args, summary, remote_object_store(rsm, JOB), keep)
        finally:
            rsm.close()


def _back_up(args: JobArgs, summary: RunSummary, store: RemoteObjectStore, keep: int) -> None:
    for name in ("topics", "partitions", "groups", "offsets", "objects_written"):
        summary.count(name, 0)
    summary.count("objects_deleted", 0)
    summary.add_bytes("written", 0)
    taken_at_ms = SYSTEM_CLOCK.milliseconds()
    with kafka_cluster(args) as cluster:
        topics = remote_enabled_topics(cluster, args.topic)
        committed = fetch_committed_offsets(cluster, list_group_ids(cluster)) if topics else {}
        consumer = KafkaConsumer(cluster)
        seen: list[TopicAtBackup] = []
        for topic in topics:
            topic_id = topic.metadata.topic_id
            if topic_id is None:
                raise ValueError(
                    f"topic {topic.name!r}: the cluster reports no topic id (Metadata v10 or"
                    " later needed)"
                )
            partitions = sorted(p.partition for p in topic.metadata.partitions)
            seen.append(
                TopicAtBackup(
                    topic=topic.name,
                    topic_id=topic_id,
                    high_watermarks={p: consumer.latest_offset(topic.name, p) for p in partitions},
                )
            )
    backup = offsets_backup(taken_at_ms=taken_at_ms, topics=seen, committed=committed)
    summary.count("topics", len(backup.topics))
    summary.count("partitions", sum(len(t.high_watermarks) for t in backup.topics))
    summary.count("groups", len(backup.groups))
    summary.count("offsets", sum(len(t.partitions) for g in backup.groups for t in g.topics))
    key = offsets_backup_key(store.prefix, taken_at_ms)
    data = backup.to_bytes()
    summary.details["key"] = key
    summary.details["taken_at_ms"] = taken_at_ms
    summary.details["groups"] = [g.group_id for g in backup.groups]
    if not args.dry_run:
        store.put_object(key, data)
        summary.count("objects_written")
        summary.add_bytes("written", len(data))
    log_line(
        "planned" if args.dry_run else "written",
        {
            "job": JOB,
            "key": key,
            "topics": len(backup.topics),
            "groups": len(backup.groups),
            "bytes": len(data),
        },
    )
    listed = [info.key for info in store.list_objects(offsets_backups_prefix(store.prefix))]
    if not args.dry_run and key not in listed:
        listed.append(key)  # a store that lists late: the new backup counts among the kept
    doomed = backups_to_delete(
        [*listed, *([key] if args.dry_run else [])], key_prefix=store.prefix, keep=keep
    )
    summary.details["deleted"] = doomed
    for old in doomed:
        log_line("planned_delete" if args.dry_run else "delete", {"job": JOB, "key": old})
    if doomed and not args.dry_run:
        store.delete_objects(doomed)
        summary.count("objects_deleted", len(doomed))


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parse_job_args(parser, argv, job=JOB)
    try:
        keep_of(args)
    except JobArgumentError as exc:
        parser.error(str(exc))
    return run_job(args, lambda summary: back_up(args, summary))


if __name__ == "__main__":
    import sys

    sys.exit(main())
