"""reconcile: finish or roll back what crashed runs left behind, delete orphaned objects.

    python -m jobs.reconcile --bootstrap-server HOST:PORT [--broker-config PATH]
        [--remote-storage-manager NAME] [--rsm-config K=V ...] [--summary-path PATH]
        [--dry-run] [--spark-master URL] [--copy-deadline-s S] [--delete-retry-grace-s S]
        [--orphan-grace-s S] [--verify-chunks]

Steps::

    1. list every object of the store (``list_objects``)            -- first, see below
    2. read every __remote_log_metadata partition from its start to its current end and
       replay it into one ``RemoteLogMetadataCache`` per partition (as a broker would)
    3. plan (``jobs.planning.reconcile_plan.plan_reconcile``, pure):
         COPY_SEGMENT_STARTED older than the copy deadline  -> roll back
         DELETE_SEGMENT_STARTED older than the retry grace   -> retry the deletion
         objects of no live segment, older than the grace    -> delete them (orphans)
         COPY_SEGMENT_FINISHED missing its .log/.index/.timeindex object -> report it
           (lost segment): never changed, never deleted
         COPY_SEGMENT_FINISHED chunked, its manifest missing or its listed objects not
           adding up to the stored size its copy recorded -> report it (damaged segment)
       with --verify-chunks, every other chunked COPY_SEGMENT_FINISHED segment is read
       whole on the driver (each chunk's CRC32C and AES-GCM tag, each index object's):
       one that fails is reported damaged too
    4. executors (one RLMM and RSM per task, ``jobs.common.remote_deletion``):
         roll back / retry: ``delete_segment`` (DELETE_SEGMENT_STARTED, objects,
         DELETE_SEGMENT_FINISHED, published on behalf of the broker that copied the
         segment), only if the segment is still in the state planned (a copy that finished
         late is never touched); orphans: the keys are deleted only if no live metadata
         names their segment when the task runs

One run serves the whole cluster: it needs no broker id and no log dir.
    5. S3 only: abort multipart uploads started before now - copy deadline (a copy killed
       mid-upload leaves its parts billed and invisible to listings)

Objects are listed before the metadata is read: a copy publishes COPY_SEGMENT_STARTED before
its first object, so every object listed belongs to a segment the metadata read knows, unless
the segment is dead. The copy deadline (default ``copy_segments``' copy timeout plus a
minute of clock skew) must not be shorter than the copy job's: a copy past it never commits.

Lost segments (objects of a COPY_SEGMENT_FINISHED segment gone from the store, e.g. an
emptied bucket) are data loss: each gets a ``action=lost_segment status=reported`` line, the
count ``lost_segments``, ``details.lost_segments`` and an error, so the run exits 1 for as
long as the loss stands. Reconcile never deletes their metadata: it is the only trace that
the records existed. What an operator does:

- restore the objects (from a backup or a replica of the bucket) under the same keys; the
  next run reports nothing, consumers read the records again;
- or accept the loss: delete the records up to the segment's end offset + 1 (DeleteRecords,
  e.g. ``kafka-delete-records``) so the log start offset passes the segment; consumers then
  skip it and ``expire_remote`` deletes its metadata as below the log start offset.

Damaged segments (a chunked copy whose objects a reader cannot serve: brokers answer
KAFKA_STORAGE_ERROR for their offsets) are reported the same way (``action=damaged_segment
status=reported``, the count ``damaged_segments``, ``details.damaged_segments``, an error).
Without ``--verify-chunks`` the check costs no request to the store: the listing's sizes
against the custom metadata of the copy (``jobs.planning.chunked_objects``), which finds an
object missing, cut short or grown, not a chunk changed in place; ``--verify-chunks`` reads
every chunked segment (the whole tier: a run's cost is the tier's size), with the key ring
of the ``rsm.config.*`` settings.

``--dry-run`` prints every planned action with its reason and changes nothing. Output: one
``partition=... event=reconcile action=...`` line per action, a ``summary`` line, and the
JSON summary with counts ``copies_rolled_back``, ``deletes_retried``, ``orphan_segments``,
``orphan_objects_deleted``, ``multipart_uploads_aborted``, ``lost_segments``, ``skipped``,
``errors`` (and the
``planned_*`` counts), bytes ``orphans_deleted``, and ``details.actions``. Topic manifests and
consumer offsets backups (``remote_object_keys``) are counted as ``topic_manifests`` and
``offset_backups`` and never deleted; any other key that is not a segment's object is
``foreign_objects``, kept too. Objects of partitions that ``__remote_log_metadata`` never
mentions (a cluster that lost its metadata, or a new one on the same bucket) are counted as
``unknown_partition_objects`` and never deleted: they are the bucket's history, what
``jobs.restore_topic`` reads.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

from jobs.common import (
    COPY_TIMEOUT_S_DEFAULT,
    JobArgs,
    JobArgumentError,
    Progress,
    RunSummary,
    StoreSettings,
    cluster_lock_key,
    exclusive_run,
    format_fields,
    job_parser,
    parse_job_args,
    run_job,
    spark_session,
)
from jobs.common.clients import kafka_cluster
from jobs.common.remote_deletion import (
    NO_RUN_BROKER_ID,
    DeletionItem,
    DeletionOutcome,
    run_on_executors,
)
from jobs.planning.chunked_objects import chunked_stored_size
from jobs.planning.reconcile_plan import (
    DELETE_RETRY_GRACE_MS_DEFAULT,
    ReconcileAction,
    ReconcileActionKind,
    ReconcilePlan,
    plan_reconcile,
)
from storage_core.client.cluster import KafkaCluster
from storage_core.clock import SYSTEM_CLOCK
from storage_core.common import TopicIdPartition, Uuid
from storage_core.tiered.chunked.chunked_storage_manager import ChunkedRemoteStorageManager
from storage_core.tiered.chunked.errors import ChunkIntegrityError, SegmentManifestError
from storage_core.tiered.metadata import serde
from storage_core.tiered.metadata.cache import RemoteLogMetadataCache
from storage_core.tiered.metadata.errors import (
    IllegalRemoteLogStateTransitionError,
    RemoteResourceNotFoundError,
)
from storage_core.tiered.metadata.metadata import (
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataSnapshot,
)
from storage_core.tiered.metadata.states import RemoteLogSegmentState
from storage_core.tiered.remote_object_keys import RemoteObjectSuffix
from storage_core.tiered.remote_storage_manager import (
    IndexType,
    RemoteObjectInfo,
    RemoteStorageError,
    RemoteStorageManager,
    remote_object_store,
)
from storage_core.tiered.rsm_loader import load_remote_storage_manager
from storage_core.tiered.topic_based_rlmm.topic_scan import scan_metadata_topic

JOB = "reconcile"
# Allowance for clocks of the copy job's hosts running behind this one.
CLOCK_SKEW_S = 60.0
COPY_DEADLINE_S_DEFAULT = COPY_TIMEOUT_S_DEFAULT + CLOCK_SKEW_S
GRACE_S_MAX = 7 * 24 * 3600.0
# Fetches per metadata partition while reading it (bounds a run on a huge topic).
ACTIONS_IN_SUMMARY_MAX = 1000
VERIFY_READ_BYTES = 1 << 20

_ALLOWED_STATES = {
    ReconcileActionKind.ROLL_BACK_COPY: (RemoteLogSegmentState.COPY_SEGMENT_STARTED,),
    ReconcileActionKind.RETRY_DELETE: (RemoteLogSegmentState.DELETE_SEGMENT_STARTED,),
}
_DONE_COUNTS = {
    ReconcileActionKind.ROLL_BACK_COPY: "copies_rolled_back",
    ReconcileActionKind.RETRY_DELETE: "deletes_retried",
    ReconcileActionKind.DELETE_ORPHANS: "orphan_segments",
}


# ---------------------------------------------------------------------------- extract
def list_store_objects(rsm: RemoteStorageManager) -> tuple[list[RemoteObjectInfo], str]:
    """Every object under the store's key prefix, and that prefix."""
    store = remote_object_store(rsm, "reconcile")
    return list(store.list_objects()), store.prefix


