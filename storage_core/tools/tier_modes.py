"""The modes of ``storage-core tier`` (described in ``storage_core.tools.tier``): copy,
expire, delete partitions and rewrite, each planning its partitions, printing its
``plan``/``status`` lines and returning its ``Summary``; with ``--dry-run`` they print the
plan and change nothing.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Sequence

from storage_core.client.consumer import KafkaConsumer
from storage_core.common import TopicIdPartition, Uuid
from storage_core.errors import StorageError
from storage_core.tiered.operations import (
    ExpiryPlan,
    LogView,
    PartitionTarget,
    SegmentView,
    candidate_segments,
    copy_segment,
    delete_expired_segments,
    delete_partition,
    fence_for,
    marked_partitions_by_broker,
    plan_expiry,
    read_view,
)
from storage_core.tiered.operations.rewrite import (
    RewriteOutcome,
    SegmentRewrite,
    chunked_manager,
    is_referenced_segment,
    plan_rewrite,
    rewrite_partition,
    rewrite_reason,
)
from storage_core.tiered.quota.copy_quota import CopyQuota, describe_copy_rate
from storage_core.tiered.remote_object_keys import topic_manifest_key
from storage_core.tiered.remote_storage_manager import RemoteObjectStore
from storage_core.tools.tier_context import Summary, TierContext, TierProgress


# ---------------------------------------------------------------------------- copy
def offsets_text(segments: Sequence[SegmentView]) -> str:
    return f"{segments[0].base_offset}..{segments[-1].end_offset}" if segments else "-"


def plan_copies(
    ctx: TierContext, targets: Sequence[PartitionTarget], summary: Summary
) -> list[tuple[PartitionTarget, LogView, list[SegmentView]]]:
    """Each target's view and candidate segments (a failed one prints its error)."""
    consumer = KafkaConsumer(ctx.cluster)
    plans = []
    for target in targets:
        try:
            view = read_view(consumer, target)
            segments = candidate_segments(view, ctx.rlmm, config=target.config)
        except StorageError as exc:
            summary.errors += 1
            ctx.error(target.topic_partition, "copy", exc)
            continue
        plans.append((target, view, segments))
    return plans


def copy_partitions(ctx: TierContext, targets: Sequence[PartitionTarget]) -> Summary:
    """Copy mode (see ``storage_core.tools.tier``); each upload first waits on the copy quota
    (KIP-956: the strictest broker's ``remote.log.manager.copy.max.bytes.per.second``, as
    ``storage_core.tiered.quota.copy_quota`` paces a copier)."""
    summary = Summary(action="copy")
    plans = plan_copies(ctx, targets, summary)
    quota = None
    if not ctx.dry_run and plans:
        rate = describe_copy_rate(ctx.cluster)
        quota = CopyQuota.of(rate.bytes_per_second, rate.window_props)
    total = sum(len(segments) for _, _, segments in plans)
    bar = TierProgress(ctx.err, action="copy", total=total, enabled=ctx.progress)
    for target, view, segments in plans:
        tp = target.topic_partition
        started = time.monotonic()
        summary.partitions += 1
        if ctx.dry_run:
            for segment in segments:
                ctx.print(
                    {
                        "plan": "copy",
                        "partition": tp,
                        "base_offset": segment.base_offset,
                        "end_offset": segment.end_offset,
                        "bytes": segment.size_bytes,
                    }
                )
            ctx.print(
                {
                    "partition": tp,
                    "action": "copy",
                    "status": "planned",
                    "segments": len(segments),
                    "bytes": sum(s.size_bytes for s in segments),
                    "offsets": offsets_text(segments),
                    "leader_epoch": target.leader_epoch,
                }
            )
            summary.segments += len(segments)
            summary.size_bytes += sum(s.size_bytes for s in segments)
            continue
        copied: list[SegmentView] = []
        fence = fence_for(ctx.cluster, target)
        try:
            for segment in segments:
                if quota is not None:
                    quota.acquire(segment.size_bytes)
                copy_segment(
                    view,
                    segment,
                    rsm=ctx.rsm,
                    rlmm=ctx.rlmm,
                    fence=fence,
                    broker_id=ctx.broker_id,
                    clock=ctx.clock,
                )
                copied.append(segment)
                summary.segments += 1
                summary.size_bytes += segment.size_bytes
                bar.update(summary.segments, summary.size_bytes)
        except StorageError as exc:
            summary.errors += 1
            ctx.error(tp, "copy", exc)
            continue
        ctx.print(
            {
                "partition": tp,
                "action": "copy",
                "status": "ok",
                "segments": len(copied),
                "bytes": sum(s.size_bytes for s in copied),
                "offsets": offsets_text(copied),
                "seconds": f"{time.monotonic() - started:.3f}",
            }
        )
    bar.finish(summary.segments, summary.size_bytes)
    return summary


