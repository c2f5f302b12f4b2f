"""An index of a segment opened on first use (Kafka's ``LazyIndex``), and closed when idle.

A broker that loads thousands of segments maps none of their ``.index`` and ``.timeindex``
files until a read, an append or a check needs them. Each lazy index is a member of the
broker's ``OpenFileCache``: every operation pins it (mapping the file if it is not mapped),
and the cache unmaps an index that has been idle longest once more than
``log.segment.open.files.max`` idle files are open. The active segment's indexes are not
evictable: they hold entries in a preallocated file, which only a roll trims.

Reopening an index maps its file again: an inactive segment's index was trimmed to its
entries when the segment rolled, so the file's length gives its entries (``AbstractIndex``).

A missing file is created (preallocated) on first use, as Kafka's ``LazyIndex.get`` does;
``delete_if_exists`` and ``rename_to`` of an index never loaded touch only the file.

An index opened ``absent`` (a new log's first segment, whose files the segment's first append
creates) is known empty: reading it (a follower's fetch of the empty log, a roll check)
answers as an empty index and creates nothing, so a new partition costs one file, not three,
until it takes records. A change creates the file as any first use does.

Thread safety: as ``AbstractIndex``; pins keep an index mapped for the whole of one operation.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Generic, Protocol, TypeVar

from storage_core.errors import CorruptIndexError
from storage_core.log.abstract_index import AbstractIndex
from storage_core.log.offset_index import OffsetIndex, OffsetPosition
from storage_core.log.time_index import NO_TIMESTAMP, TimeIndex, TimestampOffset
from storage_core.records.open_file_cache import CachedHandle, OpenFileCache

IndexT = TypeVar("IndexT", bound=AbstractIndex)
IndexT_co = TypeVar("IndexT_co", bound=AbstractIndex, covariant=True)


class IndexFactory(Protocol[IndexT_co]):
    """``OffsetIndex`` or ``TimeIndex``: how a lazy index opens its file."""

    def __call__(
        self, path: Path, base_offset: int, max_index_size: int, *, preallocate_if_empty: bool
    ) -> IndexT_co: ...


class LazyIndex(CachedHandle[IndexT], Generic[IndexT]):
    """An ``AbstractIndex`` mapped on first use; see the module docstring."""

    def __init__(
        self,
        path: Path,
        base_offset: int,
        max_index_size: int,
        factory: IndexFactory[IndexT],
        cache: OpenFileCache | None,
        *,
        entry_size: int,
        absent: bool = False,
    ) -> None:
        super().__init__()
        self._entry_size = entry_size
        self._absent = absent
        self._path = path
        self.base_offset = base_offset
        self.max_index_size = max_index_size
        self._factory = factory
        self._cache = cache
        self._closed = False

    # ------------------------------------------------------------------ handle
    def _open_handle(self) -> IndexT:
        # An inactive segment's index with no entry reopens empty, not preallocated: closing
        # it again then changes nothing on disk (and needs no descriptor to trim it).
        handle = self._factory(
            self._path,
            self.base_offset,
            self.max_index_size,
            preallocate_if_empty=not self._cache_evictable,
        )
        self._absent = False
        return handle

    def _close_handle(self, handle: IndexT) -> None:
        handle.close()  # an inactive segment's index is trimmed already: this only unmaps

    def _describe(self) -> str:
        return str(self._path)

    @contextlib.contextmanager
    def _loaded(self) -> Iterator[IndexT]:
        if self._closed:
            raise ValueError(f"index {self._path} is closed")
        cache = self._cache
        if cache is None:
            if self._handle is None:
                self._handle = self._open_handle()
            yield self._handle
            return
        index = cache.pin(self)
        try:
            yield index
        finally:
            cache.unpin(self)

    @property
    def is_loaded(self) -> bool:
        """Whether the file is mapped now."""
        return self._handle is not None

    @property
    def is_absent(self) -> bool:
        """Whether the file is not created yet (the index is empty)."""
        return self._absent

    def create_file(self) -> None:
        """Create (preallocate) an absent index's file now; out of descriptors, idle segment
        files are closed and it is tried again, then ``TooManyOpenFilesError``."""
        with self._loaded():
            pass

    def set_evictable(self, evictable: bool) -> None:
        if self._cache is not None:
            self._cache.set_evictable(self, evictable)
        else:
            self._cache_evictable = evictable  # only decides how an empty file is opened

    # ------------------------------------------------------------------ facts
    @property
    def path(self) -> Path:
        return self._path

    @property
    def entries(self) -> int:
        if self._absent:
            return 0
        with self._loaded() as index:
            return index.entries

    @property
    def length(self) -> int:
        with self._loaded() as index:
            return index.length

    @property
    def max_entries(self) -> int:
        with self._loaded() as index:
            return index.max_entries

    def is_full(self) -> bool:
        if self._absent:
            return self.max_index_size // self._entry_size == 0
        index = self._handle
        if index is not None and not self._cache_evictable:
            # The active segment's index, asked by every append's roll check: the cache never
            # closes it, and only a roll (under the log's lock, as the check) makes it
            # evictable, so it needs no pin (a pin and unpin cost more than the check).
            return index.is_full()
        with self._loaded() as index:
            return index.is_full()

    def sanity_check(self) -> None:
        """The index's full check (maps it): see ``AbstractIndex.sanity_check``."""
        if self._absent:
            return
        with self._loaded() as index:
            index.sanity_check()

    def check_length(self) -> None:
        """The check that needs no mapping: the file holds a whole number of entries.
        ``CorruptIndexError`` naming the file otherwise."""
        if self._absent:
            return
        handle = self._handle
        length = handle.length if handle is not None else self._path.stat().st_size
        if length % self._entry_size != 0:
            raise CorruptIndexError(
                f"Index file {self._path} is corrupt, found {length} bytes which is not a"
                f" multiple of the {self._entry_size}-byte entry size; rebuild it from the"
                " segment"
            )

    def is_untrimmed_preallocation(self) -> bool:
        with self._loaded() as index:
            return index.is_untrimmed_preallocation()

    # ------------------------------------------------------------------ changes
    def resize(self, new_size: int) -> bool:
        """``AbstractIndex.resize``, which needs a descriptor for a moment: out of them, idle
        segment files are closed and it is tried again (nothing changed if it failed). An
        absent index keeps the size for the file it will be created with."""
        if self._absent:
            self.max_index_size = new_size
            return False
        with self._loaded() as index:
            if self._cache is None:
                return index.resize(new_size)
            return self._cache.call_evicting(lambda: index.resize(new_size), str(self._path))

    def trim_to_valid_size(self) -> None:
        with self._loaded() as index:
            self.resize(index.entries * index.entry_size)

    def truncate(self) -> None:
        if self._absent:
            return
        with self._loaded() as index:
            index.truncate()

    def truncate_to(self, offset: int) -> None:
        if self._absent:
            return
        with self._loaded() as index:
            index.truncate_to(offset)

    def flush(self) -> None:
        """msync a mapped index; one that is not mapped has nothing unwritten."""
        if (self._cache is None and not self._absent) or self._handle is not None:
            with self._loaded() as index:
                index.flush()

    # ------------------------------------------------------------------ lifecycle
    def close(self) -> None:
        """Trim (if mapped) and unmap; idempotent. An index never loaded stays as it is."""
        if self._closed:
            return
        self._closed = True
        handle = self._take_handle()
        if handle is not None:
            handle.close()

    def delete_if_exists(self) -> bool:
        """Unmap without trimming and delete the file; True if a file was deleted."""
        self._closed = True
        handle = self._take_handle()
        if handle is not None:
            return handle.delete_if_exists()
        try:
            self._path.unlink()
        except FileNotFoundError:
            return False
        return True

    def rename_to(self, new_path: Path) -> None:
        """Rename the file (mapped or not); an index whose file was never created has none."""
        handle = self._handle
        if handle is not None:
            handle.rename_to(new_path)
        else:
            with contextlib.suppress(FileNotFoundError):
                os.replace(self._path, new_path)
        self._path = new_path

    def _take_handle(self) -> IndexT | None:
        if self._cache is not None:
            return self._cache.retire(self)
        handle, self._handle = self._handle, None
        return handle


