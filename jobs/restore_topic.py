"""restore_topic: restore a topic from the remote tier's bucket alone.

    python -m jobs.restore_topic --topic NAME [--topic-id ID] [--target NAME]
        [--partitions 0,1,...] [--allow-gaps] [--verify-checksums] [--restore-offsets]
        [--replication-factor N] [--wait-s S] [--dry-run] [--bootstrap-server HOST:PORT]
        [--broker-config PATH | --remote-storage-manager CLASS --rsm-config KEY=VALUE ...]
        [--summary-path PATH]

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
producers continue at, bytes, leader epochs, the aborted transactions running past the
restored end, ``unknown`` for a segment copied before they were recorded), a ``left-out``
line per segment not restored
and a ``stopped`` line per partition that is not; a stopped partition stops the whole restore
(nothing is created) unless ``--partitions`` leaves it out (it is then created empty).

Restoring (``storage_core.tiered.recovery.restore`` and, on the brokers,
``storage_core.replication.remote_log_restore``):

1. the target is created (CreateTopics) with the topic manifest's partition count, replication
   factor (``--replication-factor`` overrides it) and configs, remote storage on, and
   ``remote.log.restore.leader.epoch`` = the restored lineages' last epoch: its partitions lead
   in the epoch after it, and their replicas stay offline for now;
2. each planned segment's objects are copied inside the store under the target's topic id
   (S3: CopyObject), its manifest written last, and its COPY_SEGMENT_STARTED and _FINISHED
   published to ``__remote_log_metadata``;
3. ``remote.log.restore.enable`` is set: each replica starts its log after the restored
   segments, with their leader epochs (no producer state: the target is a new incarnation,
   ``storage_core.replication.remote_log_restore``); the run waits until every partition
   answers ListOffsets earliest = the restored log start and latest = the next offset, or
   later once producers write (``--wait-s``), then removes both configs;
4. with ``--restore-offsets``, each group's offsets in the source, from the newest consumer
   offsets backup in the bucket, are committed in the target, clamped to the restored range
   (``storage_core.tiered.recovery.offsets_restore``); a group with active members is
   reported and left as it is (stop its consumers and run again).

One restore of a target at a time: a run holds a lock on the target (``--lock-dir``, keyed
on the cluster and the target) from reading the bucket to its end; another run of the same
target waits ``--lock-wait-s`` and is then refused (exit 1), naming the lock. Runs on other
hosts share the lock only through a shared lock dir.

A run killed at any step and run again converges: a target that exists with
``remote.log.restore.leader.epoch`` is a restore under way and is resumed (any other existing
target is refused), segments already published are kept, copies cut short are made again.
Only objects under the target's topic id are written; the source's are only read.

Summary counts: partitions, partitions_stopped, segments_planned, segments_left_out,
incarnations, segments_restored, segments_already_restored, partitions_restored,
groups_restored, offsets_restored, offsets_clamped; bytes: planned, restored. Exit code 0, 1
when a partition is stopped, a group's offsets were not restored or the run failed, 2 for a
wrong option.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from kio.schema.errors import ErrorCode

from jobs.common import (
    JobArgs,
    RunSummary,
    cluster_lock_key,
    job_parser,
    log_dir_locks,
    log_line,
    parse_job_args,
    run_job,
)
from jobs.common.args import JobArgumentError
from jobs.common.clients import kafka_cluster, remote_log_metadata_client
from storage_core.client.admin import KafkaAdminClient
from storage_core.client.admin_requests import AlterConfigOp
from storage_core.client.cluster import KafkaCluster
from storage_core.client.consumer import KafkaConsumer
from storage_core.client.group_offsets import commit_offsets
from storage_core.clock import SYSTEM_CLOCK
from storage_core.common import TopicIdPartition, TopicPartition, Uuid
from storage_core.errors import InvalidConfigError, StorageError
from storage_core.protocol.config_resource import AlterConfigOpType, ConfigResourceType
from storage_core.tiered.recovery.bucket_inventory import (
    BucketInventory,
    BucketStore,
    PartitionInBucket,
    bucket_store,
    scan_bucket,
)
from storage_core.tiered.recovery.offsets_restore import (
    RestoredOffset,
    newest_backup,
    plan_group_offsets,
)
from storage_core.tiered.recovery.restore import (
    SegmentRestore,
    restore_segment,
    restored_segment_id,
)
from storage_core.tiered.recovery.restore_plan import PartitionRestorePlan, plan_partition
from storage_core.tiered.recovery.topic_manifest import TopicManifest
from storage_core.tiered.remote_object_keys import topic_manifest_key
from storage_core.tiered.remote_storage_manager import (
    RemoteResourceNotFoundError,
)
from storage_core.tiered.rsm_loader import load_remote_storage_manager

JOB = "restore_topic"
RESTORE_LEADER_EPOCH = "remote.log.restore.leader.epoch"
RESTORE_ENABLE = "remote.log.restore.enable"
WAIT_S_DEFAULT = 120.0


@dataclass(frozen=True, slots=True, kw_only=True)
class RestoreRequest:
    """What to restore, from the options (checked before anything is read)."""

    topic: str
    topic_id: Uuid | None
    target: str
    partitions: frozenset[int] | None
    allow_gaps: bool
    verify_checksums: bool
    replication_factor: int | None
    wait_s: float
    restore_offsets: bool

    @staticmethod
    def of(args: JobArgs) -> RestoreRequest:
        if args.topic is None:
            raise JobArgumentError("restore_topic needs --topic NAME (the topic to restore)")
        options = args.options
        topic_id = options.get("topic_id")
        try:
            parsed_id = None if topic_id is None else Uuid.from_string(str(topic_id))
        except ValueError:
            raise JobArgumentError(f"--topic-id {topic_id!r} is not a topic id") from None
        replication_factor = options.get("replication_factor")
        if replication_factor is not None and int(str(replication_factor)) < 1:
            raise JobArgumentError(f"--replication-factor {replication_factor} is not positive")
        wait_s = float(str(options.get("wait_s") or WAIT_S_DEFAULT))
        if wait_s <= 0:
            raise JobArgumentError(f"--wait-s {wait_s} is not positive")
        return RestoreRequest(
            topic=args.topic,
            topic_id=parsed_id,
            target=str(options.get("target") or args.topic),
            partitions=parse_partitions(options.get("partitions")),
            allow_gaps=bool(options.get("allow_gaps")),
            verify_checksums=bool(options.get("verify_checksums")),
            replication_factor=None if replication_factor is None else int(str(replication_factor)),
            wait_s=wait_s,
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
        "--restore-offsets",
        action="store_true",
        help="commit the groups' offsets from the newest backup, clamped to the restored range",
    )
    own.add_argument(
        "--replication-factor",
        type=int,
        default=None,
        help="the target's (default: the topic manifest's)",
    )
    own.add_argument(
        "--wait-s",
        type=float,
        default=WAIT_S_DEFAULT,
        help="how long to wait for the partitions to serve the restored offsets (default"
        f" {WAIT_S_DEFAULT:.0f})",
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


# -- the run --------------------------------------------------------------------------------


def run(args: JobArgs, request: RestoreRequest, summary: RunSummary) -> None:
    """One restore of a target at a time (``--lock-dir``): another is refused, naming it."""
    if args.dry_run:
        run_unlocked(args, request, summary)
        return
    key = restore_lock_key(args.bootstrap_server, request.target)
    with log_dir_locks(args.lock_dir, JOB, [key], wait_s=args.lock_wait_s) as held_by:
        if held_by is not None:
            raise StorageError(
                f"another restore of {request.target} is running (it holds {held_by}): let it"
                " finish, and run the restore again if it fails"
            )
        run_unlocked(args, request, summary)


def restore_lock_key(bootstrap_server: str, target: str) -> Path:
    """The run lock's key: the target topic on its cluster."""
    return cluster_lock_key(bootstrap_server) / "restore" / target


