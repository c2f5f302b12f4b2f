"""The quality tables, column by column: the one place their schemas are written down.

All are built by pure functions (``remote_segments.build_remote_segments``,
``partition_offsets.build_partition_offsets``, ``replicas.build_replicas``) as lists of
plain dicts, one per row, with exactly these keys; ``spark_ddl`` gives the Spark schema and
``row_tuples`` the rows in column order for ``spark.createDataFrame(rows, ddl)``;
``pandas.DataFrame(rows)`` takes them as they are. Offsets are Kafka offsets,
"(inclusive)" / "(exclusive)" says which bound; times are ms since the epoch. KIP-405
names: ``Lx`` local log start, ``Ly`` last stable offset, ``Lz`` log end offset, ``Rx`` /
``Ry`` remote log start / end offset.

Check columns (below the line in each table) are derived from the other columns of the same
tables by the builders; a violation flag is ``true`` when the row breaks the rule (``false``
when the rule does not apply), a ``*_problem`` / ``invalid_*`` text is null unless broken.
The suites in ``expectations/`` expect the flags false and the texts null.

``remote_segments``: one row per remote segment (one ``RemoteLogSegmentId``) known from
``__remote_log_metadata`` or found in the object listing::

    topic                  STRING   topic name
    partition              INT      partition number
    topic_id               STRING   topic id (Kafka Uuid text)
    segment_id             STRING   remote segment id (Uuid text; fresh per copy attempt)
    has_metadata           BOOLEAN  a COPY_SEGMENT_STARTED event named the segment
    start_offset           BIGINT   first offset (inclusive); from the object key if no metadata
    end_offset             BIGINT   last offset (inclusive); null without metadata
    max_timestamp_ms       BIGINT   largest record timestamp of the segment
    segment_size_bytes     BIGINT   recorded size of the .log object
    txn_idx_empty          BOOLEAN  the segment has no transaction index
    high_watermark_at_copy BIGINT   HW (exclusive) the copy of the segment was planned with
                                    (the copy run's ``copied-segments.json`` given to the
                                    quality job with ``--copied-segments``; null otherwise)
    last_stable_offset_at_copy BIGINT  Ly (exclusive) the copy was planned with, from the
                                    same record: the copy must end below it (null: not known)
    segment_leader_epochs  ARRAY<STRUCT<epoch INT, start_offset BIGINT>>  as published
    state_history          ARRAY<STRUCT<state STRING, timestamp_ms BIGINT>>  every event of
                                    the segment in log order (publish time of the record)
    current_state          STRING   state after the valid transitions (null: no metadata)
    objects                ARRAY<STRUCT<suffix STRING, size_bytes BIGINT>>  objects listed
    chunked_stored_size_bytes BIGINT  stored size of all the objects of a copy in the chunked
                                    format, from its custom metadata (null: plain format)
    --------------------------------------------------------------------------------
    lineage                STRING   ON_LINEAGE / OFF_LINEAGE / BEFORE_LINEAGE / BEYOND_VIEW
                                    against the partition's leader-epoch chain (null: unknown)
    previous_end_offset    BIGINT   end offset of the previous COPY_SEGMENT_FINISHED segment of
                                    the lineage (by start offset); null for the first / others
    gap_before             BOOLEAN  start_offset > previous_end_offset + 1
    overlaps_previous      BOOLEAN  start_offset <= previous_end_offset
    epochs_not_increasing  BOOLEAN  leader epochs not strictly increasing, start offsets
                                    decreasing, or outside [start_offset, end_offset]
    epochs_conflict_with_chain BOOLEAN  a COPY_SEGMENT_FINISHED segment OFF_LINEAGE
    off_leader_lineage     STRING   a segment not yet DELETE_SEGMENT_FINISHED whose epochs
                                    are OFF_LINEAGE against the current leader replica's
                                    leader-epoch-checkpoint (``replicas``): its epochs, the
                                    leader and the leader's lineage (null: on it, or the
                                    leader's log dir was not read)
    invalid_transition     STRING   first transition outside the segment state machine,
                                    e.g. "COPY_SEGMENT_FINISHED -> COPY_SEGMENT_STARTED"
    started_age_ms         BIGINT   time spent so far in COPY_SEGMENT_STARTED or
                                    DELETE_SEGMENT_STARTED (null in other states)
    missing_objects        ARRAY<STRING>  required suffixes absent (COPY_SEGMENT_FINISHED)
    log_object_size_bytes  BIGINT   listed size of the .log object (null if absent)
    objects_problem        STRING   what is wrong with a COPY_SEGMENT_FINISHED segment's
                                    objects (missing ones, .log size vs segment_size_bytes;
                                    chunked: the manifest missing, the objects' sizes vs
                                    chunked_stored_size_bytes)
    objects_without_live_metadata BOOLEAN  objects listed but no metadata, or the segment is
                                    DELETE_SEGMENT_FINISHED
    retention_ms           BIGINT   the topic's retention.ms (-1: unlimited; null: unknown)
    age_ms                 BIGINT   now - max_timestamp_ms
    older_than_retention   BOOLEAN  COPY_SEGMENT_FINISHED and age_ms > 2 * retention_ms

``partition_offsets``: one row per partition of the cluster's remote-enabled topics, plus one
per partition known only from partition-deletion events (``in_cluster`` false, offsets null)::

    topic                  STRING   topic name
    partition              INT      partition number
    topic_id               STRING   topic id
    in_cluster             BOOLEAN  the partition exists in the cluster now
    log_start_offset       BIGINT   the partition's log start offset (ListOffsets -2)
    local_log_start_offset BIGINT   Lx, first offset held locally (inclusive)
    high_watermark         BIGINT   HW (exclusive)
    last_stable_offset     BIGINT   Ly (exclusive; = HW without transactions)
    log_end_offset         BIGINT   Lz (exclusive)
    highest_remote_offset  BIGINT   the broker's answer to ListOffsets -5 (inclusive; -1 none)
    leader_epoch_chain     ARRAY<STRUCT<epoch INT, start_offset BIGINT>>  the
                                    leader-epoch-checkpoint, oldest first
    retention_ms           BIGINT   retention.ms (-1 unlimited)
    retention_bytes        BIGINT   retention.bytes (-1 unlimited)
    segment_bytes          BIGINT   segment.bytes
    --------------------------------------------------------------------------------
    remote_segment_count   INT      COPY_SEGMENT_FINISHED segments
    remote_bytes           BIGINT   their total segment_size_bytes
    remote_log_start_offset BIGINT  Rx: lowest start offset of them (null: none)
    remote_log_end_offset  BIGINT   Ry: highest end offset of those not OFF_LINEAGE (null: none)
    hole_before_local_log  BOOLEAN  Ry is known and max(Ry + 1, log_start_offset) < Lx
    chain_not_increasing   BOOLEAN  chain epochs or start offsets not strictly increasing
    remote_bytes_limit     BIGINT   retention_bytes + max(segment_bytes, largest segment)
                                    (null when retention_bytes is unlimited)
    remote_bytes_over_retention BOOLEAN  remote_bytes > remote_bytes_limit
    delete_state_history   ARRAY<STRUCT<state STRING, timestamp_ms BIGINT>>
    partition_delete_state STRING   latest valid DELETE_PARTITION_* state (null: none)
    invalid_delete_transition STRING  first transition outside the deletion state machine
    delete_started_age_ms  BIGINT   time spent so far in DELETE_PARTITION_MARKED/STARTED

``replicas``: one row per replica of a partition of the remote-enabled topics on a broker
whose log dirs the job reads (every broker of ``--broker-log-dirs``; the one broker of
``--log-dir`` / ``--broker-config``)::

    topic                  STRING   topic name
    partition              INT      partition number
    topic_id               STRING   topic id (null: unknown)
    broker_id              INT      the broker holding the replica
    role                   STRING   leader / follower (Metadata's leader of the partition)
    leader_id              INT      the partition's leader (-1: none)
    leader_epoch           INT      the partition's leader epoch (Metadata)
    replicas               ARRAY<INT>  the partition's assigned replicas
    isr                    ARRAY<INT>  the partition's in-sync replicas
    in_isr                 BOOLEAN  broker_id is in the ISR
    log_dir                STRING   the replica's partition directory (null: the broker's
                                    log dirs hold none; the offsets below are null then)
    log_start_offset       BIGINT   leader: ListOffsets -2; follower: log-start-offset-checkpoint
    local_log_start_offset BIGINT   first offset held locally (inclusive)
    high_watermark         BIGINT   HW (exclusive): the leader's answer to ListOffsets -1
                                    for the leader (its replication-offset-checkpoint if it
                                    does not answer); a follower's replication-offset-checkpoint
    high_watermark_source  STRING   LIST_OFFSETS or CHECKPOINT: where high_watermark came from
    log_end_offset         BIGINT   LEO (exclusive), from the replica's segments
    leader_epoch_entries   ARRAY<STRUCT<epoch INT, start_offset BIGINT>>  the replica's
                                    leader-epoch-checkpoint, oldest first
    --------------------------------------------------------------------------------
    partition_high_watermark BIGINT the leader replica's high_watermark (null: not read)
    epochs_diverge_from_leader STRING  a follower whose leader-epoch entries differ from the
                                    leader's over [max(local log starts), its LEO): both
                                    sides' entries there (null: they agree, or not read)
    isr_log_end_below_high_watermark BOOLEAN  in_isr and log_end_offset <
                                    partition_high_watermark
    partition_offline      BOOLEAN  the partition has no leader (leader_id -1)
    under_replicated       BOOLEAN  the partition has a leader and this replica is not in
                                    its ISR (a warning, not a failure)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

Row = dict[str, Any]

_EPOCHS = "ARRAY<STRUCT<epoch: INT, start_offset: BIGINT>>"
_HISTORY = "ARRAY<STRUCT<state: STRING, timestamp_ms: BIGINT>>"

REMOTE_SEGMENTS_COLUMNS: tuple[tuple[str, str], ...] = (
    ("topic", "STRING"),
    ("partition", "INT"),
    ("topic_id", "STRING"),
    ("segment_id", "STRING"),
    ("has_metadata", "BOOLEAN"),
    ("start_offset", "BIGINT"),
    ("end_offset", "BIGINT"),
    ("max_timestamp_ms", "BIGINT"),
    ("segment_size_bytes", "BIGINT"),
    ("txn_idx_empty", "BOOLEAN"),
    ("high_watermark_at_copy", "BIGINT"),
    ("last_stable_offset_at_copy", "BIGINT"),
    ("segment_leader_epochs", _EPOCHS),
    ("state_history", _HISTORY),
    ("current_state", "STRING"),
    ("objects", "ARRAY<STRUCT<suffix: STRING, size_bytes: BIGINT>>"),
    ("chunked_stored_size_bytes", "BIGINT"),
    ("lineage", "STRING"),
    ("previous_end_offset", "BIGINT"),
    ("gap_before", "BOOLEAN"),
    ("overlaps_previous", "BOOLEAN"),
    ("epochs_not_increasing", "BOOLEAN"),
    ("epochs_conflict_with_chain", "BOOLEAN"),
    ("off_leader_lineage", "STRING"),
    ("invalid_transition", "STRING"),
    ("started_age_ms", "BIGINT"),
    ("missing_objects", "ARRAY<STRING>"),
    ("log_object_size_bytes", "BIGINT"),
    ("objects_problem", "STRING"),
    ("objects_without_live_metadata", "BOOLEAN"),
    ("retention_ms", "BIGINT"),
    ("age_ms", "BIGINT"),
    ("older_than_retention", "BOOLEAN"),
)

PARTITION_OFFSETS_COLUMNS: tuple[tuple[str, str], ...] = (
    ("topic", "STRING"),
    ("partition", "INT"),
    ("topic_id", "STRING"),
    ("in_cluster", "BOOLEAN"),
    ("log_start_offset", "BIGINT"),
    ("local_log_start_offset", "BIGINT"),
    ("high_watermark", "BIGINT"),
    ("last_stable_offset", "BIGINT"),
    ("log_end_offset", "BIGINT"),
    ("highest_remote_offset", "BIGINT"),
    ("leader_epoch_chain", _EPOCHS),
    ("retention_ms", "BIGINT"),
    ("retention_bytes", "BIGINT"),
    ("segment_bytes", "BIGINT"),
    ("remote_segment_count", "INT"),
    ("remote_bytes", "BIGINT"),
    ("remote_log_start_offset", "BIGINT"),
    ("remote_log_end_offset", "BIGINT"),
    ("hole_before_local_log", "BOOLEAN"),
    ("chain_not_increasing", "BOOLEAN"),
    ("remote_bytes_limit", "BIGINT"),
    ("remote_bytes_over_retention", "BOOLEAN"),
    ("delete_state_history", _HISTORY),
    ("partition_delete_state", "STRING"),
    ("invalid_delete_transition", "STRING"),
    ("delete_started_age_ms", "BIGINT"),
)

REPLICAS_COLUMNS: tuple[tuple[str, str], ...] = (
    ("topic", "STRING"),
    ("partition", "INT"),
    ("topic_id", "STRING"),
    ("broker_id", "INT"),
    ("role", "STRING"),
    ("leader_id", "INT"),
    ("leader_epoch", "INT"),
    ("replicas", "ARRAY<INT>"),
    ("isr", "ARRAY<INT>"),
    ("in_isr", "BOOLEAN"),
    ("log_dir", "STRING"),
    ("log_start_offset", "BIGINT"),
    ("local_log_start_offset", "BIGINT"),
    ("high_watermark", "BIGINT"),
    ("high_watermark_source", "STRING"),
    ("log_end_offset", "BIGINT"),
    ("leader_epoch_entries", _EPOCHS),
    ("partition_high_watermark", "BIGINT"),
    ("epochs_diverge_from_leader", "STRING"),
    ("isr_log_end_below_high_watermark", "BOOLEAN"),
    ("partition_offline", "BOOLEAN"),
    ("under_replicated", "BOOLEAN"),
)

# Columns that name a row in failure reports (besides the column an expectation checks).
REMOTE_SEGMENTS_ROW_ID = (
    "topic",
    "partition",
    "segment_id",
    "start_offset",
    "end_offset",
    "current_state",
    "previous_end_offset",
    "last_stable_offset_at_copy",
)
PARTITION_OFFSETS_ROW_ID = (
    "topic",
    "partition",
    "log_start_offset",
    "local_log_start_offset",
    "last_stable_offset",
    "log_end_offset",
    "remote_log_start_offset",
    "remote_log_end_offset",
)
REPLICAS_ROW_ID = (
    "topic",
    "partition",
    "broker_id",
    "role",
    "leader_id",
    "leader_epoch",
    "high_watermark",
    "log_end_offset",
    "partition_high_watermark",
)

TABLE_COLUMNS: Mapping[str, tuple[tuple[str, str], ...]] = {
    "remote_segments": REMOTE_SEGMENTS_COLUMNS,
    "partition_offsets": PARTITION_OFFSETS_COLUMNS,
    "replicas": REPLICAS_COLUMNS,
}


def column_names(table: str) -> list[str]:
    return [name for name, _ in TABLE_COLUMNS[table]]


def spark_ddl(table: str) -> str:
    """The table's schema as a Spark DDL string (``createDataFrame(rows, spark_ddl(t))``)."""
    return ", ".join(f"`{name}` {kind}" for name, kind in TABLE_COLUMNS[table])


def row_tuples(table: str, rows: Sequence[Row]) -> list[tuple[Any, ...]]:
    """Rows as tuples in column order; ``ValueError`` naming a row whose keys differ."""
    names = column_names(table)
    expected = set(names)
    out = []
    for row in rows:
        if set(row) != expected:
            raise ValueError(
                f"{table} row {row.get('topic')}-{row.get('partition')} has columns"
                f" {sorted(set(row) ^ expected)} that differ from the schema"
            )
        out.append(tuple(row[name] for name in names))
    return out
