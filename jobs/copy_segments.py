"""copy_segments: tier every eligible closed segment of the partitions the given brokers lead.

    python -m jobs.copy_segments --bootstrap-server HOST:PORT
        (--broker-log-dirs ID=DIR[,DIR] ... | --broker-config server.properties [--log-dir DIR ...])
        [--num-work-units N] [--bytes-per-second B]
        [--copy-timeout-s S] [--run-timeout-s S] [--dry-run] [--summary-path PATH]

Which partitions: with ``--broker-log-dirs`` (one per broker, or
``STORAGE_CORE_BROKER_LOG_DIRS="1=/a;2=/b,/c"``), every partition of the remote-enabled
topics, read from its leader's log dirs wherever it leads; the partitions left out (no
leader, a leader whose dirs are not given, no directory in the leader's dirs) are listed
with their reason. Without it (``--log-dir``/``--broker-config``, ``--broker-id``), those
log dirs are one broker's and the run acts on what that broker leads.

Extract (driver): the partition directories (in the leaders' log dirs) whose topic has
``remote.storage.enable=true`` (DescribeConfigs) and whose leader is a broker of the map
(Metadata, which also gives the leader epoch the copies are fenced at and the leader's
host); the leader's log start offset, high watermark and last stable offset (ListOffsets,
the LSO at isolation level 1); the segments ``candidate_segments`` finds eligible (closed
and below the LSO: a segment holding an undecided transaction waits until it is decided).
Transform (pure): ``plan_work_units`` packs them by leader host, then by bytes, into work
units, one partition's segments always in one unit, oldest first. Load (executors, one Spark
task per unit, placed on its leader host when there are several: see Placement below): each
task builds its own remote storage manager and client-mode metadata manager from plain
settings, re-reads each partition directory, skips what is already remote, and runs
``copy_segment``: COPY_SEGMENT_STARTED -> upload -> verify -> COPY_SEGMENT_FINISHED.

Each copy has a deadline (``--copy-timeout-s`` from the attempt's start): it is checked
with the leader epoch before STARTED and before FINISHED, so a late or hung attempt never
commits and is rolled back. ``--run-timeout-s`` cancels the Spark job (interrupting the
tasks) when the copies take too long (counted from the job's submission: planning and the
Spark session's start are not included). A failed segment stops the rest of its
partition's chain (a later segment must not be committed before an earlier one). Each copy
is published as its partition's leader; a partition whose leader epoch moves during the run
is ``fenced`` (reported, not failed): the next run copies on from the new leader.

Concurrency: a run holds a lock per log dir (every log dir of the map, ``--lock-dir``) from
planning to its last event; a second run waits ``--lock-wait-s`` and then reports
``status=skipped``. Executors also skip a segment the metadata already shows as remote.
Running it again copies nothing.

Copy quota (KIP-956): the run copies at most ``remote.log.manager.copy.max.bytes.per.second``
for the whole cluster: the strictest value of the brokers (DescribeConfigs of each BROKER
resource: a broker's dynamic value, the cluster default set with ``kafka-configs
--entity-default``, or server.properties), or ``--bytes-per-second`` when given (the tiering
DAG's ``copy_max_bytes_per_second`` param); Kafka's default Long.MAX_VALUE is no quota. Kafka
applies the setting per broker; here the copies of all brokers run in one job, so it bounds
the run. Once Spark is up the rate is split over the units that run at once: each unit gets
``rate / min(units, spark default parallelism)`` and waits before each upload as Kafka's
RLMCopyTask waits on its quota (``storage_core.tiered.quota.copy_quota``, with the brokers'
``remote.log.manager.copy.quota.window.*``). The summary's details note ``copy_quota`` (rate,
source, units at once, each unit's share), ``copy_throttled_ms`` and the rates
(``upload_rate``: ``upload_bytes_per_second`` from the first upload's start to the last one's
end, ``copy_bytes_per_second`` over ``copy_s`` with the tasks' start-up).

Output: ``partition=<tp> event=planned|copied ...`` lines on stdout, progress on stderr, a
``summary`` line, and the JSON summary (counts: partitions, segments_planned,
segments_copied, segments_skipped, segments_fenced, segments_failed, partitions_skipped,
work_units; bytes: planned, copied; details: work_units (each with its partitions' leader
hosts and its preferred hosts), spark_start_s until the Spark session is up, copy_s of the
Spark job). Beside the summary, ``copied-segments.json`` lists each segment copied with the
HW and LSO it was planned with (``jobs.common.copied_segments``; the quality job checks it).

Placement: when the leaders sit on more than one host, the units group the chains by
leader host (``plan_work_units``) and each Spark task prefers its unit's leader host
(``located_rdd``: Spark waits up to ``spark.locality.wait`` for a slot there), so its reads
are local where a Spark executor runs beside the broker under the same host name. Either
way each task reads the leader's log dirs through the paths of the map (a mount on every
executor host, or the broker's own disk).
Exit code 0, or 1 when a segment failed or the run did.
"""

