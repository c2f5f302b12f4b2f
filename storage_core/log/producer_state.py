"""Idempotent-producer state of one partition (Kafka's ``ProducerStateManager``).

For every producer id seen in the log the partition keeps a ``ProducerStateEntry``: the
producer epoch, the metadata of its last ``NUM_BATCHES_TO_RETAIN`` (5) batches, the epoch of
the last transaction coordinator that wrote a marker for it, and the first offset of its open
transaction. A leader checks every incoming batch against that entry (``ProducerAppendInfo``):
a batch already in the log is answered with its original offsets instead of being written
twice; a stale epoch or a gap in the sequence numbers is refused.

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

Sequence numbers are int32 and wrap from 2147483647 to 0.

Thread safety: none. ``Log`` calls every method under its own lock.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import os
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

import crc32c

from storage_core.atomic_file import write_file_atomically
from storage_core.errors import (
    CheckpointWriteError,
    CorruptSnapshotError,
    InvalidProducerEpochError,
    InvalidRecordError,
    InvalidTxnStateError,
    KafkaStorageError,
    OutOfOrderSequenceError,
    TransactionCoordinatorFencedError,
)
from storage_core.log import log_file_utils as files
from storage_core.records import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    RecordBatch,
)

logger = logging.getLogger(__name__)

PRODUCER_SNAPSHOT_VERSION = 1
NUM_BATCHES_TO_RETAIN = 5
DEFAULT_PRODUCER_ID_EXPIRATION_MS = 86_400_000  # producer.id.expiration.ms
# A snapshot larger than this is refused as corrupt rather than read into memory
# (5.8 million producers; Kafka has no such limit, but none of its partitions come close).
MAX_SNAPSHOT_BYTES = 256 * 1024 * 1024

INT16_MIN, INT16_MAX = -(1 << 15), (1 << 15) - 1
INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1

_HEADER = struct.Struct(">hIi")  # version, crc, entry count
_ENTRY = struct.Struct(">qhiqiqiq")
_CRC_OFFSET = 2
_ENTRIES_OFFSET = 6  # the CRC covers everything from here on
_CONTROL_KEY = struct.Struct(">hh")  # version, control type
_MARKER_VALUE = struct.Struct(">hi")  # version, coordinator epoch


# ---------------------------------------------------------------------------- sequences
def increment_sequence(sequence: int, increment: int) -> int:
    """``sequence + increment`` on the int32 ring (Kafka's ``incrementSequence``)."""
    if sequence > INT32_MAX - increment:
        return increment - (INT32_MAX - sequence) - 1
    return sequence + increment


def decrement_sequence(sequence: int, decrement: int) -> int:
    """``sequence - decrement`` on the int32 ring (Kafka's ``decrementSequence``)."""
    if sequence < decrement:
        return INT32_MAX - (decrement - sequence) + 1
    return sequence - decrement


def in_sequence(last_sequence: int, next_sequence: int) -> bool:
    """True if ``next_sequence`` directly follows ``last_sequence`` (wrapping to 0)."""
    return next_sequence == last_sequence + 1 or (next_sequence == 0 and last_sequence == INT32_MAX)


# ---------------------------------------------------------------------------- values
class AppendOrigin(enum.Enum):
    """Where an append comes from, which decides how much is checked (Kafka's ``AppendOrigin``).

    ``CLIENT``: a produce request; epochs, sequences and duplicates are checked.
    ``REPLICATION``: a follower copying the leader, or a log being reloaded; nothing is refused.
    """

    CLIENT = "client"
    REPLICATION = "replication"


class ControlRecordType(enum.IntEnum):
    """Types of the end-transaction markers (Kafka's ``ControlRecordType``)."""

    ABORT = 0
    COMMIT = 1


@dataclass(frozen=True, slots=True, kw_only=True)
class EndTransactionMarker:
    """The record of a control batch ending a transaction (key: version, type; value:
    version, coordinator epoch)."""

    control_type: ControlRecordType
    coordinator_epoch: int
    timestamp: int


def end_txn_marker_of(batch: RecordBatch) -> EndTransactionMarker | None:
    """The marker a control batch carries; None if it is empty (cleaned) or not a marker.

    Raises ``InvalidRecordError`` if the marker record is too short to hold its fields.
    """
    for record in batch.records():
        key, value = record.key or b"", record.value or b""
        if len(key) < _CONTROL_KEY.size:
            raise InvalidRecordError(
                f"control record at offset {record.offset} has a {len(key)}-byte key,"
                f" expected at least {_CONTROL_KEY.size}"
            )
        _version, control_type = _CONTROL_KEY.unpack_from(key)
        if control_type not in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
            return None
        if len(value) < _MARKER_VALUE.size:
            raise InvalidRecordError(
                f"transaction marker at offset {record.offset} has a {len(value)}-byte value,"
                f" expected at least {_MARKER_VALUE.size}"
            )
        _version, coordinator_epoch = _MARKER_VALUE.unpack_from(value)
        return EndTransactionMarker(
            control_type=ControlRecordType(control_type),
            coordinator_epoch=coordinator_epoch,
            timestamp=record.timestamp,
        )
    return None


@dataclass(frozen=True, slots=True, kw_only=True)
class ProducerBatch:
    """What producer state needs to know of one batch, with the offsets it has in the log.

    ``end_txn_marker`` is set for a control batch carrying a transaction marker.
    """

    producer_id: int
    producer_epoch: int
    base_sequence: int
    base_offset: int
    last_offset_delta: int
    max_timestamp: int
    is_transactional: bool = False
    is_control: bool = False
    end_txn_marker: EndTransactionMarker | None = None

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id > NO_PRODUCER_ID

    @property
    def last_offset(self) -> int:
        """Offset of the last record (inclusive)."""
        return self.base_offset + self.last_offset_delta

    @property
    def last_sequence(self) -> int:
        """Sequence of the last record (Kafka's ``lastSequence``), wrapping at int32."""
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return increment_sequence(self.base_sequence, self.last_offset_delta)


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchMetadata:
    """One appended batch of a producer: its last sequence and last offset (both inclusive),
    ``offset_delta`` = last offset - first offset, and its max timestamp."""

    last_seq: int
    last_offset: int
    offset_delta: int
    timestamp: int

    def __post_init__(self) -> None:
        if not INT32_MIN <= self.last_seq <= INT32_MAX:
            raise ValueError(f"last sequence {self.last_seq} does not fit an int32")
        if not 0 <= self.offset_delta <= INT32_MAX:
            raise ValueError(f"offset delta {self.offset_delta} must be in [0, {INT32_MAX}]")
        if not 0 <= self.last_offset - self.offset_delta <= self.last_offset <= INT64_MAX:
            raise ValueError(
                f"batch offsets [{self.last_offset - self.offset_delta}, {self.last_offset}]"
                " must be non-negative int64s"
            )

    @property
    def first_seq(self) -> int:
        return decrement_sequence(self.last_seq, self.offset_delta)

    @property
    def first_offset(self) -> int:
        """Offset of the batch's first record (inclusive)."""
        return self.last_offset - self.offset_delta


@dataclass(frozen=True, slots=True, kw_only=True)
class ProducerStateEntry:
    """The state of one producer id (Kafka's ``ProducerStateEntry``).

    ``batch_metadata`` holds at most ``NUM_BATCHES_TO_RETAIN`` batches, oldest first, all of
    the current ``producer_epoch``. ``current_txn_first_offset`` is the first offset of the
    producer's open transaction, None when none is open.
    """

    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    coordinator_epoch: int = -1
    last_timestamp: int = NO_TIMESTAMP
    current_txn_first_offset: int | None = None
    batch_metadata: tuple[BatchMetadata, ...] = field(default=())

    def __post_init__(self) -> None:
        if not 0 <= self.producer_id <= INT64_MAX:
            raise ValueError(f"producer id {self.producer_id} must be a non-negative int64")
        if not INT16_MIN <= self.producer_epoch <= INT16_MAX:
            raise ValueError(f"producer epoch {self.producer_epoch} does not fit an int16")
        if not INT32_MIN <= self.coordinator_epoch <= INT32_MAX:
            raise ValueError(f"coordinator epoch {self.coordinator_epoch} does not fit an int32")
        if len(self.batch_metadata) > NUM_BATCHES_TO_RETAIN:
            raise ValueError(
                f"{len(self.batch_metadata)} batches kept, at most {NUM_BATCHES_TO_RETAIN}"
            )
        if self.current_txn_first_offset is not None and self.current_txn_first_offset < 0:
            raise ValueError(f"transaction first offset {self.current_txn_first_offset} < 0")

    @property
    def is_empty(self) -> bool:
        """True when no batch of the current epoch is known."""
        return not self.batch_metadata

    @property
    def first_seq(self) -> int:
        return self.batch_metadata[0].first_seq if self.batch_metadata else NO_SEQUENCE

    @property
    def last_seq(self) -> int:
        return self.batch_metadata[-1].last_seq if self.batch_metadata else NO_SEQUENCE

    @property
    def first_data_offset(self) -> int:
        return self.batch_metadata[0].first_offset if self.batch_metadata else -1

    @property
    def last_data_offset(self) -> int:
        return self.batch_metadata[-1].last_offset if self.batch_metadata else -1

    @property
    def last_offset_delta(self) -> int:
        return self.batch_metadata[-1].offset_delta if self.batch_metadata else 0

    def with_producer_epoch(self, producer_epoch: int) -> ProducerStateEntry:
        """A new epoch forgets the batches of the old one (Kafka's ``maybeUpdateProducerEpoch``)."""
        if producer_epoch == self.producer_epoch:
            return self
        return replace(self, producer_epoch=producer_epoch, batch_metadata=())

    def with_batch(
        self,
        producer_epoch: int,
        *,
        last_seq: int,
        last_offset: int,
        offset_delta: int,
        timestamp: int,
    ) -> ProducerStateEntry:
        """Kafka's ``addBatch``: switch epoch if needed, keep the last five batches."""
        entry = self.with_producer_epoch(producer_epoch)
        batch = BatchMetadata(
            last_seq=last_seq,
            last_offset=last_offset,
            offset_delta=offset_delta,
            timestamp=timestamp,
        )
        kept = (*entry.batch_metadata, batch)[-NUM_BATCHES_TO_RETAIN:]
        return replace(entry, batch_metadata=kept, last_timestamp=timestamp)

    def merged(self, update: ProducerStateEntry) -> ProducerStateEntry:
        """This entry after ``update`` (built by a ``ProducerAppendInfo``) is applied."""
        entry = self.with_producer_epoch(update.producer_epoch)
        kept = (*entry.batch_metadata, *update.batch_metadata)[-NUM_BATCHES_TO_RETAIN:]
        return replace(
            entry,
            batch_metadata=kept,
            coordinator_epoch=update.coordinator_epoch,
            current_txn_first_offset=update.current_txn_first_offset,
            last_timestamp=update.last_timestamp,
        )

    def find_duplicate_batch(self, batch: ProducerBatch) -> BatchMetadata | None:
        """The kept batch with the same epoch and sequence range as ``batch``, if any."""
        if batch.producer_epoch != self.producer_epoch:
            return None
        return self.batch_with_sequence_range(batch.base_sequence, batch.last_sequence)

    def batch_with_sequence_range(self, first_seq: int, last_seq: int) -> BatchMetadata | None:
        for metadata in self.batch_metadata:
            if metadata.first_seq == first_seq and metadata.last_seq == last_seq:
                return metadata
        return None


@dataclass(frozen=True, slots=True, kw_only=True)
class CompletedTxn:
    """A transaction ended by a marker: its first offset and the marker's offset (inclusive)."""

    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool


# ---------------------------------------------------------------------------- validation
class ProducerAppendInfo:
    """Validates the batches of one producer within one append (Kafka's ``ProducerAppendInfo``).

    Built from the producer's entry before the append; each batch is checked against the
    entry as updated by the batches before it, and ``to_entry`` gives the update to apply
    once the append is written. With ``AppendOrigin.CLIENT`` a bad batch raises
    ``InvalidProducerEpochError``, ``OutOfOrderSequenceError``, ``InvalidTxnStateError`` or
    ``TransactionCoordinatorFencedError``; with ``REPLICATION`` only the transaction state
    error is raised (as in Kafka) and a stale epoch is logged.
    """

    def __init__(
        self,
        partition: str,
        producer_id: int,
        current_entry: ProducerStateEntry,
        origin: AppendOrigin,
    ) -> None:
        self.partition = partition
        self.producer_id = producer_id
        self.current_entry = current_entry
        self.origin = origin
        self._updated = replace(current_entry, producer_id=producer_id, batch_metadata=())
        self.started_transactions: list[int] = []

    def to_entry(self) -> ProducerStateEntry:
        return self._updated

    def append(self, batch: ProducerBatch) -> CompletedTxn | None:
        """Check ``batch`` and fold it into the pending update."""
        if batch.is_control:
            if batch.end_txn_marker is None:
                return None  # an empty control batch: the transaction was cleaned away
            return self.append_end_txn_marker(
                batch.end_txn_marker, batch.producer_epoch, batch.base_offset
            )
        self.append_data_batch(
            epoch=batch.producer_epoch,
            first_seq=batch.base_sequence,
            last_seq=batch.last_sequence,
            last_timestamp=batch.max_timestamp,
            first_offset=batch.base_offset,
            last_offset=batch.last_offset,
            is_transactional=batch.is_transactional,
        )
        return None

    def append_data_batch(
        self,
        *,
        epoch: int,
        first_seq: int,
        last_seq: int,
        last_timestamp: int,
        first_offset: int,
        last_offset: int,
        is_transactional: bool,
    ) -> None:
        self._check_producer_epoch(epoch, first_offset)
        if self.origin is AppendOrigin.CLIENT:
            self._check_sequence(epoch, first_seq, first_offset)
        self._updated = self._updated.with_batch(
            epoch,
            last_seq=last_seq,
            last_offset=last_offset,
            offset_delta=last_offset - first_offset,
            timestamp=last_timestamp,
        )
        open_txn = self._updated.current_txn_first_offset
        if open_txn is not None and not is_transactional:
            raise InvalidTxnStateError(
                f"Expected transactional write from producer {self.producer_id} at offset"
                f" {first_offset} in partition {self.partition}: it has a transaction open"
                f" since offset {open_txn}; end the transaction before writing outside it"
            )
        if open_txn is None and is_transactional:
            self._updated = replace(self._updated, current_txn_first_offset=first_offset)
            self.started_transactions.append(first_offset)

    def append_end_txn_marker(
        self, marker: EndTransactionMarker, producer_epoch: int, offset: int
    ) -> CompletedTxn | None:
        self._check_producer_epoch(producer_epoch, offset)
        self._check_coordinator_epoch(marker, offset)
        first = self._updated.current_txn_first_offset
        completed = (
            None
            if first is None
            else CompletedTxn(
                producer_id=self.producer_id,
                first_offset=first,
                last_offset=offset,
                is_aborted=marker.control_type is ControlRecordType.ABORT,
            )
        )
        self._updated = replace(
            self._updated.with_producer_epoch(producer_epoch),
            current_txn_first_offset=None,
            coordinator_epoch=marker.coordinator_epoch,
            last_timestamp=marker.timestamp,
        )
        return completed

    def _check_producer_epoch(self, producer_epoch: int, offset: int) -> None:
        current = self._updated.producer_epoch
        if producer_epoch >= current:
            return
        message = (
            f"Epoch of producer {self.producer_id} at offset {offset} in {self.partition} is"
            f" {producer_epoch}, which is smaller than the last seen epoch {current}"
        )
        if self.origin is AppendOrigin.REPLICATION:
            logger.warning("%s", message)
            return
        raise InvalidProducerEpochError(
            f"{message}; a newer producer with this id has fenced this one"
        )

    def _check_sequence(self, producer_epoch: int, first_seq: int, offset: int) -> None:
        updated = self._updated
        if producer_epoch != updated.producer_epoch:
            # A new epoch must start at sequence 0, unless the producer is unknown here
            # (its batches were all removed by retention, or it never wrote): any sequence.
            if first_seq != 0 and updated.producer_epoch != NO_PRODUCER_EPOCH:
                raise OutOfOrderSequenceError(
                    f"Invalid sequence number for new epoch of producer {self.producer_id} at"
                    f" offset {offset} in partition {self.partition}: {producer_epoch} (request"
                    f" epoch), {first_seq} (seq. number), {updated.producer_epoch} (current"
                    " producer epoch); a new epoch must start at sequence 0"
                )
            return
        if not updated.is_empty:
            current_last_seq = updated.last_seq
        elif producer_epoch == self.current_entry.producer_epoch:
            current_last_seq = self.current_entry.last_seq
        else:
            current_last_seq = NO_SEQUENCE
        # With no known epoch (all of the producer's batches were deleted by retention or
        # DeleteRecords) any sequence number is accepted.
        if self.current_entry.producer_epoch == NO_PRODUCER_EPOCH or in_sequence(
            current_last_seq, first_seq
        ):
            return
        raise OutOfOrderSequenceError(
            f"Out of order sequence number for producer {self.producer_id} at offset {offset}"
            f" in partition {self.partition}: {first_seq} (incoming seq. number),"
            f" {current_last_seq} (current end sequence number); the producer must resend"
            " from the first unacknowledged batch"
        )

    def _check_coordinator_epoch(self, marker: EndTransactionMarker, offset: int) -> None:
        current = self._updated.coordinator_epoch
        if current <= marker.coordinator_epoch:
            return
        message = (
            f"Invalid coordinator epoch for producer {self.producer_id} at offset {offset} in"
            f" partition {self.partition}: {marker.coordinator_epoch} (zombie), {current}"
            " (current)"
        )
        if self.origin is AppendOrigin.REPLICATION:
            logger.info("%s", message)
            return
        raise TransactionCoordinatorFencedError(message)


# ---------------------------------------------------------------------------- snapshot files
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


# ---------------------------------------------------------------------------- the manager
class ProducerStateManager:
    """The producer ids of one partition, their state and its snapshot files.

    ``map_end_offset`` is the offset (exclusive) up to which the state reflects the log; the
    ``Log`` moves it after each append. ``take_snapshot`` writes the state at that offset.
    Producers idle for ``producer_id_expiration_ms`` without an open transaction are dropped
    on load and by ``remove_expired_producers``.

    Thread safety: none; the owning ``Log`` serialises every call under its lock.
    """

    def __init__(
        self,
        directory: Path,
        partition: str,
        *,
        producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    ) -> None:
        if producer_id_expiration_ms < 1:
            raise ValueError(
                f"producer.id.expiration.ms must be >= 1, got {producer_id_expiration_ms}"
            )
        self.dir = directory
        self.partition = partition
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self._producers: dict[int, ProducerStateEntry] = {}
        self._ongoing_txns: dict[int, int] = {}  # first offset -> producer id
        self._snapshots: dict[int, SnapshotFile] = self._load_snapshots()
        self._last_map_offset = 0
        self._last_snap_offset = 0

    # ------------------------------------------------------------------ state
    @property
    def active_producers(self) -> Mapping[int, ProducerStateEntry]:
        """A copy of the producer id -> entry map."""
        return dict(self._producers)

    @property
    def producer_id_count(self) -> int:
        return len(self._producers)

    @property
    def is_empty(self) -> bool:
        return not self._producers

    @property
    def map_end_offset(self) -> int:
        """The state reflects every batch below this offset (exclusive)."""
        return self._last_map_offset

    def first_undecided_offset(self) -> int | None:
        """First offset of the oldest open transaction, if any."""
        return min(self._ongoing_txns, default=None)

    def last_entry(self, producer_id: int) -> ProducerStateEntry | None:
        return self._producers.get(producer_id)

    def prepare_update(self, producer_id: int, origin: AppendOrigin) -> ProducerAppendInfo:
        current = self._producers.get(producer_id) or ProducerStateEntry(producer_id=producer_id)
        return ProducerAppendInfo(self.partition, producer_id, current, origin)

    def update(self, append_info: ProducerAppendInfo) -> None:
        """Apply a validated ``ProducerAppendInfo`` whose batches are now in the log."""
        update = append_info.to_entry()
        current = self._producers.get(append_info.producer_id)
        self._producers[append_info.producer_id] = (
            update if current is None else current.merged(update)
        )
        for first_offset in append_info.started_transactions:
            self._ongoing_txns[first_offset] = append_info.producer_id

    def complete_txn(self, completed: CompletedTxn) -> None:
        self._ongoing_txns.pop(completed.first_offset, None)

    def load_producer_entry(self, entry: ProducerStateEntry) -> None:
        self._producers[entry.producer_id] = entry
        if entry.current_txn_first_offset is not None:
            self._ongoing_txns[entry.current_txn_first_offset] = entry.producer_id

    def update_map_end_offset(self, last_offset: int) -> None:
        self._last_map_offset = last_offset

    def is_producer_expired(self, now_ms: int, entry: ProducerStateEntry) -> bool:
        return (
            entry.current_txn_first_offset is None
            and now_ms - entry.last_timestamp >= self.producer_id_expiration_ms
        )

    def remove_expired_producers(self, now_ms: int) -> int:
        """Drop producers idle for ``producer.id.expiration.ms``; returns how many went."""
        expired = [
            pid for pid, entry in self._producers.items() if self.is_producer_expired(now_ms, entry)
        ]
        for pid in expired:
            del self._producers[pid]
        if expired:
            logger.info(
                "expired producer ids partition=%s count=%d remaining=%d",
                self.partition,
                len(expired),
                len(self._producers),
            )
        return len(expired)

    # ------------------------------------------------------------------ snapshots
    def _load_snapshots(self) -> dict[int, SnapshotFile]:
        return {snapshot.offset: snapshot for snapshot in list_snapshot_files(self.dir)}

    def snapshot_files(self) -> list[SnapshotFile]:
        """The snapshot files this manager knows, oldest first."""
        return [self._snapshots[offset] for offset in sorted(self._snapshots)]

    def fetch_snapshot(self, offset: int) -> Path | None:
        """The snapshot file at exactly ``offset`` (tiered storage uploads the one whose offset
        is the next segment's base offset), or None."""
        snapshot = self._snapshots.get(offset)
        return None if snapshot is None else snapshot.path

    @property
    def latest_snapshot_offset(self) -> int | None:
        return max(self._snapshots, default=None)

    @property
    def oldest_snapshot_offset(self) -> int | None:
        return min(self._snapshots, default=None)

    def take_snapshot(self) -> Path | None:
        """Write the state at ``map_end_offset`` unless a snapshot there was already taken."""
        if self._last_map_offset <= self._last_snap_offset:
            return None
        path = files.producer_snapshot_file(self.dir, self._last_map_offset)
        write_snapshot(path, self._producers.values())
        self._snapshots[self._last_map_offset] = SnapshotFile(
            offset=self._last_map_offset, path=path
        )
        self._last_snap_offset = self._last_map_offset
        logger.info(
            "wrote producer snapshot partition=%s offset=%d producers=%d",
            self.partition,
            self._last_map_offset,
            len(self._producers),
        )
        return path

    def _remove_and_delete_snapshot(self, offset: int) -> None:
        snapshot = self._snapshots.pop(offset, None)
        if snapshot is not None:
            snapshot.path.unlink(missing_ok=True)

    def _quarantine_snapshot(self, offset: int, reason: Exception) -> None:
        snapshot = self._snapshots.pop(offset)
        kept = snapshot.path.with_name(snapshot.path.name + files.QUARANTINED_FILE_SUFFIX)
        with contextlib.suppress(FileNotFoundError):
            os.replace(snapshot.path, kept)
        logger.error(
            "corrupt producer snapshot set aside, rebuilding from the log partition=%s"
            " kept_as=%s error=%s",
            self.partition,
            kept.name,
            reason,
        )

    def remove_stray_snapshots(self, segment_base_offsets: Iterable[int]) -> None:
        """Delete snapshots that match no segment base offset, except the newest one if it is
        above every segment (the one written at the log end by a clean shutdown)."""
        base_offsets = set(segment_base_offsets)
        self._snapshots = self._load_snapshots()
        strays = [offset for offset in sorted(self._snapshots) if offset not in base_offsets]
        if not strays:
            return
        keep = strays[-1] if not base_offsets or strays[-1] > max(base_offsets) else None
        for offset in strays:
            if offset != keep:
                self._remove_and_delete_snapshot(offset)

    def delete_snapshots_before(self, offset: int, *, keep_newest_at_or_below: bool) -> None:
        """Delete snapshots below ``offset`` (exclusive); optionally keep the newest one at or
        below it, so that state for a log starting at ``offset`` can still be loaded."""
        doomed = sorted(o for o in self._snapshots if o < offset)
        if keep_newest_at_or_below and doomed and offset not in self._snapshots:
            doomed.pop()
        for snapshot_offset in doomed:
            self._remove_and_delete_snapshot(snapshot_offset)

    def on_log_start_offset_incremented(self, log_start_offset: int) -> None:
        self._last_map_offset = max(self._last_map_offset, log_start_offset)
        latest = self.latest_snapshot_offset
        self._last_snap_offset = log_start_offset if latest is None else latest

    def truncate_and_reload(self, log_start_offset: int, log_end_offset: int, now_ms: int) -> None:
        """Forget state above ``log_end_offset`` and reload from the newest valid snapshot.

        Snapshots above the log end go; below the log start only the newest one at or below
        it is kept. (Kafka deletes that one too and so forgets producers whose batches all
        lie before the log start; keeping it keeps them, as the in-memory state does.)
        """
        for offset in [o for o in self._snapshots if o > log_end_offset]:
            self._remove_and_delete_snapshot(offset)
        self.delete_snapshots_before(log_start_offset, keep_newest_at_or_below=True)
        if log_end_offset != self._last_map_offset:
            self._producers.clear()
            self._ongoing_txns.clear()
            self._load_from_snapshot(log_start_offset, now_ms)
        else:
            self.on_log_start_offset_incremented(log_start_offset)

    def _load_from_snapshot(self, log_start_offset: int, now_ms: int) -> None:
        while self._snapshots:
            offset = max(self._snapshots)
            snapshot = self._snapshots[offset]
            try:
                entries = read_snapshot(snapshot.path)
            except CorruptSnapshotError as exc:
                self._quarantine_snapshot(offset, exc)
                continue
            for entry in entries:
                if not self.is_producer_expired(now_ms, entry):
                    self.load_producer_entry(entry)
            logger.info(
                "loaded producer snapshot partition=%s offset=%d producers=%d",
                self.partition,
                offset,
                len(self._producers),
            )
            self._last_snap_offset = offset
            self._last_map_offset = offset
            return
        self._last_snap_offset = log_start_offset
        self._last_map_offset = log_start_offset

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Forget every producer and delete every snapshot; the state restarts at ``offset``."""
        self._producers.clear()
        self._ongoing_txns.clear()
        for snapshot_offset in list(self._snapshots):
            self._remove_and_delete_snapshot(snapshot_offset)
        self._last_snap_offset = 0
        self._last_map_offset = offset

    def reload_snapshots(self) -> None:
        """Forget the state and rescan the directory for snapshot files (e.g. one restored
        from remote storage); ``truncate_and_reload`` then loads the newest."""
        self._producers.clear()
        self._ongoing_txns.clear()
        self._snapshots = self._load_snapshots()
        self._last_snap_offset = 0
        self._last_map_offset = 0

    def update_parent_dir(self, directory: Path) -> None:
        """The partition directory was renamed: follow it."""
        self.dir = directory
        self._snapshots = {
            offset: SnapshotFile(offset=offset, path=directory / snapshot.path.name)
            for offset, snapshot in self._snapshots.items()
        }

    def load_producers_from_batches(self, batches: Iterable[ProducerBatch]) -> None:
        """Replay batches that are already in the log (Kafka's ``loadProducersFromRecords``)."""
        loaded: dict[int, ProducerAppendInfo] = {}
        completed: list[CompletedTxn] = []
        for batch in batches:
            if not batch.has_producer_id:
                continue
            info = loaded.get(batch.producer_id)
            if info is None:
                info = self.prepare_update(batch.producer_id, AppendOrigin.REPLICATION)
                loaded[batch.producer_id] = info
            done = info.append(batch)
            if done is not None:
                completed.append(done)
        for info in loaded.values():
            self.update(info)
        for done in completed:
            self.complete_txn(done)