def read_remote_log_metadata(
    cluster: KafkaCluster,
) -> dict[TopicIdPartition, RemoteLogMetadataCache]:
    """Every partition's metadata, replayed from the start of each ``__remote_log_metadata``
    partition to its end when the read began. Events a cache refuses are skipped (as the
    brokers' consumers skip them)."""
    caches: dict[TopicIdPartition, RemoteLogMetadataCache] = {}
    for record in scan_metadata_topic(cluster):
        event = serde.deserialize(record.value)
        if isinstance(event, RemoteLogSegmentMetadataSnapshot):
            continue  # snapshots live in files, never on the topic
        tip = event.topic_id_partition
        cache = caches.get(tip)
        if cache is None:
            cache = caches[tip] = RemoteLogMetadataCache(tip)
        try:
            cache.handle(event)
        except (IllegalRemoteLogStateTransitionError, RemoteResourceNotFoundError):
            continue
    return caches


def listing_of(
    caches: Mapping[TopicIdPartition, RemoteLogMetadataCache],
) -> dict[TopicIdPartition, list[RemoteLogSegmentMetadata]]:
    return {tip: cache.list_all_remote_log_segments() for tip, cache in caches.items()}


# ---------------------------------------------------------------------------- load
def items_of(plan: ReconcilePlan, key_prefix: str) -> list[DeletionItem]:
    """The executor work of the plan's actions, in the plan's order."""
    items = []
    for action in plan.actions:
        if action.segment is not None:
            items.append(
                DeletionItem.for_segment(
                    action.segment,
                    reason=action.kind.value,
                    allowed_states=_ALLOWED_STATES[action.kind],
                    # on behalf of the broker that copied it: a run serves the whole cluster
                    broker_id=action.segment.broker_id,
                )
            )
        else:
            items.append(
                DeletionItem.for_orphans(action.keys, key_prefix=key_prefix, reason=action.reason)
            )
    return items


