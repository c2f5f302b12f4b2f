"""A segment's aborted-transaction index, ``<base offset>.txnindex`` (Kafka's
``TransactionIndex``, ``AbortedTxn`` and ``TxnIndexSearchResult``).

File format: 34-byte big-endian entries back to back, nothing else (no header, no CRC)::

    offset  size  field
    0       2     version             int16, 0 (the only version)
    2       8     producer_id         int64
    10      8     first_offset        int64  first offset of the aborted transaction (inclusive)
    18      8     last_offset         int64  offset of its ABORT marker (inclusive)
    26      8     last_stable_offset  int64  the LSO once it was decided (Kafka's
                                             ``ProducerStateManager.lastStableOffset``)

One entry per transaction whose ABORT marker lies in the segment, in marker order (the last
offsets increase); a transaction may begin in an earlier segment. read_committed fetches use
the index to tell consumers which producers' records to skip (``collect_aborted_txns``).

Files and descriptors: the file is created by the first ``append`` only, so a segment without
aborted transactions has no ``.txnindex`` and costs nothing; ``reset`` and a truncation that
leaves no entry delete the file again (Kafka truncates it to 0 bytes and keeps it). An existing
file is opened on first read or write. With the broker's ``OpenFileCache`` the descriptor is
always evictable, also for the active segment (appends are rare and nothing is preallocated),
so a partition still holds three descriptors for its active segment; without a cache it stays
open until ``close``.

Thread safety: appends, truncation, ``reset``, renames and deletion run under the owning
``Log``'s lock. Reads may run concurrently with an append: they read the entries below the
length they observe, which an append moves only after its bytes are written.
"""

from __future__ import annotations

import contextlib
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from storage_core.errors import CorruptIndexError, StorageError
from storage_core.log.producer_state_entry import CompletedTxn
from storage_core.records.open_file_cache import CachedHandle, OpenFileCache

CURRENT_VERSION = 0
_ENTRY = struct.Struct(">hqqqq")  # version, producer id, first, last, last stable offset
ENTRY_SIZE = _ENTRY.size  # 34 (Kafka's AbortedTxn.TOTAL_SIZE)
_LAST_OFFSET = struct.Struct(">q")
_LAST_OFFSET_POSITION = 18  # of an entry's last offset, in the entry
_READ_CHUNK_BYTES = 1 << 20
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


class TxnIndexAppendError(StorageError):
    """An aborted transaction was appended out of order: its last offset is not above the
    index's last one (Kafka's ``IllegalArgumentException``). Nothing was written; the caller
    appends markers in log order."""


