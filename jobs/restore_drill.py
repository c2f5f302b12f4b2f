"""restore_drill: prove, on a schedule, that the bucket can be restored.

    python -m jobs.restore_drill [--sample-partitions N] [--night YYYY-MM-DD] [--topic T]
        [--report-dir DIR] [--run-name NAME] [--wait-s S] [--bootstrap-server HOST:PORT]
        [--broker-config PATH | --remote-storage-manager CLASS --rsm-config KEY=VALUE ...]
        [--summary-path PATH]

1. **Sample** (``jobs.planning.restore_drill.sample_partitions``): ``--sample-partitions``
   (default 3) partitions of the remote-enabled topics (``--topic``: of that one only), chosen
   by rotating on ``--night`` (default: today, UTC) so that consecutive nights drill every
   partition in turn. Scratch topics (``restore-drill-<yyyymmdd>-<topic>``) are never sampled.
2. **Restore** each sampled topic's partitions with ``jobs.restore_topic`` (its functions, in
   this process) into its scratch topic: the live topic's id as ``--topic-id``, the sample as
   ``--partitions``, ``--verify-checksums`` (every object of the bucket read and its CRC32C
   checked against its manifest) and ``--restore-offsets``. Before it, the source's log start
   and highest tiered offset are read (ListOffsets -2 and -5).
3. **Check** with Great Expectations (``expectations.restore_drill``, a file-mode context
   under ``--report-dir``, Data Docs at ``<report-dir>/gx/uncommitted/data_docs/local_site/
   index.html``): every record batch of each drilled partition, read with raw Fetches from the
   restored log start to the next offset in the scratch topic and over the same offsets in
   the source topic (whose older batches the brokers serve from the remote tier), has the
   source's base offset, last offset, partition leader epoch and CRC, and bytes that match its
   CRC; the restored offsets are contiguous; the restored range covers what the source had
   tiered; each group offset committed under a scratch topic lies in the restored range.
4. **Clean up**, whatever happened before (a failed restore or check included): the groups'
   offsets under the scratch topics (OffsetDelete; deleting a topic drops them too, as Kafka),
   the scratch topics (DeleteTopics), then, once their partitions are marked
   (DELETE_PARTITION_MARKED), their remote data, through ``jobs.delete_partitions``' steps
   (STARTED, each segment's deletion, FINISHED) run in this process. Deletion only ever
   targets a scratch topic under the topic id this run created it with
   (``ensure_scratch_target`` raises ``DrillScratchTopicError`` otherwise): never a source.
   Scratch topics left by an earlier run that was killed are removed first the same way.

Output: ``<report-dir>/restore-drill-summary.json`` (the drilled partitions and their
figures, per suite the failed expectations with reasons, the Data Docs) and the run summary
(``--summary-path``) with the same under ``details``. Counts: partitions_drilled,
batches_compared, group_offsets_checked, groups_not_restored (a group with active members
keeps its offsets: not a failure), failed_expectations, scratch_topics_deleted,
scratch_offsets_deleted, segments_deleted, partitions_finished. Exit 0 when every suite
passed and the clean-up finished, 1 otherwise, printing each failing expectation and the Data
Docs path on stderr.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode

from jobs import restore_topic
from jobs.common import JobArgs, RunSummary, job_parser, log_line, parse_job_args, run_job
from jobs.common.args import JobArgumentError
from jobs.common.clients import kafka_cluster, remote_log_metadata_client
from jobs.common.remote_deletion import NO_RUN_BROKER_ID, DeletionItem, delete_items
from jobs.common.run import one_line
from jobs.common.summary import write_json_atomically
from jobs.delete_partitions import (
    PartitionReport,
    delete_manifests_of,
    finish_partitions,
    plan_partition_deletions,
    publish_partition_state,
)
from jobs.planning.restore_drill import (
    SAMPLE_PARTITIONS_DEFAULT,
    SAMPLE_PARTITIONS_MAX,
    BatchHeader,
    Row,
    batch_rows,
    ensure_scratch_target,
    group_offset_rows,
    is_scratch_topic,
    range_problem,
    sample_partitions,
    scratch_topic_name,
    tail_gap_row,
)
from storage_core.client.admin import KafkaAdminClient
from storage_core.client.cluster import KafkaCluster
from storage_core.client.consumer import KafkaConsumer, fetch_request
from storage_core.client.errors import raise_for_error
from storage_core.client.group_offsets import (
    delete_offsets,
    fetch_committed_offsets,
    list_group_ids,
)
from storage_core.client.negotiation import ApiKey
from storage_core.common import TopicPartition, Uuid
from storage_core.errors import StorageError
from storage_core.protocol.messages import response_schema
from storage_core.records.batch import LOG_OVERHEAD, RecordBatch
from storage_core.tiered.metadata.states import RemotePartitionDeleteState
from storage_core.tiered.operations import PartitionDeletionStep, marked_partitions_by_broker
from storage_core.tiered.operations.discovery import topic_log_config
from storage_core.tiered.rsm_loader import load_remote_storage_manager

JOB = "restore_drill"
DEFAULT_REPORT_DIR = Path("restore-drill-report")
SUMMARY_FILE = "restore-drill-summary.json"
WAIT_S_DEFAULT = 120.0
LATEST_TIERED_TIMESTAMP = -5  # ListOffsets: the highest offset in remote storage
FETCH_MAX_WAIT_MS = 200
FETCH_PARTITION_MAX_BYTES = 1024 * 1024
MARKS_WAIT_S_MIN = 30.0  # for the deleted scratch partitions' DELETE_PARTITION_MARKED
EMPTY_FETCHES_MAX = 50  # fetches in a row that return no whole batch before giving up
_BATCH_LENGTH_OFFSET = 8


# ---------------------------------------------------------------------------- reading batches


def read_batch_headers(
    cluster: KafkaCluster, topic: str, partition: int, start: int, end: int
) -> list[BatchHeader]:
    """The headers of every batch holding an offset in [start, end) (exclusive end), read
    with raw Fetches from the partition's leader (control batches included; the CRC checked,
    not trusted: ``crc_valid``)."""
    tp = TopicPartition(topic, partition)
    headers: dict[int, BatchHeader] = {}
    offset, empty = start, 0
    while offset < end:
        session = cluster.leader_session(tp)
        version = session.version(ApiKey.FETCH)
        response = session.send(
            fetch_request(
                version,
                tp,
                offset,
                replica_id=-1,
                max_wait_ms=FETCH_MAX_WAIT_MS,
                min_bytes=1,
                max_bytes=FETCH_PARTITION_MAX_BYTES,
                partition_max_bytes=FETCH_PARTITION_MAX_BYTES,
                isolation_level=0,
            ),
            response_schema(ApiKey.FETCH, version),
        )
        if hasattr(response, "error_code"):
            raise_for_error(response.error_code, resource=f"fetch from {session.address}")
        data = b""
        for t in response.responses:
            for p in t.partitions:
                if p.partition_index == partition:
                    raise_for_error(p.error_code, resource=f"partition {tp}", operation="Read")
                    data = bytes(p.records or b"")
        next_offset = offset
        for batch in _whole_batches(data):
            if batch.last_offset < offset:
                continue
            headers[batch.base_offset] = BatchHeader(
                base_offset=batch.base_offset,
                last_offset=batch.last_offset,
                leader_epoch=batch.partition_leader_epoch,
                crc=batch.crc,
                crc_valid=batch.is_valid(),
            )
            next_offset = batch.next_offset
        if next_offset == offset:
            empty += 1
            if empty >= EMPTY_FETCHES_MAX:
                raise StorageError(
                    f"{tp}: {EMPTY_FETCHES_MAX} fetches from offset {offset} returned no whole"
                    f" batch (reading up to {end}); is the partition's remote data readable?"
                )
            time.sleep(0.1)
            continue
        empty, offset = 0, next_offset
    return [headers[base] for base in sorted(headers) if base < end]


def _whole_batches(data: bytes) -> list[RecordBatch]:
    view = memoryview(data)
    batches, position = [], 0
    while len(data) - position >= LOG_OVERHEAD:
        length = int.from_bytes(
            view[position + _BATCH_LENGTH_OFFSET : position + LOG_OVERHEAD], "big", signed=True
        )
        if position + LOG_OVERHEAD + length > len(data):
            break  # cut by the broker at the size limit
        batch = RecordBatch.from_buffer(view, position)
        batches.append(batch)
        position += batch.size_in_bytes
    return batches


# ---------------------------------------------------------------------------- sample


def remote_partitions(cluster: KafkaCluster, topic: str | None) -> dict[str, tuple[Uuid, int]]:
    """Each remote-enabled topic's id and partition count (``topic``: that one only);
    scratch topics are left out."""
    admin = KafkaAdminClient(cluster)
    names = [t for t in admin.list_topics() if not is_scratch_topic(t)]
    if topic is not None:
        if topic not in names:
            raise JobArgumentError(f"--topic {topic}: no such topic on the cluster")
        names = [topic]
    found = {}
    metadata = cluster.refresh_metadata(names)
    for name in names:
        try:
            if not topic_log_config(admin, name).remote_storage_enable:
                continue
        except StorageError:
            continue
        described = metadata.topic(name)
        if described is None or described.topic_id is None or described.error != ErrorCode.none:
            continue
        found[name] = (described.topic_id, len(described.partitions))
    return found


# ---------------------------------------------------------------------------- drill


@dataclasses.dataclass(slots=True)
class Drill:
    """What one run drilled and created (filled as it goes, so clean-up knows it all)."""

    night: datetime.date
    scratch_ids: dict[str, Uuid] = dataclasses.field(default_factory=dict)
    partitions: list[Row] = dataclasses.field(default_factory=list)
    batches: list[Row] = dataclasses.field(default_factory=list)
    group_offsets: list[Row] = dataclasses.field(default_factory=list)
    groups_not_restored: list[str] = dataclasses.field(default_factory=list)
    left_out: dict[str, int] = dataclasses.field(default_factory=dict)  # segments, by topic


def drill_topic(
    args: JobArgs,
    cluster: KafkaCluster,
    drill: Drill,
    *,
    topic: str,
    topic_id: Uuid,
    partitions: Sequence[int],
    wait_s: float,
) -> None:
    """Restore ``partitions`` of ``topic`` into its scratch topic and read both sides."""
    scratch = scratch_topic_name(topic, drill.night)
    consumer = KafkaConsumer(cluster)
    before = {}
    for p in partitions:
        start = consumer.earliest_offset(topic, p)
        try:
            tiered = consumer.list_offset(topic, p, LATEST_TIERED_TIMESTAMP).offset
        except StorageError:
            tiered = -1
        before[p] = (start, tiered)
    problem, per_partition = restore(
        args,
        drill,
        topic=topic,
        topic_id=topic_id,
        scratch=scratch,
        partitions=partitions,
        wait_s=wait_s,
    )
    for p in partitions:
        source_start, tiered = before[p]
        row: Row = {
            "topic": topic,
            "partition": p,
            "scratch_topic": scratch,
            "source_log_start_offset": source_start,
            "source_highest_tiered_offset": tiered,
            "restored_log_start_offset": None,
            "restored_next_offset": None,
            "batches": 0,
            "restore_problem": per_partition.get(p) or problem,
            "range_problem": None,
            "read_problem": None,
        }
        drill.partitions.append(row)
        if row["restore_problem"] is not None:
            log_line(
                "drilled", {"partition": f"{topic}-{p}", "restore_problem": row["restore_problem"]}
            )
            continue
        try:
            low = consumer.earliest_offset(scratch, p)
            high = consumer.latest_offset(scratch, p)
            row["restored_log_start_offset"], row["restored_next_offset"] = low, high
            restored = read_batch_headers(cluster, scratch, p, low, high)
            source_now = consumer.earliest_offset(topic, p)
            source = read_batch_headers(
                cluster, topic, p, max(low, source_now), max(high, tiered + 1)
            )
        except StorageError as exc:
            row["read_problem"] = one_line(exc)
            log_line("drilled", {"partition": f"{topic}-{p}", "read_problem": row["read_problem"]})
            continue
        row["range_problem"] = range_problem(
            source_log_start_offset=source_start,
            source_highest_tiered_offset=tiered,
            restored_log_start_offset=low,
            restored_next_offset=high,
        )
        if row["range_problem"] is not None and drill.left_out.get(topic):
            row["range_problem"] += (
                f" (the restore left out {drill.left_out[topic]} segment(s) of {topic}: see its"
                " left-out lines for why)"
            )
        rows = batch_rows(
            topic,
            p,
            source=source,
            restored=restored,
            restored_log_start_offset=low,
            restored_next_offset=high,
            source_log_start_offset=source_now,
            source_tiered_next_offset=tiered + 1,
        )
        tail = tail_gap_row(topic, p, rows, high)
        drill.batches += rows + ([tail] if tail is not None else [])
        row["batches"] = len(rows)
        log_line(
            "drilled",
            {
                "partition": f"{topic}-{p}",
                "scratch": f"{scratch}-{p}",
                "source_log_start_offset": source_start,
                "source_highest_tiered_offset": tiered,
                "restored_log_start_offset": low,
                "restored_next_offset": high,
                "batches": len(rows),
            },
        )


def restore(
    args: JobArgs,
    drill: Drill,
    *,
    topic: str,
    topic_id: Uuid,
    scratch: str,
    partitions: Sequence[int],
    wait_s: float,
) -> tuple[str | None, dict[int, str]]:
    """Run restore_topic into ``scratch``: (its error or None, per partition its stop reason).
    The scratch topic's id is recorded as soon as the topic exists, failed restore or not."""
    options: dict[str, object] = {
        "topic_id": str(topic_id),
        "target": scratch,
        "partitions": ",".join(str(p) for p in sorted(partitions)),
        "verify_checksums": True,
        "restore_offsets": True,
        "allow_gaps": False,
        "wait_s": wait_s,
        "replication_factor": None,
    }
    restore_args = dataclasses.replace(
        args, job=restore_topic.JOB, topic=topic, dry_run=False, summary_path=None, options=options
    )
    summary = RunSummary(job=restore_topic.JOB)
    problem = None
    try:
        request = restore_topic.RestoreRequest.of(restore_args)
        restore_topic.run(restore_args, request, summary)
    except Exception as exc:  # the drill's verdict: reported, then cleaned up
        problem = f"{type(exc).__name__}: {one_line(exc)}"
    finally:
        with kafka_cluster(args) as fresh:
            created = fresh.refresh_metadata([scratch]).topic(scratch)
        if created is not None and created.error == ErrorCode.none and created.topic_id:
            drill.scratch_ids[scratch] = created.topic_id
    per_partition: dict[int, str] = {}
    for error in summary.errors:
        where, message = error.get("partition"), str(error.get("error"))
        if where is not None and where.rpartition("-")[2].isdigit():
            per_partition[int(where.rpartition("-")[2])] = message
        elif message.startswith("group "):
            drill.groups_not_restored.append(message)
    left_out = summary.counts.get("segments_left_out", 0)
    if left_out:
        drill.left_out[topic] = left_out
    return problem, per_partition


