"""Reading segment files for humans and scripts (in the spirit of ``kafka-dump-log.sh``).

Every function here only reads: files are opened read-only and never repaired. Each yields
plain dicts (one per batch, record, index entry, aborted transaction or epoch entry) that the
CLI prints as text in Kafka's ``key: value`` style or as one JSON object per line. The record
of a control batch shows its transaction marker as Kafka's ``DumpLogSegments`` does
(``endTxnMarker: ABORT coordinatorEpoch: 3``), not its key and value.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from storage_core.errors import (
    CorruptCheckpointError,
    CorruptIndexError,
    CorruptRecordError,
    StorageError,
)
from storage_core.log import log_file_utils as files
from storage_core.log.leader_epoch_cache import (
    LEADER_EPOCH_CHECKPOINT_FILENAME,
    LeaderEpochCheckpointFile,
)
from storage_core.log.offset_index import OffsetIndex, OffsetPosition
from storage_core.log.time_index import TimeIndex
from storage_core.log.transaction_index import CURRENT_VERSION, ENTRY_SIZE, AbortedTxn
from storage_core.records import FileRecords, RecordBatch, TimestampType
from storage_core.records.end_transaction_marker import ControlRecordType

Row = dict[str, Any]


def dump_path(path: Path, *, print_data: bool = False, verify_index: bool = False) -> Iterator[Row]:
    """Rows describing one file; the kind is chosen by its name, as Kafka's tool does."""
    name = path.name
    if name == LEADER_EPOCH_CHECKPOINT_FILENAME:
        yield from dump_leader_epoch_checkpoint(path)
    elif name.endswith(files.LOG_FILE_SUFFIX) or name.endswith(files.QUARANTINED_FILE_SUFFIX):
        yield from dump_log_file(path, print_data=print_data)
    elif name.endswith(files.INDEX_FILE_SUFFIX):
        yield from dump_offset_index(path, verify=verify_index)
    elif name.endswith(files.TIME_INDEX_FILE_SUFFIX):
        yield from dump_time_index(path, verify=verify_index)
    elif name.endswith(files.TXN_INDEX_FILE_SUFFIX):
        yield from dump_txn_index(path)
    else:
        raise StorageError(
            f"{path}: not a .log, .index, .timeindex, .txnindex or leader-epoch-checkpoint file"
        )


def _base_offset_of(path: Path) -> int:
    try:
        return files.offset_from_file_name(path.name)
    except ValueError:
        return 0


def dump_log_file(path: Path, *, print_data: bool = False) -> Iterator[Row]:
    records = FileRecords.open(path, mutable=False)
    try:
        yield {"type": "file", "file": str(path), "base_offset": _base_offset_of(path)}
        position = 0
        try:
            for position, header in records.batches(0):
                batch = header.load(records)
                crc_valid = batch.is_valid()
                yield {
                    "type": "batch",
                    "base_offset": batch.base_offset,
                    "last_offset": batch.last_offset,
                    "count": batch.records_count,
                    "base_sequence": batch.base_sequence,
                    "producer_id": batch.producer_id,
                    "producer_epoch": batch.producer_epoch,
                    "partition_leader_epoch": batch.partition_leader_epoch,
                    "is_transactional": batch.is_transactional,
                    "is_control": batch.is_control,
                    "position": position,
                    "timestamp_type": TimestampType(batch.timestamp_type).name,
                    "base_timestamp": batch.base_timestamp,
                    "max_timestamp": batch.max_timestamp,
                    "size": batch.size_in_bytes,
                    "magic": batch.magic,
                    "compression": batch.compression.name.lower(),
                    "crc": batch.crc,
                    "crc_valid": crc_valid,
                }
                if print_data and crc_valid:
                    yield from _record_rows(batch)
        except CorruptRecordError as exc:
            yield {
                "type": "error",
                "file": str(path),
                "position": exc.position if exc.position is not None else position,
                "offset": exc.offset,
                "error": exc.reason,
            }
    finally:
        records.close()


def _record_rows(batch: RecordBatch) -> Iterator[Row]:
    for record in batch.records():
        row: Row = {
            "type": "record",
            "offset": record.offset,
            "timestamp": record.timestamp,
            "key_size": -1 if record.key is None else len(record.key),
            "value_size": -1 if record.value is None else len(record.value),
            "header_keys": [h.key for h in record.headers],
        }
        if batch.is_control:
            row.update(_control_fields(record.key, record.value))
        else:
            row["key"] = _text(record.key)
            row["payload"] = _text(record.value)
        yield row


def _control_fields(key: bytes | None, value: bytes | None) -> Row:
    """A control record's type and, for a transaction marker, its coordinator epoch (as
    Kafka's tool prints them); a record too short to parse shows its bytes."""
    key, value = key or b"", value or b""
    if len(key) < 4:
        return {"control_key": key.hex()}
    type_id = int.from_bytes(key[2:4], "big", signed=True)
    if type_id not in (ControlRecordType.ABORT, ControlRecordType.COMMIT) or len(value) < 6:
        return {"control_type": type_id, "control_value": value.hex()}
    return {
        "end_txn_marker": ControlRecordType(type_id).name,
        "coordinator_epoch": int.from_bytes(value[2:6], "big", signed=True),
    }


def _text(data: bytes | None) -> str | None:
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.hex()


def _segment_log_for(index_path: Path) -> Path:
    return index_path.with_name(index_path.name.split(".", 1)[0] + files.LOG_FILE_SUFFIX)


