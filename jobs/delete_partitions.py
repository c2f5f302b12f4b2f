"""delete_partitions: remove all remote data of partitions marked deleted.

    python -m jobs.delete_partitions --bootstrap-server HOST:PORT [--broker-config PATH]
        [--topic T] [--remote-storage-manager NAME] [--rsm-config K=V ...]
        [--summary-path PATH] [--dry-run] [--spark-master URL]

Steps (DESIGN section 4; each an event or an idempotent deletion, so a run killed at any
point is finished by the next one)::

    find partitions whose latest deletion event is DELETE_PARTITION_MARKED or _STARTED
        (every __remote_log_metadata partition read from its start: ``storage-core tier``'s
        ``marked_partitions``)
    driver:    publish DELETE_PARTITION_STARTED where the partition is still MARKED
    executors: every remaining segment through its own transitions (``delete_segment``:
               DELETE_SEGMENT_STARTED -> objects deleted -> DELETE_SEGMENT_FINISHED), each task
               with its own client-mode RLMM and remote storage manager; a task re-reads a
               segment's state first (a segment another run already finished only has its
               objects deleted again)
    driver:    with a fresh RLMM (which sees the executors' events), publish
               DELETE_PARTITION_FINISHED for every partition with no segment left

A segment whose objects can not be deleted stays DELETE_SEGMENT_STARTED and its partition
DELETE_PARTITION_STARTED; the run reports it and exits 1, and the next run resumes there.
``--dry-run`` prints what would be deleted (partitions, segments, bytes) and changes nothing.
The log dir is not needed (a deleted topic has no directory).

Output: one ``partition=... event=delete_partition`` line per partition, a ``summary`` line,
and the JSON summary (``--summary-path``) with counts ``partitions``,
``partitions_finished``, ``segments_deleted``, ``segments_failed`` and bytes ``deleted``.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jobs.common import (
    JobArgs,
    Progress,
    RunSummary,
    StoreSettings,
    exclusive_run,
    format_fields,
    job_parser,
    log_partition,
    parse_job_args,
    run_job,
    spark_session,
)
from storage_core.client.cluster import KafkaCluster
from storage_core.clock import SYSTEM_CLOCK
from storage_core.common import TopicIdPartition, Uuid
from storage_core.server.kafka_config import KafkaConfig
from storage_core.tiered.local_tiered_storage import LocalTieredStorage
from storage_core.tiered.metadata import serde
from storage_core.tiered.metadata.errors import RemoteResourceNotFoundError
from storage_core.tiered.metadata.metadata import (
    RemoteLogSegmentMetadata,
    RemotePartitionDeleteMetadata,
)
from storage_core.tiered.metadata.states import (
    RemoteLogSegmentState,
    RemotePartitionDeleteState,
)
from storage_core.tiered.operations import (
    PartitionDeletionStep,
    delete_segment,
    marked_partitions,
    metadata_client,
    next_partition_deletion_step,
    resolve_broker_id,
)
from storage_core.tiered.remote_log_metadata_manager import RemoteLogMetadataManager
from storage_core.tiered.remote_object_keys import InvalidRemoteObjectKeyError, parse_object_key
from storage_core.tiered.remote_storage_manager import (
    RemoteStorageError,
    RemoteStorageManager,
)

JOB = "delete_partitions"
# Spark tasks per run: each opens one RLMM and one remote storage manager.
TASKS_PER_CORE = 2
TASKS_MAX = 64


# ---------------------------------------------------------------------------- planning (pure)
@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionDeletionPlan:
    """Where one partition's deletion stands and the segments still to delete."""

    topic_id_partition: TopicIdPartition
    step: PartitionDeletionStep
    segments: tuple[RemoteLogSegmentMetadata, ...] = ()

    @property
    def size_bytes(self) -> int:
        return sum(m.segment_size_in_bytes for m in self.segments)