from __future__ import annotations

import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jobs.common import (
    COPY_TIMEOUT_S_DEFAULT,
    JobArgs,
    Progress,
    RunSummary,
    StoreSettings,
    deadline_fence,
    exclusive_run,
    job_parser,
    log_partition,
    parse_job_args,
    run_job,
    spark_session,
)
from jobs.common.clients import kafka_cluster, remote_log_metadata_client
from jobs.common.copied_segments import copied_segments_path, write_copied_segments
from jobs.common.discovery import lock_log_dirs, plan_led_partitions
from jobs.common.located_rdd import located_rdd
from jobs.planning.work_units import PlannedSegment, WorkUnit, plan_work_units, with_quota_shares
from storage_core.client.metadata import NO_LEADER
from storage_core.clock import SYSTEM_CLOCK, Clock
from storage_core.common import TopicPartition
from storage_core.errors import UnknownTopicOrPartitionError
from storage_core.tiered.operations import (
    LogView,
    PartitionTarget,
    SegmentView,
    StaleLeaderEpochError,
    candidate_segments,
    copy_segment,
    current_leader_epoch,
    highest_remote_offset,
)
from storage_core.tiered.quota.copy_quota import CopyQuota, CopyRate, describe_copy_rate
from storage_core.tiered.remote_log_metadata_manager import RemoteLogMetadataManager
from storage_core.tiered.remote_storage_manager import (
    RemoteStorageManager,
)

if TYPE_CHECKING:
    from pyspark import Accumulator

JOB = "copy_segments"
NUM_WORK_UNITS_DEFAULT = 8
RUN_TIMEOUT_S_DEFAULT = 3600.0
STATUS_POLL_S = 1.0


# ---------------------------------------------------------------------------- settings
@dataclass(frozen=True, slots=True, kw_only=True)
class CopySettings(StoreSettings):
    """What an executor needs, as plain (picklable) data."""

    copy_timeout_s: float
    # remote.log.manager.copy.quota.window.* as the brokers gave them (the quota's windows)
    copy_quota_windows: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class CopyOutcome:
    """What happened to one planned segment. ``status``: copied | skipped | fenced | failed."""

    partition: str
    base_offset: int
    end_offset: int
    status: str
    size_bytes: int
    seconds: float
    unit: int
    high_watermark_at_copy: int  # the HW (exclusive) the copy was planned with
    last_stable_offset_at_copy: int  # the LSO (exclusive) it was planned with: end_offset < it
    segment_id: str | None = None
    reason: str | None = None
    started_at_ms: int = 0  # when its attempt started (the clock of its executor)
    throttled_ms: int = 0  # waited on the copy quota before its upload


@dataclass(slots=True)
class PartitionResult:
    segments: int = 0
    size_bytes: int = 0
    skipped: int = 0
    fenced: int = 0
    failed: int = 0
    seconds: float = 0.0
    offsets: list[int] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)


# ---------------------------------------------------------------------------- extract
def extract_segments(args: JobArgs, summary: RunSummary) -> list[PlannedSegment]:
    """Every eligible segment of the partitions the map's brokers lead (driver side)."""

    def plan(
        target: PartitionTarget, view: LogView, rlmm: RemoteLogMetadataManager
    ) -> list[PlannedSegment]:
        segments = candidate_segments(view, rlmm, config=target.config)
        return [
            planned_segment(
                view,
                s,
                leader_epoch=target.leader_epoch,
                leader_id=target.leader_id,
                leader_host=target.leader_host,
            )
            for s in segments
        ]

    return plan_led_partitions(args, summary, job=JOB, plan=plan)