# ---------------------------------------------------------------------------- expire
def expire_partitions(ctx: TierContext, targets: Sequence[PartitionTarget]) -> Summary:
    """Expire mode (see ``storage_core.tools.tier``)."""
    summary = Summary(action="expire")
    consumer = KafkaConsumer(ctx.cluster)
    plans: list[tuple[PartitionTarget, ExpiryPlan]] = []
    for target in targets:
        try:
            view = read_view(consumer, target)
            plan = plan_expiry(
                view, ctx.rlmm, config=target.config, now_ms=ctx.clock.milliseconds()
            )
        except StorageError as exc:
            summary.errors += 1
            ctx.error(target.topic_partition, "expire", exc)
            continue
        plans.append((target, plan))
    total = sum(len(plan.expired) for _, plan in plans)
    bar = TierProgress(ctx.err, action="expire", total=total, enabled=ctx.progress)
    for target, plan in plans:
        tp = target.topic_partition
        started = time.monotonic()
        summary.partitions += 1
        for item in plan.expired:
            ctx.print(
                {
                    "plan": "expire",
                    "partition": tp,
                    "base_offset": item.metadata.start_offset,
                    "end_offset": item.metadata.end_offset,
                    "bytes": item.metadata.segment_size_in_bytes,
                    "reason": item.reason.name,
                }
            )
        planned_bytes = sum(i.metadata.segment_size_in_bytes for i in plan.expired)
        new_start = "-" if plan.log_start_offset is None else plan.log_start_offset
        if ctx.dry_run:
            summary.segments += len(plan.expired)
            summary.size_bytes += planned_bytes
            ctx.print(
                {
                    "partition": tp,
                    "action": "expire",
                    "status": "planned",
                    "segments": len(plan.expired),
                    "bytes": planned_bytes,
                    "log_start_offset": new_start,
                }
            )
            continue
        try:
            outcome = delete_expired_segments(
                plan,
                rsm=ctx.rsm,
                rlmm=ctx.rlmm,
                fence=fence_for(ctx.cluster, target),
                broker_id=ctx.broker_id,
                clock=ctx.clock,
            )
        except StorageError as exc:
            summary.errors += 1
            ctx.error(tp, "expire", exc)
            continue
        deleted_bytes = sum(i.metadata.segment_size_in_bytes for i in outcome.deleted)
        summary.segments += len(outcome.deleted)
        summary.size_bytes += deleted_bytes
        summary.errors += len(outcome.failed)
        bar.update(summary.segments, summary.size_bytes)
        ctx.print(
            {
                "partition": tp,
                "action": "expire",
                "status": "error" if outcome.failed else "ok",
                "deleted": len(outcome.deleted),
                "failed": len(outcome.failed),
                "bytes": deleted_bytes,
                "log_start_offset": new_start,
                "seconds": f"{time.monotonic() - started:.3f}",
            }
        )
    bar.finish(summary.segments, summary.size_bytes)
    return summary


# ---------------------------------------------------------------------------- delete
def delete_partitions(ctx: TierContext, topic: str | None) -> Summary:
    """Delete-partitions mode (see ``storage_core.tools.tier``)."""
    summary = Summary(action="delete-partition")
    finished_topics: set[tuple[str, Uuid]] = set()
    for tip, marked_by in marked_partitions_by_broker(ctx.cluster, topic):
        common = {"partition": tip.topic_partition, "action": "delete-partition"}
        if marked_by != ctx.broker_id:
            reason = f"marked by broker {marked_by}, not {ctx.broker_id}"
            ctx.print({**common, "status": "skipped", "reason": reason})
            continue
        started = time.monotonic()
        summary.partitions += 1
        try:
            if ctx.dry_run:
                segments = list(ctx.rlmm.list_remote_log_segments(tip))
                summary.segments += len(segments)
                summary.size_bytes += sum(m.segment_size_in_bytes for m in segments)
                ctx.print(
                    {
                        **common,
                        "status": "planned",
                        "topic_id": tip.topic_id,
                        "segments": len(segments),
                    }
                )
                continue
            result = delete_partition(
                tip, rsm=ctx.rsm, rlmm=ctx.rlmm, broker_id=ctx.broker_id, clock=ctx.clock
            )
        except StorageError as exc:
            summary.errors += 1
            ctx.error(tip.topic_partition, "delete-partition", exc)
            continue
        summary.segments += result.deleted_segments
        if not result.finished:
            summary.errors += 1
        else:
            finished_topics.add((tip.topic_partition.topic, tip.topic_id))
        ctx.print(
            {
                **common,
                "status": "ok" if result.finished else "unfinished",
                "topic_id": tip.topic_id,
                "segments": result.deleted_segments,
                "finished": result.finished,
                "seconds": f"{time.monotonic() - started:.3f}",
            }
        )
    if finished_topics:
        delete_gone_topic_manifests(ctx, topic, finished_topics, summary)
    return summary