def plan_partition_deletions(
    states: Mapping[
        TopicIdPartition,
        tuple[RemotePartitionDeleteMetadata | None, Sequence[RemoteLogSegmentMetadata]],
    ],
) -> list[PartitionDeletionPlan]:
    """Each partition's step (``next_partition_deletion_step``) and its segments, by topic
    and partition. A MARKED partition's segments are deleted in the same run, once STARTED is
    published, so they are listed for it too. Pure."""
    plans = []
    for tip in sorted(states, key=partition_order):
        delete_metadata, segments = states[tip]
        step = next_partition_deletion_step(delete_metadata, segments)
        listed = step in (
            PartitionDeletionStep.PUBLISH_STARTED,
            PartitionDeletionStep.DELETE_SEGMENTS,
        )
        plans.append(
            PartitionDeletionPlan(
                topic_id_partition=tip,
                step=step,
                segments=tuple(sorted(segments, key=segment_order)) if listed else (),
            )
        )
    return plans


def task_count(items: int, cores: int) -> int:
    """Spark tasks for ``items`` work items: a couple per core, never more than items."""
    return max(1, min(items, max(1, cores) * TASKS_PER_CORE, TASKS_MAX))


def partition_order(tip: TopicIdPartition) -> tuple[str, int, str]:
    return (tip.topic_partition.topic, tip.topic_partition.partition, str(tip.topic_id))


def segment_order(metadata: RemoteLogSegmentMetadata) -> tuple[int, int, str]:
    return (metadata.start_offset, metadata.end_offset, str(metadata.remote_log_segment_id.id))


# ---------------------------------------------------------------------------- executors
@dataclass(frozen=True, slots=True, kw_only=True)
class DeletionItem:
    """One unit of executor work: a segment (its metadata as ``RemoteLogMetadataSerde``
    bytes) to delete if its current state is one of ``allowed_states``, or orphaned object
    ``keys`` of segment ``segment_id`` of ``partition`` to delete if no live metadata names
    that segment."""

    reason: str
    metadata_bytes: bytes | None = None
    allowed_states: tuple[int, ...] = ()
    keys: tuple[str, ...] = ()
    key_prefix: str = ""

    @staticmethod
    def for_segment(
        metadata: RemoteLogSegmentMetadata,
        *,
        reason: str,
        allowed_states: Iterable[RemoteLogSegmentState] = tuple(RemoteLogSegmentState),
    ) -> DeletionItem:
        return DeletionItem(
            reason=reason,
            metadata_bytes=serde.serialize(metadata),
            allowed_states=tuple(int(s) for s in allowed_states),
        )

    @staticmethod
    def for_orphans(keys: Sequence[str], *, key_prefix: str, reason: str) -> DeletionItem:
        return DeletionItem(reason=reason, keys=tuple(keys), key_prefix=key_prefix)


@dataclass(frozen=True, slots=True, kw_only=True)
class DeletionOutcome:
    """What an executor did with one item. ``status``: ``deleted`` (went through its
    transitions), ``already_deleted`` (another run finished it; its objects were deleted
    again), ``skipped`` (its state moved on, or the orphan's segment is live now), ``error``."""

    partition: str
    segment_id: str
    status: str
    size_bytes: int = 0
    objects: int = 0
    detail: str = ""
    seconds: float = 0.0


def delete_on_executor(
    settings: StoreSettings, items: Iterable[DeletionItem]
) -> Iterator[DeletionOutcome]:
    """The body of one Spark task (``mapPartitions``): one RLMM and one RSM for its items."""
    batch = list(items)
    if not batch:
        return
    rsm = settings.remote_storage_manager()
    try:
        with metadata_client(settings.bootstrap_server) as rlmm:
            yield from delete_items(batch, rsm=rsm, rlmm=rlmm, broker_id=settings.broker_id)
    finally:
        rsm.close()


def delete_items(
    items: Iterable[DeletionItem],
    *,
    rsm: RemoteStorageManager,
    rlmm: RemoteLogMetadataManager,
    broker_id: int,
) -> Iterator[DeletionOutcome]:
    """One outcome per item, in order; a failing item is reported, never raised."""
    for item in items:
        started = time.monotonic()
        if item.metadata_bytes is not None:
            outcome = _delete_segment_item(item, rsm=rsm, rlmm=rlmm, broker_id=broker_id)
        else:
            outcome = _delete_orphan_item(item, rsm=rsm, rlmm=rlmm)
        yield DeletionOutcome(
            partition=outcome.partition,
            segment_id=outcome.segment_id,
            status=outcome.status,
            size_bytes=outcome.size_bytes,
            objects=outcome.objects,
            detail=outcome.detail,
            seconds=round(time.monotonic() - started, 3),
        )