def action_fields(action: ReconcileAction) -> dict[str, object]:
    fields: dict[str, object] = {
        "action": action.kind.value,
        "segment_id": str(action.segment_id),
        "objects": len(action.keys),
        "bytes": action.size_bytes,
        "reason": action.reason,
    }
    if action.segment is not None:
        fields["start_offset"] = action.segment.start_offset
        fields["end_offset"] = action.segment.end_offset
        fields["state"] = action.segment.state.name
    return fields


def print_action(action: ReconcileAction, status: str, **extra: object) -> None:
    line = {
        "partition": action.topic_id_partition.topic_partition,
        "event": "reconcile",
        "job": JOB,
        "status": status,
        **action_fields(action),
        **extra,
    }
    print(format_fields(line), flush=True)


def reconcile(args: JobArgs, summary: RunSummary) -> None:
    """The whole run (see the module docstring)."""
    with exclusive_run(args, [cluster_lock_key(args.bootstrap_server)], summary) as ours:
        if not ours:
            return
        _reconcile(args, summary)


def _reconcile(args: JobArgs, summary: RunSummary) -> None:
    options = ReconcileOptions.of(args)
    rsm = load_remote_storage_manager(args.rsm_class_name, dict(args.rsm_config))
    try:
        listed_at_ms = SYSTEM_CLOCK.milliseconds()
        objects, key_prefix = list_store_objects(rsm)  # before the metadata: see above
        with kafka_cluster(args) as cluster:
            caches = read_remote_log_metadata(cluster)
        plan = plan_reconcile(
            listing_of(caches),
            objects,
            now_ms=SYSTEM_CLOCK.milliseconds(),
            copy_deadline_ms=options.copy_deadline_ms,
            key_prefix=key_prefix,
            delete_retry_grace_ms=options.delete_retry_grace_ms,
            orphan_grace_ms=options.orphan_grace_ms,
            listed_at_ms=listed_at_ms,
        )
        record_plan(plan, objects, summary)
        report_lost_segments(plan, summary)
        damaged = list(plan.damaged)
        if options.verify_chunks:
            damaged += verify_chunked_segments(
                rsm,
                listing_of(caches),
                {a.segment_id for a in (*plan.lost, *plan.damaged)},
                summary,
            )
        report_damaged_segments(damaged, summary)
        if args.dry_run:
            for action in plan.actions:
                print_action(action, "planned")
            summary.details["actions"] = [
                {**action_fields(a), "partition": str(a.topic_id_partition.topic_partition)}
                for a in plan.actions[:ACTIONS_IN_SUMMARY_MAX]
            ]
            if hasattr(underlying_store(rsm), "abort_incomplete_multipart_uploads"):
                summary.details["multipart_uploads"] = (
                    f"would abort those started over {options.copy_deadline_ms} ms ago"
                )
            return
        settings = StoreSettings.of(args, NO_RUN_BROKER_ID)
        outcomes: list[DeletionOutcome] = []
        progress = Progress(JOB, len(plan.actions))
        if plan.actions:
            with spark_session(JOB, args.spark_master) as spark:
                outcomes = run_on_executors(spark, settings, items_of(plan, key_prefix))
            progress.advance(len(outcomes), sum(o.size_bytes for o in outcomes))
        progress.finish()
        record_outcomes(plan, outcomes, summary)
        maybe_abort_multipart_uploads(rsm, options.copy_deadline_ms, summary)
    finally:
        rsm.close()


