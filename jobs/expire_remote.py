"""expire_remote: delete remote segments past retention, below the log start offset, or
off the leader-epoch lineage, for the partitions the given brokers lead.

    python -m jobs.expire_remote --bootstrap-server HOST:PORT
        (--broker-log-dirs ID=DIR[,DIR] ... | --broker-config server.properties [--log-dir DIR ...])
        [--topic T] [--num-work-units N] [--dry-run] [--summary-path PATH]

Extract (driver): the same partitions as ``copy_segments`` (remote storage on; with
``--broker-log-dirs`` every partition read from its leader's log dirs, else those this
broker leads; the leader epoch from Metadata, log start and high watermark from
ListOffsets).
Plan (driver, pure over what was read): the library's ``plan_expiry`` per partition:
``retention.ms``, ``retention.bytes``, the log start offset, segments before or off the
leader-epoch lineage, and deletions that started earlier and did not finish. Load
(executors, partitions packed by bytes into work units, placed wherever Spark likes: unlike
``copy_segments``' tasks they read no log dir, only the remote tier and the metadata
topic, so a leader's host gains them nothing): ``delete_expired_segments``:
DELETE_SEGMENT_STARTED -> delete the objects -> DELETE_SEGMENT_FINISHED per segment,
published as the partition's leader and fenced by its leader epoch; a failed segment is
reported and the others go on. A partition whose leader moved during the run is reported
``fenced`` (not failed): the new leader's next run expires it.

``--dry-run`` prints one ``plan`` line per segment (what, why, bytes) and a ``planned``
line per partition, writes the plan into the summary, and changes nothing.

Concurrency: one run per log dir (every log dir of the map) at a time (``--lock-dir``,
``--lock-wait-s``; a second run reports ``status=skipped``). Deleting is idempotent: a
segment already deleted is no longer listed, one whose deletion stopped half-way is retried
(DELETE_RETRY).

Summary counts: partitions, partitions_skipped, partitions_fenced, segments_planned,
segments_deleted, segments_failed, work_units; bytes: planned, deleted. Exit code 0, or 1
when a deletion or the run failed."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator, Sequence
from functools import partial
from typing import Any

from jobs.common import (
    JobArgs,
    Progress,
    RunSummary,
    StoreSettings,
    exclusive_run,
    job_parser,
    log_line,
    log_partition,
    parse_job_args,
    run_job,
    spark_session,
)
from jobs.common.clients import kafka_cluster, remote_log_metadata_client
from jobs.common.discovery import lock_log_dirs, plan_led_partitions
from jobs.planning.expiry_plan import PartitionExpiry, describe_expiry, plan_expiry_units
from storage_core.client.metadata import NO_LEADER
from storage_core.clock import SYSTEM_CLOCK
from storage_core.common import TopicPartition
from storage_core.tiered.operations import (
    LeaderEpochFence,
    LogView,
    PartitionTarget,
    StaleLeaderEpochError,
    current_leader_epoch,
    delete_expired_segments,
    plan_expiry,
)
from storage_core.tiered.remote_log_metadata_manager import RemoteLogMetadataManager

JOB = "expire_remote"
NUM_WORK_UNITS_DEFAULT = 4


# ---------------------------------------------------------------------------- extract + plan
def extract_plans(args: JobArgs, summary: RunSummary) -> list[PartitionExpiry]:
    """The expiry plan of each remote-enabled partition a broker of the map leads (driver
    side)."""
    now_ms = SYSTEM_CLOCK.milliseconds()

    def plan(
        target: PartitionTarget, view: LogView, rlmm: RemoteLogMetadataManager
    ) -> list[PartitionExpiry]:
        tp = target.topic_partition
        expiry = plan_expiry(view, rlmm, config=target.config, now_ms=now_ms)
        return [
            PartitionExpiry(
                partition=str(tp),
                topic=tp.topic,
                partition_index=tp.partition,
                leader_epoch=target.leader_epoch,
                plan=expiry,
                leader_id=target.leader_id,
                leader_host=target.leader_host,
            )
        ]

    return plan_led_partitions(args, summary, job=JOB, plan=plan)


def report_plans(summary: RunSummary, plans: Sequence[PartitionExpiry]) -> None:
    for item in plans:
        rows = describe_expiry(item.partition, item.plan)
        for row in rows:
            log_line("plan", {"action": "expire", **row})
        new_start = item.plan.log_start_offset
        log_partition(
            "planned",
            item.partition,
            job=JOB,
            segments=len(rows),
            bytes=item.size_bytes,
            remote_bytes=item.plan.remote_size_bytes,
            log_start_offset="-" if new_start is None else new_start,
        )
        summary.count("partitions")
        summary.count("segments_planned", len(rows))
        summary.add_bytes("planned", item.size_bytes)
        if summary.dry_run:
            summary.partition(
                item.partition,
                "planned",
                segments=len(rows),
                bytes=item.size_bytes,
                log_start_offset=new_start,
                plan=rows,
            )


# ---------------------------------------------------------------------------- executors
def expire_work_units(
    units: Iterable[list[PartitionExpiry]], settings: StoreSettings
) -> Iterator[dict[str, Any]]:
    """A Spark task: run its partitions' deletions with its own clients."""
    for unit in units:
        rsm = settings.remote_storage_manager()
        cluster = kafka_cluster(settings)
        rlmm = remote_log_metadata_client(settings)
        try:
            for item in unit:
                tp = TopicPartition(item.topic, item.partition_index)
                fence = LeaderEpochFence(
                    planned_leader_epoch=item.leader_epoch,
                    current_leader_epoch=current_leader_epoch(cluster, tp),
                )
                try:
                    outcome = delete_expired_segments(
                        item.plan, rsm=rsm, rlmm=rlmm, fence=fence, broker_id=item.leader_id
                    )
                except StaleLeaderEpochError as exc:
                    # The leader moved during the run: the new leader's run expires from here.
                    yield {
                        "partition": item.partition,
                        "deleted": 0,
                        "bytes": 0,
                        "errors": [],
                        "fenced": " ".join(str(exc).split()),
                    }
                    continue
                except Exception as exc:
                    yield {
                        "partition": item.partition,
                        "deleted": 0,
                        "bytes": 0,
                        "errors": [f"{type(exc).__name__}: {' '.join(str(exc).split())}"],
                    }
                    continue
                yield {
                    "partition": item.partition,
                    "deleted": len(outcome.deleted),
                    "bytes": sum(d.metadata.segment_size_in_bytes for d in outcome.deleted),
                    "errors": [
                        f"segment {failed.metadata.remote_log_segment_id.id}"
                        f" [{failed.metadata.start_offset}, {failed.metadata.end_offset}]:"
                        f" {type(exc).__name__}: {' '.join(str(exc).split())}"
                        for failed, exc in outcome.failed
                    ],
                }
        finally:
            rlmm.close()
            cluster.close()
            rsm.close()


