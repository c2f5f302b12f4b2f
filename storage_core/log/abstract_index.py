"""The memory-mapped, sparse index files of a segment (Kafka's ``AbstractIndex``).

File format: fixed-size big-endian entries back to back, nothing else (no header, no CRC)::

    byte 0           entry_size       2 * entry_size                    length
    | entry 0        | entry 1        | ...  | entry entries-1 | (preallocated, unused)

The entry layout belongs to the subclass (``OffsetIndex``: 8 bytes, ``TimeIndex``: 12 bytes);
both store offsets relative to the segment's base offset as int32, so an absolute offset fits
a segment only if ``0 <= offset - base_offset <= 2**31 - 1``.

Life of a file, as in Kafka:

* A new (missing or empty) file opened writable is preallocated to ``max_index_size``
  rounded down to a multiple of ``entry_size`` and starts with no entries; with
  ``preallocate_if_empty=False`` (an inactive segment's index opened again on demand) an
  existing empty file stays empty.
* An existing file is mapped as it is and holds ``length // entry_size`` entries: files are
  trimmed to their used bytes when a segment rolls or closes, so length equals used bytes.
  For the active segment the caller grows it again with ``resize(max_index_size)``.
* ``trim_to_valid_size`` (and ``close``) cut the file to ``entries * entry_size`` bytes.

Lookups are binary searches over the mapped entries (Kafka's "warm section" is not
reproduced: it only changes which pages are touched, never the answer).
"""

from __future__ import annotations

import abc
import bisect
import enum
import mmap
import os
import threading
from pathlib import Path
from typing import ClassVar

from storage_core.errors import CorruptIndexError, InvalidOffsetError

DEFAULT_MAX_INDEX_SIZE_BYTES = 10 * 1024 * 1024
# Relative offsets and physical positions are int32 in both index formats.
MAX_RELATIVE_OFFSET = (1 << 31) - 1

_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


class IndexSearchType(enum.Enum):
    """Which half of an entry a binary search compares (Kafka's ``IndexSearchType``)."""

    KEY = "key"  # OffsetIndex: offset, TimeIndex: timestamp
    VALUE = "value"  # OffsetIndex: position, TimeIndex: offset