def run_unlocked(args: JobArgs, request: RestoreRequest, summary: RunSummary) -> None:
    store = bucket_store(load_remote_storage_manager(args.rsm_class_name, args.rsm_config))
    try:
        with kafka_cluster(args) as cluster:
            resumed = target_under_restore(cluster, request.target)
            inventory = scan_bucket(
                store,
                topic=request.topic,
                topic_id=request.topic_id,
                verify_checksums=request.verify_checksums,
            )
            source_id = incarnation(inventory, request, summary)
            manifest = read_topic_manifest(store, request.topic, source_id)
            plans = plan(inventory, manifest, request)
            stopped = [report(p, request.target, plan, summary) for p, plan in plans.items()]
            if any(stopped) and not args.dry_run:
                raise StorageError(
                    f"{sum(stopped)} partition(s) of {request.topic} cannot be restored (see"
                    " their stopped lines): nothing was restored; leave them out (--partitions)"
                    " or allow gaps (--allow-gaps)"
                )
            log_line(
                "topic",
                {
                    "source": request.topic,
                    "topic_id": source_id,
                    "target": request.target,
                    "partitions": manifest.partition_count,
                    "replication_factor": request.replication_factor or manifest.replication_factor,
                    "configs": ",".join(f"{k}={v}" for k, v in sorted(manifest.configs.items())),
                    "resumed": resumed,
                },
            )
            offsets = (
                group_offsets(store, request, source_id, plans, summary)
                if request.restore_offsets
                else {}
            )
            if args.dry_run:
                return
            restore(
                args,
                cluster,
                store,
                request=request,
                manifest=manifest,
                plans=plans,
                resumed=resumed,
                summary=summary,
            )
            commit_group_offsets(cluster, offsets, summary)
    finally:
        store.close()