def _delete_segment_item(
    item: DeletionItem,
    *,
    rsm: RemoteStorageManager,
    rlmm: RemoteLogMetadataManager,
    broker_id: int,
) -> DeletionOutcome:
    if item.metadata_bytes is None:
        raise ValueError("a segment item needs its metadata")
    listed = serde.deserialize(item.metadata_bytes)
    if not isinstance(listed, RemoteLogSegmentMetadata):
        raise ValueError(f"a segment item holds {type(listed).__name__}, not segment metadata")
    tip = listed.topic_id_partition
    segment_id = listed.remote_log_segment_id.id
    where = {"partition": str(tip), "segment_id": str(segment_id)}
    try:
        current = {m.remote_log_segment_id.id: m for m in rlmm.list_remote_log_segments(tip)}.get(
            segment_id
        )
        if current is None:
            # DELETE_SEGMENT_FINISHED already (another run): make sure no object is left.
            rsm.delete_log_segment_data(listed)
            return _outcome(where, status="already_deleted")
        if int(current.state) not in item.allowed_states:
            return _outcome(
                where,
                status="skipped",
                detail=f"state is now {current.state.name}",
            )
        delete_segment(
            current,
            rsm=rsm,
            rlmm=rlmm,
            broker_id=broker_id,
            clock=SYSTEM_CLOCK,
            reason=item.reason,
        )
    except RemoteResourceNotFoundError:
        # A concurrent run published DELETE_SEGMENT_FINISHED between our read and our event.
        return _outcome(where, status="already_deleted")
    except Exception as exc:  # reported per segment; the next run retries it
        return _outcome(where, status="error", detail=f"{type(exc).__name__}: {exc}")
    return _outcome(where, status="deleted", size_bytes=listed.segment_size_in_bytes)


def _delete_orphan_item(
    item: DeletionItem, *, rsm: RemoteStorageManager, rlmm: RemoteLogMetadataManager
) -> DeletionOutcome:
    try:
        parsed = [parse_object_key(key, item.key_prefix) for key in item.keys]
    except InvalidRemoteObjectKeyError as exc:
        return DeletionOutcome(partition="-", segment_id="-", status="error", detail=str(exc))
    segments = {p.segment.segment_id: p.segment.topic_id_partition for p in parsed}
    where = {
        "partition": ",".join(sorted({str(t) for t in segments.values()})),
        "segment_id": ",".join(sorted(str(s) for s in segments)),
    }
    try:
        for segment_id, tip in segments.items():
            if _is_listed(rlmm, tip, segment_id):
                return _outcome(where, status="skipped", detail="the segment has live metadata now")
        delete_object_keys(rsm, list(item.keys))
    except Exception as exc:  # reported per item; the next run retries it
        return _outcome(where, status="error", detail=f"{type(exc).__name__}: {exc}")
    return _outcome(where, status="deleted", objects=len(item.keys))


def _outcome(
    where: Mapping[str, str],
    *,
    status: str,
    size_bytes: int = 0,
    objects: int = 0,
    detail: str = "",
) -> DeletionOutcome:
    return DeletionOutcome(
        partition=where["partition"],
        segment_id=where["segment_id"],
        status=status,
        size_bytes=size_bytes,
        objects=objects,
        detail=detail,
    )


def _is_listed(rlmm: RemoteLogMetadataManager, tip: TopicIdPartition, segment_id: Uuid) -> bool:
    return any(m.remote_log_segment_id.id == segment_id for m in rlmm.list_remote_log_segments(tip))


