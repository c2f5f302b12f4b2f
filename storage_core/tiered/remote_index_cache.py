"""``RemoteIndexCache``: the indexes of remote segments, cached on local disk (KIP-405).

Reading a remote segment at an offset (or a timestamp) needs its offset (or time) index; these
are fetched once from the remote storage manager and kept under
``<log dir>/remote-log-index-cache/`` with Kafka's file names. Kafka fetches the time index
with the others; here it is fetched when a timestamp lookup first needs it: a consumer reading
at offsets never does, and it cost every cold read inside a segment a fetch, a file and a
mapping (and a GET on S3)::

    <20-digit start offset>_<segment uuid>.index       OffsetIndex format (8-byte entries)
    <20-digit start offset>_<segment uuid>.timeindex   TimeIndex format (12-byte entries)
    <20-digit start offset>_<segment uuid>.txnindex    aborted-transaction index (empty when
                                                       the segment has none)
    *.tmp                                              a download in progress (never read)
    *.deleted                                          evicted, still used by a reader

A download goes to a ``.tmp`` file, is checked (whole entries, ordered, not below the start
offset) and renamed into place, so a complete name always holds a complete file. The
transaction index is written as an empty file when the store has none (Kafka's
``RemoteIndexCache`` on ``RemoteResourceNotFoundException``: a segment without aborted
transactions) or the metadata says it is empty (KIP-1058's ``txn_idx_empty``: nothing is
fetched). On start the directory is scanned: complete entries are kept (the offset and
transaction indexes present, the time index if it was fetched; an entry cut short by a crash
has no ``.txnindex`` and is fetched again), anything else is removed. An entry keeps its
transaction index's bytes in memory (34 per aborted transaction, counted in the cache size)
for ``collect_aborted_txns``.

Entries are keyed by remote segment id and evicted least recently used first once their total
size exceeds ``remote.log.index.file.cache.total.size.bytes``; ``remove`` drops the entry of
a deleted segment. An entry in use by a reader (``with cache.acquire(metadata) as entry``) is
never unmapped under it: eviction only marks it, and the last reader closes and deletes its
files.

Thread-safety: every method may be called from any thread. ``_lock`` guards the map and the
byte count; downloads run outside it, one per segment at a time (others wait for it).
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import threading
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from storage_core.common import Uuid
from storage_core.errors import CorruptIndexError
from storage_core.log.log_manager import REMOTE_INDEX_CACHE_DIR_NAME
from storage_core.log.offset_index import OffsetIndex, OffsetPosition
from storage_core.log.time_index import TimeIndex, TimestampOffset
from storage_core.log.transaction_index import ENTRY_SIZE as TXN_ENTRY_SIZE
from storage_core.log.transaction_index import AbortedTxn, TransactionIndex, TxnIndexSearchResult
from storage_core.tiered.remote_storage_manager import (
    IndexType,
    RemoteLogSegmentMetadataLike,
    RemoteReadNeedsStoreError,
    RemoteResourceNotFoundError,
    RemoteSegmentRef,
    RemoteStorageError,
    RemoteStorageManager,
)

logger = logging.getLogger(__name__)

DIR_NAME = REMOTE_INDEX_CACHE_DIR_NAME
TEMP_SUFFIX = ".tmp"
DELETED_SUFFIX = ".deleted"
OFFSET_INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
# An index file bigger than this is not an index (Kafka's segment.index.bytes max is 2 GiB).
MAX_INDEX_FILE_BYTES = 1 << 31
DOWNLOAD_CHUNK_BYTES = 1 << 20


def entry_file_stem(start_offset: int, segment_id: Uuid) -> str:
    """Kafka's ``remoteLogIndexFileName`` prefix: ``<20-digit offset>_<uuid>``."""
    return f"{start_offset:020d}_{segment_id}"