def planned_segment(
    view: LogView,
    segment: SegmentView,
    *,
    leader_epoch: int,
    leader_id: int,
    leader_host: str | None = None,
) -> PlannedSegment:
    if segment.next_base_offset is None or view.topic_id is None:
        raise ValueError(f"{view.topic_partition}: segment {segment.base_offset} is not copyable")
    return PlannedSegment(
        partition=str(view.topic_partition),
        topic=view.topic_partition.topic,
        partition_index=view.topic_partition.partition,
        topic_id=str(view.topic_id),
        directory=str(view.directory),
        base_offset=segment.base_offset,
        next_base_offset=segment.next_base_offset,
        size_bytes=segment.size_bytes,
        leader_epoch=leader_epoch,
        log_start_offset=view.log_start_offset,
        high_watermark=view.high_watermark,
        last_stable_offset=view.stable_offset,
        leader_id=leader_id,
        leader_host=leader_host,
    )


# ---------------------------------------------------------------------------- executors
def copy_chain(
    chain: Sequence[PlannedSegment],
    *,
    rsm: RemoteStorageManager,
    rlmm: RemoteLogMetadataManager,
    leader_epoch_reader: Callable[[TopicPartition], Callable[[], int]],
    broker_id: int,
    copy_timeout_s: float,
    unit: int = 0,
    clock: Clock = SYSTEM_CLOCK,
    before_copy: Callable[[int], int] = lambda size_bytes: 0,
) -> Iterator[CopyOutcome]:
    """Copy one partition's planned segments, oldest first, publishing as ``broker_id``; the
    first failure stops it, and so does a leader epoch that moved on (``fenced``: not a
    failure, the new leader's run copies on). ``before_copy(size_bytes)`` runs right before
    each upload (the copy quota's wait)."""
    view: LogView | None = None
    stop_reason: str | None = None
    for planned in chain:
        started = time.monotonic()
        started_at_ms = clock.milliseconds()

        def outcome(
            status: str,
            reason: str | None = None,
            *,
            segment_id: str | None = None,
            throttled_ms: int = 0,
            planned: PlannedSegment = planned,
            started: float = started,
            started_at_ms: int = started_at_ms,
        ) -> CopyOutcome:
            return CopyOutcome(
                partition=planned.partition,
                base_offset=planned.base_offset,
                end_offset=planned.end_offset,
                status=status,
                size_bytes=planned.size_bytes,
                seconds=round(time.monotonic() - started, 3),
                unit=unit,
                high_watermark_at_copy=planned.high_watermark,
                last_stable_offset_at_copy=(
                    planned.high_watermark
                    if planned.last_stable_offset is None
                    else planned.last_stable_offset
                ),
                segment_id=segment_id,
                reason=reason,
                started_at_ms=started_at_ms,
                throttled_ms=throttled_ms,
            )

        if stop_reason is not None:
            yield outcome("skipped", stop_reason)
            continue
        try:
            if view is None:
                view = LogView.read(
                    Path(planned.directory),
                    high_watermark=planned.high_watermark,
                    log_start_offset=planned.log_start_offset,
                    last_stable_offset=planned.last_stable_offset,
                )
                if str(view.topic_id) != planned.topic_id:
                    raise UnknownTopicOrPartitionError(
                        f"{planned.directory} now holds topic id {view.topic_id}, planned"
                        f" with {planned.topic_id}: the topic was recreated; not copied"
                    )
            segment = view.segment(planned.base_offset)
            if segment is None or segment.next_base_offset != planned.next_base_offset:
                stop_reason = "the segment changed or is gone since planning"
                yield outcome("skipped", stop_reason)
                continue
            if highest_remote_offset(view, rlmm).offset >= segment.end_offset:
                yield outcome("skipped", "already remote")
                continue
            tp = view.topic_partition
            fence = deadline_fence(
                topic_partition=tp,
                planned_leader_epoch=planned.leader_epoch,
                current_leader_epoch=leader_epoch_reader(tp),
                deadline_ms=clock.milliseconds() + int(copy_timeout_s * 1000),
                clock=clock,
                what=f"the copy of segment {segment.base_offset}",
            )
            throttled_ms = before_copy(segment.size_bytes)
            result = copy_segment(
                view, segment, rsm=rsm, rlmm=rlmm, fence=fence, broker_id=broker_id, clock=clock
            )
        except StaleLeaderEpochError as exc:
            # The leader moved during the run: its new leader's run copies on from here.
            stop_reason = "the partition's leader moved during the run"
            yield outcome("fenced", " ".join(str(exc).split()))
            continue
        except Exception as exc:
            stop_reason = f"segment {planned.base_offset} of the partition failed"
            yield outcome("failed", f"{type(exc).__name__}: {' '.join(str(exc).split())}")
            continue
        yield outcome(
            "copied",
            segment_id=str(result.metadata.remote_log_segment_id.id),
            throttled_ms=throttled_ms,
        )