def delete_object_keys(rsm: RemoteStorageManager, keys: list[str]) -> None:
    """Delete arbitrary object keys: ``delete_objects`` where the store has it (S3), the
    files under ``LocalTieredStorage``'s directory otherwise. Keys already gone are fine."""
    delete_objects = getattr(rsm, "delete_objects", None)
    if callable(delete_objects):
        delete_objects(keys)
        return
    if isinstance(rsm, LocalTieredStorage):
        root = rsm.storage_dir.resolve()
        for key in keys:
            path = (root / key).resolve()
            if not path.is_relative_to(root):
                raise RemoteStorageError(f"object key {key!r} points outside {root}")
            try:
                path.unlink(missing_ok=True)
            except OSError as exc:
                raise RemoteStorageError(f"deleting remote object {path} failed: {exc}") from exc
        return
    raise RemoteStorageError(
        f"{rsm!r} can not delete objects by key (no delete_objects); delete them by hand"
    )


def run_on_executors(
    spark: Any, settings: StoreSettings, items: Sequence[DeletionItem]
) -> list[DeletionOutcome]:
    """Spread ``items`` over Spark tasks and collect one outcome per item, in the order of
    ``items`` (``parallelize`` slices keep it and ``collect`` concatenates the slices)."""
    if not items:
        return []
    context = spark.sparkContext
    slices = task_count(len(items), int(context.defaultParallelism))
    rdd = context.parallelize(list(items), slices)
    outcomes: list[DeletionOutcome] = rdd.mapPartitions(
        lambda part: delete_on_executor(settings, part)
    ).collect()
    if len(outcomes) != len(items):
        raise RuntimeError(
            f"{len(items)} deletions sent to the executors, {len(outcomes)} answered"
        )
    return outcomes


# ---------------------------------------------------------------------------- driver
@dataclass(slots=True)
class PartitionReport:
    plan: PartitionDeletionPlan
    deleted: int = 0
    failed: int = 0
    size_bytes: int = 0
    errors: list[str] = field(default_factory=list)


def publish_partition_state(
    rlmm: RemoteLogMetadataManager,
    tip: TopicIdPartition,
    state: RemotePartitionDeleteState,
    broker_id: int,
) -> None:
    rlmm.put_remote_partition_delete_metadata(
        RemotePartitionDeleteMetadata(
            topic_id_partition=tip,
            state=state,
            event_timestamp_ms=SYSTEM_CLOCK.milliseconds(),
            broker_id=broker_id,
        )
    )


def cluster_lock_key(bootstrap_server: str) -> Path:
    """The run lock's key for jobs that work on the whole cluster, not on a log dir."""
    return Path("/cluster") / bootstrap_server.replace("/", "_")


def resolve_job_broker_id(args: JobArgs, cluster: KafkaCluster) -> int:
    config = None if args.broker_config_path is None else KafkaConfig.load(args.broker_config_path)
    return resolve_broker_id(args.broker_id, config, cluster.refresh_metadata([]))


def delete_marked_partitions(args: JobArgs, summary: RunSummary) -> None:
    """The whole run (see the module docstring)."""
    with exclusive_run(args, [cluster_lock_key(args.bootstrap_server)], summary) as ours:
        if not ours:
            return
        _delete_marked_partitions(args, summary)


def _delete_marked_partitions(args: JobArgs, summary: RunSummary) -> None:
    with KafkaCluster(args.bootstrap_server) as cluster:
        broker_id = resolve_job_broker_id(args, cluster)
        tips = marked_partitions(cluster, args.topic)
    summary.count("partitions", len(tips))
    if not tips:
        return
    with metadata_client(args.bootstrap_server) as rlmm:
        plans = plan_partition_deletions(
            {
                tip: (
                    rlmm.remote_partition_delete_metadata(tip),
                    list(rlmm.list_remote_log_segments(tip)),
                )
                for tip in tips
            }
        )
        if args.dry_run:
            report_dry_run(plans, summary)
            return
        for plan in plans:
            if plan.step is PartitionDeletionStep.PUBLISH_STARTED:
                publish_partition_state(
                    rlmm,
                    plan.topic_id_partition,
                    RemotePartitionDeleteState.DELETE_PARTITION_STARTED,
                    broker_id,
                )
    reports = {str(p.topic_id_partition): PartitionReport(plan=p) for p in plans}
    settings = StoreSettings.of(args, broker_id)
    items = [
        DeletionItem.for_segment(metadata, reason="partition deleted")
        for plan in plans
        for metadata in plan.segments
    ]
    progress = Progress(JOB, len(items))
    started = time.monotonic()
    if items:
        with spark_session(JOB, args.spark_master) as spark:
            outcomes = run_on_executors(spark, settings, items)
        for outcome in outcomes:
            report = reports[outcome.partition]
            if outcome.status == "error":
                report.failed += 1
                report.errors.append(f"segment {outcome.segment_id}: {outcome.detail}")
            else:
                report.deleted += 1
                report.size_bytes += outcome.size_bytes
            progress.advance(1, outcome.size_bytes)
    progress.finish()
    # A fresh RLMM reads the executors' events from the topic.
    with metadata_client(args.bootstrap_server) as rlmm:
        for report in reports.values():
            finish_partition(rlmm, report, broker_id, summary, started)


