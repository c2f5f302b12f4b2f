"""delete_partitions: remove all remote data of partitions marked deleted.

    python -m jobs.delete_partitions --bootstrap-server HOST:PORT [--broker-config PATH]
        [--topic T] [--remote-storage-manager NAME] [--rsm-config K=V ...]
        [--summary-path PATH] [--dry-run] [--spark-master URL]

Steps (DESIGN section 4; each an event or an idempotent deletion, so a run killed at any
point is finished by the next one)::

    find the cluster's partitions whose latest deletion event is DELETE_PARTITION_MARKED or
        _STARTED, and the broker of that event (every __remote_log_metadata partition read
        from its start: ``storage-core tier``'s ``marked_partitions_by_broker``)
    driver:    publish DELETE_PARTITION_STARTED where the partition is still MARKED
    executors: every remaining segment through its own transitions (``delete_segment``:
               DELETE_SEGMENT_STARTED -> objects deleted -> DELETE_SEGMENT_FINISHED), each task
               with its own client-mode RLMM and remote storage manager; a task re-reads a
               segment's state first (a segment another run already finished only has its
               objects deleted again)
    driver:    with a fresh RLMM (which sees the executors' events), publish
               DELETE_PARTITION_FINISHED for every partition with no segment left; a topic
               whose partitions of the run all finished loses its topic manifest
               (``<prefix>/<topic>-<topicId>/topic-manifest.json``): a restore of the whole
               cluster must not bring a deleted topic back

A segment whose objects can not be deleted stays DELETE_SEGMENT_STARTED and its partition
DELETE_PARTITION_STARTED; the run reports it and exits 1, and the next run resumes there.
``--dry-run`` prints what would be deleted (partitions, segments, bytes) and changes nothing.

One run deletes the marked partitions of the whole cluster, whichever broker led them: the
leader decides a partition's deletion when its topic is deleted (only it publishes
DELETE_PARTITION_MARKED, as Kafka's ``StopPartition(deleteRemoteLog)``), and the run carries
it out on that broker's behalf: each partition's events (DELETE_PARTITION_STARTED/FINISHED
and its segments' DELETE_SEGMENT_*) name the broker that marked it, so its metadata reads as
if that leader had deleted it. Neither a broker id nor log dirs are needed (remote data only;
a deleted topic has no directory); ``--broker-config`` may still name the store. On a single
broker every partition is marked by that broker, as before.

Output: one ``partition=... event=delete_partition`` line per partition, a ``summary`` line,
and the JSON summary (``--summary-path``) with counts ``partitions``,
``partitions_finished``, ``segments_deleted``, ``segments_failed``, ``topic_manifests_deleted``
and bytes ``deleted``.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from jobs.common import (
    JobArgs,
    Progress,
    RunSummary,
    StoreSettings,
    cluster_lock_key,
    exclusive_run,
    format_fields,
    job_parser,
    log_line,
    log_partition,
    parse_job_args,
    run_job,
    spark_session,
)
from jobs.common.clients import kafka_cluster, remote_log_metadata_client
from jobs.common.remote_deletion import NO_RUN_BROKER_ID, DeletionItem, run_on_executors
from storage_core.clock import SYSTEM_CLOCK
from storage_core.common import TopicIdPartition, Uuid
from storage_core.tiered.metadata.metadata import (
    RemoteLogSegmentMetadata,
    RemotePartitionDeleteMetadata,
)
from storage_core.tiered.metadata.states import RemotePartitionDeleteState
from storage_core.tiered.operations import (
    PartitionDeletionStep,
    marked_partitions_by_broker,
    next_partition_deletion_step,
)
from storage_core.tiered.remote_log_metadata_manager import RemoteLogMetadataManager
from storage_core.tiered.remote_object_keys import topic_manifest_key
from storage_core.tiered.remote_storage_manager import RemoteStorageManager, remote_object_store

JOB = "delete_partitions"


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


def partition_order(tip: TopicIdPartition) -> tuple[str, int, str]:
    return (tip.topic_partition.topic, tip.topic_partition.partition, str(tip.topic_id))


def segment_order(metadata: RemoteLogSegmentMetadata) -> tuple[int, int, str]:
    return (metadata.start_offset, metadata.end_offset, str(metadata.remote_log_segment_id.id))


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


def delete_marked_partitions(args: JobArgs, summary: RunSummary) -> None:
    """The whole run (see the module docstring)."""
    with exclusive_run(args, [cluster_lock_key(args.bootstrap_server)], summary) as ours:
        if not ours:
            return
        _delete_marked_partitions(args, summary)


def _delete_marked_partitions(args: JobArgs, summary: RunSummary) -> None:
    with kafka_cluster(args) as cluster:
        marked_by = dict(marked_partitions_by_broker(cluster, args.topic))
    tips = list(marked_by)
    summary.count("partitions", len(tips))
    if not tips:
        return
    with remote_log_metadata_client(args) as rlmm:
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
            report_dry_run(plans, marked_by, summary)
            return
        for plan in plans:
            if plan.step is PartitionDeletionStep.PUBLISH_STARTED:
                publish_partition_state(
                    rlmm,
                    plan.topic_id_partition,
                    RemotePartitionDeleteState.DELETE_PARTITION_STARTED,
                    marked_by[plan.topic_id_partition],
                )
    reports = {str(p.topic_id_partition): PartitionReport(plan=p) for p in plans}
    # Every item names the broker that marked its partition: the run has no broker of its own.
    settings = StoreSettings.of(args, NO_RUN_BROKER_ID)
    items = [
        DeletionItem.for_segment(
            metadata, reason="partition deleted", broker_id=marked_by[plan.topic_id_partition]
        )
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
    with remote_log_metadata_client(args) as rlmm:
        finished = finish_partitions(rlmm, reports.values(), marked_by, summary, started)
    delete_topic_manifests(settings, finished, summary)


def finish_partitions(
    rlmm: RemoteLogMetadataManager,
    reports: Iterable[PartitionReport],
    marked_by: Mapping[TopicIdPartition, int],
    summary: RunSummary,
    started: float,
) -> list[tuple[str, Uuid]]:
    """``finish_partition`` for each report; the topics (name, id) whose every partition
    among them finished."""
    finished: dict[tuple[str, Uuid], bool] = {}
    for report in reports:
        tip = report.plan.topic_id_partition
        done = finish_partition(rlmm, report, marked_by[tip], summary, started)
        topic = (tip.topic_partition.topic, tip.topic_id)
        finished[topic] = finished.get(topic, True) and done
    return [topic for topic, done in finished.items() if done]


def delete_topic_manifests(
    settings: StoreSettings, topics: Sequence[tuple[str, Uuid]], summary: RunSummary
) -> None:
    """The manifests of topics whose remote data is gone (a manifest already gone is fine)."""
    summary.count("topic_manifests_deleted", 0)
    if not topics:
        return
    rsm = settings.remote_storage_manager()
    try:
        delete_manifests_of(rsm, topics, summary)
    finally:
        rsm.close()


def delete_manifests_of(
    rsm: RemoteStorageManager, topics: Sequence[tuple[str, Uuid]], summary: RunSummary
) -> None:
    """Delete the manifests of ``topics`` (name, topic id) from ``rsm``'s store."""
    store = remote_object_store(rsm, "deleting a deleted topic's manifest")
    store.delete_objects([topic_manifest_key(store.prefix, name, tid) for name, tid in topics])
    summary.count("topic_manifests_deleted", len(topics))
    for name, topic_id in topics:
        log_line("topic_manifest_deleted", {"topic": name, "topic_id": topic_id})


def finish_partition(
    rlmm: RemoteLogMetadataManager,
    report: PartitionReport,
    broker_id: int,
    summary: RunSummary,
    started: float,
) -> bool:
    """Publish DELETE_PARTITION_FINISHED if no segment is left; whether the partition's
    deletion is finished."""
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
        "marked_by": broker_id,
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
    return finished


def report_dry_run(
    plans: Sequence[PartitionDeletionPlan],
    marked_by: Mapping[TopicIdPartition, int],
    summary: RunSummary,
) -> None:
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
            "marked_by": marked_by[plan.topic_id_partition],
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
