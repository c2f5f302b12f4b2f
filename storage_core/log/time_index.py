"""The ``.timeindex`` file of a segment: timestamp -> offset (Kafka's ``TimeIndex``).

File format: 12-byte entries, big-endian, back to back (see ``abstract_index``)::

    +-------------------------------------+---------------------------+
    | timestamp (int64, ms)               | relative offset (int32)   |
    +-------------------------------------+---------------------------+

An entry ``(t, o)`` says: the largest timestamp of the segment's records up to offset
``base_offset + o`` is ``t``. Timestamps strictly increase from entry to entry (an entry is
only added when the timestamp grows); offsets never decrease. An index of a segment whose
records carry no timestamp (``NO_TIMESTAMP``) is empty.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import ClassVar

from storage_core.errors import IndexFullError, InvalidOffsetError, InvalidTimestampError
from storage_core.log.abstract_index import AbstractIndex, IndexSearchType
from storage_core.records.record import NO_TIMESTAMP

__all__ = ["NO_TIMESTAMP", "TimeIndex", "TimestampOffset"]

_ENTRY = struct.Struct(">qi")
TIME_INDEX_ENTRY = _ENTRY  # (timestamp ms, offset relative to the base), big-endian


@dataclass(frozen=True, slots=True)
class TimestampOffset:
    """A timestamp (ms) and an absolute offset."""

    timestamp: int
    offset: int


class TimeIndex(AbstractIndex):
    """Maps timestamps to offsets in one segment; format in the module docstring.

    The index counts as full one entry early (``entries >= max_entries - 1``): the last slot is
    kept for the final entry appended with ``skip_full_check=True`` when the segment rolls.

    Thread safety: as ``AbstractIndex``: every public method holds the index's lock.
    """

    entry_size: ClassVar[int] = _ENTRY.size

    # ------------------------------------------------------------------ entries
    def _parse(self, n: int) -> TimestampOffset:
        timestamp, relative = _ENTRY.unpack_from(self._buffer(), n * _ENTRY.size)
        return TimestampOffset(timestamp, self.base_offset + relative)

    def _search_key(self, n: int, search_type: IndexSearchType) -> int:
        timestamp, relative = _ENTRY.unpack_from(self._buffer(), n * _ENTRY.size)
        if search_type is IndexSearchType.KEY:
            return int(timestamp)
        return int(self.base_offset + relative)

    def is_full(self) -> bool:
        with self._lock:
            return self._entries >= self._max_entries - 1

    def entry(self, n: int) -> TimestampOffset:
        """The ``n``-th entry (0-based); ``IndexError`` if ``n`` is not in ``[0, entries)``."""
        with self._lock:
            if not 0 <= n < self._entries:
                raise IndexError(
                    f"Attempt to fetch entry {n} from time index {self.path}, which has"
                    f" {self._entries} entries"
                )
            return self._parse(n)

    @property
    def last_entry(self) -> TimestampOffset:
        """The last entry, or ``(NO_TIMESTAMP, base_offset)`` if the index is empty."""
        with self._lock:
            if self._entries == 0:
                return TimestampOffset(NO_TIMESTAMP, self.base_offset)
            return self._parse(self._entries - 1)

    def entries_list(self) -> list[TimestampOffset]:
        """Every entry in use, in file order (for dump and verification tools)."""
        with self._lock:
            return [
                TimestampOffset(timestamp, self.base_offset + relative)
                for timestamp, relative in _ENTRY.iter_unpack(self._entries_bytes())
            ]

    # ------------------------------------------------------------------ append and search
    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> None:
        """Add ``(timestamp, offset)`` if ``timestamp`` is above the last entry's timestamp.

        Raises ``IndexFullError`` if the index is full (unless ``skip_full_check``, used for
        the final entry when the segment rolls), ``InvalidOffsetError`` if ``offset`` is below
        the last entry's offset or does not fit the segment, and ``InvalidTimestampError`` if
        ``timestamp`` is below the last entry's timestamp. An equal timestamp adds nothing.
        """
        with self._lock:
            self._check_writable()
            if not skip_full_check and self.is_full():
                raise IndexFullError(
                    f"Attempt to append to a full time index {self.path} ({self._entries}"
                    " entries); roll a new segment"
                )
            last = self.last_entry
            if self._entries > 0 and offset < last.offset:
                raise InvalidOffsetError(
                    f"Attempt to append an offset ({offset}) to slot {self._entries} no larger"
                    f" than the last offset appended ({last.offset}) to {self.path}"
                )
            if self._entries > 0 and timestamp < last.timestamp:
                raise InvalidTimestampError(
                    f"Attempt to append a timestamp ({timestamp}) to slot {self._entries} no"
                    f" larger than the last timestamp appended ({last.timestamp}) to {self.path}"
                )
            if timestamp <= last.timestamp:
                return
            relative = self.relative_offset(offset)
            if self._entries >= self._max_entries:
                raise IndexFullError(
                    f"No room left in time index {self.path} ({self._entries} entries of"
                    f" {self._max_entries}) for the final entry; resize it first"
                )
            _ENTRY.pack_into(self._buffer(), self._entries * _ENTRY.size, timestamp, relative)
            self._entries += 1

    def lookup(self, target_timestamp: int) -> TimestampOffset:
        """The entry with the largest timestamp ``<= target_timestamp``.

        ``(NO_TIMESTAMP, base_offset)`` if every entry's timestamp is larger.
        """
        with self._lock:
            slot = self._largest_lower_bound_slot_for(target_timestamp, IndexSearchType.KEY)
            if slot == -1:
                return TimestampOffset(NO_TIMESTAMP, self.base_offset)
            return self._parse(slot)

    def truncate_to(self, offset: int) -> None:
        """Keep only the entries whose offset is ``< offset`` (Kafka's ``truncateTo``)."""
        with self._lock:
            self._truncate_to_entries(self._count_below(offset, IndexSearchType.VALUE))

    # ------------------------------------------------------------------ checks
    def _check_entries(self) -> None:
        previous: tuple[int, int] | None = None
        for slot, (timestamp, relative) in enumerate(_ENTRY.iter_unpack(self._entries_bytes())):
            if previous is None:
                if relative < 0:
                    raise self._corrupt(
                        f"entry 0 has offset {self.base_offset + relative} which is less than"
                        f" the base offset {self.base_offset}"
                    )
            else:
                if timestamp <= previous[0]:
                    raise self._corrupt(
                        f"entry {slot} has timestamp {timestamp} which is not larger than the"
                        f" previous entry's {previous[0]}"
                    )
                if relative < previous[1]:
                    raise self._corrupt(
                        f"entry {slot} has offset {self.base_offset + relative} which is less"
                        f" than the previous entry's {self.base_offset + previous[1]}"
                    )
            previous = (timestamp, relative)