def record_results(
    summary: RunSummary, plans: Sequence[PartitionExpiry], results: Iterable[dict[str, Any]]
) -> None:
    by_name = {p.partition: p for p in plans}
    for result in sorted(results, key=lambda r: str(r["partition"])):
        partition = result["partition"]
        errors: list[str] = result["errors"]
        fenced: str | None = result.get("fenced")
        status = "error" if errors else "fenced" if fenced else "ok"
        new_start = by_name[partition].plan.log_start_offset
        fields: dict[str, Any] = {
            "deleted": result["deleted"],
            "failed": len(errors),
            "bytes": result["bytes"],
            "log_start_offset": "-" if new_start is None else new_start,
        }
        if fenced:
            fields["reason"] = fenced
            summary.count("partitions_fenced")
        log_partition("expired", partition, job=JOB, status=status, **fields)
        summary.partition(partition, status, **fields, errors=errors)
        summary.count("segments_deleted", result["deleted"])
        summary.count("segments_failed", len(errors))
        summary.add_bytes("deleted", result["bytes"])
        for error in errors:
            summary.error(error, partition)


# ---------------------------------------------------------------------------- main
def run(args: JobArgs, summary: RunSummary) -> None:
    with exclusive_run(args, lock_log_dirs(args), summary) as ours:
        if not ours:
            return
        plans = extract_plans(args, summary)
        report_plans(summary, plans)
        units = plan_expiry_units(plans, args.int_option("num_work_units"))
        summary.count("work_units", len(units))
        if args.dry_run or not units:
            return
        # Each partition's deletions publish as its leader (``PartitionExpiry.leader_id``).
        settings = StoreSettings.of(args, NO_LEADER)
        progress = Progress(JOB, len(units))
        with spark_session(JOB, args.spark_master) as spark:
            rdd = spark.sparkContext.parallelize(units, len(units))
            results = rdd.mapPartitions(partial(expire_work_units, settings=settings)).collect()
        progress.advance(len(units), sum(r["bytes"] for r in results))
        progress.finish()
        record_results(summary, plans, results)


def main(argv: list[str] | None = None) -> int:
    parser = job_parser(JOB, __doc__)
    own = parser.add_argument_group(f"{JOB} options")
    own.add_argument(
        "--num-work-units",
        type=int,
        default=NUM_WORK_UNITS_DEFAULT,
        help=f"Spark tasks to spread the deletions over (default {NUM_WORK_UNITS_DEFAULT})",
    )
    args = parse_job_args(parser, argv, job=JOB)
    if args.int_option("num_work_units") < 1:
        parser.error("--num-work-units must be >= 1")
    return run_job(args, partial(run, args))


if __name__ == "__main__":
    sys.exit(main())