def copy_work_units(units: Iterable[WorkUnit], settings: CopySettings) -> Iterator[dict[str, Any]]:
    """A Spark task: copy the segments of its work unit(s) with its own clients, each upload
    waiting on the unit's share of the copy quota (``CopyQuota``) first."""
    for unit in units:
        rsm = settings.remote_storage_manager()
        cluster = kafka_cluster(settings)
        rlmm = remote_log_metadata_client(settings)
        quota = CopyQuota.of(unit.bytes_per_second, dict(settings.copy_quota_windows))
        try:
            chains: dict[str, list[PlannedSegment]] = {}
            for segment in unit.segments:
                chains.setdefault(segment.partition, []).append(segment)
            for chain in chains.values():
                for outcome in copy_chain(
                    chain,
                    rsm=rsm,
                    rlmm=rlmm,
                    leader_epoch_reader=partial(current_leader_epoch, cluster),
                    broker_id=chain[0].leader_id,
                    copy_timeout_s=settings.copy_timeout_s,
                    unit=unit.index,
                    before_copy=quota.acquire if quota is not None else lambda size_bytes: 0,
                ):
                    yield asdict(outcome)
        finally:
            rlmm.close()
            cluster.close()
            rsm.close()


def run_on_spark(
    args: JobArgs,
    units: Sequence[WorkUnit],
    settings: CopySettings,
    run_timeout_s: float,
    summary: RunSummary,
    *,
    copy_rate: CopyRate | None = None,
) -> list[dict[str, Any]]:
    """One Spark task per unit; progress from the status tracker (units done) and an
    accumulator (bytes copied, added as each task finishes); cancelled on timeout. The last
    progress line counts the bytes from the results (an accumulator counts a retried task's
    bytes twice).

    The copy rate is split over the units Spark runs at once: each gets ``rate / min(units,
    Spark's default parallelism)`` (its task slots), so the run as a whole copies at the rate.

    Notes ``spark_start_s`` (until the session is up), ``copy_s`` (the Spark job),
    ``copy_quota`` and the rates (``upload_rate``) in the summary's details."""
    progress = Progress(JOB, len(units))
    spark_started = time.monotonic()
    with spark_session(JOB, args.spark_master) as spark:
        copy_started = time.monotonic()
        summary.details["spark_start_s"] = round(copy_started - spark_started, 3)
        sc = spark.sparkContext
        units = note_copy_quota(summary, units, copy_rate, sc.defaultParallelism)
        group = f"{JOB}-{uuid.uuid4().hex}"
        sc.setJobGroup(group, f"{JOB}: {len(units)} work units", interruptOnCancel=True)
        timed_out = threading.Event()
        finished = threading.Event()
        copied_bytes = sc.accumulator(0)

        def watch() -> None:
            deadline = time.monotonic() + run_timeout_s
            while not finished.wait(STATUS_POLL_S):
                tracker = sc.statusTracker()
                done = 0
                for job_id in tracker.getJobIdsForGroup(group):
                    job = tracker.getJobInfo(job_id)
                    for stage_id in job.stageIds if job is not None else []:
                        stage = tracker.getStageInfo(stage_id)
                        done += stage.numCompletedTasks if stage is not None else 0
                progress.advance(done - progress.done, copied_bytes.value - progress.size_bytes)
                if time.monotonic() > deadline:
                    timed_out.set()
                    sc.cancelJobGroup(group)
                    return

        watcher = threading.Thread(target=watch, name=f"{JOB}-progress", daemon=True)
        watcher.start()
        try:
            rdd = located_rdd(sc, list(units), [u.preferred_hosts for u in units])
            task = partial(counting_copied_bytes, settings=settings, copied_bytes=copied_bytes)
            results = rdd.mapPartitions(task).collect()
        except Exception as exc:
            if timed_out.is_set():
                raise TimeoutError(
                    f"the copies passed --run-timeout-s={run_timeout_s:g}; their Spark job was"
                    " cancelled (copies that had not finished are not committed)"
                ) from exc
            raise
        finally:
            finished.set()
            watcher.join()
            summary.details["copy_s"] = round(time.monotonic() - copy_started, 3)
    summary.details.update(upload_rate(results, summary.details["copy_s"]))
    progress.advance(len(units) - progress.done, bytes_copied(results) - progress.size_bytes)
    progress.finish()
    return results