class LazyOffsetIndex(LazyIndex[OffsetIndex]):
    """A segment's ``.index``, mapped on first use."""

    def __init__(
        self,
        path: Path,
        base_offset: int,
        max_index_size: int,
        cache: OpenFileCache | None,
        *,
        absent: bool = False,
    ) -> None:
        super().__init__(
            path,
            base_offset,
            max_index_size,
            OffsetIndex,
            cache,
            entry_size=OffsetIndex.entry_size,
            absent=absent,
        )

    @property
    def last_offset(self) -> int:
        if self._absent:
            return self.base_offset
        with self._loaded() as index:
            return index.last_offset

    def entry(self, n: int) -> OffsetPosition:
        with self._loaded() as index:
            return index.entry(n)

    def entries_list(self) -> list[OffsetPosition]:
        with self._loaded() as index:
            return index.entries_list()

    def append(self, offset: int, position: int) -> None:
        with self._loaded() as index:
            index.append(offset, position)

    def lookup(self, target_offset: int) -> OffsetPosition:
        if self._absent:
            return OffsetPosition(self.base_offset, 0)
        with self._loaded() as index:
            return index.lookup(target_offset)

    def fetch_upper_bound_offset(
        self, fetch_offset: OffsetPosition, fetch_size: int
    ) -> OffsetPosition | None:
        if self._absent:
            return None
        with self._loaded() as index:
            return index.fetch_upper_bound_offset(fetch_offset, fetch_size)


class LazyTimeIndex(LazyIndex[TimeIndex]):
    """A segment's ``.timeindex``, mapped on first use."""

    def __init__(
        self,
        path: Path,
        base_offset: int,
        max_index_size: int,
        cache: OpenFileCache | None,
        *,
        absent: bool = False,
    ) -> None:
        super().__init__(
            path,
            base_offset,
            max_index_size,
            TimeIndex,
            cache,
            entry_size=TimeIndex.entry_size,
            absent=absent,
        )

    @property
    def last_entry(self) -> TimestampOffset:
        if self._absent:
            return TimestampOffset(NO_TIMESTAMP, self.base_offset)
        with self._loaded() as index:
            return index.last_entry

    def entry(self, n: int) -> TimestampOffset:
        with self._loaded() as index:
            return index.entry(n)

    def entries_list(self) -> list[TimestampOffset]:
        with self._loaded() as index:
            return index.entries_list()

    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> None:
        with self._loaded() as index:
            index.maybe_append(timestamp, offset, skip_full_check)

    def lookup(self, target_timestamp: int) -> TimestampOffset:
        if self._absent:
            return TimestampOffset(NO_TIMESTAMP, self.base_offset)
        with self._loaded() as index:
            return index.lookup(target_timestamp)
