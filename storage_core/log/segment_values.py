"""Values a ``LogSegment`` takes and gives (Kafka's ``RollParams``, ``LogOffsetPosition``,
``LogOffsetMetadata``, ``FetchDataInfo`` and the result of ``LogSegment.recover``).

Frozen dataclasses; safe to share between threads (a ``FileSlice`` reads its file lazily).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from storage_core.records import FileRecords


@dataclass(frozen=True, slots=True, kw_only=True)
class RollParams:
    """What ``should_roll`` needs to know about the next append."""

    max_segment_ms: int
    max_segment_bytes: int
    max_timestamp_in_messages: int
    max_offset_in_messages: int
    messages_size: int
    now_ms: int


@dataclass(frozen=True, slots=True)
class LogOffsetPosition:
    """Where the batch holding an offset sits: its last offset, position and size in bytes."""

    offset: int
    position: int
    size: int


@dataclass(frozen=True, slots=True)
class LogOffsetMetadata:
    """An offset with the segment and byte position it maps to (Kafka's ``LogOffsetMetadata``)."""

    message_offset: int
    segment_base_offset: int = -1
    relative_position_in_segment: int = -1


@dataclass(frozen=True, slots=True)
class FileSlice:
    """A byte range of a segment's ``.log`` file, readable lazily (or sent with ``sendfile``)."""

    file_records: FileRecords
    position: int
    size: int

    def read(self) -> bytes:
        return self.file_records.read(self.position, self.size)

    @property
    def path(self) -> Path:
        return self.file_records.path


@dataclass(frozen=True, slots=True)
class FetchDataInfo:
    """Result of a read: where it started and the bytes (a file slice or an empty buffer)."""

    fetch_offset_metadata: LogOffsetMetadata
    records: FileSlice | None
    first_entry_incomplete: bool = False

    @property
    def size_in_bytes(self) -> int:
        return 0 if self.records is None else self.records.size

    def read_bytes(self) -> bytes:
        return b"" if self.records is None else self.records.read()


@dataclass(frozen=True, slots=True, kw_only=True)
class RecoveryResult:
    """What ``LogSegment.recover`` kept: ``valid_bytes`` (exclusive end of the valid prefix)."""

    valid_bytes: int
    truncated_bytes: int
    reason: str | None
    # True when the cut bytes are only an incomplete last batch (an interrupted write).
    torn_tail: bool
