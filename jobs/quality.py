"""``python -m jobs.quality``: build the quality tables and run the Great Expectations suites.

Extract (driver): the object listing of the remote store (``list_objects`` of the RSM), then
every event of ``__remote_log_metadata`` (read from the beginning up to its end, with each
record's append time), then per remote-enabled partition of the log dirs its offsets
(ListOffsets -2 / -1 / -5 on the leader, the local log start, LEO and leader-epoch chain from
a read-only ``LogView``) and its retention configs (DescribeConfigs). The listing is taken
before the events so that a copy running meanwhile cannot look like orphaned objects; run the
job after, not during, copy and delete jobs (the DAGs order them).

Transform: the pure builders of ``jobs.tables`` (schemas in ``jobs.tables.schemas``); the rows
become Spark DataFrames. Validate: the suites of ``expectations`` in a file-mode GE context
under ``--report-dir``; Data Docs at ``<report-dir>/gx/uncommitted/data_docs/local_site/
index.html``. Output: ``<report-dir>/quality-summary.json`` (per suite: success and failed
expectations with reasons) and the run summary (``--summary-path``) with the same under
``details.suites``. Exit 1 if any suite fails, printing the failing expectations and the
Data Docs path on stderr.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from jobs.common import (
    JobArgs,
    RunSummary,
    job_parser,
    log_partition,
    parse_job_args,
    run_job,
    spark_session,
)
from jobs.common.summary import write_json_atomically
from jobs.tables import (
    MetadataRecord,
    PartitionState,
    RemoteObjectInfo,
    build_partition_offsets,
    build_remote_segments,
    row_tuples,
    spark_ddl,
)
from jobs.tables.schemas import Row
from storage_core.client.admin import KafkaAdminClient
from storage_core.client.cluster import KafkaCluster
from storage_core.client.consumer import KafkaConsumer
from storage_core.errors import StorageError
from storage_core.tiered.metadata import serde
from storage_core.tiered.metadata.errors import CorruptRemoteLogMetadataError
from storage_core.tiered.operations import LogView, partition_dirs, topic_log_config
from storage_core.tiered.remote_storage_manager import load_remote_storage_manager
from storage_core.tiered.topic_based_rlmm.config import REMOTE_LOG_METADATA_TOPIC_NAME
from storage_core.tiered.topic_based_rlmm.topic_scan import scan_metadata_topic

JOB = "quality"
LATEST_TIERED_TIMESTAMP = -5  # ListOffsets: the highest offset in remote storage
DEFAULT_REPORT_DIR = Path("quality-report")
SUMMARY_FILE = "quality-summary.json"


def read_metadata_records(cluster: KafkaCluster) -> list[MetadataRecord]:
    """Every record of ``__remote_log_metadata`` from its start to its current end."""
    records: list[MetadataRecord] = []
    for record in scan_metadata_topic(cluster, missing_ok=True):
        try:
            event = serde.deserialize(record.value)
        except CorruptRemoteLogMetadataError as exc:
            log_partition(
                "skipped-record", f"{REMOTE_LOG_METADATA_TOPIC_NAME}-{record.partition}", error=exc
            )
            continue
        records.append(
            MetadataRecord(
                partition=record.partition,
                offset=record.offset,
                timestamp_ms=record.timestamp_ms,
                event=event,
            )
        )
    return records


def read_partition_states(cluster: KafkaCluster, args: JobArgs) -> list[PartitionState]:
    """Offsets, chain and retention of every remote-enabled partition of the log dirs."""
    found = [item for d in args.require_log_dirs() for item in partition_dirs(d, args.topic)]
    admin = KafkaAdminClient(cluster)
    consumer = KafkaConsumer(cluster)
    configs: dict[str, Any] = {}
    states = []
    for tp, directory in found:
        if tp.topic not in configs:
            try:
                configs[tp.topic] = topic_log_config(admin, tp.topic)
            except StorageError:
                configs[tp.topic] = None
        config = configs[tp.topic]
        if config is None or not config.remote_storage_enable:
            continue
        log_start = consumer.earliest_offset(tp.topic, tp.partition)
        high_watermark = consumer.latest_offset(tp.topic, tp.partition)
        try:
            tiered = consumer.list_offset(tp.topic, tp.partition, LATEST_TIERED_TIMESTAMP)
            highest_remote: int | None = tiered.offset
        except StorageError:
            highest_remote = None
        view = LogView.read(directory, high_watermark=high_watermark, log_start_offset=log_start)
        if view.topic_id is None:
            log_partition("skipped", tp, reason="no partition.metadata (topic id)")
            continue
        states.append(
            PartitionState(
                topic=tp.topic,
                partition=tp.partition,
                topic_id=view.topic_id,
                log_start_offset=view.log_start_offset,
                local_log_start_offset=view.local_log_start_offset,
                high_watermark=view.high_watermark,
                last_stable_offset=view.last_stable_offset,
                log_end_offset=view.log_end_offset,
                highest_remote_offset=highest_remote,
                leader_epoch_chain=tuple((e.epoch, e.start_offset) for e in view.epoch_entries),
                retention_ms=config.retention_ms,
                retention_bytes=config.retention_bytes,
                segment_bytes=config.segment_bytes,
            )
        )
    return states


def gather(args: JobArgs) -> tuple[list[Row], list[Row]]:
    """Extract and transform: the two tables' rows."""
    rsm = load_remote_storage_manager(args.rsm_class_name, dict(args.rsm_config))
    try:
        list_objects = getattr(rsm, "list_objects", None)
        if list_objects is None:
            raise StorageError(f"{type(rsm).__name__} cannot list its objects (no list_objects)")
        objects: list[RemoteObjectInfo] = list(list_objects())
        key_prefix = str(getattr(rsm, "prefix", ""))
    finally:
        rsm.close()
    now_ms = int(time.time() * 1000)
    with KafkaCluster(args.bootstrap_server) as cluster:
        records = read_metadata_records(cluster)
        partitions = read_partition_states(cluster, args)
    segments = build_remote_segments(
        records, objects, partitions, now_ms=now_ms, key_prefix=key_prefix
    )
    offsets = build_partition_offsets(partitions, records, segments, now_ms=now_ms)
    return segments, offsets