def target_under_restore(cluster: KafkaCluster, target: str) -> bool:
    """False for an absent target, True for one a restore created and did not finish;
    ``InvalidConfigError`` naming any other target that exists."""
    existing = cluster.refresh_metadata([target]).topic(target)
    if existing is None or existing.error != ErrorCode.none:
        return False
    entries = KafkaAdminClient(cluster).describe_configs(
        ConfigResourceType.TOPIC, target, [RESTORE_LEADER_EPOCH]
    )
    if any(e.name == RESTORE_LEADER_EPOCH and int(e.value or -1) >= 0 for e in entries):
        return True
    raise InvalidConfigError(
        f"the target topic {target!r} exists on the cluster: restore into another name"
        " (--target) or delete it first"
    )


def incarnation(inventory: BucketInventory, request: RestoreRequest, summary: RunSummary) -> Uuid:
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
    return incarnations[0]


def _incarnation(found: Mapping[TopicIdPartition, PartitionInBucket], topic_id: Uuid) -> str:
    partitions = [tip for tip in found if tip.topic_id == topic_id]
    segments = sum(len(found[tip].segments) for tip in partitions)
    return f"{topic_id}: {len(partitions)} partition(s), {segments} segment(s)"


def read_topic_manifest(store: BucketStore, topic: str, topic_id: Uuid) -> TopicManifest:
    key = topic_manifest_key(store.prefix, topic, topic_id)
    try:
        data = store.get_object(key)
    except RemoteResourceNotFoundError:
        raise InvalidConfigError(
            f"the bucket has no topic manifest for {topic} ({topic_id}) at {key}: the tiering"
            " DAG writes it (jobs.topic_manifests); a restore needs it for the partition count"
            " and the configs"
        ) from None
    manifest = TopicManifest.from_bytes(data, where=key)
    if manifest.topic != topic or manifest.topic_id != topic_id:
        raise InvalidConfigError(
            f"topic manifest {key} describes {manifest.topic} ({manifest.topic_id})"
        )
    return manifest


def plan(
    inventory: BucketInventory, manifest: TopicManifest, request: RestoreRequest
) -> dict[int, PartitionRestorePlan]:
    """Every partition of the topic manifest (a partition never tiered is restored empty)."""
    plans = {}
    for partition in range(manifest.partition_count):
        if request.partitions is not None and partition not in request.partitions:
            continue
        tip = TopicIdPartition(manifest.topic_id, TopicPartition(manifest.topic, partition))
        found = inventory.partitions.get(tip, PartitionInBucket(tip))
        plans[partition] = plan_partition(found, allow_gaps=request.allow_gaps)
    beyond = sorted(
        tip.topic_partition.partition
        for tip in inventory.partitions
        if tip.topic_partition.partition >= manifest.partition_count
    )
    if beyond:
        raise InvalidConfigError(
            f"the bucket holds partitions {beyond} of {manifest.topic}, beyond the"
            f" {manifest.partition_count} of its topic manifest: the manifest is stale"
        )
    return plans


def report(partition: int, target: str, plan: PartitionRestorePlan, summary: RunSummary) -> bool:
    """Print and count one partition's plan; True when it is stopped."""
    tp = plan.source.topic_partition
    summary.count("partitions")
    for item in plan.left_out:
        summary.count("segments_left_out")
        log_line(
            "left-out",
            {
                "partition": tp,
                "segment": item.ref.segment_id,
                "start_offset": item.ref.start_offset,
                "reason": item.reason,
            },
        )
    if plan.stopped is not None:
        summary.count("partitions_stopped")
        summary.error(plan.stopped, tp)
        log_line("stopped", {"partition": tp, "reason": plan.stopped})
        return True
    summary.count("segments_planned", len(plan.segments))
    summary.add_bytes("planned", plan.stored_bytes)
    fields: dict[str, object] = {
        "target": f"{target}-{partition}",
        "topic_id": plan.source.topic_id,
        "segments": len(plan.segments),
        "log_start_offset": plan.log_start_offset,
        "end_offset": plan.end_offset,
        "next_offset": plan.next_offset,
        "bytes": plan.stored_bytes,
        "leader_epochs": ",".join(f"{e.epoch}@{e.start_offset}" for e in plan.leader_epochs),
    }
    if plan.gap is not None:
        fields["gap"] = str(plan.gap)
    last = plan.segments[-1].manifest if plan.segments else None
    if last is not None and last.segment is not None:
        # Aborts whose markers lie past the restored end: closed there by the restore.
        aborted = last.segment.aborted_past_end
        fields["aborted_past_end"] = "unknown" if aborted is None else len(aborted)
    log_line("plan", {"partition": tp, **fields})
    summary.partition(tp, "planned", **{k: str(v) for k, v in fields.items()})
    return False