def upload_rate(outcomes: Sequence[Mapping[str, Any]], copy_s: float) -> dict[str, Any]:
    """The run's copy rates: ``copy_bytes_per_second`` (bytes copied / the Spark job's time,
    task start-up included), ``upload_s`` (from the first copy's start to the last one's end)
    with ``upload_bytes_per_second``, and ``copy_throttled_ms`` (waits on the copy quota)."""
    copied = [o for o in outcomes if o["status"] == "copied"]
    size_bytes = bytes_copied(copied)
    rates: dict[str, Any] = {"copy_throttled_ms": sum(o["throttled_ms"] for o in outcomes)}
    if copy_s > 0:
        rates["copy_bytes_per_second"] = round(size_bytes / copy_s, 1)
    if copied:
        first_ms = min(o["started_at_ms"] for o in copied)
        last_ms = max(o["started_at_ms"] + o["seconds"] * 1000 for o in copied)
        upload_s = (last_ms - first_ms) / 1000
        rates["upload_s"] = round(upload_s, 3)
        if upload_s > 0:
            rates["upload_bytes_per_second"] = round(size_bytes / upload_s, 1)
    return rates


def note_copy_quota(
    summary: RunSummary, units: Sequence[WorkUnit], copy_rate: CopyRate | None, task_slots: int
) -> list[WorkUnit]:
    """The units with their share of the copy rate (``with_quota_shares``), noted in the
    summary's details (``copy_quota``, and each work unit's ``bytes_per_second``)."""
    rate = None if copy_rate is None else copy_rate.bytes_per_second
    concurrent_units = max(1, min(len(units), task_slots))
    shared = with_quota_shares(units, rate, concurrent_units)
    summary.details["copy_quota"] = {
        "bytes_per_second": rate,
        "source": "default" if copy_rate is None else copy_rate.source,
        "concurrent_units": concurrent_units,
        "unit_bytes_per_second": shared[0].bytes_per_second if shared else None,
    }
    for unit, detail in zip(shared, summary.details.get("work_units", []), strict=False):
        detail["bytes_per_second"] = unit.bytes_per_second
    return shared


def counting_copied_bytes(
    units: Iterable[WorkUnit], settings: CopySettings, copied_bytes: Accumulator[int]
) -> Iterator[dict[str, Any]]:
    """``copy_work_units``, adding the bytes of each segment copied to ``copied_bytes``."""
    for outcome in copy_work_units(units, settings):
        copied_bytes.add(bytes_copied([outcome]))
        yield outcome


def bytes_copied(outcomes: Iterable[Mapping[str, Any]]) -> int:
    """The bytes of the segments copied (not those skipped, fenced or failed)."""
    return sum(o["size_bytes"] for o in outcomes if o["status"] == "copied")


# ---------------------------------------------------------------------------- load
def record_results(summary: RunSummary, outcomes: Iterable[dict[str, Any]]) -> None:
    """Per-partition lines and summary entries from the executors' outcomes."""
    by_partition: dict[str, PartitionResult] = {}
    for item in outcomes:
        result = by_partition.setdefault(item["partition"], PartitionResult())
        result.seconds += item["seconds"]
        if item["status"] == "copied":
            result.segments += 1
            result.size_bytes += item["size_bytes"]
            result.offsets += [item["base_offset"], item["end_offset"]]
        elif item["status"] == "skipped":
            result.skipped += 1
        elif item["status"] == "fenced":
            result.fenced += 1
            result.reasons.append(f"segment {item['base_offset']}: {item['reason']}")
        else:
            result.failed += 1
            result.errors.append(f"segment {item['base_offset']}: {item['reason']}")
    for partition, result in sorted(by_partition.items()):
        status = "error" if result.failed else "fenced" if result.fenced else "ok"
        offsets = f"{min(result.offsets)}..{max(result.offsets)}" if result.offsets else "-"
        fields: dict[str, Any] = {
            "segments": result.segments,
            "bytes": result.size_bytes,
            "skipped": result.skipped,
            "fenced": result.fenced,
            "failed": result.failed,
            "offsets": offsets,
            "seconds": round(result.seconds, 3),
        }
        log_partition("copied", partition, job=JOB, status=status, **fields)
        summary.partition(
            partition, status, **fields, errors=result.errors, fenced_by=result.reasons
        )
        summary.count("segments_copied", result.segments)
        summary.count("segments_skipped", result.skipped)
        summary.count("segments_fenced", result.fenced)
        summary.count("segments_failed", result.failed)
        summary.add_bytes("copied", result.size_bytes)
        for error in result.errors:
            summary.error(error, partition)


