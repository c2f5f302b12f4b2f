"""``remote_segments``: one row per remote segment (schema in ``jobs.tables.schemas``).

``segment_base_rows`` turns the metadata records and the object listing into rows of facts;
``derive_segment_checks`` adds the check columns from those facts and the partitions'
states; ``build_remote_segments`` does both. Pure: no I/O, deterministic for its inputs
(``now_ms`` is a parameter). Negative tests change facts in good rows and derive again.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from jobs.planning.chunked_objects import chunked_objects_problem, chunked_stored_size
from jobs.tables.inputs import (
    CopyOffsets,
    MetadataRecord,
    PartitionKey,
    PartitionState,
    RemoteObjectInfo,
    ReplicaState,
)
from jobs.tables.schemas import Row
from jobs.tables.states import SEGMENT_STARTED_STATES, replay_segment_states
from storage_core.tiered.metadata.cache import is_same_segment
from storage_core.tiered.metadata.metadata import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
)
from storage_core.tiered.metadata.states import RemoteLogSegmentState
from storage_core.tiered.operations.lineage import (
    LineageCheck,
    check_remote_segment_lineage,
    filtered_leader_epoch_map,
)
from storage_core.tiered.remote_object_keys import (
    InvalidRemoteObjectKeyError,
    RemoteObjectSuffix,
    parse_object_key,
)

FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED.name
DELETE_FINISHED = RemoteLogSegmentState.DELETE_SEGMENT_FINISHED.name

# Objects every COPY_SEGMENT_FINISHED segment has (the producer snapshot is optional; the
# transaction index is required when the segment says it has one).
REQUIRED_SUFFIXES = (
    RemoteObjectSuffix.LOG.value,
    RemoteObjectSuffix.OFFSET_INDEX.value,
    RemoteObjectSuffix.TIME_INDEX.value,
    RemoteObjectSuffix.LEADER_EPOCH_CHECKPOINT.value,
)

_SegmentKey = tuple[str, int, str]  # (topic id, partition, segment id)


def _segment_key(segment_id: RemoteLogSegmentId) -> _SegmentKey:
    tip = segment_id.topic_id_partition
    return (str(tip.topic_id), tip.topic_partition.partition, str(segment_id.id))


def _empty_row(topic: str, partition: int, topic_id: str, segment_id: str) -> Row:
    return {
        "topic": topic,
        "partition": partition,
        "topic_id": topic_id,
        "segment_id": segment_id,
        "has_metadata": False,
        "start_offset": None,
        "end_offset": None,
        "max_timestamp_ms": None,
        "segment_size_bytes": None,
        "txn_idx_empty": None,
        "high_watermark_at_copy": None,
        "last_stable_offset_at_copy": None,
        "segment_leader_epochs": [],
        "state_history": [],
        "objects": [],
        "chunked_stored_size_bytes": None,
    }


def segment_base_rows(
    records: Iterable[MetadataRecord],
    objects: Iterable[RemoteObjectInfo],
    *,
    key_prefix: str = "",
) -> list[Row]:
    """Fact columns of every segment named by a segment event or an object key.

    Records are taken in log order (metadata partition, then offset); every segment event
    goes into ``state_history`` with its record's timestamp, but for a segment's metadata
    announced again unchanged (re-appended by the metadata topic's compaction, as the RLMM
    cache takes it: a repeat). Keys that are not remote
    segment objects under ``key_prefix`` are ignored.
    """
    rows: dict[_SegmentKey, Row] = {}
    added: dict[_SegmentKey, RemoteLogSegmentMetadata] = {}
    for record in sorted(records, key=lambda r: (r.partition, r.offset)):
        event = record.event
        if not isinstance(event, RemoteLogSegmentMetadata | RemoteLogSegmentMetadataUpdate):
            continue
        segment_id = event.remote_log_segment_id
        key = _segment_key(segment_id)
        if isinstance(event, RemoteLogSegmentMetadata):
            first = added.setdefault(key, event)
            if first is not event and is_same_segment(first, event):
                continue  # announced again unchanged (the topic's compaction): a repeat
        row = rows.get(key)
        if row is None:
            tp = segment_id.topic_id_partition.topic_partition
            row = rows[key] = _empty_row(tp.topic, tp.partition, key[0], key[2])
        if isinstance(event, RemoteLogSegmentMetadata) and not row["has_metadata"]:
            row.update(
                has_metadata=True,
                start_offset=event.start_offset,
                end_offset=event.end_offset,
                max_timestamp_ms=event.max_timestamp_ms,
                segment_size_bytes=event.segment_size_in_bytes,
                txn_idx_empty=event.txn_idx_empty,
                segment_leader_epochs=[
                    {"epoch": epoch, "start_offset": offset}
                    for epoch, offset in event.segment_leader_epochs.items()
                ],
            )
        row["state_history"].append(
            {"state": event.state.name, "timestamp_ms": record.timestamp_ms}
        )
        stored_size = chunked_stored_size(event.custom_metadata)
        if stored_size is not None:
            row["chunked_stored_size_bytes"] = stored_size
    for info in objects:
        try:
            parsed = parse_object_key(info.key, key_prefix)
        except InvalidRemoteObjectKeyError:
            continue
        ref = parsed.segment
        key = (str(ref.topic_id), ref.partition, str(ref.segment_id))
        row = rows.get(key)
        if row is None:
            row = rows[key] = _empty_row(ref.topic, ref.partition, key[0], key[2])
            row["start_offset"] = ref.start_offset
        row["objects"].append({"suffix": parsed.suffix.value, "size_bytes": info.size_bytes})
    for row in rows.values():
        row["objects"].sort(key=lambda o: o["suffix"])
    return sorted(rows.values(), key=_row_order)


def with_copy_offsets(rows: Iterable[Row], copies: Mapping[str, CopyOffsets]) -> list[Row]:
    """New rows with the offsets each segment's copy was planned with, where ``copies`` (by
    segment id: a copy run's record, ``read_copy_offsets``) names the segment."""
    out = []
    for base in rows:
        row = dict(base)
        copy = copies.get(row["segment_id"])
        if copy is not None:
            row["high_watermark_at_copy"] = copy.high_watermark_at_copy
            row["last_stable_offset_at_copy"] = copy.last_stable_offset_at_copy
        out.append(row)
    return out


