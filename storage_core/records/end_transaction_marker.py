"""The end-transaction marker a control batch carries (Kafka's ``EndTransactionMarker`` and
``ControlRecordType``).

A control batch (attribute bit 5, see ``records.batch``) holds one record: its key is the
control record's version and type, its value, for a marker, the version and the epoch of the
transaction coordinator that wrote it (big-endian)::

    key    version int16, type int16 (0 ABORT, 1 COMMIT)
    value  version int16, coordinator_epoch int32
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

from storage_core.errors import InvalidRecordError
from storage_core.records.batch import RecordBatch
from storage_core.records.memory_records_builder import build_batch
from storage_core.records.record import SimpleRecord

_CONTROL_KEY = struct.Struct(">hh")  # version, control type
_MARKER_VALUE = struct.Struct(">hi")  # version, coordinator epoch


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


def build_end_txn_marker_batch(
    *,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    control_type: ControlRecordType,
    timestamp: int,
    partition_leader_epoch: int = -1,
) -> bytes:
    """The control batch a partition leader appends for a WriteTxnMarkers entry (Kafka's
    ``MemoryRecords.withEndTransactionMarker``): transactional and control, no sequence,
    one record whose key and value are written out at the top of this module."""
    record = SimpleRecord(
        key=_CONTROL_KEY.pack(0, control_type),
        value=_MARKER_VALUE.pack(0, coordinator_epoch),
        timestamp=timestamp,
    )
    return build_batch(
        [record],
        partition_leader_epoch=partition_leader_epoch,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        is_transactional=True,
        is_control=True,
    )