def report_plan(summary: RunSummary, units: Sequence[WorkUnit]) -> None:
    for unit in units:
        chains: dict[str, list[PlannedSegment]] = {}
        for segment in unit.segments:
            chains.setdefault(segment.partition, []).append(segment)
        for partition, chain in chains.items():
            size = sum(s.size_bytes for s in chain)
            log_partition(
                "planned",
                partition,
                job=JOB,
                unit=unit.index,
                segments=len(chain),
                bytes=size,
                offsets=f"{chain[0].base_offset}..{chain[-1].end_offset}",
                leader_epoch=chain[0].leader_epoch,
                leader=chain[0].leader_id,
                leader_host=chain[0].leader_host or "-",
                preferred_hosts=",".join(unit.preferred_hosts) or "-",
            )
            summary.count("partitions")
            if summary.dry_run:
                summary.partition(
                    partition,
                    "planned",
                    segments=len(chain),
                    bytes=size,
                    offsets=[[s.base_offset, s.end_offset] for s in chain],
                )
    summary.count("work_units", len(units))
    summary.count("segments_planned", sum(len(u.segments) for u in units))
    summary.add_bytes("planned", sum(u.size_bytes for u in units))
    summary.details["work_units"] = [
        {
            "index": u.index,
            "partitions": list(u.partitions),
            "segments": len(u.segments),
            "bytes": u.size_bytes,
            "bytes_per_second": u.bytes_per_second,
            "leader_hosts": list(u.leader_hosts),
            "preferred_hosts": list(u.preferred_hosts),
        }
        for u in units
    ]


# ---------------------------------------------------------------------------- main
def run(args: JobArgs, summary: RunSummary) -> None:
    with exclusive_run(args, lock_log_dirs(args), summary) as ours:
        if not ours:
            return
        segments = extract_segments(args, summary)
        with kafka_cluster(args) as cluster:
            copy_rate = describe_copy_rate(cluster, args.optional_float_option("bytes_per_second"))
        units = plan_work_units(
            segments, args.int_option("num_work_units"), copy_rate.bytes_per_second
        )
        report_plan(summary, units)
        if args.dry_run or not units:
            return
        # Each chain publishes as its partition's leader (``PlannedSegment.leader_id``).
        settings = CopySettings.of(
            args,
            NO_LEADER,
            copy_timeout_s=args.float_option("copy_timeout_s"),
            copy_quota_windows=tuple(sorted(copy_rate.window_props.items())),
        )
        results = run_on_spark(
            args, units, settings, args.float_option("run_timeout_s"), summary, copy_rate=copy_rate
        )
        record_results(summary, results)
        if args.summary_path is not None:
            path = copied_segments_path(args.summary_path)
            write_copied_segments(path, job=JOB, started=summary.started, outcomes=results)


def positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise ValueError(text)
    return value


def main(argv: list[str] | None = None) -> int:
    parser = job_parser(JOB, __doc__)
    own = parser.add_argument_group(f"{JOB} options")
    own.add_argument(
        "--num-work-units",
        type=int,
        default=NUM_WORK_UNITS_DEFAULT,
        help=f"Spark tasks to spread the copies over (default {NUM_WORK_UNITS_DEFAULT})",
    )
    own.add_argument(
        "--bytes-per-second",
        type=positive_float,
        default=None,
        help="the whole run's upload rate, bytes per second, over the brokers'"
        " remote.log.manager.copy.max.bytes.per.second (default: the strictest broker's value;"
        " none when no broker sets one)",
    )
    own.add_argument(
        "--copy-timeout-s",
        type=positive_float,
        default=COPY_TIMEOUT_S_DEFAULT,
        help=f"each segment copy's deadline (default {COPY_TIMEOUT_S_DEFAULT:g})",
    )
    own.add_argument(
        "--run-timeout-s",
        type=positive_float,
        default=RUN_TIMEOUT_S_DEFAULT,
        help="cancel the Spark job of copies this long after submitting it"
        f" (default {RUN_TIMEOUT_S_DEFAULT:g})",
    )
    args = parse_job_args(parser, argv, job=JOB)
    if args.int_option("num_work_units") < 1:
        parser.error("--num-work-units must be >= 1")
    return run_job(args, partial(run, args))


if __name__ == "__main__":
    sys.exit(main())