class RemoteIndexCacheEntry:
    """The cached indexes of one remote segment; read-only, shared by readers.

    ``users`` counts readers holding the entry; ``evicted`` is set once the cache dropped it,
    and the entry's files are closed and deleted when both say so. Guarded by the cache lock.
    """

    def __init__(
        self,
        segment_id: Uuid,
        start_offset: int,
        offset_index: OffsetIndex,
        time_index: TimeIndex | None,
        txn_index_path: Path | None,
        *,
        aborted_txns: tuple[AbortedTxn, ...] = (),
    ) -> None:
        self.segment_id = segment_id
        self.start_offset = start_offset
        self.offset_index = offset_index
        self.time_index = time_index  # None until a timestamp lookup fetches it
        self.txn_index_path = txn_index_path
        self.aborted_txns = aborted_txns
        self.users = 0
        self.evicted = False
        self.time_index_lock = threading.Lock()  # one fetch of the time index at a time
        # The files never change while cached; the time index adds its size once fetched.
        self.size_bytes = offset_index.length + TXN_ENTRY_SIZE * len(aborted_txns)
        if time_index is not None:
            self.size_bytes += time_index.length

    @property
    def time_index_path(self) -> Path:
        """Where the time index is (or goes), beside the offset index under its current name
        (evicted entries' files are renamed)."""
        path = self.offset_index.path
        return path.with_name(path.name.replace(OFFSET_INDEX_SUFFIX, TIME_INDEX_SUFFIX, 1))

    def lookup_offset(self, offset: int) -> int:
        """Byte position in the remote ``.log`` from which to scan for ``offset``."""
        return self.offset_index.lookup(offset).position

    def lookup_timestamp(self, timestamp: int, starting_offset: int) -> int:
        """Byte position from which to scan for the first record at or after both targets;
        the time index must have been fetched (``RemoteIndexCache.lookup_timestamp``)."""
        if self.time_index is None:
            raise RuntimeError(f"remote segment {self.segment_id}: time index not fetched")
        entry: TimestampOffset = self.time_index.lookup(timestamp)
        return self.offset_index.lookup(max(entry.offset, starting_offset)).position

    def fetch_upper_bound_offset(self, fetch_offset: int, position: int, size: int) -> int | None:
        """Kafka's ``OffsetIndex.fetchUpperBoundOffset``: the offset of the first index entry
        at or past ``position + size`` bytes, None if the index holds none."""
        found = self.offset_index.fetch_upper_bound_offset(
            OffsetPosition(fetch_offset, position), size
        )
        return None if found is None else found.offset

    def collect_aborted_txns(
        self, fetch_offset: int, upper_bound_offset: int
    ) -> TxnIndexSearchResult:
        """Kafka's ``TransactionIndex.collectAbortedTxns`` over the remote segment's index:
        the aborted transactions overlapping ``[fetch_offset, upper_bound_offset)``; complete
        at the first entry whose LSO is ``>= upper_bound_offset``."""
        found: list[AbortedTxn] = []
        for txn in self.aborted_txns:
            if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound_offset:
                found.append(txn)
            if txn.last_stable_offset >= upper_bound_offset:
                return TxnIndexSearchResult(tuple(found), True)
        return TxnIndexSearchResult(tuple(found), False)

    def _set_aside(self) -> None:
        """Rename the files to unique ``.deleted`` names, so a new download of the same
        segment can take the names while readers still use these (Kafka renames too)."""
        token = secrets.token_hex(4)
        self.offset_index.rename_to(_deleted_name(self.offset_index.path, token))
        if self.time_index is not None:
            self.time_index.rename_to(_deleted_name(self.time_index.path, token))
        if self.txn_index_path is not None:
            target = _deleted_name(self.txn_index_path, token)
            with contextlib.suppress(FileNotFoundError):
                os.replace(self.txn_index_path, target)
            self.txn_index_path = target

    def _delete_files(self) -> None:
        self.offset_index.delete_if_exists()
        if self.time_index is not None:
            self.time_index.delete_if_exists()
        if self.txn_index_path is not None:
            with contextlib.suppress(FileNotFoundError):
                self.txn_index_path.unlink()


@dataclass(frozen=True, slots=True)
class RemoteIndexCacheStats:
    entries: int
    size_bytes: int
    hits: int
    misses: int
    evictions: int