def read_scratch_offsets(
    cluster: KafkaCluster, scratch: Sequence[str]
) -> dict[str, dict[tuple[str, int], int]]:
    """Every group's committed offsets under the scratch topics."""
    if not scratch:
        return {}
    names = set(scratch)
    found: dict[str, dict[tuple[str, int], int]] = {}
    for group_id, offsets in fetch_committed_offsets(cluster, list_group_ids(cluster)).items():
        mine = {
            (tp.topic, tp.partition): o.offset for tp, o in offsets.items() if tp.topic in names
        }
        if mine:
            found[group_id] = mine
    return found


# ---------------------------------------------------------------------------- clean up


def clean_up(
    args: JobArgs, scratch_ids: Mapping[str, Uuid], wait_s: float, summary: RunSummary
) -> None:
    """Remove the groups' offsets under the scratch topics, the topics, then their remote
    data (see the module docstring). Errors are noted in ``summary``, never raised."""
    if not scratch_ids:
        return
    try:
        with kafka_cluster(args) as cluster:
            for group_id, offsets in sorted(
                read_scratch_offsets(cluster, list(scratch_ids)).items()
            ):
                delete_offsets(cluster, group_id, [TopicPartition(t, p) for t, p in offsets])
                summary.count("scratch_offsets_deleted", len(offsets))
                log_line("cleaned", {"group": group_id, "offsets": len(offsets)})
            counts = delete_scratch_topics(cluster, scratch_ids, summary)
            marked = wait_for_marks(cluster, scratch_ids, counts, max(wait_s, MARKS_WAIT_S_MIN))
        for name, count in sorted(counts.items()):
            found = sum(1 for tip in marked if tip.topic_partition.topic == name)
            if found < count:
                summary.error(
                    f"clean-up: {count - found} of {count} partitions of {name} were not marked"
                    " for deletion in time: their remote data is left for"
                    " partition_deletion_sweep once they are"
                )
        delete_remote_data(args, marked, scratch_ids, summary)
    except Exception as exc:
        summary.error(
            f"clean-up: {type(exc).__name__}: {one_line(exc)}; the scratch topics"
            f" {', '.join(sorted(scratch_ids))} may be left: the next drill removes them (and"
            " partition_deletion_sweep their remote data once marked)"
        )