def cluster_label(bootstrap_server: str) -> str:
    """``cluster <id> (<bootstrap server>)``, how the Data Docs name the validated data."""
    try:
        with KafkaCluster(bootstrap_server) as cluster:
            cluster_id = cluster.metadata().cluster_id
    except StorageError:
        cluster_id = None
    return f"cluster {cluster_id or '?'} ({bootstrap_server})"


def run(args: JobArgs, summary: RunSummary) -> None:
    from expectations.runner import QualityContext  # noqa: PLC0415 - GE imports take seconds

    report_dir = Path(str(args.options.get("report_dir") or DEFAULT_REPORT_DIR)).resolve()
    segments, offsets = gather(args)
    summary.count("remote_segments", len(segments))
    summary.count("partitions", len(offsets))
    tables = {"remote_segments": segments, "partition_offsets": offsets}
    with spark_session("quality", args.spark_master) as spark:
        context = QualityContext(
            report_dir,
            engine="spark",
            started_state_max_ms=int(str(args.options["started_state_max_ms"])),
            delete_pending_max_ms=int(str(args.options["delete_pending_max_ms"])),
        )
        run_name = str(args.options.get("run_name") or "") or None
        source = cluster_label(args.bootstrap_server)
        outcomes = {
            table: context.validate(
                table,
                spark.createDataFrame(row_tuples(table, rows), spark_ddl(table)),
                run_name=run_name,
                source=source,
            )
            for table, rows in tables.items()
        }
    docs = context.data_docs_index
    report = {
        "success": all(o.success for o in outcomes.values()),
        "data_docs": str(docs),
        "suites": {name: o.to_dict() for name, o in outcomes.items()},
    }
    write_json_atomically(report_dir / SUMMARY_FILE, report)
    summary.details.update(report)
    for outcome in outcomes.values():
        summary.count("failed_expectations", len(outcome.failed))
        for failed in outcome.failed:
            summary.error(f"{outcome.suite}: {failed.reason}")
            print(f"quality: FAILED {outcome.suite}: {failed.reason}", file=sys.stderr)
    status = "passed" if report["success"] else "FAILED"
    print(f"quality: suites {status}; Data Docs: {docs}", file=sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = job_parser(JOB, __doc__)
    own = parser.add_argument_group("quality")
    own.add_argument(
        "--report-dir",
        type=Path,
        default=DEFAULT_REPORT_DIR,
        help="GE context, Data Docs and quality-summary.json (default ./quality-report)",
    )
    own.add_argument(
        "--started-state-max-ms",
        type=int,
        default=30 * 60 * 1000,
        help="a segment in a *_STARTED state longer than this fails the suite (default 30 min)",
    )
    own.add_argument(
        "--delete-pending-max-ms",
        type=int,
        default=24 * 60 * 60 * 1000,
        help="a partition deletion pending longer than this fails the suite (default 1 day)",
    )
    own.add_argument(
        "--run-name",
        default=None,
        help="the run's name in the Data Docs, e.g. the DAG run (default: none)",
    )
    args = parse_job_args(parser, argv, job=JOB)
    return run_job(args, lambda summary: run(args, summary))


if __name__ == "__main__":
    sys.exit(main())
