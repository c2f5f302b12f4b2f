"""Producer state snapshot files: Kafka's ``ProducerSnapshot`` format and ``SnapshotFile``.

Snapshot files
--------------
The state is persisted in ``<20-digit offset>.snapshot`` files in the partition directory.
The offset in the name is exclusive: the snapshot holds the state after every batch below
it. The layout is Kafka's ``ProducerSnapshot`` version 1 (``PID_SNAPSHOT_MAP_SCHEMA`` in
``ProducerStateManager.java``), big-endian, no padding::

    offset  size  field                                   type
         0     2  version (always 1)                      int16
         2     4  crc: CRC-32C of bytes [6, end of file)  uint32
         6     4  N, the number of producer entries       int32
        10  46*N  N entries, each:
                    +0   8  producer_id                    int64
                    +8   2  epoch                          int16
                   +10   4  last_sequence (-1: no batch)   int32
                   +14   8  last_offset (-1: no batch)     int64
                   +22   4  offset_delta                   int32   last - first offset of
                                                                   the last batch
                   +26   8  timestamp                      int64   max timestamp of the
                                                                   last batch (or marker)
                   +34   4  coordinator_epoch              int32
                   +38   8  current_txn_first_offset       int64   -1: no open transaction

Only the last batch of each producer is stored, so after a reload a retry of one of the
four older batches is no longer recognised as a duplicate (as in Kafka). Entries are written
in producer-id order, so equal states give equal files. Reading checks the version, the CRC,
and that the length is exactly ``10 + 46*N``; a file that fails is set aside as
``<name>.quarantined`` (never deleted) and the next older snapshot is tried, the rest being
rebuilt from the log. Writes are atomic: ``<name>.tmp``, fsync, rename, fsync the directory.

Thread safety: the functions hold no state; ``ProducerStateManager`` calls them under the
owning ``Log``'s lock.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import crc32c

from storage_core.atomic_file import write_file_atomically
from storage_core.errors import CheckpointWriteError, CorruptSnapshotError, KafkaStorageError
from storage_core.log import log_file_utils as files
from storage_core.log.producer_state_entry import BatchMetadata, ProducerStateEntry

PRODUCER_SNAPSHOT_VERSION = 1
# A snapshot larger than this is refused as corrupt rather than read into memory
# (5.8 million producers; Kafka has no such limit, but none of its partitions come close).
MAX_SNAPSHOT_BYTES = 256 * 1024 * 1024

_HEADER = struct.Struct(">hIi")  # version, crc, entry count
_ENTRY = struct.Struct(">qhiqiqiq")
_CRC_OFFSET = 2
_ENTRIES_OFFSET = 6  # the CRC covers everything from here on


def encode_snapshot(entries: Iterable[ProducerStateEntry]) -> bytes:
    """The bytes of a snapshot file holding ``entries`` (layout in the module docstring)."""
    ordered = sorted(entries, key=lambda entry: entry.producer_id)
    body = bytearray(_HEADER.size + _ENTRY.size * len(ordered))
    _HEADER.pack_into(body, 0, PRODUCER_SNAPSHOT_VERSION, 0, len(ordered))
    position = _HEADER.size
    for entry in ordered:
        _ENTRY.pack_into(
            body,
            position,
            entry.producer_id,
            entry.producer_epoch,
            entry.last_seq,
            entry.last_data_offset,
            entry.last_offset_delta,
            entry.last_timestamp,
            entry.coordinator_epoch,
            -1 if entry.current_txn_first_offset is None else entry.current_txn_first_offset,
        )
        position += _ENTRY.size
    if len(body) > MAX_SNAPSHOT_BYTES:
        raise KafkaStorageError(
            f"a producer snapshot of {len(ordered)} producers would be {len(body)} bytes, more"
            f" than {MAX_SNAPSHOT_BYTES}; lower producer.id.expiration.ms"
        )
    struct.pack_into(">I", body, _CRC_OFFSET, crc32c.crc32c(memoryview(body)[_ENTRIES_OFFSET:]))
    return bytes(body)


def decode_snapshot(data: bytes, *, file: str = "<buffer>") -> list[ProducerStateEntry]:
    """Parse a snapshot file's bytes; ``CorruptSnapshotError`` naming ``file`` if invalid."""
    if len(data) < _HEADER.size:
        raise CorruptSnapshotError(
            f"Snapshot {file} is {len(data)} bytes, shorter than its {_HEADER.size}-byte header"
        )
    if len(data) > MAX_SNAPSHOT_BYTES:
        raise CorruptSnapshotError(
            f"Snapshot {file} is {len(data)} bytes, more than the limit {MAX_SNAPSHOT_BYTES}"
        )
    version, stored_crc, count = _HEADER.unpack_from(data)
    if version != PRODUCER_SNAPSHOT_VERSION:
        raise CorruptSnapshotError(f"Snapshot {file} contained an unknown file version {version}")
    computed_crc = crc32c.crc32c(memoryview(data)[_ENTRIES_OFFSET:])
    if stored_crc != computed_crc:
        raise CorruptSnapshotError(
            f"Snapshot {file} is corrupt (CRC is no longer valid). Stored crc: {stored_crc}."
            f" Computed crc: {computed_crc}"
        )
    if count < 0 or len(data) != _HEADER.size + count * _ENTRY.size:
        raise CorruptSnapshotError(
            f"Snapshot {file} declares {count} producer entries but holds"
            f" {len(data) - _HEADER.size} bytes of entries ({_ENTRY.size} bytes each)"
        )
    entries: list[ProducerStateEntry] = []
    for i in range(count):
        (
            producer_id,
            epoch,
            last_seq,
            last_offset,
            offset_delta,
            timestamp,
            coordinator_epoch,
            txn_first_offset,
        ) = _ENTRY.unpack_from(data, _HEADER.size + i * _ENTRY.size)
        try:
            batches = (
                (
                    BatchMetadata(
                        last_seq=last_seq,
                        last_offset=last_offset,
                        offset_delta=offset_delta,
                        timestamp=timestamp,
                    ),
                )
                if last_offset >= 0
                else ()
            )
            entries.append(
                ProducerStateEntry(
                    producer_id=producer_id,
                    producer_epoch=epoch,
                    coordinator_epoch=coordinator_epoch,
                    last_timestamp=timestamp,
                    current_txn_first_offset=txn_first_offset if txn_first_offset >= 0 else None,
                    batch_metadata=batches,
                )
            )
        except ValueError as exc:
            raise CorruptSnapshotError(f"Snapshot {file} entry {i} is invalid: {exc}") from exc
    return entries


