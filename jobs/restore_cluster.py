"""restore_cluster: restore every topic the bucket holds onto a cluster, with its offsets.

    python -m jobs.restore_cluster [--allow-gaps] [--verify-checksums] [--no-offsets]
        [--wait-s S] [--dry-run] [--bootstrap-server HOST:PORT] [--broker-config PATH |
        --remote-storage-manager CLASS --rsm-config KEY=VALUE ...] [--summary-path PATH]

For a cluster that lost everything but its bucket (new ZooKeeper, new brokers, the same
remote storage settings): the topics are the bucket's topic manifests
(``<prefix>/<topic>-<topicId>/topic-manifest.json``). Of a name with several incarnations
(a topic deleted and created again), the one whose manifest was written last is restored.
Each topic goes through ``jobs.restore_topic`` under its own name, with its consumer groups'
offsets from the newest backup (``--no-offsets`` leaves them), one after the other:

- a topic that exists on the cluster is left as it is and reported (``topics_skipped``),
  unless it is a restore under way, which is resumed;
- a topic that cannot be restored (a gap, a damaged manifest, a refused request) is reported
  with the reason and the others go on; the run then exits 1.

Run it again after any failure: restored topics are skipped, a restore cut short is resumed.

``--dry-run`` prints every topic's plan (``jobs.restore_topic``'s lines) and changes nothing.
Summary counts: topics, topics_restored, topics_skipped, topics_failed, and every count of
``jobs.restore_topic`` summed over the topics.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable

from jobs import restore_topic
from jobs.common import JobArgs, RunSummary, job_parser, log_line, parse_job_args, run_job
from jobs.common.clients import kafka_cluster
from jobs.common.run import one_line
from storage_core.common import Uuid
from storage_core.errors import StorageError
from storage_core.tiered.recovery.bucket_inventory import bucket_store
from storage_core.tiered.recovery.topic_manifest import TopicManifest
from storage_core.tiered.remote_object_keys import (
    InvalidRemoteObjectKeyError,
    parse_topic_manifest_key,
)
from storage_core.tiered.remote_storage_manager import RemoteObjectInfo
from storage_core.tiered.rsm_loader import load_remote_storage_manager

JOB = "restore_cluster"


def build_parser() -> argparse.ArgumentParser:
    parser = job_parser(JOB, __doc__)
    own = parser.add_argument_group("restore_cluster")
    own.add_argument("--allow-gaps", action="store_true", help="as restore_topic's")
    own.add_argument("--verify-checksums", action="store_true", help="as restore_topic's")
    own.add_argument("--no-offsets", action="store_true", help="leave the consumer groups' offsets")
    own.add_argument(
        "--wait-s",
        type=float,
        default=restore_topic.WAIT_S_DEFAULT,
        help="per topic, as restore_topic's",
    )
    return parser


def newest_incarnations(manifests: Iterable[TopicManifest]) -> list[TopicManifest]:
    """Per topic name, the manifest written last; by name."""
    newest: dict[str, TopicManifest] = {}
    for manifest in manifests:
        kept = newest.get(manifest.topic)
        if kept is None or (manifest.written_at_ms, str(manifest.topic_id)) > (
            kept.written_at_ms,
            str(kept.topic_id),
        ):
            newest[manifest.topic] = manifest
    return [newest[name] for name in sorted(newest)]


def topic_manifests(args: JobArgs) -> list[TopicManifest]:
    """Every topic manifest of the bucket, read and checked."""
    rsm = load_remote_storage_manager(args.rsm_class_name, args.rsm_config)
    store = bucket_store(rsm)
    try:
        found = []
        for info in store.list_objects():
            key = _manifest_key(info, store.prefix)
            if key is not None:
                found.append(TopicManifest.from_bytes(store.get_object(key), where=key))
        return found
    finally:
        store.close()


def _manifest_key(info: RemoteObjectInfo, prefix: str) -> str | None:
    try:
        parse_topic_manifest_key(info.key, prefix)
    except InvalidRemoteObjectKeyError:
        return None
    return info.key


def run(args: JobArgs, summary: RunSummary) -> None:
    manifests = newest_incarnations(topic_manifests(args))
    with kafka_cluster(args) as cluster:
        existing = {t.name for t in cluster.refresh_metadata(None).topics}
    summary.count("topics", len(manifests))
    for manifest in manifests:
        request = restore_topic.RestoreRequest(
            topic=manifest.topic,
            topic_id=manifest.topic_id,
            target=manifest.topic,
            partitions=None,
            allow_gaps=bool(args.options.get("allow_gaps")),
            verify_checksums=bool(args.options.get("verify_checksums")),
            replication_factor=None,
            wait_s=float(str(args.options.get("wait_s") or restore_topic.WAIT_S_DEFAULT)),
            restore_offsets=not args.options.get("no_offsets"),
        )
        if manifest.topic in existing and not _under_restore(args, manifest.topic):
            summary.count("topics_skipped")
            log_line("skipped", {"topic": manifest.topic, "reason": "exists on the cluster"})
            continue
        topic_summary = RunSummary(job=JOB, dry_run=args.dry_run)
        try:
            restore_topic.run(args, request, topic_summary)
        except (StorageError, ValueError) as exc:
            topic_summary.error(one_line(exc))
        _merge(summary, topic_summary, manifest.topic, manifest.topic_id)


def _under_restore(args: JobArgs, topic: str) -> bool:
    with kafka_cluster(args) as cluster:
        try:
            return restore_topic.target_under_restore(cluster, topic)
        except StorageError:
            return False


def _merge(summary: RunSummary, topic_summary: RunSummary, topic: str, topic_id: Uuid) -> None:
    for name, n in topic_summary.counts.items():
        if name != "errors":
            summary.count(name, n)
    for name, n in topic_summary.bytes.items():
        summary.add_bytes(name, n)
    summary.partitions.extend(topic_summary.partitions)
    if topic_summary.errors:
        summary.count("topics_failed")
        for error in topic_summary.errors:
            summary.error(f"topic {topic} ({topic_id}): {error['error']}", error["partition"])
        log_line("failed", {"topic": topic, "topic_id": topic_id})
    else:
        summary.count("topics_restored")
        log_line("topic-restored", {"topic": topic, "topic_id": topic_id})


def main(argv: list[str] | None = None) -> int:
    args = parse_job_args(build_parser(), argv, job=JOB)
    return run_job(args, lambda summary: run(args, summary))


if __name__ == "__main__":
    sys.exit(main())