class ReconcileOptions:
    """The job's own options, in ms."""

    def __init__(
        self,
        *,
        copy_deadline_ms: int,
        delete_retry_grace_ms: int,
        orphan_grace_ms: int,
        verify_chunks: bool = False,
    ) -> None:
        self.copy_deadline_ms = copy_deadline_ms
        self.delete_retry_grace_ms = delete_retry_grace_ms
        self.orphan_grace_ms = orphan_grace_ms
        self.verify_chunks = verify_chunks

    @staticmethod
    def of(args: JobArgs) -> ReconcileOptions:
        def seconds(name: str, default: float) -> float:
            value = args.options.get(name)
            number = default if value is None else float(str(value))
            if not 0 <= number <= GRACE_S_MAX:
                option = "--" + name.replace("_", "-")
                raise JobArgumentError(f"{option} must be within [0, {GRACE_S_MAX:g}] seconds")
            return number

        copy_deadline_s = seconds("copy_deadline_s", COPY_DEADLINE_S_DEFAULT)
        if copy_deadline_s <= 0:
            raise JobArgumentError("--copy-deadline-s must be positive")
        return ReconcileOptions(
            copy_deadline_ms=int(copy_deadline_s * 1000),
            delete_retry_grace_ms=int(
                seconds("delete_retry_grace_s", DELETE_RETRY_GRACE_MS_DEFAULT / 1000) * 1000
            ),
            orphan_grace_ms=int(seconds("orphan_grace_s", copy_deadline_s) * 1000),
            verify_chunks=bool(args.options.get("verify_chunks")),
        )


def record_plan(
    plan: ReconcilePlan, objects: Sequence[RemoteObjectInfo], summary: RunSummary
) -> None:
    summary.count("objects_listed", len(objects))
    summary.count("live_segments", plan.live_segments)
    summary.count("copies_in_progress", plan.copies_in_progress)
    summary.count("deletes_in_progress", plan.deletes_in_progress)
    summary.count("young_orphan_objects", plan.young_orphan_objects)
    summary.count("unknown_partition_objects", plan.unknown_partition_objects)
    summary.count("foreign_objects", len(plan.foreign_keys))
    summary.count("topic_manifests", len(plan.topic_manifest_keys))
    summary.count("offset_backups", len(plan.offsets_backup_keys))
    for kind, name in _DONE_COUNTS.items():
        summary.count(f"planned_{name}", len(plan.of_kind(kind)))
    summary.add_bytes(
        "orphans_planned",
        sum(a.size_bytes for a in plan.of_kind(ReconcileActionKind.DELETE_ORPHANS)),
    )