def restore(
    args: JobArgs,
    cluster: KafkaCluster,
    store: BucketStore,
    *,
    request: RestoreRequest,
    manifest: TopicManifest,
    plans: Mapping[int, PartitionRestorePlan],
    resumed: bool,
    summary: RunSummary,
) -> None:
    admin = KafkaAdminClient(cluster)
    if not resumed:
        last_epoch = max(
            (p.leader_epochs[-1].epoch for p in plans.values() if p.leader_epochs), default=0
        )
        configs = {
            name: value
            for name, value in manifest.configs.items()
            if name not in (RESTORE_LEADER_EPOCH, RESTORE_ENABLE)
        }
        configs |= {"remote.storage.enable": "true", RESTORE_LEADER_EPOCH: str(last_epoch)}
        admin.create_topic(
            request.target,
            num_partitions=manifest.partition_count,
            replication_factor=request.replication_factor or manifest.replication_factor,
            configs=configs,
        )
    target_id = wait_for_topic_id(cluster, request.target, request.wait_s)
    now_ms = SYSTEM_CLOCK.milliseconds()
    with remote_log_metadata_client(args) as rlmm:
        for partition, partition_plan in plans.items():
            tip = TopicIdPartition(target_id, TopicPartition(request.target, partition))
            known = {m.remote_log_segment_id.id: m for m in rlmm.list_remote_log_segments(tip)}
            check_same_restore(tip, known, partition_plan)
            last = partition_plan.segments[-1] if partition_plan.segments else None
            for segment in partition_plan.segments:
                try:
                    outcome, stored = restore_segment(
                        store, rlmm, segment, tip, known=known, now_ms=now_ms,
                        ends_the_log=segment is last,
                    )  # fmt: skip
                except StorageError as exc:
                    raise StorageError(
                        f"restoring {tip.topic_partition} stopped at segment"
                        f" {segment.ref.segment_id} (from offset {segment.ref.start_offset}):"
                        f" {exc}; {request.target} stays marked as under restore"
                        f" ({RESTORE_LEADER_EPOCH}): run the restore again to finish it"
                    ) from exc
                summary.count(f"segments_{outcome.value}")
                if outcome is SegmentRestore.RESTORED:
                    summary.add_bytes("restored", stored)
    admin.incremental_alter_configs(
        ConfigResourceType.TOPIC,
        request.target,
        [AlterConfigOp(name=RESTORE_ENABLE, op=AlterConfigOpType.SET, value="true")],
    )
    wait_until_restored(cluster, request.target, plans, request.wait_s, summary)
    admin.incremental_alter_configs(
        ConfigResourceType.TOPIC,
        request.target,
        [
            AlterConfigOp(name=RESTORE_ENABLE, op=AlterConfigOpType.DELETE),
            AlterConfigOp(name=RESTORE_LEADER_EPOCH, op=AlterConfigOpType.DELETE),
        ],
    )
    log_line("restored", {"target": request.target, "topic_id": target_id})


def check_same_restore(
    tip: TopicIdPartition,
    known: Mapping[Uuid, object],
    plan: PartitionRestorePlan,
) -> None:
    """A restore under way is resumed only by the same restore: every segment the target
    already holds must be one this plan restores (their ids derive from the target's topic id
    and the source segments'), else ``InvalidConfigError`` naming the target."""
    planned = {
        restored_segment_id(tip.topic_id, segment.metadata.remote_log_segment_id.id)
        for segment in plan.segments
    }
    foreign = sorted(str(segment_id) for segment_id in known if segment_id not in planned)
    if foreign:
        raise InvalidConfigError(
            f"{tip.topic_partition} is under restore from other segments than this run's"
            f" ({len(foreign)} of its segments, e.g. {foreign[0]}, are not in the plan): resume"
            " it with the source and options it was started with, or delete the target and"
            " restore again"
        )