def delete_scratch_topics(
    cluster: KafkaCluster, scratch_ids: Mapping[str, Uuid], summary: RunSummary
) -> dict[str, int]:
    """DeleteTopics of each scratch topic that still has the id it was created with; its
    partition count by name."""
    counts = {}
    metadata = cluster.refresh_metadata(list(scratch_ids))
    for name in sorted(scratch_ids):
        found = metadata.topic(name)
        if found is None or found.error != ErrorCode.none:
            continue
        ensure_scratch_target(name, found.topic_id, scratch_ids=scratch_ids)
        KafkaAdminClient(cluster).delete_topics([name])
        counts[name] = len(found.partitions)
        summary.count("scratch_topics_deleted")
        log_line("cleaned", {"topic": name, "topic_id": found.topic_id})
    return counts


def wait_for_marks(
    cluster: KafkaCluster, scratch_ids: Mapping[str, Uuid], counts: Mapping[str, int], wait_s: float
) -> dict[Any, int]:
    """The scratch topics' partitions marked for deletion (with their marking broker), once
    every deleted topic's partitions are marked or ``wait_s`` has passed."""
    deadline = time.monotonic() + wait_s
    while True:
        marked = {
            tip: broker
            for name in sorted(scratch_ids)
            for tip, broker in marked_partitions_by_broker(cluster, name)
            if str(tip.topic_id) == str(scratch_ids[name])
        }
        by_topic: dict[str, int] = {}
        for tip in marked:
            by_topic[tip.topic_partition.topic] = by_topic.get(tip.topic_partition.topic, 0) + 1
        if all(by_topic.get(name, 0) >= n for name, n in counts.items()):
            return marked
        if time.monotonic() >= deadline:
            return marked
        time.sleep(0.2)