def read_snapshot(path: Path) -> list[ProducerStateEntry]:
    """Read and verify one snapshot file (Kafka's ``readSnapshot``)."""
    try:
        with open(path, "rb") as snapshot:
            data = snapshot.read(MAX_SNAPSHOT_BYTES + 1)
    except OSError as exc:
        raise KafkaStorageError(f"Error while reading producer snapshot {path}: {exc}") from exc
    return decode_snapshot(data, file=str(path))


def write_snapshot(path: Path, entries: Iterable[ProducerStateEntry]) -> None:
    """Replace ``path`` with a snapshot of ``entries``: temp file, fsync, rename, fsync dir.

    Raises ``CheckpointWriteError`` naming the file; the previous file is then untouched.
    """
    data = encode_snapshot(entries)
    try:
        write_file_atomically(path, data)
    except OSError as exc:
        raise CheckpointWriteError(
            f"Error while writing producer snapshot {path}: {exc}"
            " (check the disk and permissions of the log dir)"
        ) from exc


@dataclass(frozen=True, slots=True, kw_only=True)
class SnapshotFile:
    """A ``<offset>.snapshot`` file; ``offset`` is the exclusive end of the state it holds."""

    offset: int
    path: Path


def list_snapshot_files(directory: Path) -> list[SnapshotFile]:
    """The snapshot files of ``directory``, oldest first."""
    found: list[SnapshotFile] = []
    if not directory.is_dir():
        return found
    for entry in directory.iterdir():
        if not entry.name.endswith(files.PRODUCER_SNAPSHOT_FILE_SUFFIX) or not entry.is_file():
            continue
        if entry.name.count(".") != 1:
            continue
        try:
            offset = files.offset_from_file_name(entry.name)
        except ValueError:
            continue
        found.append(SnapshotFile(offset=offset, path=entry))
    found.sort(key=lambda snapshot: snapshot.offset)
    return found