def group_offsets(
    store: BucketStore,
    request: RestoreRequest,
    source_id: Uuid,
    plans: Mapping[int, PartitionRestorePlan],
    summary: RunSummary,
) -> dict[str, list[RestoredOffset]]:
    """The offsets to restore per group, printed (one ``offset`` line each)."""
    found = newest_backup(store)
    if found is None:
        raise InvalidConfigError(
            "--restore-offsets: the bucket holds no consumer offsets backup (retention_nightly"
            " writes one, jobs.backup_consumer_offsets)"
        )
    key, backup = found
    offsets = plan_group_offsets(
        backup, source=request.topic, source_id=source_id, target=request.target, plans=plans
    )
    log_line(
        "offsets-backup", {"key": key, "taken_at_ms": backup.taken_at_ms, "groups": len(offsets)}
    )
    for group_id, restored in sorted(offsets.items()):
        for item in restored:
            log_line(
                "offset",
                {
                    "group": group_id,
                    "partition": item.target,
                    "offset": item.offset.offset,
                    "backed_up": item.backed_up,
                    "clamped": item.clamped,
                },
            )
            summary.count("offsets_clamped", int(item.clamped))
    return offsets


def commit_group_offsets(
    cluster: KafkaCluster, offsets: Mapping[str, list[RestoredOffset]], summary: RunSummary
) -> None:
    for group_id, restored in sorted(offsets.items()):
        try:
            commit_offsets(cluster, group_id, {item.target: item.offset for item in restored})
        except StorageError as exc:
            summary.error(
                f"group {group_id!r}: its offsets were not restored ({exc}); a group with"
                " active members keeps its own: stop its consumers and run the restore again"
            )
            continue
        summary.count("groups_restored")
        summary.count("offsets_restored", len(restored))


def wait_for_topic_id(cluster: KafkaCluster, topic: str, wait_s: float) -> Uuid:
    deadline = time.monotonic() + wait_s
    while True:
        found = cluster.refresh_metadata([topic]).topic(topic)
        if found is not None and found.error == ErrorCode.none and found.topic_id is not None:
            return found.topic_id
        if time.monotonic() >= deadline:
            raise StorageError(f"topic {topic} has no topic id in Metadata after {wait_s:.0f} s")
        time.sleep(0.2)


def wait_until_restored(
    cluster: KafkaCluster,
    topic: str,
    plans: Mapping[int, PartitionRestorePlan],
    wait_s: float,
    summary: RunSummary,
) -> None:
    """Until each partition's leader answers ListOffsets earliest = the restored log start
    and latest at least the next offset: from the moment ``remote.log.restore.enable`` lets
    the partitions online producers may write (a run killed after it and run again finds
    their records); a replica that started below the restored segments answers less."""
    consumer = KafkaConsumer(cluster)
    pending = dict(plans)
    deadline = time.monotonic() + wait_s
    last: dict[int, str] = {}
    while pending:
        for partition, partition_plan in list(pending.items()):
            try:
                offsets = (
                    consumer.earliest_offset(topic, partition),
                    consumer.latest_offset(topic, partition),
                )
            except StorageError as exc:
                last[partition] = str(exc)
                continue
            if (
                offsets[0] == partition_plan.log_start_offset
                and offsets[1] >= partition_plan.next_offset
            ):
                del pending[partition]
                summary.count("partitions_restored")
                log_line(
                    "restored",
                    {
                        "partition": f"{topic}-{partition}",
                        "log_start_offset": offsets[0],
                        "next_offset": partition_plan.next_offset,
                        "latest": offsets[1],
                    },
                )
            else:
                last[partition] = f"earliest {offsets[0]}, latest {offsets[1]}"
        if pending and time.monotonic() >= deadline:
            waiting = "; ".join(f"{topic}-{p}: {last.get(p, 'no answer')}" for p in pending)
            raise StorageError(
                f"{len(pending)} partition(s) did not serve their restored offsets within"
                f" {wait_s:.0f} s ({waiting}); run the restore again to resume it"
            )
        if pending:
            time.sleep(0.2)
            cluster.invalidate_metadata()


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parse_job_args(parser, argv, job=JOB)
    try:
        request = RestoreRequest.of(args)
    except JobArgumentError as exc:
        parser.error(str(exc))
    return run_job(args, lambda summary: run(args, request, summary))


if __name__ == "__main__":
    sys.exit(main())