def delete_remote_data(
    args: JobArgs, marked: Mapping[Any, int], scratch_ids: Mapping[str, Uuid], summary: RunSummary
) -> None:
    """jobs.delete_partitions' steps for the marked scratch partitions, in this process."""
    for tip in marked:
        ensure_scratch_target(tip.topic_partition.topic, tip.topic_id, scratch_ids=scratch_ids)
    if not marked:
        return
    rsm = load_remote_storage_manager(args.rsm_class_name, dict(args.rsm_config))
    try:
        with remote_log_metadata_client(args) as rlmm:
            plans = plan_partition_deletions(
                {
                    tip: (
                        rlmm.remote_partition_delete_metadata(tip),
                        list(rlmm.list_remote_log_segments(tip)),
                    )
                    for tip in marked
                }
            )
            for plan in plans:
                if plan.step is PartitionDeletionStep.PUBLISH_STARTED:
                    publish_partition_state(
                        rlmm,
                        plan.topic_id_partition,
                        RemotePartitionDeleteState.DELETE_PARTITION_STARTED,
                        marked[plan.topic_id_partition],
                    )
            reports = {p.topic_id_partition: PartitionReport(plan=p) for p in plans}
            items = []
            for plan in plans:
                for metadata in plan.segments:
                    ensure_scratch_target(
                        metadata.topic_id_partition.topic_partition.topic,
                        metadata.topic_id_partition.topic_id,
                        scratch_ids=scratch_ids,
                    )
                    items.append(
                        DeletionItem.for_segment(
                            metadata,
                            reason="restore drill scratch topic deleted",
                            broker_id=marked[plan.topic_id_partition],
                        )
                    )
            outcomes = delete_items(items, rsm=rsm, rlmm=rlmm, broker_id=NO_RUN_BROKER_ID)
            by_partition = {str(tip): report for tip, report in reports.items()}
            for outcome in outcomes:
                report = by_partition[outcome.partition]
                if outcome.status == "error":
                    report.failed += 1
                    report.errors.append(f"segment {outcome.segment_id}: {outcome.detail}")
                else:
                    report.deleted += 1
                    report.size_bytes += outcome.size_bytes
        started = time.monotonic()
        with remote_log_metadata_client(args) as rlmm:  # a fresh one reads the events
            finished = finish_partitions(rlmm, reports.values(), marked, summary, started)
        # The broker leading a scratch topic's partition 0 wrote its manifest; gone with it.
        delete_manifests_of(rsm, finished, summary)
    finally:
        rsm.close()


