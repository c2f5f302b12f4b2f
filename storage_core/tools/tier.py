"""``storage-core tier``: run the tiering operations now, from outside the broker.

    storage-core tier --bootstrap-server HOST:PORT --log-dir DIR [--topic T] [--dry-run]
        [--broker-config server.properties] [--broker-id N]
        [--remote-storage-manager LocalTieredStorage|S3RemoteStorageManager]
        [--rsm-config KEY=VALUE ...] [--expire] [--delete-partitions] [--progress]
        [--run-timeout-s S]

Modes (the default is copy; ``--expire`` and ``--delete-partitions`` may be combined):

- **copy**: for every partition directory of the log dir whose topic has
  ``remote.storage.enable=true`` (read through DescribeConfigs) and whose leader is this
  broker (Metadata), copy the segments ``candidate_segments`` finds eligible, oldest first,
  fenced by the leader epoch Metadata reported when planning.
- **expire** (``--expire``): remote retention, ``plan_expiry`` + ``delete_expired_segments``
  for the same partitions. The broker moves the log start offset once it sees the
  DELETE_SEGMENT_STARTED events.
- **delete partitions** (``--delete-partitions``): ``delete_partition`` for every partition
  whose latest deletion event on ``__remote_log_metadata`` is DELETE_PARTITION_MARKED or
  DELETE_PARTITION_STARTED by this broker (the partition's leader when its topic was
  deleted marks it; the log dir is not needed: a deleted topic has no directory).

The broker id is ``--broker-id``, else ``--broker-config``'s, else the only broker of the
cluster. The remote storage manager is ``--remote-storage-manager`` (default: the broker
config's ``remote.log.storage.manager.class.name``) built from the broker config's
``rsm.config.*`` settings, overridden by ``--rsm-config`` (prefix optional).

Views of the log dir use the log start offset and the high watermark the leader reports
(ListOffsets -2 and -1, asked in that order, before the directory is read), not the
checkpoint files, which lag.

Output on stdout, one ``key=value`` line per partition and per mode, then a summary::

    partition=orders-0 action=copy status=ok segments=3 bytes=49152 offsets=0..29 seconds=0.21
    partition=orders-1 action=copy status=skipped reason="leader is broker 2"
    partition=orders-0 action=expire status=ok deleted=2 failed=0 bytes=32768 log_start_offset=20
    partition=orders-0 action=delete-partition status=ok topic_id=... segments=5 finished=true
    summary action=copy partitions=2 segments=3 bytes=49152 errors=0 seconds=0.35

``--run-timeout-s`` (default 600) bounds the whole run: a store that hangs (each request runs
into its timeouts and retries, then the rollback does too) cannot keep the command for
minutes per partition. Past the bound the command prints an error naming the store and the
bound and exits 1 at once. Whatever it was doing is left as the crash of a copy would leave
it: a COPY_SEGMENT_STARTED attempt (rolled back by ``jobs.reconcile`` after its copy
deadline) or a DELETE_SEGMENT_STARTED one (retried by expiry or reconcile); nothing is
committed half-way (FINISHED is published only after every object is written and checked).

``--dry-run`` prints ``plan ...`` lines (one per segment) and ``status=planned`` instead,
and changes nothing. A progress bar goes to stderr when it is a terminal (or with
``--progress``). Exit code 0, or 1 when a partition failed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from storage_core.client.cluster import KafkaCluster
from storage_core.client.consumer import KafkaConsumer
from storage_core.clock import SYSTEM_CLOCK, Clock
from storage_core.errors import InvalidConfigError, StorageError
from storage_core.server.kafka_config import KafkaConfig
from storage_core.tiered.operations import (
    ExpiryPlan,
    LogView,
    PartitionTarget,
    SegmentView,
    SkipReason,
    candidate_segments,
    copy_segment,
    delete_expired_segments,
    delete_partition,
    discover_targets,
    fence_for,
    marked_partitions_by_broker,
    metadata_client,
    plan_expiry,
    read_view,
    resolve_broker_id,
)
from storage_core.tiered.remote_log_metadata_manager import RemoteLogMetadataManager
from storage_core.tiered.remote_storage_manager import (
    RemoteStorageManager,
    load_remote_storage_manager,
)
from storage_core.tiered.topic_based_rlmm import (
    TopicBasedRemoteLogMetadataManager,
)
from storage_core.tools.key_values import format_fields, rsm_settings

PROGRESS_INTERVAL_S = 0.2
RUN_TIMEOUT_S_DEFAULT = 600.0
RUN_TIMEOUT_S_MAX = 24 * 3600.0


class TierRunTimeoutError(StorageError):
    """The run passed ``--run-timeout-s``; the process must exit now (its worker may be stuck
    in a store call that cannot be interrupted)."""

    error_code = "request_timed_out"


# ---------------------------------------------------------------------------- settings
def log_dirs_of(log_dir: Path | None, broker_config: KafkaConfig | None) -> list[Path]:
    """``--log-dir``, else the broker config's ``log.dirs``."""
    if log_dir is not None:
        return [log_dir]
    if broker_config is not None:
        return broker_config.log_dirs()
    raise InvalidConfigError("pass --log-dir (or --broker-config to use its log.dirs)")