def report_lost_segments(plan: ReconcilePlan, summary: RunSummary) -> None:
    """Data loss is reported, never repaired here: one line and one error per lost segment."""
    summary.count("lost_segments", len(plan.lost))
    summary.details["lost_segments"] = [
        {**action_fields(a), "partition": str(a.topic_id_partition.topic_partition)}
        for a in plan.lost[:ACTIONS_IN_SUMMARY_MAX]
    ]
    for action in plan.lost:
        segment = action.segment
        offsets = (
            "" if segment is None else f" (offsets {segment.start_offset}..{segment.end_offset})"
        )
        summary.error(
            f"lost segment {action.segment_id}{offsets}: {action.reason}",
            action.topic_id_partition.topic_partition,
        )
        print_action(action, "reported")


def report_damaged_segments(damaged: Sequence[ReconcileAction], summary: RunSummary) -> None:
    """As lost segments: one line and one error each, never repaired here."""
    summary.count("damaged_segments", len(damaged))
    summary.details["damaged_segments"] = [
        {**action_fields(a), "partition": str(a.topic_id_partition.topic_partition)}
        for a in damaged[:ACTIONS_IN_SUMMARY_MAX]
    ]
    for action in damaged:
        segment = action.segment
        offsets = (
            "" if segment is None else f" (offsets {segment.start_offset}..{segment.end_offset})"
        )
        summary.error(
            f"damaged segment {action.segment_id}{offsets}: {action.reason}",
            action.topic_id_partition.topic_partition,
        )
        print_action(action, "reported")


def verify_chunked_segments(
    rsm: RemoteStorageManager,
    listing: Mapping[TopicIdPartition, Sequence[RemoteLogSegmentMetadata]],
    reported: set[Uuid],
    summary: RunSummary,
) -> list[ReconcileAction]:
    """``--verify-chunks``: read every chunked COPY_SEGMENT_FINISHED segment not yet
    reported, whole; those failing a check are damaged. A segment that cannot be read for
    another reason (the store, a key the ring lacks) is an error of the run, not damage."""
    damaged = []
    verified = 0
    for tip in sorted(listing, key=str):
        for metadata in listing[tip]:
            if (
                metadata.state is not RemoteLogSegmentState.COPY_SEGMENT_FINISHED
                or chunked_stored_size(metadata.custom_metadata) is None
                or metadata.remote_log_segment_id.id in reported
            ):
                continue
            try:
                read_whole_segment(rsm, metadata)
            except (ChunkIntegrityError, SegmentManifestError) as exc:
                damaged.append(
                    ReconcileAction(
                        kind=ReconcileActionKind.DAMAGED_SEGMENT,
                        topic_id_partition=tip,
                        segment_id=metadata.remote_log_segment_id.id,
                        reason=f"COPY_SEGMENT_FINISHED but a read fails its checks: {exc}",
                        segment=metadata,
                    )
                )
            except RemoteStorageError as exc:
                summary.error(
                    f"cannot verify segment {metadata.remote_log_segment_id.id}: {exc}",
                    tip.topic_partition,
                )
            verified += 1
    summary.count("chunked_segments_verified", verified)
    return damaged


def read_whole_segment(rsm: RemoteStorageManager, metadata: RemoteLogSegmentMetadata) -> None:
    """Read the ``.log`` and every index object the segment's manifest lists, through the
    chunked manager (which checks each chunk and object as it restores it)."""
    with rsm.fetch_log_segment(metadata, 0) as stream:
        while stream.read(VERIFY_READ_BYTES):
            pass
    manifest = getattr(rsm, "segment_manifest", lambda _: None)(metadata)
    listed = set() if manifest is None else set(manifest.objects)
    for index_type in IndexType:
        if RemoteObjectSuffix.for_index(index_type).value in listed:
            with rsm.fetch_index(metadata, index_type) as stream:
                stream.read()