def leftover_scratch_ids(cluster: KafkaCluster) -> dict[str, Uuid]:
    """Scratch topics on the cluster (left by a drill that was killed), with their ids."""
    names = [t for t in KafkaAdminClient(cluster).list_topics() if is_scratch_topic(t)]
    metadata = cluster.refresh_metadata(names) if names else None
    found = {}
    for name in names:
        topic = None if metadata is None else metadata.topic(name)
        if topic is not None and topic.topic_id is not None:
            found[name] = topic.topic_id
    return found


# ---------------------------------------------------------------------------- the run


def parse_night(text: object) -> datetime.date:
    if text is None or text == "":
        return datetime.datetime.now(datetime.UTC).date()
    try:
        return datetime.date.fromisoformat(str(text)[:10])
    except ValueError:
        raise JobArgumentError(f"--night {text!r} is not a date (YYYY-MM-DD)") from None


def run(args: JobArgs, summary: RunSummary) -> None:
    night = parse_night(args.options.get("night"))
    count = int(str(args.options.get("sample_partitions") or SAMPLE_PARTITIONS_DEFAULT))
    if not 1 <= count <= SAMPLE_PARTITIONS_MAX:
        raise JobArgumentError(
            f"--sample-partitions {count}: between 1 and {SAMPLE_PARTITIONS_MAX}"
        )
    wait_s = float(str(args.options.get("wait_s") or WAIT_S_DEFAULT))
    report_dir = Path(str(args.options.get("report_dir") or DEFAULT_REPORT_DIR)).resolve()
    with kafka_cluster(args) as cluster:
        leftovers = leftover_scratch_ids(cluster)
    if leftovers:
        log_line("leftovers", {"topics": ",".join(sorted(leftovers))})
        clean_up(args, leftovers, wait_s, summary)
    drill = Drill(night=night)
    try:
        with kafka_cluster(args) as cluster:
            topics = remote_partitions(cluster, args.topic)
            candidates = [(t, p) for t, (_, n) in topics.items() for p in range(n)]
            sample = sample_partitions(candidates, count, night) if candidates else []
            log_line(
                "sample",
                {
                    "night": night.isoformat(),
                    "candidates": len(candidates),
                    "drilled": ",".join(f"{t}-{p}" for t, p in sample) or "-",
                },
            )
            by_topic: dict[str, list[int]] = {}
            for t, p in sample:
                by_topic.setdefault(t, []).append(p)
            for t, ps in sorted(by_topic.items()):
                drill_topic(
                    args,
                    cluster,
                    drill,
                    topic=t,
                    topic_id=topics[t][0],
                    partitions=ps,
                    wait_s=wait_s,
                )
            ranges = {
                (row["scratch_topic"], row["partition"]): (
                    row["restored_log_start_offset"],
                    row["restored_next_offset"],
                )
                for row in drill.partitions
                if row["restored_next_offset"] is not None
            }
            drill.group_offsets = group_offset_rows(
                read_scratch_offsets(cluster, list(drill.scratch_ids)), ranges
            )
        validate(args, drill, report_dir, summary)
    finally:
        clean_up(args, drill.scratch_ids, wait_s, summary)