# ---------------------------------------------------------------------------- output
class TierProgress:
    """A ``\\r``-rewritten bar on stderr (at most every 0.2 s) over segments and bytes."""

    def __init__(self, stream: TextIO, *, action: str, total: int, enabled: bool) -> None:
        self.stream = stream
        self.action = action
        self.total = total
        self.enabled = enabled and total > 0
        self._shown_at = 0.0
        self._drawn = False

    def update(self, done: int, size_bytes: int, *, force: bool = False) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if not force and now - self._shown_at < PROGRESS_INTERVAL_S:
            return
        self._shown_at = now
        width = 30
        filled = width * done // self.total
        bar = "#" * filled + "." * (width - filled)
        self.stream.write(
            f"\r{self.action} [{bar}] {done}/{self.total} segments {size_bytes:,} bytes"
        )
        self.stream.flush()
        self._drawn = True

    def finish(self, done: int, size_bytes: int) -> None:
        if self.enabled:
            self.update(done, size_bytes, force=True)
        if self._drawn:
            self.stream.write("\n")
            self.stream.flush()


@dataclass(slots=True)
class Summary:
    """Totals of one mode, printed as the ``summary`` line."""

    action: str
    partitions: int = 0
    segments: int = 0
    size_bytes: int = 0
    errors: int = 0
    started: float = field(default_factory=time.monotonic)

    def line(self) -> str:
        return "summary " + format_fields(
            {
                "action": self.action,
                "partitions": self.partitions,
                "segments": self.segments,
                "bytes": self.size_bytes,
                "errors": self.errors,
                "seconds": f"{time.monotonic() - self.started:.3f}",
            }
        )


# ---------------------------------------------------------------------------- targets
def find_targets(
    cluster: KafkaCluster,
    log_dirs: Sequence[Path],
    *,
    topic: str | None,
    broker_id: int,
    out: TextIO,
    action: str,
) -> list[PartitionTarget]:
    """The partitions ``broker_id`` leads among ``log_dirs``; prints a ``status=skipped``
    line for each one left out."""
    found = discover_targets(cluster, {broker_id: tuple(log_dirs)}, topic=topic)
    for skipped in found.skipped:
        if skipped.why is SkipReason.NOT_REMOTE_ENABLED:
            continue  # the command leaves topics without remote storage alone, silently
        line = {
            "partition": skipped.topic_partition,
            "action": action,
            "status": "skipped",
            "reason": skipped.reason,
        }
        print(format_fields(line), file=out)
    return list(found.targets)


# ---------------------------------------------------------------------------- context
@dataclass(slots=True)
class TierContext:
    """What every mode uses; the RSM and the RLMM are built on first use, closed at the end."""

    cluster: KafkaCluster
    bootstrap_server: str
    broker_id: int
    rsm_class_name: str
    rsm_config: dict[str, str]
    out: TextIO
    err: TextIO
    dry_run: bool
    progress: bool
    clock: Clock = SYSTEM_CLOCK
    _rsm: RemoteStorageManager | None = None
    _rlmm: TopicBasedRemoteLogMetadataManager | None = None

    @property
    def rsm(self) -> RemoteStorageManager:
        if self._rsm is None:
            self._rsm = load_remote_storage_manager(self.rsm_class_name, self.rsm_config)
        return self._rsm

    @property
    def rlmm(self) -> RemoteLogMetadataManager:
        if self._rlmm is None:
            self._rlmm = metadata_client(self.bootstrap_server)
        return self._rlmm

    def close(self) -> None:
        if self._rlmm is not None:
            self._rlmm.close()
        if self._rsm is not None:
            self._rsm.close()

    def print(self, fields: Mapping[str, object]) -> None:
        print(format_fields(fields), file=self.out, flush=True)

    def error(self, tp: object, action: str, exc: Exception) -> None:
        self.print({"partition": tp, "action": action, "status": "error", "error": exc})


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
    """Copy mode (see the module docstring)."""
    summary = Summary(action="copy")
    plans = plan_copies(ctx, targets, summary)
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
    """Expire mode (see the module docstring)."""
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
    """Delete-partitions mode (see the module docstring)."""
    summary = Summary(action="delete-partition")
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
    return summary