def delete_gone_topic_manifests(
    ctx: TierContext, topic: str | None, topics: set[tuple[str, Uuid]], summary: Summary
) -> None:
    """The manifest of each of ``topics`` whose every partition's remote data is now deleted
    (none left marked or started, by any broker): it would otherwise outlive the topic."""
    rsm = ctx.rsm
    if not isinstance(rsm, RemoteObjectStore):
        return  # a store without whole objects holds no topic manifest
    pending = {tip.topic_id for tip, _ in marked_partitions_by_broker(ctx.cluster, topic)}
    for name, topic_id in sorted(t for t in topics if t[1] not in pending):
        try:
            rsm.delete_objects([topic_manifest_key(rsm.prefix, name, topic_id)])
        except StorageError as exc:
            summary.errors += 1
            error = {"topic": name, "action": "delete-topic-manifest", "status": "error"}
            ctx.print({**error, "error": exc})
            continue
        ctx.print(
            {"topic": name, "action": "delete-topic-manifest", "status": "ok", "topic_id": topic_id}
        )


# ---------------------------------------------------------------------------- rewrite
def rewrite_partitions(ctx: TierContext, targets: Sequence[PartitionTarget]) -> Summary:
    """Rewrite mode (see ``storage_core.tools.tier`` and ``operations.rewrite``)."""
    summary = Summary(action="rewrite")
    try:
        rsm = chunked_manager(ctx.rsm)
    except StorageError as exc:
        summary.errors += 1
        for target in targets:
            ctx.error(target.topic_partition, "rewrite", exc)
        return summary
    plans: list[tuple[PartitionTarget, list[SegmentRewrite]]] = []
    for target in targets:
        try:
            tip = TopicIdPartition(target.topic_id, target.topic_partition)
            plan = plan_rewrite(
                list(ctx.rlmm.list_remote_log_segments(tip)),
                functools.partial(rewrite_reason, rsm),
                lambda m: is_referenced_segment(ctx.rlmm, m),
            )
        except StorageError as exc:
            summary.errors += 1
            ctx.error(target.topic_partition, "rewrite", exc)
            continue
        plans.append((target, plan))
    total = sum(1 for _, plan in plans for item in plan if item.source is not None)
    bar = TierProgress(ctx.err, action="rewrite", total=total, enabled=ctx.progress)
    for target, plan in plans:
        tp = target.topic_partition
        started = time.monotonic()
        summary.partitions += 1
        for item in plan:
            shown = item.source if item.source is not None else item.keep
            assert shown is not None  # SegmentRewrite holds one of them
            ctx.print(
                {
                    "plan": "rewrite" if item.source is not None else "delete-superseded",
                    "partition": tp,
                    "segment_id": shown.remote_log_segment_id.id,
                    "base_offset": shown.start_offset,
                    "end_offset": shown.end_offset,
                    "bytes": shown.segment_size_in_bytes,
                    "obsolete": len(item.obsolete),
                    "reason": item.reason,
                }
            )
        to_rewrite = [item.source for item in plan if item.source is not None]
        planned_bytes = sum(m.segment_size_in_bytes for m in to_rewrite)
        if ctx.dry_run:
            summary.segments += len(to_rewrite)
            summary.size_bytes += planned_bytes
            ctx.print(
                {
                    "partition": tp,
                    "action": "rewrite",
                    "status": "planned",
                    "segments": len(to_rewrite),
                    "bytes": planned_bytes,
                    "obsolete": sum(len(item.obsolete) for item in plan),
                }
            )
            continue
        progressed = functools.partial(_show_progress, bar, summary.segments, summary.size_bytes)
        try:
            outcome = rewrite_partition(
                plan,
                rsm=rsm,
                rlmm=ctx.rlmm,
                fence=fence_for(ctx.cluster, target),
                broker_id=ctx.broker_id,
                clock=ctx.clock,
                on_segment=progressed,
            )
        except StorageError as exc:
            summary.errors += 1
            ctx.error(tp, "rewrite", exc)
            continue
        summary.segments += outcome.rewritten
        summary.size_bytes += outcome.size_bytes
        ctx.print(
            {
                "partition": tp,
                "action": "rewrite",
                "status": "ok",
                "segments": outcome.rewritten,
                "bytes": outcome.size_bytes,
                "deleted": outcome.deleted,
                "offsets": "-"
                if not to_rewrite
                else f"{to_rewrite[0].start_offset}..{to_rewrite[-1].end_offset}",
                "seconds": f"{time.monotonic() - started:.3f}",
            }
        )
    bar.finish(summary.segments, summary.size_bytes)
    return summary


def _show_progress(bar: TierProgress, done: int, size_bytes: int, outcome: RewriteOutcome) -> None:
    bar.update(done + outcome.rewritten, size_bytes + outcome.size_bytes)
