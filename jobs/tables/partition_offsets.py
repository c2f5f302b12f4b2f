"""``partition_offsets``: one row per partition (schema in ``jobs.tables.schemas``).

``partition_base_rows`` takes the partitions' states and the partition-deletion events;
``derive_partition_checks`` adds the check columns from them and the ``remote_segments``
rows; ``build_partition_offsets`` does both. Pure, like ``remote_segments``.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence

from jobs.tables.inputs import MetadataRecord, PartitionKey, PartitionState
from jobs.tables.schemas import Row
from jobs.tables.states import DELETE_PENDING_STATES, replay_delete_states
from storage_core.tiered.metadata.metadata import RemotePartitionDeleteMetadata
from storage_core.tiered.operations.lineage import LineageCheck

FINISHED = "COPY_SEGMENT_FINISHED"


def _state_row(state: PartitionState) -> Row:
    return {
        "topic": state.topic,
        "partition": state.partition,
        "topic_id": str(state.topic_id),
        "in_cluster": True,
        "log_start_offset": state.log_start_offset,
        "local_log_start_offset": state.local_log_start_offset,
        "high_watermark": state.high_watermark,
        "last_stable_offset": state.last_stable_offset,
        "log_end_offset": state.log_end_offset,
        "highest_remote_offset": state.highest_remote_offset,
        "leader_epoch_chain": [
            {"epoch": epoch, "start_offset": offset} for epoch, offset in state.leader_epoch_chain
        ],
        "retention_ms": state.retention_ms,
        "retention_bytes": state.retention_bytes,
        "segment_bytes": state.segment_bytes,
        "delete_state_history": [],
    }


def _deleted_row(topic: str, partition: int, topic_id: str) -> Row:
    row: Row = dict.fromkeys(_state_row_keys())
    row.update(
        topic=topic,
        partition=partition,
        topic_id=topic_id,
        in_cluster=False,
        leader_epoch_chain=[],
        delete_state_history=[],
    )
    return row


def _state_row_keys() -> list[str]:
    return [
        "topic",
        "partition",
        "topic_id",
        "in_cluster",
        "log_start_offset",
        "local_log_start_offset",
        "high_watermark",
        "last_stable_offset",
        "log_end_offset",
        "highest_remote_offset",
        "leader_epoch_chain",
        "retention_ms",
        "retention_bytes",
        "segment_bytes",
        "delete_state_history",
    ]


def partition_base_rows(
    partitions: Iterable[PartitionState], records: Iterable[MetadataRecord]
) -> list[Row]:
    """Fact columns of every partition in ``partitions`` or named by a deletion event."""
    rows: dict[PartitionKey, Row] = {p.key: _state_row(p) for p in partitions}
    for record in sorted(records, key=lambda r: (r.partition, r.offset)):
        event = record.event
        if not isinstance(event, RemotePartitionDeleteMetadata):
            continue
        tip = event.topic_id_partition
        tp = tip.topic_partition
        key = (str(tip.topic_id), tp.partition)
        row = rows.get(key)
        if row is None:
            row = rows[key] = _deleted_row(tp.topic, tp.partition, key[0])
        row["delete_state_history"].append(
            {"state": event.state.name, "timestamp_ms": record.timestamp_ms}
        )
    return sorted(rows.values(), key=lambda r: (r["topic"], r["partition"], r["topic_id"]))


def chain_not_increasing(chain: Sequence[dict[str, int]]) -> bool:
    """Whether the chain's epochs or start offsets are not strictly increasing."""
    return any(
        later["epoch"] <= earlier["epoch"] or later["start_offset"] <= earlier["start_offset"]
        for earlier, later in itertools.pairwise(chain)
    )


def derive_partition_checks(
    rows: Sequence[Row], segment_rows: Sequence[Row], *, now_ms: int
) -> list[Row]:
    """New rows with the check columns of ``jobs.tables.schemas``."""
    finished: dict[PartitionKey, list[Row]] = {}
    for segment in segment_rows:
        if segment["current_state"] == FINISHED and segment["has_metadata"]:
            key = (segment["topic_id"], segment["partition"])
            finished.setdefault(key, []).append(segment)
    out = []
    for base in rows:
        row = dict(base)
        segments = finished.get((row["topic_id"], row["partition"]), [])
        sizes = [s["segment_size_bytes"] for s in segments]
        lineage_ends = [
            s["end_offset"] for s in segments if s["lineage"] != LineageCheck.OFF_LINEAGE.name
        ]
        row["remote_segment_count"] = len(segments)
        row["remote_bytes"] = sum(sizes)
        row["remote_log_start_offset"] = min((s["start_offset"] for s in segments), default=None)
        remote_end = max(lineage_ends, default=None)
        row["remote_log_end_offset"] = remote_end
        local_start = row["local_log_start_offset"]
        row["hole_before_local_log"] = (
            remote_end is not None
            and local_start is not None
            and max(remote_end + 1, row["log_start_offset"]) < local_start
        )
        row["chain_not_increasing"] = chain_not_increasing(row["leader_epoch_chain"])
        retention_bytes = row["retention_bytes"]
        if retention_bytes is None or retention_bytes < 0:
            row["remote_bytes_limit"] = None
        else:
            one_segment = max([row["segment_bytes"] or 0, *sizes])
            row["remote_bytes_limit"] = retention_bytes + one_segment
        limit = row["remote_bytes_limit"]
        row["remote_bytes_over_retention"] = limit is not None and row["remote_bytes"] > limit
        replay = replay_delete_states(row["delete_state_history"])
        row["partition_delete_state"] = replay.current_state
        row["invalid_delete_transition"] = replay.invalid_transition
        row["delete_started_age_ms"] = (
            now_ms - replay.entered_ms
            if replay.current_state in DELETE_PENDING_STATES and replay.entered_ms is not None
            else None
        )
        out.append(row)
    return out


def build_partition_offsets(
    partitions: Iterable[PartitionState],
    records: Iterable[MetadataRecord],
    segment_rows: Sequence[Row],
    *,
    now_ms: int,
) -> list[Row]:
    """The ``partition_offsets`` rows (see ``jobs.tables.schemas``)."""
    return derive_partition_checks(
        partition_base_rows(partitions, records), segment_rows, now_ms=now_ms
    )