# ---------------------------------------------------------------------------- main
def run_tier(
    *,
    bootstrap_server: str,
    log_dir: Path | None,
    topic: str | None,
    dry_run: bool,
    expire: bool,
    delete_partitions_marked: bool,
    broker_config_path: Path | None,
    broker_id: int | None,
    remote_storage_manager: str | None,
    rsm_config: Sequence[str],
    progress: bool | None,
    out: TextIO,
    err: TextIO,
    clock: Clock = SYSTEM_CLOCK,
    run_timeout_s: float = RUN_TIMEOUT_S_DEFAULT,
) -> int:
    """Run the modes asked for (copy when neither ``expire`` nor ``delete_partitions_marked``);
    returns 1 if any partition failed. Raises ``TierRunTimeoutError`` past ``run_timeout_s``
    (the run goes on in a daemon thread: the caller exits the process)."""
    if not 0 < run_timeout_s <= RUN_TIMEOUT_S_MAX:
        raise ValueError(
            f"--run-timeout-s must be in (0, {RUN_TIMEOUT_S_MAX:g}], got {run_timeout_s}"
        )
    outcome: list[int] = []
    failure: list[BaseException] = []

    def body() -> None:
        try:
            outcome.append(
                _run_tier(
                    bootstrap_server=bootstrap_server,
                    log_dir=log_dir,
                    topic=topic,
                    dry_run=dry_run,
                    expire=expire,
                    delete_partitions_marked=delete_partitions_marked,
                    broker_config_path=broker_config_path,
                    broker_id=broker_id,
                    remote_storage_manager=remote_storage_manager,
                    rsm_config=rsm_config,
                    progress=progress,
                    out=out,
                    err=err,
                    clock=clock,
                )
            )
        except BaseException as exc:  # handed to the caller's thread
            failure.append(exc)

    worker = threading.Thread(target=body, name="tier-run", daemon=True)
    worker.start()
    worker.join(run_timeout_s)
    if worker.is_alive():
        broker_config = None if broker_config_path is None else KafkaConfig.load(broker_config_path)
        name, config = rsm_settings(broker_config, remote_storage_manager, rsm_config)
        store = {
            k: v
            for k, v in config.items()
            if k.endswith((".bucket.name", ".endpoint.url", ".storage.dir"))
        }
        raise TierRunTimeoutError(
            f"storage-core tier did not finish within --run-timeout-s={run_timeout_s:g}"
            f" (remote storage manager {name or 'LocalTieredStorage'} {store}): is the store"
            " answering? Segments left COPY_SEGMENT_STARTED are rolled back by"
            " `python -m jobs.reconcile` after the copy deadline; nothing was committed half-way"
        )
    if failure:
        raise failure[0]
    return outcome[0]


def _run_tier(
    *,
    bootstrap_server: str,
    log_dir: Path | None,
    topic: str | None,
    dry_run: bool,
    expire: bool,
    delete_partitions_marked: bool,
    broker_config_path: Path | None,
    broker_id: int | None,
    remote_storage_manager: str | None,
    rsm_config: Sequence[str],
    progress: bool | None,
    out: TextIO,
    err: TextIO,
    clock: Clock,
) -> int:
    broker_config = None if broker_config_path is None else KafkaConfig.load(broker_config_path)
    rsm_class_name, rsm_config_values = rsm_settings(
        broker_config, remote_storage_manager, rsm_config
    )
    copy = not expire and not delete_partitions_marked
    with KafkaCluster(bootstrap_server) as cluster:
        ctx = TierContext(
            cluster=cluster,
            bootstrap_server=bootstrap_server,
            broker_id=resolve_broker_id(broker_id, broker_config, cluster.refresh_metadata([])),
            rsm_class_name=rsm_class_name,
            rsm_config=rsm_config_values,
            out=out,
            err=err,
            dry_run=dry_run,
            progress=not dry_run and (progress if progress is not None else err.isatty()),
            clock=clock,
        )
        summaries: list[Summary] = []
        try:
            if copy or expire:
                dirs = log_dirs_of(log_dir, broker_config)
                action = "copy" if copy else "expire"
                targets = find_targets(
                    cluster, dirs, topic=topic, broker_id=ctx.broker_id, out=out, action=action
                )
                if copy:
                    summaries.append(copy_partitions(ctx, targets))
                if expire:
                    summaries.append(expire_partitions(ctx, targets))
            if delete_partitions_marked:
                summaries.append(delete_partitions(ctx, topic))
        finally:
            ctx.close()
    for summary in summaries:
        print(summary.line(), file=out, flush=True)
    return 1 if any(s.errors for s in summaries) else 0
