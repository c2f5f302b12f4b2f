"""Kafka record batches v2 (magic 2): codecs, batches in memory and the ``.log`` file.

Modules, bottom up, in Kafka's terms: ``varint`` (``ByteUtils``' integer encodings),
``compression`` (codecs and their Kafka framings), ``record`` (``DefaultRecord``: record values
and their decoder), ``batch`` (``DefaultRecordBatch``: the batch wire format and its in-place
setters), ``record_batch_header`` (``FileChannelRecordBatch``: a batch header read from a
file), ``memory_records_builder`` (``MemoryRecordsBuilder``: encoding a batch),
``memory_records`` (``MemoryRecords``: batches back to back in a buffer), ``file_records``
(``FileRecords``: a segment's ``.log`` file) and ``end_transaction_marker``
(``EndTransactionMarker``: what a control batch ending a transaction carries).
"""

from storage_core.records.batch import (
    BATCH_HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_V2,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    RecordBatch,
    TimestampType,
    patch_log_append_time,
    patch_max_timestamp,
    patch_offset_and_epoch,
)
from storage_core.records.compression import (
    DEFAULT_MAX_DECOMPRESSED_BYTES,
    CompressionType,
    compress,
    decompress,
)
from storage_core.records.file_records import MAX_FILE_BYTES, FileRecords
from storage_core.records.memory_records import iter_batches
from storage_core.records.memory_records_builder import build_batch
from storage_core.records.record import Header, Record, SimpleRecord
from storage_core.records.record_batch_header import RecordBatchHeader, parse_batch_header

__all__ = [
    "BATCH_HEADER_SIZE",
    "DEFAULT_MAX_DECOMPRESSED_BYTES",
    "LOG_OVERHEAD",
    "MAGIC_V2",
    "MAX_FILE_BYTES",
    "NO_PARTITION_LEADER_EPOCH",
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "NO_SEQUENCE",
    "NO_TIMESTAMP",
    "CompressionType",
    "FileRecords",
    "Header",
    "Record",
    "RecordBatch",
    "RecordBatchHeader",
    "SimpleRecord",
    "TimestampType",
    "build_batch",
    "compress",
    "decompress",
    "iter_batches",
    "parse_batch_header",
    "patch_log_append_time",
    "patch_max_timestamp",
    "patch_offset_and_epoch",
]