def _row_order(row: Row) -> tuple[Any, ...]:
    start = row["start_offset"]
    return (
        row["topic"],
        row["topic_id"],
        row["partition"],
        start is None,
        start or 0,
        row["segment_id"],
    )


def epochs_not_increasing(row: Row) -> bool:
    """Whether a segment with metadata breaks its epoch rules: no entry, epochs not strictly
    increasing, start offsets decreasing, or one outside [start_offset, end_offset]."""
    if not row["has_metadata"]:
        return False
    entries = row["segment_leader_epochs"]
    if not entries:
        return True
    previous_epoch: int | None = None
    previous_offset = row["start_offset"]
    for entry in entries:
        epoch, offset = entry["epoch"], entry["start_offset"]
        if previous_epoch is not None and epoch <= previous_epoch:
            return True
        if offset < previous_offset or not row["start_offset"] <= offset <= row["end_offset"]:
            return True
        previous_epoch, previous_offset = epoch, offset
    return False


def lineage_of(row: Row, partition: PartitionState | None) -> str | None:
    """``LineageCheck`` name of a segment against its partition's chain (``None``: no
    metadata, no partition state, or epochs too broken to compare)."""
    if partition is None or not row["has_metadata"] or epochs_not_increasing(row):
        return None
    check = check_remote_segment_lineage(
        {e["epoch"]: e["start_offset"] for e in row["segment_leader_epochs"]},
        row["end_offset"],
        leader_epochs=filtered_leader_epoch_map(dict(partition.leader_epoch_chain)),
        log_end_offset=partition.log_end_offset,
    )
    return check.name


def off_leader_lineage(row: Row, leader: ReplicaState | None) -> str | None:
    """What puts a segment not yet DELETE_SEGMENT_FINISHED off the current leader replica's
    lineage, or ``None`` (on it, before or beyond it, or nothing to compare)."""
    if leader is None or leader.log_end_offset is None or row["current_state"] is None:
        return None
    if row["current_state"] == DELETE_FINISHED or not row["has_metadata"]:
        return None
    if epochs_not_increasing(row):
        return None
    epochs = {e["epoch"]: e["start_offset"] for e in row["segment_leader_epochs"]}
    check = check_remote_segment_lineage(
        epochs,
        row["end_offset"],
        leader_epochs=filtered_leader_epoch_map(dict(leader.leader_epoch_entries)),
        log_end_offset=leader.log_end_offset,
    )
    if check is not LineageCheck.OFF_LINEAGE:
        return None
    mine = " ".join(f"{epoch}@{start}" for epoch, start in epochs.items())
    lineage = " ".join(f"{epoch}@{start}" for epoch, start in leader.leader_epoch_entries)
    return (
        f"epochs [{mine}] are off the lineage of leader {leader.broker_id}"
        f" (epoch {leader.leader_epoch}): [{lineage}] up to {leader.log_end_offset}"
    )


def objects_problem(
    row: Row,
    missing: Sequence[str],
    log_size_bytes: int | None,
    *,
    chunked: bool = False,
    sizes: Mapping[str, int] | None = None,
) -> str | None:
    """What is wrong with a COPY_SEGMENT_FINISHED segment's objects, or ``None``. The
    ``.log`` of a ``chunked`` segment (one with a segment manifest) holds its chunks as
    stored, compressed or encrypted, so its size is not the segment's: its objects' listed
    ``sizes`` must add up to the stored size its copy recorded, with its manifest among them
    (``jobs.planning.chunked_objects``); its chunks' checksums are checked where they are
    read."""
    problems = []
    if missing:
        problems.append("missing " + ", ".join(f".{suffix}" for suffix in missing))
    expected = row["segment_size_bytes"]
    stored_size = row.get("chunked_stored_size_bytes")
    plain = not chunked and stored_size is None
    if log_size_bytes is not None and log_size_bytes != expected and plain:
        problems.append(f".log is {log_size_bytes} bytes, metadata says {expected}")
    if not missing:
        problem = chunked_objects_problem(stored_size, sizes or {})
        if problem is not None:
            problems.append(problem)
    return "; ".join(problems) or None