@dataclass(frozen=True, slots=True, kw_only=True)
class AbortedTxn:
    """One entry of the index; see the module docstring for the fields and their bounds."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int
    version: int = CURRENT_VERSION

    def __post_init__(self) -> None:
        if self.first_offset > self.last_offset:
            raise ValueError(
                f"aborted transaction of producer {self.producer_id}: first offset"
                f" {self.first_offset} is above its last offset {self.last_offset}"
            )

    @staticmethod
    def of(completed: CompletedTxn, last_stable_offset: int) -> AbortedTxn:
        """The entry of an aborted ``completed`` transaction (Kafka's
        ``AbortedTxn(CompletedTxn, long)``)."""
        return AbortedTxn(
            producer_id=completed.producer_id,
            first_offset=completed.first_offset,
            last_offset=completed.last_offset,
            last_stable_offset=last_stable_offset,
        )

    def to_bytes(self) -> bytes:
        return _ENTRY.pack(
            self.version,
            self.producer_id,
            self.first_offset,
            self.last_offset,
            self.last_stable_offset,
        )

    @staticmethod
    def from_bytes(data: bytes | bytearray | memoryview, position: int = 0) -> AbortedTxn:
        """The entry at ``position``; ``ValueError`` if its offsets are out of order."""
        version, producer_id, first, last, lso = _ENTRY.unpack_from(data, position)
        return AbortedTxn(
            producer_id=producer_id,
            first_offset=first,
            last_offset=last,
            last_stable_offset=lso,
            version=version,
        )


@dataclass(frozen=True, slots=True)
class TxnIndexSearchResult:
    """The aborted transactions of one segment that overlap a fetch range, and whether the
    search is complete (no later segment can hold more: Kafka's ``isComplete``)."""

    aborted_transactions: tuple[AbortedTxn, ...]
    is_complete: bool


class _IndexFile(CachedHandle[int]):
    """The open-file-cache member of one opened ``.txnindex``: a read-write descriptor.

    A new member is made each time the file is (re)created, so that deleting the file also
    drops its descriptor for good (``OpenFileCache.retire``)."""

    def __init__(self, owner: TransactionIndex) -> None:
        super().__init__()
        self._owner = owner

    def _open_handle(self) -> int:
        return os.open(self._owner.path, os.O_RDWR | os.O_CREAT | _O_CLOEXEC, 0o644)

    def _close_handle(self, handle: int) -> None:
        os.close(handle)

    def _describe(self) -> str:
        return str(self._owner.path)


class TransactionIndex:
    """A segment's ``.txnindex``; see the module docstring."""

    def __init__(self, start_offset: int, path: Path, cache: OpenFileCache | None = None) -> None:
        self.start_offset = start_offset
        self._path = Path(path)
        self._cache = cache
        self._member: _IndexFile | None = None
        self._closed = False
        # Bytes in the file, None until first needed (a stat, no descriptor); 0 when missing.
        self._length: int | None = None
        self._last_offset: int | None = None  # of the last entry, known after a read/append
        self._last_offset_known = False
        self._unflushed = False
        self._created_unsynced = False  # a new file whose directory entry is not fsynced

    # ------------------------------------------------------------------ facts
    @property
    def path(self) -> Path:
        return self._path

    @property
    def holds_descriptor(self) -> bool:
        """Whether a descriptor of the file is open now."""
        member = self._member
        return member is not None and member._handle is not None

    @property
    def length(self) -> int:
        """Bytes in the file; 0 when there is none."""
        if self._length is None:
            try:
                self._length = self._path.stat().st_size
            except FileNotFoundError:
                self._length = 0
        return self._length

    @property
    def is_empty(self) -> bool:
        return self.length < ENTRY_SIZE

    @property
    def last_offset(self) -> int | None:
        """Last offset of the last entry (the newest ABORT marker), None if there is none."""
        if not self._last_offset_known:
            entries = self._read_entries()
            self._last_offset = entries[-1][1].last_offset if entries else None
            self._last_offset_known = True
        return self._last_offset

    # ------------------------------------------------------------------ reads
    def all_entries(self) -> list[AbortedTxn]:
        """Every entry, oldest first (Kafka's ``allAbortedTxns``)."""
        return [txn for _position, txn in self._read_entries()]

    def collect_aborted_txns(
        self, fetch_offset: int, upper_bound_offset: int
    ) -> TxnIndexSearchResult:
        """Aborted transactions overlapping ``[fetch_offset, upper_bound_offset)``: those whose
        last offset is ``>= fetch_offset`` and first offset ``< upper_bound_offset``. Complete
        at the first entry whose last stable offset is ``>= upper_bound_offset``: every
        transaction aborted after it was decided above the range (Kafka's rules).

        The entries whose last offset is below ``fetch_offset`` are passed over by a binary
        search of the raw bytes (the last offsets increase), unparsed: they overlap nothing
        and complete nothing, as an entry's LSO is at most its last offset + 1 (a transaction
        still open when the marker was written began before it). A consumer reading the
        middle of a segment with many aborts parses only the entries from its offset on."""
        data = self._read_data()
        end = len(data) // ENTRY_SIZE
        low = 0
        while low < end:
            middle = (low + end) // 2
            (last,) = _LAST_OFFSET.unpack_from(data, middle * ENTRY_SIZE + _LAST_OFFSET_POSITION)
            if last < fetch_offset:
                low = middle + 1
            else:
                end = middle
        found: list[AbortedTxn] = []
        for position in range(low * ENTRY_SIZE, len(data) - ENTRY_SIZE + 1, ENTRY_SIZE):
            txn = self._entry_at(data, position)
            if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound_offset:
                found.append(txn)
            if txn.last_stable_offset >= upper_bound_offset:
                return TxnIndexSearchResult(tuple(found), True)
        return TxnIndexSearchResult(tuple(found), False)

    def check_length(self) -> None:
        """The check that needs no descriptor: a whole number of entries (a stat).
        ``CorruptIndexError`` naming the file otherwise."""
        self._length = None  # look at the file as it is now
        length = self.length
        if length % ENTRY_SIZE != 0:
            raise CorruptIndexError(
                f"Transaction index {self._path} is corrupt, found {length} bytes which is not"
                f" a multiple of the {ENTRY_SIZE}-byte entry size; rebuild it from the segment"
            )

    def sanity_check(self) -> None:
        """``check_length``, then every entry: version 0, offsets in order, last offsets
        not decreasing and not below the segment's base offset (Kafka's ``sanityCheck``).
        Equal last offsets are accepted: a restored log's last remote segment closes the
        aborts whose markers were never copied at its end, all at one offset
        (``ChunkedRemoteStorageManager.fetch_index``); appends stay strictly increasing.
        ``CorruptIndexError`` naming the file otherwise. Leaves no descriptor open (a load
        checks files it may never read again)."""
        self.check_length()
        previous: AbortedTxn | None = None
        for position, txn in self._read_entries(keep_open=False):
            problem = None
            if txn.last_offset < self.start_offset:
                problem = f"its last offset is below the segment's base offset {self.start_offset}"
            elif previous is not None and txn.last_offset < previous.last_offset:
                problem = f"its last offset is below the previous entry's {previous.last_offset}"
            if problem is not None:
                raise CorruptIndexError(
                    f"Transaction index {self._path} is corrupt at byte {position}: {txn}:"
                    f" {problem}; rebuild it from the segment"
                )
            previous = txn

    def _read_entries(self, *, keep_open: bool = True) -> list[tuple[int, AbortedTxn]]:
        """(byte position, entry) of every whole entry below the length observed now; without
        ``keep_open`` a file not open already is read through a descriptor closed at once."""
        data = self._read_data(keep_open=keep_open)
        return [
            (position, self._entry_at(data, position))
            for position in range(0, len(data) - ENTRY_SIZE + 1, ENTRY_SIZE)
        ]

    def _read_data(self, *, keep_open: bool = True) -> bytes:
        """The bytes of every whole entry below the length observed now (see
        ``_read_entries``)."""
        length = self.length
        if length < ENTRY_SIZE:
            return b""
        size = length - length % ENTRY_SIZE
        if keep_open or self.holds_descriptor:
            with self._pinned() as fd:
                return _pread_fully(fd, size, self._path)
        fd = self._open_read_only()
        try:
            return _pread_fully(fd, size, self._path)
        finally:
            os.close(fd)

    def _entry_at(self, data: bytes, position: int) -> AbortedTxn:
        """The entry at byte ``position`` of ``data``; ``CorruptIndexError`` naming the file
        if its version is not 0 or its offsets are out of order."""
        version = int.from_bytes(data[position : position + 2], "big", signed=True)
        if version != CURRENT_VERSION:
            raise CorruptIndexError(
                f"Transaction index {self._path} is corrupt at byte {position}: unexpected"
                f" aborted transaction version {version}, current version is"
                f" {CURRENT_VERSION}; rebuild it from the segment"
            )
        try:
            return AbortedTxn.from_bytes(data, position)
        except ValueError as exc:
            raise CorruptIndexError(
                f"Transaction index {self._path} is corrupt at byte {position}: {exc};"
                " rebuild it from the segment"
            ) from exc

    def _open_read_only(self) -> int:
        """A descriptor for one read; out of descriptors, idle segment files are closed first
        (``TooManyOpenFilesError`` if that is not enough)."""
        path = self._path

        def open_fd() -> int:
            return os.open(path, os.O_RDONLY | _O_CLOEXEC)

        return open_fd() if self._cache is None else self._cache.call_evicting(open_fd, str(path))

    # ------------------------------------------------------------------ changes
    def append(self, aborted: AbortedTxn) -> None:
        """Add an entry at the end, creating the file if needed. ``TxnIndexAppendError`` if
        its last offset is not above the last entry's."""
        last = self.last_offset
        if last is not None and last >= aborted.last_offset:
            raise TxnIndexAppendError(
                f"The last offset of appended transactions must increase sequentially, but"
                f" {aborted.last_offset} is not greater than current last offset {last} of"
                f" index {self._path}"
            )
        entry = aborted.to_bytes()
        created = self.length == 0 and not self._path.exists()
        with self._pinned() as fd:
            position = self.length
            written = 0
            while written < len(entry):
                written += os.pwrite(fd, entry[written:], position + written)
        self._created_unsynced = self._created_unsynced or created
        self._unflushed = True
        self._length = position + len(entry)
        self._last_offset = aborted.last_offset
        self._last_offset_known = True

    def truncate_to(self, offset: int) -> None:
        """Drop every entry whose last offset is ``>= offset`` (Kafka's ``truncateTo``); the
        file goes when none is left."""
        kept_last: int | None = None
        for position, txn in self._read_entries():
            if txn.last_offset >= offset:
                if position == 0:
                    self.reset()
                    return
                with self._pinned() as fd:
                    os.ftruncate(fd, position)
                self._length = position
                self._unflushed = True
                self._last_offset = kept_last
                self._last_offset_known = True
                return
            kept_last = txn.last_offset

    def reset(self) -> None:
        """Remove every entry: the file is deleted (recreated by the next append)."""
        self._drop_descriptor()
        self._path.unlink(missing_ok=True)
        self._forget_file()

    def flush(self) -> None:
        """fsync what was written since the last flush (and a new file's directory entry)."""
        if not self._unflushed or self.length == 0:
            return
        with self._pinned() as fd:
            os.fsync(fd)
        if self._created_unsynced:
            dir_fd = os.open(self._path.parent, os.O_RDONLY | _O_CLOEXEC)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
            self._created_unsynced = False
        self._unflushed = False

    # ------------------------------------------------------------------ lifecycle
    def rename_to(self, new_path: Path) -> None:
        """Rename the file if there is one (an open descriptor stays valid); the index then
        names ``new_path`` either way (Kafka's ``renameTo``)."""
        new_path = Path(new_path)
        with contextlib.suppress(FileNotFoundError):
            os.replace(self._path, new_path)
        self._path = new_path

    def close(self) -> None:
        """Close the descriptor; idempotent. The file stays as it is."""
        self._closed = True
        self._drop_descriptor()

    def delete_if_exists(self) -> bool:
        """Close and delete the file; True if a file was deleted."""
        self.close()
        try:
            self._path.unlink()
        except FileNotFoundError:
            return False
        finally:
            self._forget_file()
        return True

    def _forget_file(self) -> None:
        self._length = 0
        self._last_offset = None
        self._last_offset_known = True
        self._unflushed = False
        self._created_unsynced = False

    def _drop_descriptor(self) -> None:
        member, self._member = self._member, None
        if member is None:
            return
        if self._cache is not None:
            handle = self._cache.retire(member)  # a pinned one closes at its last unpin
        else:
            handle, member._handle = member._handle, None
        if handle is not None:
            os.close(handle)

    @contextlib.contextmanager
    def _pinned(self) -> Iterator[int]:
        """The descriptor (the file opened, or created, if needed) for one operation."""
        if self._closed:
            raise ValueError(f"transaction index {self._path} is closed")
        member = self._member
        if member is None:
            member = self._member = _IndexFile(self)
        cache = self._cache
        if cache is None:
            if member._handle is None:
                member._handle = member._open_handle()
            yield member._handle
            return
        fd = cache.pin(member)
        try:
            yield fd
        finally:
            cache.unpin(member)

    def __repr__(self) -> str:
        return f"TransactionIndex({self._path}, start_offset={self.start_offset})"


def read_aborted_txns(path: Path) -> list[AbortedTxn]:
    """Every whole entry of the index file at ``path``, oldest first; none when there is no
    file. For readers outside the broker (a tiering job reading its log dir): an entry still
    being appended is left for the next read. ``CorruptIndexError`` naming the file."""
    index = TransactionIndex(0, path)
    try:
        return [txn for _position, txn in index._read_entries(keep_open=False)]
    except FileNotFoundError:
        return []


def _pread_fully(fd: int, size: int, path: Path) -> bytes:
    chunks: list[bytes] = []
    position = 0
    while position < size:
        chunk = os.pread(fd, min(_READ_CHUNK_BYTES, size - position), position)
        if not chunk:
            raise CorruptIndexError(
                f"Transaction index {path} ended at byte {position}, expected {size} bytes;"
                " rebuild it from the segment"
            )
        chunks.append(chunk)
        position += len(chunk)
    return b"".join(chunks)
