"""``python -m jobs.quality``: build the quality tables and run the Great Expectations suites.

Extract (driver): the object listing of the remote store (``list_objects`` of the RSM), then
every event of ``__remote_log_metadata`` (read from the beginning up to its end, with each
record's append time), then per remote-enabled partition its offsets (ListOffsets -2 / -1 /
-5 on the leader, the local log start, LEO and leader-epoch chain from a read-only
``LogView`` of the leader's directory with ``--broker-log-dirs``, of the log dirs' own with
``--log-dir`` / ``--broker-config``) and its retention configs (DescribeConfigs), and every
replica on a broker of the broker id -> log dirs map (``jobs.common.replica_states``; the
single-broker form is that broker's replicas), and with ``--copied-segments`` the record of
the copy run just before (``copied-segments.json``: the HW and LSO each copy was planned with,
checked against the segment's end; absent when that run copied nothing). The listing is taken
before the events so that a copy running meanwhile cannot look like orphaned objects; run the
job after, not during, copy and delete jobs (the DAGs order them).

Transform: the pure builders of ``jobs.tables`` (schemas in ``jobs.tables.schemas``); the rows
become DataFrames: pandas while every table has at most ``PANDAS_ROWS_MAX`` rows, Spark
beyond (``--validation-engine``; the suites are the same on both). Validate: the suites of
``expectations`` (``SUITE_TABLES``: two on ``replicas``, one of them the WARNING suite
``replica_warnings``) in a file-mode GE context under ``--report-dir``; Data Docs at
``<report-dir>/gx/uncommitted/data_docs/local_site/index.html``. Output:
``<report-dir>/quality-summary.json`` (per suite: success and failed expectations with
reasons) and the run summary (``--summary-path``) with the same under ``details.suites``.
Exit 1 if any suite but a WARNING one fails, printing the failing expectations and the Data
Docs path on stderr; a WARNING suite's failures are printed as ``quality: WARNING ...`` and
listed under ``warnings`` (report and ``details``) and counted as ``counts.warnings``, and
leave the exit code 0.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from jobs.common import (
    JobArgs,
    RunSummary,
    job_parser,
    log_line,
    log_partition,
    parse_job_args,
    run_job,
    spark_session,
)
from jobs.common.broker_log_dirs import BrokerLogDirs
from jobs.common.clients import kafka_cluster
from jobs.common.copied_segments import read_copy_offsets
from jobs.common.discovery import broker_log_dirs
from jobs.common.replica_states import read_replica_states
from jobs.common.summary import write_json_atomically
from jobs.tables import (
    CopyOffsets,
    MetadataRecord,
    PartitionState,
    RemoteObjectInfo,
    ReplicaState,
    build_partition_offsets,
    build_remote_segments,
    build_replicas,
    leader_replicas,
    row_tuples,
    spark_ddl,
)
from jobs.tables.schemas import Row
from storage_core.client.admin import KafkaAdminClient
from storage_core.client.cluster import KafkaCluster
from storage_core.client.consumer import KafkaConsumer
from storage_core.common import TopicPartition
from storage_core.errors import StorageError
from storage_core.log.log_config import LogConfig
from storage_core.tiered.metadata import serde
from storage_core.tiered.metadata.errors import CorruptRemoteLogMetadataError
from storage_core.tiered.operations import (
    LogView,
    partition_dirs,
    topic_log_config,
)
from storage_core.tiered.operations.discovery import found_partition_dirs
from storage_core.tiered.rsm_loader import load_remote_storage_manager
from storage_core.tiered.topic_based_rlmm.config import REMOTE_LOG_METADATA_TOPIC_NAME
from storage_core.tiered.topic_based_rlmm.topic_scan import scan_metadata_topic

JOB = "quality"
LATEST_TIERED_TIMESTAMP = -5  # ListOffsets: the highest offset in remote storage
DEFAULT_REPORT_DIR = Path("quality-report")
SUMMARY_FILE = "quality-summary.json"
VALIDATION_ENGINES = ("auto", "pandas", "spark")
PANDAS_ROWS_MAX = 1_000_000  # per table; beyond, the suites run on Spark


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


def remote_enabled_topics(admin: KafkaAdminClient, topics: Iterable[str]) -> dict[str, LogConfig]:
    """The configs of those of ``topics`` with ``remote.storage.enable=true``."""
    configs: dict[str, LogConfig] = {}
    for topic in sorted(set(topics)):
        try:
            config = topic_log_config(admin, topic)
        except StorageError:
            continue
        if config.remote_storage_enable:
            configs[topic] = config
    return configs


def read_partition_states(
    cluster: KafkaCluster,
    found: Iterable[tuple[TopicPartition, Path]],
    configs: Mapping[str, LogConfig],
) -> list[PartitionState]:
    """Offsets, chain and retention of every remote-enabled partition of ``found``."""
    consumer = KafkaConsumer(cluster)
    states = []
    for tp, directory in found:
        config = configs.get(tp.topic)
        if config is None:
            continue
        log_start = consumer.earliest_offset(tp.topic, tp.partition)
        last_stable_offset = consumer.last_stable_offset(tp.topic, tp.partition)
        high_watermark = consumer.latest_offset(tp.topic, tp.partition)
        try:
            tiered = consumer.list_offset(tp.topic, tp.partition, LATEST_TIERED_TIMESTAMP)
            highest_remote: int | None = tiered.offset
        except StorageError:
            highest_remote = None
        view = LogView.read(
            directory,
            high_watermark=high_watermark,
            log_start_offset=log_start,
            last_stable_offset=last_stable_offset,
        )
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
                last_stable_offset=view.stable_offset,
                log_end_offset=view.log_end_offset,
                highest_remote_offset=highest_remote,
                leader_epoch_chain=tuple((e.epoch, e.start_offset) for e in view.epoch_entries),
                retention_ms=config.retention_ms,
                retention_bytes=config.retention_bytes,
                segment_bytes=config.segment_bytes,
            )
        )
    return states


def replica_log_dirs(cluster: KafkaCluster, args: JobArgs) -> BrokerLogDirs:
    """The broker id -> log dirs map (``broker_log_dirs``); empty when the single broker's id
    cannot be told (the replicas table is then left out)."""
    try:
        return broker_log_dirs(args, cluster)
    except StorageError as exc:
        log_partition("skipped", "replicas", reason=str(exc))
        return {}


def read_partitions(
    cluster: KafkaCluster, args: JobArgs
) -> tuple[list[PartitionState], list[ReplicaState]]:
    """The partitions' states and their replicas' states.

    With ``--broker-log-dirs`` a partition is read from its leader's directory; with the
    single-broker form, every partition directory of the log dirs is read (ListOffsets goes
    to the leader either way)."""
    log_dirs_map = replica_log_dirs(cluster, args)
    found = found_partition_dirs(log_dirs_map, args.topic)
    if args.broker_log_dirs:
        local: list[tuple[TopicPartition, Path]] = []
    else:
        local = [item for d in args.require_log_dirs() for item in partition_dirs(d, args.topic)]
    topics = {tp.topic for dirs in found.values() for tp in dirs} | {tp.topic for tp, _ in local}
    configs = remote_enabled_topics(KafkaAdminClient(cluster), topics)
    replicas = read_replica_states(cluster, log_dirs_map, found, configs)
    if args.broker_log_dirs:
        local = [
            (TopicPartition(r.topic, r.partition), Path(r.log_dir))
            for r in replicas
            if r.is_leader and r.log_dir is not None
        ]
    return read_partition_states(cluster, local, configs), replicas


def copy_offsets(args: JobArgs) -> dict[str, CopyOffsets]:
    """The ``--copied-segments`` record's offsets by segment id (none without the option, or
    when the copy run wrote no record: it copied nothing)."""
    option = args.options.get("copied_segments")
    if not option:
        return {}
    path = Path(str(option))
    if not path.is_file():
        log_line("skipped", {"record": path, "reason": "no copied-segments record: none copied"})
        return {}
    return read_copy_offsets(path)


def gather(args: JobArgs) -> dict[str, list[Row]]:
    """Extract and transform: the rows of each table, by table name."""
    copies = copy_offsets(args)
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
    with kafka_cluster(args) as cluster:
        records = read_metadata_records(cluster)
        partitions, replica_states = read_partitions(cluster, args)
    segments = build_remote_segments(
        records,
        objects,
        partitions,
        now_ms=now_ms,
        key_prefix=key_prefix,
        leaders=leader_replicas(replica_states),
        copies=copies,
    )
    offsets = build_partition_offsets(partitions, records, segments, now_ms=now_ms)
    return {
        "remote_segments": segments,
        "partition_offsets": offsets,
        "replicas": build_replicas(replica_states),
    }


def cluster_label(args: JobArgs) -> str:
    """``cluster <id> (<bootstrap server>)``, how the Data Docs name the validated data."""
    try:
        with kafka_cluster(args) as cluster:
            cluster_id = cluster.metadata().cluster_id
    except StorageError:
        cluster_id = None
    return f"cluster {cluster_id or '?'} ({args.bootstrap_server})"


def validation_engine(
    asked: str, tables: Mapping[str, Sequence[Row]]
) -> Literal["pandas", "spark"]:
    """The engine the suites run on: ``asked``, or for ``auto`` pandas while every table has
    at most ``PANDAS_ROWS_MAX`` rows (the rows are in the driver's memory already, and a
    checkpoint on pandas takes a fraction of a second where Spark takes seconds per suite),
    Spark beyond."""
    if asked not in VALIDATION_ENGINES:
        raise ValueError(f"validation engine {asked!r}: expected one of {VALIDATION_ENGINES}")
    if asked == "pandas":
        return "pandas"
    if asked == "spark":
        return "spark"
    largest = max((len(rows) for rows in tables.values()), default=0)
    return "pandas" if largest <= PANDAS_ROWS_MAX else "spark"


def run(args: JobArgs, summary: RunSummary) -> None:
    from expectations.definitions import SUITE_TABLES  # noqa: PLC0415
    from expectations.runner import (  # noqa: PLC0415 - GE imports take seconds
        QualityContext,
        pandas_frame,
    )

    report_dir = Path(str(args.options.get("report_dir") or DEFAULT_REPORT_DIR)).resolve()
    tables = gather(args)
    summary.count("remote_segments", len(tables["remote_segments"]))
    summary.count("partitions", len(tables["partition_offsets"]))
    summary.count("replicas", len(tables["replicas"]))
    engine = validation_engine(str(args.options.get("validation_engine") or "auto"), tables)
    summary.details["validation_engine"] = engine
    run_name = str(args.options.get("run_name") or "") or None
    source = cluster_label(args)

    def validate_all(context: QualityContext, frames: Mapping[str, Any]) -> dict[str, Any]:
        return {
            suite: context.validate(suite, frames[table], run_name=run_name, source=source)
            for suite, table in SUITE_TABLES.items()
        }

    def quality_context() -> QualityContext:
        return QualityContext(
            report_dir,
            engine=engine,
            started_state_max_ms=int(str(args.options["started_state_max_ms"])),
            delete_pending_max_ms=int(str(args.options["delete_pending_max_ms"])),
        )

    if engine == "spark":
        with spark_session("quality", args.spark_master) as spark:
            context = quality_context()
            outcomes = validate_all(
                context,
                {
                    table: spark.createDataFrame(row_tuples(table, rows), spark_ddl(table))
                    for table, rows in tables.items()
                },
            )
    else:
        context = quality_context()
        outcomes = validate_all(
            context, {table: pandas_frame(table, rows) for table, rows in tables.items()}
        )
    docs = context.data_docs_index
    warnings = [
        f"{o.suite}: {failed.reason}" for o in outcomes.values() if o.warning for failed in o.failed
    ]
    report = {
        "success": not any(o.fails_run for o in outcomes.values()),
        "data_docs": str(docs),
        "suites": {name: o.to_dict() for name, o in outcomes.items()},
        "warnings": warnings,
    }
    write_json_atomically(report_dir / SUMMARY_FILE, report)
    summary.details.update(report)
    for outcome in outcomes.values():
        if outcome.warning:
            summary.count("warnings", len(outcome.failed))
            for failed in outcome.failed:
                print(f"quality: WARNING {outcome.suite}: {failed.reason}", file=sys.stderr)
            continue
        summary.count("failed_expectations", len(outcome.failed))
        for failed in outcome.failed:
            summary.error(f"{outcome.suite}: {failed.reason}")
            print(f"quality: FAILED {outcome.suite}: {failed.reason}", file=sys.stderr)
    status = "passed" if report["success"] else "FAILED"
    warned = f" with {len(warnings)} warnings" if warnings else ""
    print(f"quality: suites {status}{warned}; Data Docs: {docs}", file=sys.stderr, flush=True)


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
        "--copied-segments",
        type=Path,
        default=None,
        help="the copied-segments.json of the copy run to check (each copy ends below the LSO"
        " it was planned with; default: none)",
    )
    own.add_argument(
        "--validation-engine",
        choices=VALIDATION_ENGINES,
        default="auto",
        help="where the suites run: pandas, spark, or auto (pandas while every table has at"
        f" most {PANDAS_ROWS_MAX:,} rows, Spark beyond; default)",
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