def derive_segment_checks(
    rows: Sequence[Row],
    partitions: Mapping[PartitionKey, PartitionState],
    *,
    now_ms: int,
    leaders: Mapping[PartitionKey, ReplicaState] | None = None,
) -> list[Row]:
    """New rows with the check columns of ``jobs.tables.schemas`` derived from the facts;
    ``leaders`` are the leader replicas (``replicas.leader_replicas``) by partition."""
    out: list[Row] = []
    for base in rows:
        row = dict(base)
        partition = partitions.get((row["topic_id"], row["partition"]))
        replay = replay_segment_states(row["state_history"])
        state = replay.current_state
        finished = state == FINISHED
        row["current_state"] = state
        row["invalid_transition"] = replay.invalid_transition
        row["started_age_ms"] = (
            now_ms - replay.entered_ms
            if state in SEGMENT_STARTED_STATES and replay.entered_ms is not None
            else None
        )
        lineage = lineage_of(row, partition)
        row["lineage"] = lineage
        row["epochs_not_increasing"] = epochs_not_increasing(row)
        row["epochs_conflict_with_chain"] = finished and lineage == LineageCheck.OFF_LINEAGE.name
        leader = None if leaders is None else leaders.get((row["topic_id"], row["partition"]))
        row["off_leader_lineage"] = off_leader_lineage(row, leader)
        sizes = {o["suffix"]: o["size_bytes"] for o in row["objects"]}
        required = list(REQUIRED_SUFFIXES)
        if row["txn_idx_empty"] is False:
            required.append(RemoteObjectSuffix.TRANSACTION_INDEX.value)
        missing = sorted(s for s in required if s not in sizes) if finished else []
        log_size = sizes.get(RemoteObjectSuffix.LOG.value)
        row["missing_objects"] = missing
        row["log_object_size_bytes"] = log_size
        chunked = RemoteObjectSuffix.SEGMENT_MANIFEST.value in sizes
        row["objects_problem"] = (
            objects_problem(row, missing, log_size, chunked=chunked, sizes=sizes)
            if finished
            else None
        )
        row["objects_without_live_metadata"] = bool(sizes) and (
            not row["has_metadata"] or state is None or state == DELETE_FINISHED
        )
        retention_ms = None if partition is None else partition.retention_ms
        row["retention_ms"] = retention_ms
        max_timestamp_ms = row["max_timestamp_ms"]
        age_ms = None if max_timestamp_ms is None else now_ms - max_timestamp_ms
        row["age_ms"] = age_ms
        row["older_than_retention"] = (
            finished
            and retention_ms is not None
            and retention_ms >= 0
            and age_ms is not None
            and age_ms > 2 * retention_ms
        )
        row["previous_end_offset"] = None
        row["gap_before"] = False
        row["overlaps_previous"] = False
        out.append(row)
    _derive_contiguity(out)
    return out


def _derive_contiguity(rows: list[Row]) -> None:
    """Per partition, the COPY_SEGMENT_FINISHED segments not OFF_LINEAGE, by start offset:
    each one after the first gets ``previous_end_offset``, ``gap_before``,
    ``overlaps_previous``."""
    lineages: dict[tuple[str, int], list[Row]] = {}
    for row in rows:
        if (
            row["current_state"] == FINISHED
            and row["has_metadata"]
            and row["lineage"] != LineageCheck.OFF_LINEAGE.name
        ):
            lineages.setdefault((row["topic_id"], row["partition"]), []).append(row)
    for members in lineages.values():
        members.sort(key=lambda r: (r["start_offset"], r["end_offset"], r["segment_id"]))
        for previous, row in itertools.pairwise(members):
            previous_end = previous["end_offset"]
            row["previous_end_offset"] = previous_end
            row["gap_before"] = row["start_offset"] > previous_end + 1
            row["overlaps_previous"] = row["start_offset"] <= previous_end


def build_remote_segments(
    records: Iterable[MetadataRecord],
    objects: Iterable[RemoteObjectInfo],
    partitions: Iterable[PartitionState],
    *,
    now_ms: int,
    key_prefix: str = "",
    leaders: Mapping[PartitionKey, ReplicaState] | None = None,
    copies: Mapping[str, CopyOffsets] | None = None,
) -> list[Row]:
    """The ``remote_segments`` rows (see ``jobs.tables.schemas``); ``leaders`` as in
    ``derive_segment_checks``, ``copies`` as in ``with_copy_offsets``."""
    by_key = {p.key: p for p in partitions}
    base = segment_base_rows(records, objects, key_prefix=key_prefix)
    if copies:
        base = with_copy_offsets(base, copies)
    return derive_segment_checks(base, by_key, now_ms=now_ms, leaders=leaders)
