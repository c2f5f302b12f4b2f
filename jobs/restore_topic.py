"""restore_topic: plan the restore of a topic from the remote tier's bucket alone.

    python -m jobs.restore_topic --topic NAME [--topic-id ID] [--target NAME]
        [--partitions 0,1,...] [--allow-gaps] [--verify-checksums] [--restore-offsets]
        --dry-run [--bootstrap-server HOST:PORT] [--broker-config PATH | --remote-storage-manager
        CLASS --rsm-config KEY=VALUE ...] [--summary-path PATH]

Reads the bucket (``storage_core.tiered.recovery.bucket_inventory``): every segment manifest
of the topic, each checked against the objects it lists (``--verify-checksums`` also reads
every object and compares its CRC32C). When the bucket holds several incarnations of the name
(topic ids of a topic deleted and created again), ``--topic-id`` picks one; without it the
run is refused, listing them. Then, per partition (``storage_core.tiered.recovery.restore_plan``),
the segments that rebuild its log along its leader-epoch lineage, and the ones left out and
why. A partition whose bucket data has a gap is stopped with the gap named, unless
``--allow-gaps`` restores what lies above it.

The target (``--target``, default the source's name) must not exist on the cluster: the run
is refused, naming it.

``--dry-run`` prints the plan: one ``plan`` line per partition (segments, offsets, the offset
producers continue at, bytes, leader epochs), a ``left-out`` line per segment not restored
and a ``stopped`` line per partition that is not. Restoring itself is not available yet:
without ``--dry-run`` the run is refused and changes nothing.

Summary counts: partitions, partitions_stopped, segments_planned, segments_left_out,
incarnations; bytes: planned. Exit code 0, 1 when a partition is stopped or the run failed,
2 for a wrong option.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from jobs.common import JobArgs, RunSummary, job_parser, log_line, parse_job_args, run_job
from jobs.common.args import JobArgumentError
from jobs.common.clients import kafka_cluster
from storage_core.common import TopicIdPartition, Uuid
from storage_core.errors import InvalidConfigError
from storage_core.tiered.chunked.chunked_storage_manager import ChunkedRemoteStorageManager
from storage_core.tiered.recovery.bucket_inventory import (
    BucketStore,
    PartitionInBucket,
    scan_bucket,
)
from storage_core.tiered.recovery.restore_plan import PartitionRestorePlan, plan_partitions
from storage_core.tiered.remote_storage_manager import RemoteStorageManager
from storage_core.tiered.rsm_loader import load_remote_storage_manager

JOB = "restore_topic"


@dataclass(frozen=True, slots=True, kw_only=True)
class RestoreRequest:
    """What to restore, from the options (checked before anything is read)."""

    topic: str
    topic_id: Uuid | None
    target: str
    partitions: frozenset[int] | None
    allow_gaps: bool
    verify_checksums: bool
    restore_offsets: bool

    @staticmethod
    def of(args: JobArgs) -> RestoreRequest:
        if args.topic is None:
            raise JobArgumentError("restore_topic needs --topic NAME (the topic to restore)")
        if not args.dry_run:
            raise JobArgumentError(
                "restoring is not available yet: run with --dry-run to see what a restore would do"
            )
        options = args.options
        topic_id = options.get("topic_id")
        try:
            parsed_id = None if topic_id is None else Uuid.from_string(str(topic_id))
        except ValueError:
            raise JobArgumentError(f"--topic-id {topic_id!r} is not a topic id") from None
        return RestoreRequest(
            topic=args.topic,
            topic_id=parsed_id,
            target=str(options.get("target") or args.topic),
            partitions=parse_partitions(options.get("partitions")),
            allow_gaps=bool(options.get("allow_gaps")),
            verify_checksums=bool(options.get("verify_checksums")),
            restore_offsets=bool(options.get("restore_offsets")),
        )


def build_parser() -> argparse.ArgumentParser:
    parser = job_parser(JOB, __doc__)
    own = parser.add_argument_group("restore_topic")
    own.add_argument("--topic-id", default=None, help="the incarnation to restore (a topic id)")
    own.add_argument("--target", default=None, help="the topic to create (default: the source)")
    own.add_argument("--partitions", default=None, help="comma-separated partitions (default: all)")
    own.add_argument(
        "--allow-gaps",
        action="store_true",
        help="restore a partition whose bucket data has a gap from above the gap",
    )
    own.add_argument(
        "--verify-checksums",
        action="store_true",
        help="read every object and compare its CRC32C with its manifest",
    )
    own.add_argument(
        "--restore-offsets", action="store_true", help="restore the consumer groups' offsets"
    )
    return parser


def parse_partitions(text: object) -> frozenset[int] | None:
    if text is None:
        return None
    try:
        partitions = frozenset(int(part) for part in str(text).split(",") if part.strip())
    except ValueError:
        raise JobArgumentError(f"--partitions {text!r} is not a comma-separated list") from None
    if not partitions or min(partitions) < 0:
        raise JobArgumentError(f"--partitions {text!r} names no partition or a negative one")
    return partitions


def bucket_store(rsm: RemoteStorageManager) -> BucketStore:
    """The store under the chunked format (the objects as stored, manifests included)."""
    store = rsm.store if isinstance(rsm, ChunkedRemoteStorageManager) else rsm
    if not isinstance(store, BucketStore):
        raise InvalidConfigError(
            f"restoring reads the bucket's objects and manifests: {type(store).__name__} cannot"
            " list them (configure LocalTieredStorage or S3RemoteStorageManager)"
        )
    return store


def plan(args: JobArgs, request: RestoreRequest, summary: RunSummary) -> None:
    with kafka_cluster(args) as cluster:
        existing = cluster.refresh_metadata([request.target]).topic(request.target)
    if existing is not None and existing.error == ErrorCode.none:
        raise InvalidConfigError(
            f"the target topic {request.target!r} exists on the cluster: restore into another"
            " name (--target) or delete it first"
        )
    store = bucket_store(load_remote_storage_manager(args.rsm_class_name, args.rsm_config))
    try:
        inventory = scan_bucket(
            store,
            topic=request.topic,
            topic_id=request.topic_id,
            verify_checksums=request.verify_checksums,
        )
    finally:
        store.close()
    found = inventory.partitions
    incarnations = sorted({tip.topic_id for tip in found}, key=str)
    summary.count("incarnations", len(incarnations))
    if not incarnations:
        which = "" if request.topic_id is None else f" with topic id {request.topic_id}"
        raise InvalidConfigError(f"the bucket holds no segment of topic {request.topic!r}{which}")
    if len(incarnations) > 1:
        listed = ", ".join(_incarnation(found, topic_id) for topic_id in incarnations)
        raise InvalidConfigError(
            f"the bucket holds {len(incarnations)} incarnations of topic {request.topic!r}:"
            f" pick one with --topic-id ({listed})"
        )
    chosen = {
        tip: partition
        for tip, partition in found.items()
        if request.partitions is None or tip.topic_partition.partition in request.partitions
    }
    for tip, partition_plan in plan_partitions(chosen, allow_gaps=request.allow_gaps).items():
        report(tip, request.target, partition_plan, summary)


def _incarnation(found: Mapping[TopicIdPartition, PartitionInBucket], topic_id: Uuid) -> str:
    partitions = [tip for tip in found if tip.topic_id == topic_id]
    segments = sum(len(found[tip].segments) for tip in partitions)
    return f"{topic_id}: {len(partitions)} partition(s), {segments} segment(s)"


def report(
    tip: TopicIdPartition, target: str, plan: PartitionRestorePlan, summary: RunSummary
) -> None:
    partition = tip.topic_partition
    summary.count("partitions")
    for item in plan.left_out:
        summary.count("segments_left_out")
        log_line(
            "left-out",
            {
                "partition": partition,
                "segment": item.ref.segment_id,
                "start_offset": item.ref.start_offset,
                "reason": item.reason,
            },
        )
    if plan.stopped is not None:
        summary.count("partitions_stopped")
        summary.error(plan.stopped, partition)
        log_line("stopped", {"partition": partition, "reason": plan.stopped})
        return
    summary.count("segments_planned", len(plan.segments))
    summary.add_bytes("planned", plan.stored_bytes)
    fields: dict[str, object] = {
        "partition": partition,
        "target": f"{target}-{partition.partition}",
        "topic_id": tip.topic_id,
        "segments": len(plan.segments),
        "log_start_offset": plan.log_start_offset,
        "end_offset": plan.end_offset,
        "next_offset": plan.next_offset,
        "bytes": plan.stored_bytes,
        "leader_epochs": ",".join(f"{e.epoch}@{e.start_offset}" for e in plan.leader_epochs),
    }
    if plan.gap is not None:
        fields["gap"] = str(plan.gap)
    log_line("plan", fields)
    summary.partition(
        partition, "planned", **{k: str(v) for k, v in fields.items() if k != "partition"}
    )


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parse_job_args(parser, argv, job=JOB)
    try:
        request = RestoreRequest.of(args)
    except JobArgumentError as exc:
        parser.error(str(exc))
    return run_job(args, lambda summary: plan(args, request, summary))


if __name__ == "__main__":
    sys.exit(main())