def record_outcomes(
    plan: ReconcilePlan, outcomes: Sequence[DeletionOutcome], summary: RunSummary
) -> None:
    """Match each action with its outcome and count what was done. ``run_on_executors``
    keeps the order of its items (one outcome per item), so outcomes pair by position."""
    paired: list[DeletionOutcome | None] = list(outcomes)
    if len(paired) != len(plan.actions):
        summary.error(f"{len(plan.actions)} actions but {len(paired)} outcomes from the executors")
        paired = [None] * len(plan.actions)
    for name in (*_DONE_COUNTS.values(), "orphan_objects_deleted", "skipped"):
        summary.count(name, 0)
    summary.add_bytes("orphans_deleted", 0)
    reported: list[dict[str, Any]] = []
    for action, outcome in zip(plan.actions, paired, strict=True):
        status = "error" if outcome is None else outcome.status
        detail = "no outcome from the executors" if outcome is None else outcome.detail
        tp = action.topic_id_partition.topic_partition
        if status in ("deleted", "already_deleted"):
            summary.count(_DONE_COUNTS[action.kind])
            if action.kind is ReconcileActionKind.DELETE_ORPHANS:
                summary.count("orphan_objects_deleted", len(action.keys))
                summary.add_bytes("orphans_deleted", action.size_bytes)
        elif status == "skipped":
            summary.count("skipped")
        else:
            summary.error(f"{action.kind.value} of segment {action.segment_id}: {detail}", tp)
        print_action(action, status, **({"detail": detail} if detail else {}))
        if len(reported) < ACTIONS_IN_SUMMARY_MAX:
            reported.append(
                {**action_fields(action), "partition": str(tp), "status": status, "detail": detail}
            )
    summary.details["actions"] = reported


def underlying_store(rsm: RemoteStorageManager) -> RemoteStorageManager:
    """The store under the chunked format (what S3-only operations are asked of)."""
    return rsm.store if isinstance(rsm, ChunkedRemoteStorageManager) else rsm


def maybe_abort_multipart_uploads(
    rsm: RemoteStorageManager, copy_deadline_ms: int, summary: RunSummary
) -> None:
    """S3: abort uploads older than the copy deadline (no copy can still be using them)."""
    abort = getattr(underlying_store(rsm), "abort_incomplete_multipart_uploads", None)
    if not callable(abort):
        return
    started = time.monotonic()
    try:
        aborted: list[str] = abort(timedelta(milliseconds=copy_deadline_ms))
    except RemoteStorageError as exc:
        summary.error(f"aborting incomplete multipart uploads failed: {exc}")
        return
    summary.count("multipart_uploads_aborted", len(aborted))
    summary.details["multipart_uploads_aborted"] = aborted[:ACTIONS_IN_SUMMARY_MAX]
    for key in aborted:
        line = {"event": "reconcile", "job": JOB, "action": "abort_multipart", "key": key}
        print(format_fields(line), flush=True)
    summary.details["multipart_seconds"] = round(time.monotonic() - started, 3)


# ---------------------------------------------------------------------------- main
def build_parser() -> argparse.ArgumentParser:
    parser = job_parser(JOB, __doc__)
    own = parser.add_argument_group("reconcile")
    own.add_argument(
        "--copy-deadline-s",
        type=float,
        default=None,
        metavar="S",
        help="roll back COPY_SEGMENT_STARTED older than this; never below copy_segments'"
        f" --copy-timeout-s (default {COPY_DEADLINE_S_DEFAULT:g})",
    )
    own.add_argument(
        "--delete-retry-grace-s",
        type=float,
        default=None,
        metavar="S",
        help="retry DELETE_SEGMENT_STARTED older than this"
        f" (default {DELETE_RETRY_GRACE_MS_DEFAULT / 1000:g})",
    )
    own.add_argument(
        "--verify-chunks",
        action="store_true",
        help="read every chunked segment whole and report those failing a checksum or tag"
        " (reads the whole tier)",
    )
    own.add_argument(
        "--orphan-grace-s",
        type=float,
        default=None,
        metavar="S",
        help="delete orphaned objects older than this (default: the copy deadline)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = parse_job_args(build_parser(), argv, job=JOB)
    try:
        ReconcileOptions.of(args)
    except JobArgumentError as exc:
        build_parser().error(str(exc))
    return run_job(args, lambda summary: reconcile(args, summary))


if __name__ == "__main__":
    import sys

    # Run through the importable module so Spark pickles its functions by reference.
    from jobs.reconcile import main as module_main

    sys.exit(module_main())
