"""Pure builders of the quality tables ``remote_segments``, ``partition_offsets`` and
``replicas``.

Schemas: ``jobs.tables.schemas`` (the one place they are written down). Inputs:
``jobs.tables.inputs``. No I/O, no Spark: the quality job turns the rows into DataFrames.
"""

from jobs.tables.inputs import (
    CopyOffsets,
    MetadataRecord,
    PartitionState,
    RemoteObjectInfo,
    ReplicaState,
)
from jobs.tables.partition_offsets import build_partition_offsets
from jobs.tables.remote_segments import build_remote_segments
from jobs.tables.replicas import build_replicas, leader_replicas
from jobs.tables.schemas import (
    PARTITION_OFFSETS_COLUMNS,
    REMOTE_SEGMENTS_COLUMNS,
    REPLICAS_COLUMNS,
    column_names,
    row_tuples,
    spark_ddl,
)

__all__ = [
    "PARTITION_OFFSETS_COLUMNS",
    "REMOTE_SEGMENTS_COLUMNS",
    "REPLICAS_COLUMNS",
    "CopyOffsets",
    "MetadataRecord",
    "PartitionState",
    "RemoteObjectInfo",
    "ReplicaState",
    "build_partition_offsets",
    "build_remote_segments",
    "build_replicas",
    "column_names",
    "leader_replicas",
    "row_tuples",
    "spark_ddl",
]