def finish_partition(
    rlmm: RemoteLogMetadataManager,
    report: PartitionReport,
    broker_id: int,
    summary: RunSummary,
    started: float,
) -> None:
    tip = report.plan.topic_id_partition
    tp = tip.topic_partition
    remaining = list(rlmm.list_remote_log_segments(tip))
    step = next_partition_deletion_step(rlmm.remote_partition_delete_metadata(tip), remaining)
    if step is PartitionDeletionStep.PUBLISH_FINISHED:
        publish_partition_state(
            rlmm, tip, RemotePartitionDeleteState.DELETE_PARTITION_FINISHED, broker_id
        )
        step = PartitionDeletionStep.DONE
    finished = step is PartitionDeletionStep.DONE
    summary.count("segments_deleted", report.deleted)
    summary.count("segments_failed", report.failed)
    summary.add_bytes("deleted", report.size_bytes)
    if finished:
        summary.count("partitions_finished")
    for error in report.errors:
        summary.error(error, tp)
    if not finished and not report.errors:
        summary.error(f"{len(remaining)} segment(s) left after the run ({step.value})", tp)
    status = "ok" if finished else "unfinished"
    fields: dict[str, object] = {
        "topic_id": tip.topic_id,
        "segments": report.deleted,
        "failed": report.failed,
        "bytes": report.size_bytes,
        "finished": finished,
        "seconds": f"{time.monotonic() - started:.3f}",
    }
    print_partition_line("delete_partition", tp, status, fields)
    summary.partition(
        tp, status, **{k: str(v) if isinstance(v, Uuid) else v for k, v in fields.items()}
    )


def report_dry_run(plans: Sequence[PartitionDeletionPlan], summary: RunSummary) -> None:
    for plan in plans:
        tp = plan.topic_id_partition.topic_partition
        for metadata in plan.segments:
            log_partition(
                "plan",
                tp,
                job=JOB,
                action="delete_segment",
                segment_id=metadata.remote_log_segment_id.id,
                start_offset=metadata.start_offset,
                end_offset=metadata.end_offset,
                state=metadata.state.name,
                bytes=metadata.segment_size_in_bytes,
            )
        fields: dict[str, object] = {
            "topic_id": str(plan.topic_id_partition.topic_id),
            "step": plan.step.name,
            "segments": len(plan.segments),
            "bytes": plan.size_bytes,
        }
        print_partition_line("delete_partition", tp, "planned", fields)
        summary.partition(tp, "planned", **fields)
        summary.count("segments_planned", len(plan.segments))
        summary.add_bytes("planned", plan.size_bytes)


def print_partition_line(event: str, tp: object, status: str, fields: Mapping[str, object]) -> None:
    """``partition=<tp> event=<event> job=... status=... k=v ...`` on stdout."""
    line = {"partition": tp, "event": event, "job": JOB, "status": status, **fields}
    print(format_fields(line), flush=True)


def build_parser() -> argparse.ArgumentParser:
    return job_parser(JOB, __doc__)


def main(argv: list[str] | None = None) -> int:
    args = parse_job_args(build_parser(), argv, job=JOB)
    return run_job(args, lambda summary: delete_marked_partitions(args, summary))


if __name__ == "__main__":
    import sys

    # Run through the importable module so Spark pickles its functions by reference.
    from jobs.delete_partitions import main as module_main

    sys.exit(module_main())