def dump_offset_index(path: Path, *, verify: bool = False) -> Iterator[Row]:
    index = OffsetIndex(path, _base_offset_of(path), writable=False)
    try:
        yield {"type": "file", "file": str(path), "entries": index.entries}
        entries = index.entries_list()
        for entry in entries:
            yield {"type": "index_entry", "offset": entry.offset, "position": entry.position}
        if verify:
            yield from _verify_offset_index(path, entries)
    finally:
        index.close()


def _verify_offset_index(path: Path, entries: list[OffsetPosition]) -> Iterator[Row]:
    """Each entry must point at the start of a batch and name that batch's last offset."""
    log_path = _segment_log_for(path)
    if not log_path.exists():
        yield {"type": "mismatch", "file": str(path), "error": f"{log_path.name} is missing"}
        return
    records = FileRecords.open(log_path, mutable=False)
    last_offset_at: dict[int, int] = {}
    try:
        for position, header in records.batches(0):
            last_offset_at[position] = header.last_offset
    except CorruptRecordError as exc:
        yield {"type": "mismatch", "file": str(log_path), "error": str(exc)}
    finally:
        records.close()
    previous = -1
    for entry in entries:
        if entry.offset <= previous:
            yield {
                "type": "mismatch",
                "index_offset": entry.offset,
                "error": f"index offset {entry.offset} is not above the previous {previous}",
            }
        previous = entry.offset
        log_offset = last_offset_at.get(entry.position)
        if log_offset is None:
            yield {
                "type": "mismatch",
                "index_offset": entry.offset,
                "position": entry.position,
                "error": "no batch starts at this position",
            }
        elif log_offset != entry.offset:
            yield {
                "type": "mismatch",
                "index_offset": entry.offset,
                "log_offset": log_offset,
                "position": entry.position,
                "error": "index offset differs from the last offset of the batch",
            }


def dump_time_index(path: Path, *, verify: bool = False) -> Iterator[Row]:
    index = TimeIndex(path, _base_offset_of(path), writable=False)
    try:
        yield {"type": "file", "file": str(path), "entries": index.entries}
        entries = index.entries_list()
        for entry in entries:
            yield {"type": "time_index_entry", "timestamp": entry.timestamp, "offset": entry.offset}
        if verify:
            try:
                index.sanity_check()
            except CorruptIndexError as exc:
                yield {"type": "mismatch", "file": str(path), "error": str(exc)}
            previous_ts = -1
            for entry in entries:
                if entry.timestamp < previous_ts:
                    yield {
                        "type": "mismatch",
                        "timestamp": entry.timestamp,
                        "error": f"timestamp {entry.timestamp} is below the previous {previous_ts}",
                    }
                previous_ts = entry.timestamp
    finally:
        index.close()


def dump_txn_index(path: Path) -> Iterator[Row]:
    """The aborted transactions of a ``.txnindex``, in Kafka's words; a trailing partial entry
    or an entry of another version is an ``error`` row."""
    data = path.read_bytes()
    whole = len(data) - len(data) % ENTRY_SIZE
    yield {"type": "file", "file": str(path), "entries": whole // ENTRY_SIZE}
    for position in range(0, whole, ENTRY_SIZE):
        version = int.from_bytes(data[position : position + 2], "big", signed=True)
        if version != CURRENT_VERSION:
            yield {
                "type": "error",
                "file": str(path),
                "error": f"entry at byte {position} has version {version}, expected"
                f" {CURRENT_VERSION}",
            }
            return
        try:
            entry = AbortedTxn.from_bytes(data, position)
        except ValueError as exc:
            yield {"type": "error", "file": str(path), "error": f"entry at byte {position}: {exc}"}
            return
        yield {
            "type": "aborted_txn",
            "version": entry.version,
            "producer_id": entry.producer_id,
            "first_offset": entry.first_offset,
            "last_offset": entry.last_offset,
            "last_stable_offset": entry.last_stable_offset,
        }
    if whole != len(data):
        yield {
            "type": "error",
            "file": str(path),
            "error": f"{len(data) - whole} bytes at the end do not make a whole"
            f" {ENTRY_SIZE}-byte entry",
        }


def dump_leader_epoch_checkpoint(path: Path) -> Iterator[Row]:
    """The epoch entries; a file that does not parse is an ``error`` row naming its line."""
    try:
        entries = LeaderEpochCheckpointFile(path).read()
    except CorruptCheckpointError as exc:
        yield {"type": "file", "file": str(path)}
        yield {"type": "error", "file": str(path), "error": str(exc)}
        return
    yield {"type": "file", "file": str(path), "entries": len(entries)}
    for entry in entries:
        yield {"type": "epoch_entry", "epoch": entry.epoch, "start_offset": entry.start_offset}


def format_row(row: Row) -> str:
    """Kafka-style text: ``key: value`` pairs, records prefixed with ``|``."""
    kind = row["type"]
    if kind == "file" and "format" in row:  # a remote segment's object (``dump_remote``)
        shown = ("format", "compression", "encryption_key_id")
        return f"Dumping {row['file']} " + " ".join(f"{_camel(k)}: {_show(row[k])}" for k in shown)
    if kind == "file":
        return f"Dumping {row['file']}"
    if kind == "error" and "position" not in row:
        return f"Found corrupt data: {row['error']}"
    if kind == "error":
        return (
            f"Found corrupt data at position {row['position']} (offset {row['offset']}):"
            f" {row['error']}"
        )
    body = " ".join(f"{_camel(k)}: {_show(v)}" for k, v in row.items() if k != "type")
    return f"| {body}" if kind == "record" else body


def _camel(key: str) -> str:
    head, *rest = key.split("_")
    return head + "".join(part.capitalize() for part in rest)


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