def validate(args: JobArgs, drill: Drill, report_dir: Path, summary: RunSummary) -> None:
    from expectations.restore_drill import (  # noqa: PLC0415 - GE imports take seconds
        DRILL_SUITE_TABLES,
        DrillContext,
    )

    tables = {
        "drill_partitions": drill.partitions,
        "drill_batches": drill.batches,
        "drill_group_offsets": drill.group_offsets,
    }
    summary.count("partitions_drilled", len(drill.partitions))
    summary.count("batches_compared", len(drill.batches))
    summary.count("group_offsets_checked", len(drill.group_offsets))
    summary.count("groups_not_restored", len(drill.groups_not_restored))
    drilled = ", ".join(f"{r['topic']}-{r['partition']}" for r in drill.partitions) or "nothing"
    context = DrillContext(report_dir)
    run_name = str(args.options.get("run_name") or "") or None
    outcomes = {
        suite: context.validate(suite, tables[table], run_name=run_name, source=drilled)
        for suite, table in DRILL_SUITE_TABLES.items()
    }
    docs = context.data_docs_index
    report = {
        "success": all(o.success for o in outcomes.values()),
        "night": drill.night.isoformat(),
        "drilled": drill.partitions,
        "groups_not_restored": drill.groups_not_restored,
        "data_docs": str(docs),
        "suites": {name: o.to_dict() for name, o in outcomes.items()},
    }
    write_json_atomically(report_dir / SUMMARY_FILE, report)
    summary.details.update(report)
    for outcome in outcomes.values():
        summary.count("failed_expectations", len(outcome.failed))
        for failed in outcome.failed:
            summary.error(f"{outcome.suite}: {failed.reason}")
            print(f"restore_drill: FAILED {outcome.suite}: {failed.reason}", file=sys.stderr)
    status = "passed" if report["success"] else "FAILED"
    print(
        f"restore_drill: {drilled}: suites {status}; Data Docs: {docs}", file=sys.stderr, flush=True
    )


def build_parser() -> argparse.ArgumentParser:
    parser = job_parser(JOB, __doc__)
    own = parser.add_argument_group("restore_drill")
    own.add_argument(
        "--sample-partitions",
        type=int,
        default=SAMPLE_PARTITIONS_DEFAULT,
        help=f"how many partitions to drill (default {SAMPLE_PARTITIONS_DEFAULT})",
    )
    own.add_argument(
        "--night",
        default=None,
        help="the date the sample rotates on, YYYY-MM-DD (default: today, UTC)",
    )
    own.add_argument(
        "--report-dir",
        type=Path,
        default=DEFAULT_REPORT_DIR,
        help="GE context, Data Docs and restore-drill-summary.json (default"
        " ./restore-drill-report)",
    )
    own.add_argument("--run-name", default=None, help="the run's name in the Data Docs")
    own.add_argument(
        "--wait-s",
        type=float,
        default=WAIT_S_DEFAULT,
        help="how long to wait for restored partitions and deletion marks (default"
        f" {WAIT_S_DEFAULT:.0f})",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parse_job_args(parser, argv, job=JOB)
    return run_job(args, lambda summary: run(args, summary))


if __name__ == "__main__":
    sys.exit(main())
