"""The ``.index`` file of a segment: offset -> byte position (Kafka's ``OffsetIndex``).

File format: 8-byte entries, big-endian, back to back (see ``abstract_index``)::

    +---------------------------+---------------------------+
    | relative offset (int32)   | physical position (int32) |
    +---------------------------+---------------------------+

``relative offset = offset - base_offset`` where ``offset`` is the last offset of the batch
the entry points at, and ``physical position`` is the batch's byte position in the ``.log``
file. The index is sparse (one entry every ``index.interval.bytes``); offsets and positions
strictly increase from entry to entry.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import ClassVar

from storage_core.errors import IndexFullError, InvalidOffsetError
from storage_core.log.abstract_index import MAX_RELATIVE_OFFSET, AbstractIndex, IndexSearchType

_ENTRY = struct.Struct(">ii")


@dataclass(frozen=True, slots=True)
class OffsetPosition:
    """An absolute offset and the byte position of its batch in the ``.log`` file."""

    offset: int
    position: int


class OffsetIndex(AbstractIndex):
    """Maps offsets to positions in one segment's ``.log``; format in the module docstring.

    ``lookup(offset)`` gives the entry with the largest offset ``<= offset`` (a position from
    which to scan forward), or ``(base_offset, 0)`` when every entry is larger.

    Thread safety: as ``AbstractIndex``: every public method holds the index's lock.
    """

    entry_size: ClassVar[int] = _ENTRY.size

    # ------------------------------------------------------------------ entries
    def _parse(self, n: int) -> OffsetPosition:
        relative, position = _ENTRY.unpack_from(self._buffer(), n * _ENTRY.size)
        return OffsetPosition(self.base_offset + relative, position)

    def _search_key(self, n: int, search_type: IndexSearchType) -> int:
        relative, position = _ENTRY.unpack_from(self._buffer(), n * _ENTRY.size)
        if search_type is IndexSearchType.KEY:
            return int(self.base_offset + relative)
        return int(position)

    def entry(self, n: int) -> OffsetPosition:
        """The ``n``-th entry (0-based); ``IndexError`` if ``n`` is not in ``[0, entries)``."""
        with self._lock:
            if not 0 <= n < self._entries:
                raise IndexError(
                    f"Attempt to fetch entry {n} from index {self.path}, which has"
                    f" {self._entries} entries"
                )
            return self._parse(n)

    @property
    def last_offset(self) -> int:
        """Absolute offset of the last entry, or ``base_offset`` if the index is empty."""
        with self._lock:
            if self._entries == 0:
                return self.base_offset
            return self._parse(self._entries - 1).offset

    def entries_list(self) -> list[OffsetPosition]:
        """Every entry in use, in file order (for dump and verification tools)."""
        with self._lock:
            return [
                OffsetPosition(self.base_offset + relative, position)
                for relative, position in _ENTRY.iter_unpack(self._entries_bytes())
            ]

    # ------------------------------------------------------------------ append and search
    def append(self, offset: int, position: int) -> None:
        """Add an entry; ``offset`` must be above the last entry's and fit the segment.

        Raises ``IndexFullError`` when the index is full (the segment must roll) and
        ``InvalidOffsetError`` when the offset is not larger than the last one, does not fit
        an int32 relative offset, or the position does not fit an int32.
        """
        with self._lock:
            self._check_writable()
            if self.is_full():
                raise IndexFullError(
                    f"Attempt to append to a full index {self.path} ({self._entries} entries);"
                    " roll a new segment"
                )
            if self._entries > 0:
                last = self.last_offset
                if offset <= last:
                    raise InvalidOffsetError(
                        f"Attempt to append an offset {offset} to slot {self._entries} no larger"
                        f" than the last offset appended ({last}) to {self.path}"
                    )
            relative = self.relative_offset(offset)
            if not 0 <= position <= MAX_RELATIVE_OFFSET:
                raise InvalidOffsetError(
                    f"Physical position {position} of offset {offset} does not fit an int32"
                    f" in index {self.path}"
                )
            _ENTRY.pack_into(self._buffer(), self._entries * _ENTRY.size, relative, position)
            self._entries += 1

    def lookup(self, target_offset: int) -> OffsetPosition:
        """The entry with the largest offset ``<= target_offset``; ``(base_offset, 0)`` if none."""
        with self._lock:
            slot = self._largest_lower_bound_slot_for(target_offset, IndexSearchType.KEY)
            if slot == -1:
                return OffsetPosition(self.base_offset, 0)
            return self._parse(slot)

    def fetch_upper_bound_offset(
        self, fetch_offset: OffsetPosition, fetch_size: int
    ) -> OffsetPosition | None:
        """The first entry whose position is ``>= fetch_offset.position + fetch_size``.

        Kafka uses it to find where a fetch of ``fetch_size`` bytes starting at
        ``fetch_offset`` ends at the latest; None when no entry lies that far.
        """
        with self._lock:
            slot = self._smallest_upper_bound_slot_for(
                fetch_offset.position + fetch_size, IndexSearchType.VALUE
            )
            if slot == -1:
                return None
            return self._parse(slot)

    def truncate_to(self, offset: int) -> None:
        """Keep only the entries whose offset is ``< offset`` (Kafka's ``truncateTo``)."""
        with self._lock:
            self._truncate_to_entries(self._count_below(offset, IndexSearchType.KEY))

    # ------------------------------------------------------------------ checks
    def _check_entries(self) -> None:
        previous: tuple[int, int] | None = None
        for slot, (relative, position) in enumerate(_ENTRY.iter_unpack(self._entries_bytes())):
            if previous is None:
                if relative < 0:
                    raise self._corrupt(
                        f"entry 0 has offset {self.base_offset + relative} which is less than"
                        f" the base offset {self.base_offset}"
                    )
                if position < 0:
                    raise self._corrupt(f"entry 0 has negative position {position}")
            else:
                if relative <= previous[0]:
                    raise self._corrupt(
                        f"entry {slot} has offset {self.base_offset + relative} which is not"
                        f" larger than the previous entry's {self.base_offset + previous[0]}"
                    )
                if position < previous[1]:
                    raise self._corrupt(
                        f"entry {slot} has position {position} which is less than the previous"
                        f" entry's {previous[1]}"
                    )
            previous = (relative, position)
