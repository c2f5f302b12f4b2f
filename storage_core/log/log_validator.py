"""Validation of incoming record batches and, for the leader, offset assignment in place.

Kafka's split (``UnifiedLog.analyzeAndValidateRecords`` and ``LogValidator``):

- every append (``analyze_and_validate``): framing, magic 2, sizes against
  ``max.message.bytes``/``segment.bytes``, CRC32C, the offset range against the record count;
- appends from clients (``validate_client_batches``, on the produce path): base offset 0, no
  control batch, a base sequence with a producer id, no transactional batch without one;
- leader appends (``assign_offsets``, Kafka's ``validateMessagesAndAssignOffsets``): every
  record of every batch, decompressed when compressed (``records.record_scan``: lengths,
  offset deltas 0..n-1, key/value/header framing, nothing left over), and the batch's
  ``maxTimestamp`` recomputed from the records (CreateTime) or set to the append time
  (LogAppendTime). Followers append what their leader validated.

Errors, as Kafka answers them: a bad CRC, size field, unknown codec or undecodable compressed
stream is CORRUPT_MESSAGE (``CorruptRecordError``; Kafka itself answers UNKNOWN_SERVER_ERROR for
the last two, which tells a client nothing); a malformed record or a batch a client may not
write is INVALID_RECORD (``InvalidRecordError``, naming the record in ``record_errors``); a
client batch flagged LogAppendTime where Kafka refuses it is INVALID_TIMESTAMP with one record
error per record. Nothing of a refused append is written.

A leader patches the base offset and partition leader epoch of every batch in place; those
header fields lie outside the CRC (which starts at ``attributes``), so no checksum is
recomputed. A batch whose ``maxTimestamp`` (or timestamp type) must change is copied whole and
re-checksummed, as Kafka's ``setMaxTimestamp`` does.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from storage_core.errors import (
    CorruptRecordError,
    DecompressedSizeLimitError,
    InvalidRecordError,
    InvalidRecordTimestampError,
    RecordBatchTooLargeError,
    RecordTooLargeError,
    UnexpectedAppendOffsetError,
    UnsupportedCompressionError,
)
from storage_core.log.producer_state_entry import BatchMetadata
from storage_core.log.timestamp_window import TimestampWindow
from storage_core.records import (
    BATCH_HEADER_SIZE,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    CompressionType,
    RecordBatch,
    TimestampType,
    decompress,
    iter_batches,
    patch_log_append_time,
    patch_max_timestamp,
    patch_offset_and_epoch,
)
from storage_core.records.record_scan import scan_records

# A produce request with more batches than this is refused rather than walked forever.
MAX_BATCHES_PER_APPEND = 100_000
# Kafka lists a record error for every record; a response names at most this many.
MAX_RECORD_ERRORS = 1_000


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchInfo:
    """One validated batch of an append: where it sits in the buffer and what it holds.

    The producer fields are those of the batch header (``NO_PRODUCER_ID`` etc. for a batch
    of a producer that is not idempotent).
    """

    position: int
    base_offset: int
    last_offset_delta: int
    records_count: int
    max_timestamp: int
    partition_leader_epoch: int
    size_in_bytes: int
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    base_sequence: int = NO_SEQUENCE
    is_transactional: bool = False
    is_control: bool = False

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta


@dataclass(frozen=True, slots=True, kw_only=True)
class LogAppendInfo:
    """Summary of validated batches (Kafka's ``LogAppendInfo``); offsets are inclusive.

    ``is_duplicate``: the append was a retry of batches already in the log (same producer,
    epoch and sequence range); nothing was written and ``first_offset``/``last_offset`` are
    the offsets the original batch got, which the producer must be answered with.
    """

    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    records_count: int
    valid_bytes: int
    batches: tuple[BatchInfo, ...]
    log_append_time_ms: int = NO_TIMESTAMP
    is_duplicate: bool = False

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1


def analyze_and_validate(
    buffer: bytes | bytearray | memoryview,
    *,
    max_message_bytes: int,
    segment_bytes: int,
    file: str | None = None,
    timestamp_window: TimestampWindow | None = None,
) -> LogAppendInfo:
    """Validate every batch in ``buffer`` and summarise them, with the offsets as given.

    Raises ``CorruptRecordError`` (bad framing or CRC), ``InvalidRecordError`` (inconsistent
    offsets and counts) or ``RecordBatchTooLargeError`` (over ``max.message.bytes`` /
    ``segment.bytes``). Nothing is written when any batch fails.
    """
    if len(buffer) == 0:
        raise InvalidRecordError("an append must carry at least one record batch")
    if len(buffer) > segment_bytes:
        raise RecordBatchTooLargeError(
            f"the record batches are {len(buffer)} bytes, larger than segment.bytes"
            f" ({segment_bytes})"
        )
    batches: list[BatchInfo] = []
    records_count = 0
    max_timestamp = NO_TIMESTAMP
    offset_of_max_timestamp = -1
    end = 0
    for position, batch in iter_batches(buffer, file=file):
        if len(batches) >= MAX_BATCHES_PER_APPEND:
            raise InvalidRecordError(f"more than {MAX_BATCHES_PER_APPEND} batches in one append")
        _validate_batch(batch, position, max_message_bytes, file)
        if timestamp_window is not None:  # a leader's append to a topic with a window
            timestamp_window.check(batch, batch_index=len(batches))
        info = BatchInfo(
            position=position,
            base_offset=batch.base_offset,
            last_offset_delta=batch.last_offset_delta,
            records_count=batch.records_count,
            max_timestamp=batch.max_timestamp,
            partition_leader_epoch=batch.partition_leader_epoch,
            size_in_bytes=batch.size_in_bytes,
            producer_id=batch.producer_id,
            producer_epoch=batch.producer_epoch,
            base_sequence=batch.base_sequence,
            is_transactional=batch.is_transactional,
            is_control=batch.is_control,
        )
        batches.append(info)
        records_count += batch.records_count
        if batch.max_timestamp > max_timestamp:
            max_timestamp = batch.max_timestamp
            offset_of_max_timestamp = info.last_offset
        end = position + batch.size_in_bytes
    if end != len(buffer):
        raise CorruptRecordError(
            f"{len(buffer) - end} trailing bytes after the last batch", file=file, position=end
        )
    return LogAppendInfo(
        first_offset=batches[0].base_offset,
        last_offset=batches[-1].last_offset,
        max_timestamp=max_timestamp,
        offset_of_max_timestamp=offset_of_max_timestamp,
        records_count=records_count,
        valid_bytes=end,
        batches=tuple(batches),
    )


def _validate_batch(
    batch: RecordBatch, position: int, max_message_bytes: int, file: str | None
) -> None:
    if batch.size_in_bytes > max_message_bytes:
        raise RecordTooLargeError(
            f"batch at position {position} is {batch.size_in_bytes} bytes, larger than"
            f" max.message.bytes ({max_message_bytes})"
        )
    batch.ensure_valid()
    if batch.last_offset_delta < 0:
        raise InvalidRecordError(f"batch at position {position} has an invalid offset range")
    if batch.records_count <= 0:
        raise InvalidRecordError(
            f"batch at position {position} reports an invalid record count {batch.records_count}"
        )
    if batch.last_offset_delta + 1 != batch.records_count:
        raise InvalidRecordError(
            f"batch at position {position}: offset range {batch.last_offset_delta + 1} does not"
            f" match its record count {batch.records_count}"
        )


def assign_offsets(
    buffer: bytes | bytearray | memoryview,
    info: LogAppendInfo,
    *,
    next_offset: int,
    leader_epoch: int,
    log_append_time_ms: int | None = None,
) -> tuple[LogAppendInfo, list[bytes | bytearray | memoryview]]:
    """Give the batches offsets from ``next_offset`` on and stamp the leader epoch.

    Returns the new summary and the bytes to write, as parts: for each batch a patched copy of
    its 61-byte header followed by a view of its untouched body, so a large batch is never
    copied. With ``log_append_time_ms`` the batches become LogAppendTime batches, which changes
    CRC-covered bytes, so each batch is copied whole and re-checksummed.
    """
    view = memoryview(buffer).cast("B")
    parts: list[bytes | bytearray | memoryview] = []
    batches: list[BatchInfo] = []
    offset = next_offset
    max_timestamp = NO_TIMESTAMP
    offset_of_max_timestamp = -1
    for batch in info.batches:
        start, end = batch.position, batch.position + batch.size_in_bytes
        batch_max_timestamp, header_is_right = validate_records(
            buffer, batch.position, log_append_time=log_append_time_ms is not None
        )
        if log_append_time_ms is None and header_is_right:
            header = bytearray(view[start : start + BATCH_HEADER_SIZE])
            patch_offset_and_epoch(
                header, 0, base_offset=offset, partition_leader_epoch=leader_epoch
            )
            parts.append(header)
            parts.append(view[start + BATCH_HEADER_SIZE : end])
        else:
            whole = bytearray(view[start:end])
            patch_offset_and_epoch(
                whole, 0, base_offset=offset, partition_leader_epoch=leader_epoch
            )
            if log_append_time_ms is None:
                patch_max_timestamp(whole, 0, batch_max_timestamp)
            else:
                patch_log_append_time(whole, 0, log_append_time_ms)
                batch_max_timestamp = log_append_time_ms
            parts.append(whole)
        assigned = BatchInfo(
            position=batch.position,
            base_offset=offset,
            last_offset_delta=batch.last_offset_delta,
            records_count=batch.records_count,
            max_timestamp=batch_max_timestamp,
            partition_leader_epoch=leader_epoch,
            size_in_bytes=batch.size_in_bytes,
            producer_id=batch.producer_id,
            producer_epoch=batch.producer_epoch,
            base_sequence=batch.base_sequence,
            is_transactional=batch.is_transactional,
            is_control=batch.is_control,
        )
        batches.append(assigned)
        if batch_max_timestamp > max_timestamp:
            max_timestamp = batch_max_timestamp
            offset_of_max_timestamp = assigned.last_offset
        offset = assigned.last_offset + 1
    summary = LogAppendInfo(
        first_offset=next_offset,
        last_offset=offset - 1,
        max_timestamp=max_timestamp,
        offset_of_max_timestamp=offset_of_max_timestamp,
        records_count=info.records_count,
        valid_bytes=info.valid_bytes,
        batches=tuple(batches),
        log_append_time_ms=NO_TIMESTAMP if log_append_time_ms is None else log_append_time_ms,
    )
    return summary, parts


def validate_records(
    buffer: bytes | bytearray | memoryview, position: int, *, log_append_time: bool
) -> tuple[int, bool]:
    """Check every record of the batch at ``position``: ``(max timestamp as Kafka stores it,
    whether the header already says so)``.

    For a CreateTime topic that is the largest record timestamp (``baseTimestamp`` plus the
    largest delta), whatever the header said. A client batch flagged LogAppendTime is refused
    with INVALID_TIMESTAMP where Kafka refuses it (a LogAppendTime topic, or no timestamp);
    on a CreateTime topic Kafka keeps its max timestamp and stores it as CreateTime. The
    max timestamp is ignored for LogAppendTime topics (the append time replaces it).
    """
    batch = RecordBatch.from_buffer(buffer, position)
    count = batch.records_count
    if batch.timestamp_type == TimestampType.LOG_APPEND_TIME and (
        log_append_time or batch.max_timestamp == NO_TIMESTAMP
    ):
        message = (
            "the batch's timestamp type is LogAppendTime; a producer must send CreateTime"
            " (the broker sets LogAppendTime itself)"
        )
        raise InvalidRecordTimestampError(
            f"{message}; nothing of the batch was stored",
            record_errors=tuple((index, message) for index in range(min(count, MAX_RECORD_ERRORS))),
        )
    try:
        compression = batch.compression
    except UnsupportedCompressionError as exc:
        raise CorruptRecordError(str(exc), position=position, offset=batch.base_offset) from None
    records_start = position + BATCH_HEADER_SIZE
    records_end = position + batch.size_in_bytes
    data: bytes
    if compression == CompressionType.NONE:
        if isinstance(buffer, bytes):
            data, start, end = buffer, records_start, records_end
        else:
            data = bytes(memoryview(buffer).cast("B")[records_start:records_end])
            start, end = 0, len(data)
    else:
        try:
            data = decompress(compression, memoryview(buffer).cast("B")[records_start:records_end])
        except DecompressedSizeLimitError:
            raise
        except CorruptRecordError as exc:
            raise CorruptRecordError(
                f"{exc.reason}; the batch's compression flag ({compression.display_name}) does"
                " not match its records",
                position=position,
                offset=batch.base_offset,
            ) from None
        start, end = 0, len(data)
    max_delta = scan_records(data, start, end, count)
    if batch.timestamp_type == TimestampType.LOG_APPEND_TIME:
        return batch.max_timestamp, False
    max_timestamp = batch.base_timestamp + max_delta
    return max_timestamp, max_timestamp == batch.max_timestamp


def validate_client_batches(buffer: bytes | bytearray | memoryview) -> None:
    """Kafka's ``LogValidator.validateBatch`` rules for batches a client produced.

    Raises ``InvalidRecordError`` for a base offset other than 0, a control batch, a producer
    id without a base sequence, and a transactional batch without a producer id (which Kafka's
    own builder refuses to write). Framing, sizes and CRCs are ``analyze_and_validate``'s.
    """
    for position, batch in iter_batches(buffer):
        problem = None
        if batch.base_offset != 0:
            problem = f"its base offset is {batch.base_offset}; a producer sends 0"
        elif batch.is_control:
            problem = "it is a control batch; clients may not write control records"
        elif batch.producer_id != NO_PRODUCER_ID and batch.base_sequence < 0:
            problem = (
                f"it has producer id {batch.producer_id} but base sequence"
                f" {batch.base_sequence}; an idempotent batch needs a sequence >= 0"
            )
        elif batch.is_transactional and batch.producer_id == NO_PRODUCER_ID:
            problem = "it is transactional without a producer id; call InitProducerId first"
        if problem is not None:
            raise InvalidRecordError(
                f"the record batch at byte {position} of the request is refused: {problem};"
                " nothing of it was stored"
            )


def validate_follower_offsets(info: LogAppendInfo, *, log_end_offset: int, partition: str) -> None:
    """A follower's batches must start at the LEO and follow each other without a gap."""
    if info.first_offset != log_end_offset:
        raise UnexpectedAppendOffsetError(
            f"partition {partition}: follower append starts at offset"
            f" {info.first_offset} but the log end offset is {log_end_offset}"
        )
    expected = info.first_offset
    for batch in info.batches:
        if batch.base_offset != expected:
            raise UnexpectedAppendOffsetError(
                f"partition {partition}: batch at offset {batch.base_offset}"
                f" does not follow offset {expected - 1} (offsets must be contiguous)"
            )
        expected = batch.last_offset + 1


def duplicate_append_info(
    info: LogAppendInfo, duplicate: BatchMetadata, *, uses_log_append_time: bool
) -> LogAppendInfo:
    """The answer to a retried batch: the offsets and timestamp the original one got."""
    return replace(
        info,
        first_offset=duplicate.first_offset,
        last_offset=duplicate.last_offset,
        max_timestamp=duplicate.timestamp,
        offset_of_max_timestamp=duplicate.last_offset,
        batches=(),
        # Kafka answers with the original batch's timestamp as its log append time.
        log_append_time_ms=duplicate.timestamp if uses_log_append_time else NO_TIMESTAMP,
        is_duplicate=True,
    )