class RemoteIndexCache:
    """On-disk LRU cache of remote segment indexes; see the module docstring."""

    def __init__(self, rsm: RemoteStorageManager, log_dir: Path, *, max_size_bytes: int) -> None:
        if max_size_bytes < 0:
            raise ValueError(
                f"remote.log.index.file.cache.total.size.bytes must be >= 0, got {max_size_bytes}"
            )
        self._rsm = rsm
        self.cache_dir = log_dir / DIR_NAME
        self.max_size_bytes = max_size_bytes
        self._lock = threading.Lock()
        self._entries: OrderedDict[Uuid, RemoteIndexCacheEntry] = OrderedDict()
        self._loading: dict[Uuid, threading.Event] = {}
        self._size_bytes = 0
        self._hits = 0
        self._misses = 0
        self._evictions = 0
        self._closed = False
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        self._load_existing()

    # ------------------------------------------------------------------ start-up
    def _load_existing(self) -> None:
        stems: dict[str, set[str]] = {}
        for path in self.cache_dir.iterdir():
            if path.name.endswith(TEMP_SUFFIX) or path.suffix not in (
                OFFSET_INDEX_SUFFIX,
                TIME_INDEX_SUFFIX,
                TXN_INDEX_SUFFIX,
            ):
                _unlink_quietly(path)
                continue
            stems.setdefault(path.stem, set()).add(path.suffix)
        for stem, suffixes in sorted(stems.items()):
            parsed = _parse_stem(stem)
            if parsed is None or not {OFFSET_INDEX_SUFFIX, TXN_INDEX_SUFFIX} <= suffixes:
                for suffix in suffixes:
                    _unlink_quietly(self.cache_dir / (stem + suffix))
                continue
            start_offset, segment_id = parsed
            try:
                entry = self._open_entry(
                    segment_id,
                    start_offset,
                    self.cache_dir / stem,
                    with_time_index=TIME_INDEX_SUFFIX in suffixes,
                )
            except (CorruptIndexError, ValueError, OSError) as exc:
                logger.warning("dropping cached remote index stem=%s error=%s", stem, exc)
                for suffix in suffixes:
                    _unlink_quietly(self.cache_dir / (stem + suffix))
                continue
            self._entries[segment_id] = entry
            self._size_bytes += entry.size_bytes
        self._evict_over_limit(keep=None)
        logger.info(
            "remote index cache loaded dir=%s entries=%d size_bytes=%d",
            self.cache_dir,
            len(self._entries),
            self._size_bytes,
        )

    @staticmethod
    def _open_entry(
        segment_id: Uuid,
        start_offset: int,
        base: Path,
        *,
        with_time_index: bool,
        txn_index_empty: bool = False,
    ) -> RemoteIndexCacheEntry:
        """The entry of the files under ``base``, each checked; ``txn_index_empty``: its
        transaction index was just written empty, and is not read back."""
        offset_index = OffsetIndex(
            base.with_name(base.name + OFFSET_INDEX_SUFFIX), start_offset, writable=False
        )
        time_index = None
        try:
            offset_index.sanity_check()
            if with_time_index:
                time_index = _open_time_index(
                    base.with_name(base.name + TIME_INDEX_SUFFIX), start_offset
                )
            txn_path = base.with_name(base.name + TXN_INDEX_SUFFIX)
            aborted: tuple[AbortedTxn, ...] = ()
            if not txn_index_empty:
                txn_index = TransactionIndex(start_offset, txn_path)
                try:
                    txn_index.sanity_check()
                    aborted = tuple(txn_index.all_entries())
                finally:
                    txn_index.close()
        except BaseException:
            offset_index.close()
            if time_index is not None:
                time_index.close()
            raise
        return RemoteIndexCacheEntry(
            segment_id, start_offset, offset_index, time_index, txn_path, aborted_txns=aborted
        )

    # ------------------------------------------------------------------ lookups
    @contextlib.contextmanager
    def acquire(self, metadata: RemoteLogSegmentMetadataLike) -> Iterator[RemoteIndexCacheEntry]:
        """The entry of ``metadata``'s segment, downloaded if needed, held while in use.

        Raises ``RemoteStorageError`` if the store fails and ``CorruptIndexError`` if a
        downloaded index is not valid (its files are removed; the next call retries).
        """
        entry = self._get_or_load(metadata)
        try:
            yield entry
        finally:
            self._release(entry)

    def lookup_offset(self, metadata: RemoteLogSegmentMetadataLike, offset: int) -> int:
        """Kafka's ``RemoteIndexCache.lookupOffset``: a ``.log`` position at or before
        ``offset``'s batch."""
        with self.acquire(metadata) as entry:
            return entry.lookup_offset(offset)

    def cached_lookup_offset(self, metadata: RemoteLogSegmentMetadataLike, offset: int) -> int:
        """``lookup_offset`` from an entry already cached (its indexes mapped in memory), for a
        read on the event loop: ``RemoteReadNeedsStoreError`` when the segment's indexes are
        not cached (or still being downloaded), never a download or a wait."""
        key = RemoteSegmentRef.of(metadata).segment_id
        with self._lock:
            entry = self._entries.get(key)
            if entry is None or self._closed:
                raise RemoteReadNeedsStoreError(f"remote segment {key}: indexes not cached")
            self._entries.move_to_end(key)
            entry.users += 1
            self._hits += 1
        try:
            return entry.lookup_offset(offset)
        finally:
            self._release(entry)

    def lookup_timestamp(
        self, metadata: RemoteLogSegmentMetadataLike, timestamp: int, starting_offset: int
    ) -> int:
        with self.acquire(metadata) as entry:
            self._fetch_time_index(metadata, entry)
            return entry.lookup_timestamp(timestamp, starting_offset)

    def _fetch_time_index(
        self, metadata: RemoteLogSegmentMetadataLike, entry: RemoteIndexCacheEntry
    ) -> None:
        """Fetch the held entry's time index if it has none yet. It is written to a temporary
        file of its own and put beside the offset index under the cache lock: an entry
        evicted meanwhile has renamed its files (deleted with them), and a new entry of the
        same segment may be fetching the same index under the original name."""
        with entry.time_index_lock:
            if entry.time_index is not None:
                return
            temp = self.cache_dir / (
                f"{entry_file_stem(entry.start_offset, entry.segment_id)}"
                f"{TIME_INDEX_SUFFIX}.{secrets.token_hex(4)}{TEMP_SUFFIX}"
            )
            try:
                self._fetch_to_temp(metadata, IndexType.TIMESTAMP, temp)
                with self._lock:
                    if self._closed:  # its entries are unmapped: nothing to add it to
                        raise RemoteStorageError(
                            "remote index cache is closed (broker shutting down)"
                        )
                    target = entry.time_index_path
                    os.replace(temp, target)
                    try:
                        time_index = _open_time_index(target, entry.start_offset)
                    except BaseException:
                        _unlink_quietly(target)
                        raise
                    entry.time_index = time_index
                    entry.size_bytes += time_index.length
                    if not entry.evicted:
                        self._size_bytes += time_index.length
                        self._evict_over_limit(keep=entry.segment_id)
            finally:
                _unlink_quietly(temp)

    def _get_or_load(self, metadata: RemoteLogSegmentMetadataLike) -> RemoteIndexCacheEntry:
        ref = RemoteSegmentRef.of(metadata)
        key = ref.segment_id
        while True:
            with self._lock:
                if self._closed:
                    raise RemoteStorageError("remote index cache is closed (broker shutting down)")
                entry = self._entries.get(key)
                if entry is not None:
                    self._entries.move_to_end(key)
                    entry.users += 1
                    self._hits += 1
                    return entry
                loading = self._loading.get(key)
                if loading is None:
                    loading = threading.Event()
                    self._loading[key] = loading
                    self._misses += 1
                    break
            loading.wait()  # another thread is downloading this segment's indexes
        try:
            entry = self._download(metadata, ref)
        except BaseException:
            with self._lock:
                del self._loading[key]
                loading.set()
            raise
        with self._lock:
            # Published in the same critical section that ends the download, so a waiter
            # finds the entry and never downloads the same files again.
            del self._loading[key]
            loading.set()
            if self._closed:
                entry._delete_files()
                raise RemoteStorageError("remote index cache is closed (broker shutting down)")
            self._entries[key] = entry
            self._size_bytes += entry.size_bytes
            entry.users += 1
            self._evict_over_limit(keep=key)
            return entry

    def _release(self, entry: RemoteIndexCacheEntry) -> None:
        with self._lock:
            entry.users -= 1
            if entry.users == 0 and entry.evicted:
                entry._delete_files()
            elif entry.users == 0 and entry.size_bytes > self.max_size_bytes:
                self._drop(entry.segment_id)

    # ------------------------------------------------------------------ downloads
    def _download(
        self, metadata: RemoteLogSegmentMetadataLike, ref: RemoteSegmentRef
    ) -> RemoteIndexCacheEntry:
        base = self.cache_dir / entry_file_stem(ref.start_offset, ref.segment_id)
        offset_target = base.with_name(base.name + OFFSET_INDEX_SUFFIX)
        written: list[Path] = []
        try:
            self._fetch_to_file(metadata, IndexType.OFFSET, offset_target)
            written.append(offset_target)
            txn_target = base.with_name(base.name + TXN_INDEX_SUFFIX)
            fetched = False
            if not getattr(metadata, "txn_idx_empty", False):
                try:
                    self._fetch_to_file(metadata, IndexType.TRANSACTION, txn_target)
                    fetched = True
                except RemoteResourceNotFoundError:
                    pass  # a segment without aborted transactions has no transaction index
            if not fetched:
                txn_target.write_bytes(b"")  # the entry is complete (Kafka's empty file)
            written.append(txn_target)
            return self._open_entry(
                ref.segment_id,
                ref.start_offset,
                base,
                with_time_index=False,
                txn_index_empty=not fetched,
            )
        except BaseException:
            for path in written:
                _unlink_quietly(path)
            raise

    def _fetch_to_file(
        self, metadata: RemoteLogSegmentMetadataLike, index_type: IndexType, target: Path
    ) -> None:
        temp = target.with_name(target.name + TEMP_SUFFIX)
        self._fetch_to_temp(metadata, index_type, temp)
        os.replace(temp, target)

    def _fetch_to_temp(
        self, metadata: RemoteLogSegmentMetadataLike, index_type: IndexType, temp: Path
    ) -> None:
        """The index object into ``temp`` (removed if that fails)."""
        try:
            stream = self._rsm.fetch_index(metadata, index_type)
            with stream, open(temp, "wb") as out:
                total_bytes = 0
                while chunk := stream.read(DOWNLOAD_CHUNK_BYTES):
                    total_bytes += len(chunk)
                    if total_bytes > MAX_INDEX_FILE_BYTES:
                        raise CorruptIndexError(
                            f"remote {index_type.value} index of {RemoteSegmentRef.of(metadata)}"
                            f" is larger than {MAX_INDEX_FILE_BYTES} bytes; it is not an index"
                        )
                    out.write(chunk)
                out.flush()
        except BaseException:
            _unlink_quietly(temp)
            raise

    # ------------------------------------------------------------------ eviction
    def remove(self, segment_id: Uuid) -> None:
        """Drop a segment's entry (the segment was deleted); idempotent."""
        with self._lock:
            self._drop(segment_id)

    def _drop(self, segment_id: Uuid) -> None:
        entry = self._entries.pop(segment_id, None)
        if entry is None:
            return
        self._size_bytes -= entry.size_bytes
        self._evictions += 1
        entry.evicted = True
        if entry.users == 0:
            entry._delete_files()
        else:
            entry._set_aside()

    def _evict_over_limit(self, *, keep: Uuid | None) -> None:
        """Evict least recently used entries (never ``keep``) until within the limit."""
        for segment_id in list(self._entries):
            if self._size_bytes <= self.max_size_bytes:
                return
            if segment_id != keep:
                self._drop(segment_id)

    # ------------------------------------------------------------------ state
    def stats(self) -> RemoteIndexCacheStats:
        with self._lock:
            return RemoteIndexCacheStats(
                entries=len(self._entries),
                size_bytes=self._size_bytes,
                hits=self._hits,
                misses=self._misses,
                evictions=self._evictions,
            )

    def __contains__(self, segment_id: object) -> bool:
        with self._lock:
            return segment_id in self._entries

    def close(self) -> None:
        """Unmap every entry; the files stay for the next start."""
        with self._lock:
            self._closed = True
            for entry in self._entries.values():
                entry.offset_index.close()
                if entry.time_index is not None:
                    entry.time_index.close()
            self._entries.clear()
            self._size_bytes = 0


def _parse_stem(stem: str) -> tuple[int, Uuid] | None:
    offset_text, _, uuid_text = stem.partition("_")
    if len(offset_text) != 20 or not offset_text.isdigit():
        return None
    try:
        return int(offset_text), Uuid.from_string(uuid_text)
    except ValueError:
        return None


def _open_time_index(path: Path, start_offset: int) -> TimeIndex:
    time_index = TimeIndex(path, start_offset, writable=False)
    try:
        time_index.sanity_check()
    except BaseException:
        time_index.close()
        raise
    return time_index


def _deleted_name(path: Path, token: str) -> Path:
    return path.with_name(f"{path.name}.{token}{DELETED_SUFFIX}")


def _unlink_quietly(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