def round_down_to_exact_multiple(number: int, factor: int) -> int:
    """The largest multiple of ``factor`` that is ``<= number`` (for ``number >= 0``)."""
    return factor * (number // factor)


class AbstractIndex(abc.ABC):
    """A memory-mapped file of fixed-size entries sorted by offset; see the module docstring.

    Thread safety: every public method holds one re-entrant lock per index, so appends,
    truncations, resizes (which replace the mapping) and lookups may be called from any
    thread. Entries are written straight into the shared mapping; ``flush`` makes them
    durable.
    """

    entry_size: ClassVar[int] = 0

    def __init__(
        self,
        path: Path,
        base_offset: int,
        max_index_size: int = DEFAULT_MAX_INDEX_SIZE_BYTES,
        writable: bool = True,
        *,
        preallocate_if_empty: bool = True,
    ) -> None:
        """``preallocate_if_empty`` False: an existing empty file stays empty (an inactive
        segment's index with no entry, opened again on demand), as in Kafka, which
        preallocates only a file it creates."""
        if self.entry_size <= 0:
            raise TypeError(f"{type(self).__name__} must define a positive entry_size")
        self._lock = threading.RLock()
        self._path = path
        self.base_offset = base_offset
        self.max_index_size = max_index_size
        self.writable = writable
        self._mmap: mmap.mmap | None = None
        self._length = 0
        self._entries = 0
        self._max_entries = 0
        self._closed = False
        self._preallocate_if_empty = preallocate_if_empty
        self._open()

    # ------------------------------------------------------------------ mapping
    def _open(self) -> None:
        try:
            existing_length = self._path.stat().st_size
            exists = True
        except FileNotFoundError:
            existing_length = 0
            exists = False
        if not self.writable:
            # A read-only index never creates or changes its file; a missing one is empty.
            if existing_length > 0:
                self._map(existing_length)
            self._length = existing_length
            self._entries = existing_length // self.entry_size
            self._max_entries = self._entries
            return
        if existing_length == 0 and (self._preallocate_if_empty or not exists):
            if self.max_index_size < self.entry_size:
                raise ValueError(
                    f"Invalid max index size {self.max_index_size} for {self._path}:"
                    f" it must hold at least one {self.entry_size}-byte entry"
                )
            length = round_down_to_exact_multiple(self.max_index_size, self.entry_size)
            self._preallocate_and_map(length)
            self._entries = 0
        else:
            length = existing_length
            self._entries = length // self.entry_size
            self._map(length)
        self._length = length
        self._max_entries = length // self.entry_size

    def _preallocate_and_map(self, length: int) -> None:
        """Create the file at ``length`` bytes and map it through one descriptor. If mapping
        fails (no descriptor or mapping left) the file is cut back to empty: preallocated
        zeros left behind would read as ``length // entry_size`` entries on the next open."""
        fd = os.open(self._path, os.O_RDWR | os.O_CREAT | _O_CLOEXEC, 0o644)
        try:
            os.ftruncate(fd, length)
            try:
                self._mmap = mmap.mmap(fd, length, access=mmap.ACCESS_WRITE)
            except BaseException:
                os.ftruncate(fd, 0)
                raise
        finally:
            os.close(fd)

    def _map(self, length: int) -> None:
        """Map the first ``length`` bytes of the file (no mapping for an empty file)."""
        if length == 0:
            self._mmap = None
            return
        flags = (os.O_RDWR if self.writable else os.O_RDONLY) | _O_CLOEXEC
        fd = os.open(self._path, flags)
        try:
            access = mmap.ACCESS_WRITE if self.writable else mmap.ACCESS_READ
            self._mmap = mmap.mmap(fd, length, access=access)
        finally:
            os.close(fd)  # the mapping keeps its own reference to the file

    def _unmap(self) -> None:
        if self._mmap is not None:
            self._mmap.close()
            self._mmap = None

    def _buffer(self) -> mmap.mmap:
        """The mapping, for reading or writing entries that are known to exist."""
        if self._mmap is None:
            state = "closed" if self._closed else "empty"
            raise ValueError(f"index {self._path} is {state}: it has no mapped entries")
        return self._mmap

    def _check_writable(self) -> None:
        if not self.writable:
            raise ValueError(f"index {self._path} was opened read-only")
        if self._closed:
            raise ValueError(f"index {self._path} is closed")

    # ------------------------------------------------------------------ sizes
    @property
    def path(self) -> Path:
        return self._path

    @property
    def entries(self) -> int:
        """Number of entries in use."""
        with self._lock:
            return self._entries

    @property
    def max_entries(self) -> int:
        """Number of entries the current file length can hold."""
        with self._lock:
            return self._max_entries

    @property
    def length(self) -> int:
        """Current length of the file (and of the mapping) in bytes."""
        with self._lock:
            return self._length

    @property
    def size_in_bytes(self) -> int:
        """Bytes used by entries (``entries * entry_size``)."""
        with self._lock:
            return self._entries * self.entry_size

    def is_full(self) -> bool:
        with self._lock:
            return self._entries >= self._max_entries

    # ------------------------------------------------------------------ offsets
    def relative_offset(self, offset: int) -> int:
        """``offset - base_offset``; ``InvalidOffsetError`` if it does not fit an int32."""
        relative = offset - self.base_offset
        if relative < 0 or relative > MAX_RELATIVE_OFFSET:
            raise InvalidOffsetError(
                f"Integer overflow for offset {offset} in index {self._path}: offsets must be in"
                f" [{self.base_offset}, {self.base_offset + MAX_RELATIVE_OFFSET}] (inclusive)"
                " for this segment; roll a new segment"
            )
        return relative

    def can_append_offset(self, offset: int) -> bool:
        return 0 <= offset - self.base_offset <= MAX_RELATIVE_OFFSET

    # ------------------------------------------------------------------ file changes
    def resize(self, new_size: int) -> bool:
        """Set the file length to ``new_size`` rounded down to a whole entry; keep entries.

        Returns True if the length changed. Shrinking below the entries in use is refused
        (``truncate_to`` first).
        """
        with self._lock:
            self._check_writable()
            rounded = round_down_to_exact_multiple(max(new_size, 0), self.entry_size)
            if rounded < self._entries * self.entry_size:
                raise ValueError(
                    f"cannot resize index {self._path} to {rounded} bytes: {self._entries}"
                    f" entries use {self._entries * self.entry_size} bytes"
                )
            if rounded == self._length:
                return False
            # The descriptor first: without one (EMFILE) nothing has changed.
            fd = os.open(self._path, os.O_RDWR | _O_CLOEXEC)
            try:
                self._unmap()
                os.ftruncate(fd, rounded)
                if rounded > 0:
                    self._mmap = mmap.mmap(fd, rounded, access=mmap.ACCESS_WRITE)
            finally:
                os.close(fd)
            self._length = rounded
            self._max_entries = rounded // self.entry_size
            return True

    def trim_to_valid_size(self) -> None:
        """Cut the preallocated tail: the file becomes exactly ``entries * entry_size`` bytes."""
        with self._lock:
            self.resize(self._entries * self.entry_size)

    def reset(self) -> None:
        """Drop every entry and grow the file back to ``max_index_size`` (Kafka's ``reset``)."""
        with self._lock:
            self.truncate()
            self.resize(self.max_index_size)

    def truncate(self) -> None:
        """Drop every entry (the file length is unchanged)."""
        with self._lock:
            self._truncate_to_entries(0)

    @abc.abstractmethod
    def truncate_to(self, offset: int) -> None:
        """Drop every entry whose offset is ``>= offset``."""

    def _truncate_to_entries(self, entries: int) -> None:
        self._entries = entries

    def flush(self) -> None:
        """Write the mapped entries to disk (``msync``)."""
        with self._lock:
            if self._mmap is not None and self.writable:
                self._mmap.flush()

    def close(self) -> None:
        """Trim the file to its entries (writable indexes only) and unmap it. Idempotent."""
        with self._lock:
            if self._closed:
                return
            if self.writable:
                self.trim_to_valid_size()
            self._unmap()
            self._closed = True

    def delete_if_exists(self) -> bool:
        """Unmap (without trimming) and delete the file; True if a file was deleted."""
        with self._lock:
            self._unmap()
            self._closed = True
            try:
                self._path.unlink()
            except FileNotFoundError:
                return False
            return True

    def rename_to(self, new_path: Path) -> None:
        """Atomically rename the file; the mapping stays valid."""
        with self._lock:
            os.replace(self._path, new_path)
            self._path = new_path

    # ------------------------------------------------------------------ checks
    def sanity_check(self) -> None:
        """Raise ``CorruptIndexError`` naming the file if it cannot be a valid index.

        Checks that the length is a whole number of entries and, per index type, that the
        entries are ordered and not below the base offset. A failing index can be rebuilt
        from the segment's ``.log``.
        """
        with self._lock:
            if self._length % self.entry_size != 0:
                raise CorruptIndexError(
                    f"Index file {self._path} is corrupt, found {self._length} bytes which is"
                    f" not a multiple of the {self.entry_size}-byte entry size; rebuild it"
                    " from the segment"
                )
            if self._entries > 0:
                self._check_entries()

    def is_untrimmed_preallocation(self) -> bool:
        """Whether the entries are valid ones followed only by zero-filled entries.

        That is the preallocated tail of an index that was never trimmed because the broker
        stopped without closing it: expected after a crash, not a sign of corruption.
        """
        with self._lock:
            if self._length % self.entry_size != 0 or self._entries == 0:
                return False
            data = self._entries_bytes()
            zero_entry = bytes(self.entry_size)
            first_zero = next(
                (
                    slot
                    for slot in range(self._entries)
                    if data[slot * self.entry_size : (slot + 1) * self.entry_size] == zero_entry
                ),
                None,
            )
            if first_zero is None:
                return False
            tail = data[first_zero * self.entry_size :]
            if tail.count(0) != len(tail):
                return False
            entries = self._entries
            self._entries = first_zero
            try:
                if first_zero > 0:
                    self._check_entries()
            except CorruptIndexError:
                return False
            finally:
                self._entries = entries
            return True

    @abc.abstractmethod
    def _check_entries(self) -> None:
        """Index-type checks of the entries in use; raise ``CorruptIndexError``."""

    def _corrupt(self, problem: str) -> CorruptIndexError:
        return CorruptIndexError(
            f"Corrupt index found, index file {self._path} (base offset {self.base_offset},"
            f" {self._entries} entries): {problem}; rebuild it from the segment"
        )

    def _entries_bytes(self) -> bytes:
        """A copy of the bytes of every entry in use."""
        if self._entries == 0:
            return b""
        return self._buffer()[: self._entries * self.entry_size]

    # ------------------------------------------------------------------ searches
    @abc.abstractmethod
    def _search_key(self, n: int, search_type: IndexSearchType) -> int:
        """The absolute key or value of entry ``n`` (offsets made absolute)."""

    def _largest_lower_bound_slot_for(self, target: int, search_type: IndexSearchType) -> int:
        """Slot of the last entry whose key (or value) is ``<= target``; -1 if none."""
        return (
            bisect.bisect_right(
                range(self._entries), target, key=lambda n: self._search_key(n, search_type)
            )
            - 1
        )

    def _smallest_upper_bound_slot_for(self, target: int, search_type: IndexSearchType) -> int:
        """Slot of the first entry whose key (or value) is ``>= target``; -1 if none."""
        slot = bisect.bisect_left(
            range(self._entries), target, key=lambda n: self._search_key(n, search_type)
        )
        return -1 if slot == self._entries else slot

    def _count_below(self, target: int, search_type: IndexSearchType) -> int:
        """Number of leading entries whose key (or value) is ``< target``."""
        return bisect.bisect_left(
            range(self._entries), target, key=lambda n: self._search_key(n, search_type)
        )

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(path={str(self._path)!r}, base_offset={self.base_offset},"
            f" entries={self._entries}, max_entries={self._max_entries})"
        )
