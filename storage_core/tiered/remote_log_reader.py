"""Reads of tiered offsets (Kafka's ``RemoteLogReader`` and ``RemoteLogManager.read``).

A consumer fetch at offset ``O`` below the local log start offset is served from the remote
tier, never on the log I/O threads: ``RemoteLogReader`` owns a pool of
``remote.log.reader.threads`` threads with a bounded queue of pending reads. A read whose
bytes are all in memory (a chunked segment's cached manifest and chunks, and its cached
offset index when the read starts inside it) is first tried where the fetch arrives, on the
event loop (``memory_only``); anything that would touch the store, a file or another
thread's work raises ``RemoteReadNeedsStoreError`` before doing so and goes to the pool.
One read:

1. ``epoch = leader_epoch_cache.epoch_for_offset(O)``; the RLMM gives the COPY_SEGMENT_FINISHED
   segment holding ``O`` in that epoch's lineage (``remote_log_segment_metadata(epoch, O)``);
2. the segment's cached offset index (``RemoteIndexCache``) gives the ``.log`` position of the
   batch at or before ``O``;
3. the RSM streams the ``.log`` from that position; whole batches are kept from the first one
   whose last offset is ``>= O``, until ``max_bytes`` (the first batch even if larger when
   ``min_one_message``, as Kafka). Every batch is checked (framing, magic, CRC) before it is
   returned. A segment holding no batch at or after ``O`` (possible after compaction or
   aborted transactions) hands over to the next segment, up to ``MAX_SEGMENTS_PER_READ``;
4. a read_committed read (``include_aborted_txns``) also returns the aborted transactions
   overlapping the records read, from this segment's transaction index, the following remote
   segments' and the local ones' (``remote_aborted_txns``), up to Kafka's upper bound: the
   offset of the first offset-index entry past the bytes read, else the segment's end + 1.
   All remote data is below the LSO (copies stop there), so no record is held back;
5. the read stops at the end of ``epoch`` in the leader-epoch cache (the next entry's start
   offset): a segment of the epoch uploaded by a leader deposed in an unclean election may
   hold records past where this lineage ended the epoch (its offsets were written again in
   a later epoch); those are never returned (the next fetch reads the later epoch's own).

Errors: no epoch or no segment for ``O`` -> ``OffsetOutOfRangeError``; the store failing ->
``RemoteStorageError`` (KAFKA_STORAGE_ERROR for that partition only); a full queue ->
``RemoteReadQueueFullError``. An object of the segment missing from the store: if the RLMM
still holds the segment COPY_SEGMENT_FINISHED, its records are lost ->
``RemoteSegmentMissingError`` (see ``remote_read_faults``); if the segment was deleted while
being read -> a plain ``RemoteStorageError`` (the next fetch finds the new log start).

Thread-safety: ``submit`` may be called from any thread; reads share only thread-safe objects
(RLMM, RSM, index cache, epoch cache).
"""

from __future__ import annotations

import itertools
import logging
import struct
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Protocol, TypeVar

from storage_core.common import TopicIdPartition
from storage_core.errors import CorruptRecordError, KafkaStorageError, OffsetOutOfRangeError
from storage_core.log.leader_epoch_cache import EpochEntry
from storage_core.log.log import TimestampAndOffset
from storage_core.log.transaction_index import AbortedTxn
from storage_core.records.batch import LOG_OVERHEAD, MIN_BATCH_LENGTH, RecordBatch
from storage_core.tiered.chunked.chunk_cache import ChunkKey
from storage_core.tiered.chunked.chunk_stream import ChunkStream
from storage_core.tiered.chunked.chunked_storage_manager import ChunkedRemoteStorageManager
from storage_core.tiered.metadata.metadata import RemoteLogSegmentMetadata
from storage_core.tiered.metadata.states import RemoteLogSegmentState
from storage_core.tiered.next_remote_segment import NextRemoteSegment
from storage_core.tiered.read_positions import ReadPositions
from storage_core.tiered.remote_aborted_txns import (
    LocalAbortedTxns,
    collect_aborted_transactions,
)
from storage_core.tiered.remote_index_cache import RemoteIndexCache
from storage_core.tiered.remote_log_metadata_manager import RemoteLogMetadataManager
from storage_core.tiered.remote_read_faults import RemoteSegmentMissingError
from storage_core.tiered.remote_storage_manager import (
    RemoteReadNeedsStoreError,
    RemoteResourceNotFoundError,
    RemoteStorageError,
    RemoteStorageManager,
    RemoteStream,
)

logger = logging.getLogger(__name__)

T = TypeVar("T")

_LOG_OVERHEAD = struct.Struct(">qi")
MAX_PENDING_READS = 100  # Kafka's remote.log.reader.max.pending.tasks default
MAX_SEGMENTS_PER_READ = 8
MAX_BATCH_BYTES = (1 << 31) - 1
# A fetch reads max_bytes and this much more in one go: the batches before the fetch offset
# (at most an index interval) and the part of a batch that crosses max_bytes.
READ_AHEAD_BYTES = 64 * 1024
DEFAULT_WINDOW_BYTES = 1 << 20
# A read from memory runs on the event loop: one of more batches than this (each costs a few
# microseconds, and a fetch of small batches holds tens of thousands), or asking for more
# bytes (an answer that crosses chunks is joined into one copy), goes to a reader thread.
MEMORY_READ_MAX_BATCHES = 256
MEMORY_READ_MAX_BYTES = 4 << 20


class RemoteReadQueueFullError(KafkaStorageError):
    """Too many remote reads are pending; the fetch should be retried later."""


@dataclass(frozen=True, slots=True)
class RemoteReadStart:
    """The remote segment a read starts in, and the leader epoch it was found under."""

    epoch: int
    metadata: RemoteLogSegmentMetadata


class MemoryReadMissError(RemoteReadNeedsStoreError):
    """A read from memory gave up (``RemoteReadNeedsStoreError``) after finding where it
    starts: ``start``, handed to the reader thread that takes the read over, which then need
    not look the segment up again."""

    def __init__(self, message: str, start: RemoteReadStart) -> None:
        super().__init__(message)
        self.start = start


class LeaderEpochLookup(Protocol):
    """What a remote read needs of the partition's ``LeaderEpochFileCache``."""

    def epoch_for_offset(self, offset: int) -> int | None: ...

    def epoch_entries(self) -> list[EpochEntry]: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class RemoteStorageFetchInfo:
    """Kafka's ``RemoteStorageFetchInfo``: one partition's read from the remote tier."""

    topic_id_partition: TopicIdPartition
    fetch_offset: int
    max_bytes: int
    min_one_message: bool
    include_aborted_txns: bool = False  # a read_committed fetch (Kafka's TXN_COMMITTED)

    def __post_init__(self) -> None:
        if self.fetch_offset < 0:
            raise ValueError(f"fetch offset must be >= 0, got {self.fetch_offset}")
        if self.max_bytes < 0:
            raise ValueError(f"max bytes must be >= 0, got {self.max_bytes}")


@dataclass(frozen=True, slots=True, kw_only=True)
class RemoteFetchData:
    """Whole batches read from remote segments, starting at or before ``fetch_offset``.

    ``first_entry_incomplete`` is True when the first batch exceeded ``max_bytes`` without
    ``min_one_message`` (no bytes are returned then). ``aborted_transactions``: with
    ``include_aborted_txns`` those overlapping the records (``None`` otherwise).
    """

    fetch_offset: int
    records: bytes | memoryview
    first_entry_incomplete: bool = False
    aborted_transactions: tuple[AbortedTxn, ...] | None = None
    first_batch_position: int = 0  # in the remote ``.log`` of the records' segment


class RemoteLogReader:
    """The remote read pool and the read itself; see the module docstring."""

    def __init__(
        self,
        *,
        rsm: RemoteStorageManager,
        rlmm: RemoteLogMetadataManager,
        index_cache: RemoteIndexCache,
        threads: int,
        max_pending_reads: int = MAX_PENDING_READS,
    ) -> None:
        if threads < 1:
            raise ValueError(f"remote.log.reader.threads must be >= 1, got {threads}")
        self._rsm = rsm
        self._rlmm = rlmm
        self.index_cache = index_cache
        self.read_positions = ReadPositions()
        self.next_segment = NextRemoteSegment(rlmm)
        if isinstance(rsm, ChunkedRemoteStorageManager):  # prefetch reads across segments
            rsm.fetcher.next_segment = self.next_segment
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="remote-reader")
        self._max_pending_reads = max_pending_reads
        self._pending_lock = threading.Lock()
        self._pending = 0

    @property
    def reads_from_memory(self) -> bool:
        """Whether a read can be answered from memory at all (``read(memory_only=True)``):
        chunked segments over a chunk cache kept in memory."""
        rsm = self._rsm
        return isinstance(rsm, ChunkedRemoteStorageManager) and rsm.fetcher.cache.in_memory

    # ------------------------------------------------------------------ the pool
    def submit(self, task: Callable[[], T]) -> Future[T]:
        """Run ``task`` on a reader thread; ``RemoteReadQueueFullError`` when saturated."""
        with self._pending_lock:
            if self._pending >= self._max_pending_reads:
                raise RemoteReadQueueFullError(
                    f"{self._pending} remote reads are pending (limit {self._max_pending_reads});"
                    " retry the fetch later or raise remote.log.reader.threads"
                )
            self._pending += 1
        try:
            future = self._pool.submit(task)
        except BaseException:
            self._done()
            raise
        future.add_done_callback(lambda _f: self._done())
        return future

    def _done(self) -> None:
        with self._pending_lock:
            self._pending -= 1

    def submit_read(
        self,
        info: RemoteStorageFetchInfo,
        epochs: LeaderEpochLookup,
        local_log: LocalAbortedTxns | None = None,
    ) -> Future[RemoteFetchData]:
        return self.submit(lambda: self.read(info, epochs, local_log))

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    # ------------------------------------------------------------------ reads
    def read(
        self,
        info: RemoteStorageFetchInfo,
        epochs: LeaderEpochLookup,
        local_log: LocalAbortedTxns | None = None,
        *,
        memory_only: bool = False,
        start: RemoteReadStart | None = None,
    ) -> RemoteFetchData:
        """Kafka's ``RemoteLogManager.read`` (blocking; call it on a reader thread).
        ``local_log`` is the partition's log, searched last for aborted transactions.

        ``memory_only``: the read may run on the event loop, for it touches neither the store
        nor a file: it raises ``RemoteReadNeedsStoreError`` as soon as it would (a segment's
        manifest, chunk or offset index not in memory, a plain segment, the aborted
        transactions of a read_committed fetch), and is then run on a reader thread.
        A consumer reading on through cached chunks thus skips two trips between threads.
        Once it has found the segment, it gives up with ``MemoryReadMissError``, whose
        ``start`` the thread's read takes (``start``): a cold read looks its segment up once.
        A segment deleted in between fails as one deleted while being read; a ``start`` whose
        epoch no longer holds the offset in the leader-epoch cache (the lineage changed in
        between) is looked up again."""
        if memory_only and info.include_aborted_txns:
            raise RemoteReadNeedsStoreError("a read_committed read looks up transaction indexes")
        if memory_only and info.max_bytes > MEMORY_READ_MAX_BYTES:
            raise RemoteReadNeedsStoreError(f"{info.max_bytes} bytes: too long a read for the loop")
        self.next_segment.remember(info.topic_id_partition, epochs)
        if start is not None and epochs.epoch_for_offset(info.fetch_offset) != start.epoch:
            start = None
        if start is None:
            start = self._read_start(info.topic_id_partition, info.fetch_offset, epochs)
        if not memory_only:
            return self._read(info, epochs, local_log, start, None)
        try:
            return self._read(info, epochs, local_log, start, [])
        except RemoteReadNeedsStoreError as exc:
            raise MemoryReadMissError(str(exc), start) from None

    def _read_start(
        self, tip: TopicIdPartition, offset: int, epochs: LeaderEpochLookup
    ) -> RemoteReadStart:
        epoch = epochs.epoch_for_offset(offset)
        if epoch is None:
            raise OffsetOutOfRangeError(
                f"partition {tip.topic_partition}: no leader epoch holds offset {offset}"
                " in the leader-epoch cache, so no remote segment can serve it"
            )
        metadata = self._rlmm.remote_log_segment_metadata(tip, epoch, offset)
        if metadata is None:
            raise OffsetOutOfRangeError(
                f"partition {tip.topic_partition}: no remote segment holds offset {offset}"
                f" (leader epoch {epoch}); the consumer should reset its position"
            )
        return RemoteReadStart(epoch, metadata)

    def _read(
        self,
        info: RemoteStorageFetchInfo,
        epochs: LeaderEpochLookup,
        local_log: LocalAbortedTxns | None,
        start: RemoteReadStart,
        memory_hits: list[ChunkKey] | None,
    ) -> RemoteFetchData:
        """``read`` from ``start``; from memory alone with ``memory_hits`` (the chunks read,
        counted as cache hits once the read is served: one that gives up is read again on a
        reader thread, which counts)."""
        tip = info.topic_id_partition
        offset = info.fetch_offset
        epoch, metadata = start.epoch, start.metadata
        memory_only = memory_hits is not None
        for _ in range(MAX_SEGMENTS_PER_READ):
            epoch_end = epoch_end_offset(epochs.epoch_entries(), epoch)
            try:
                position = self._start_position(metadata, offset, memory_only)
                data = self._read_from_segment(metadata, position, info, epoch_end, memory_hits)
            except RemoteResourceNotFoundError as exc:
                raise self._missing_object_error(metadata, exc) from exc
            if data is not None:
                if info.include_aborted_txns:
                    data = self._add_aborted_transactions(data, metadata, epochs, local_log)
                self._count_memory_hits(memory_hits)
                return data
            # No batch at or after the offset in this segment: continue with the next one.
            next_offset = metadata.end_offset + 1
            if epoch_end is not None:
                next_offset = min(next_offset, epoch_end)
            next_epoch = epochs.epoch_for_offset(next_offset)
            following = (
                None
                if next_epoch is None
                else self._rlmm.remote_log_segment_metadata(tip, next_epoch, next_offset)
            )
            if following is None or next_epoch is None:
                break
            metadata, epoch = following, next_epoch
        self._count_memory_hits(memory_hits)
        return RemoteFetchData(
            fetch_offset=offset,
            records=b"",
            aborted_transactions=() if info.include_aborted_txns else None,
        )

    def _count_memory_hits(self, hits: list[ChunkKey] | None) -> None:
        if hits and isinstance(self._rsm, ChunkedRemoteStorageManager):
            self._rsm.fetcher.cache.count_hits(len(hits))

    def _start_position(
        self, metadata: RemoteLogSegmentMetadata, offset: int, memory_only: bool = False
    ) -> int:
        """Where to start reading ``offset`` in the segment's ``.log``: at or before the
        batch holding it. From the segment's start on, its first byte (what the offset index
        would say); where an earlier read ended, there (``ReadPositions``); otherwise the
        offset index. A sequential reader, entering a segment or going on in it, then
        needs no offset index, and a cold one downloads none."""
        if offset <= metadata.start_offset:
            return 0
        remembered = self.read_positions.position(metadata.remote_log_segment_id.id, offset)
        if remembered is not None:
            return remembered
        if memory_only:
            return self.index_cache.cached_lookup_offset(metadata, offset)
        return self.index_cache.lookup_offset(metadata, offset)

    def _add_aborted_transactions(
        self,
        data: RemoteFetchData,
        metadata: RemoteLogSegmentMetadata,
        epochs: LeaderEpochLookup,
        local_log: LocalAbortedTxns | None,
    ) -> RemoteFetchData:
        """Kafka's ``addAbortedTransactions``: from the first batch read, up to the first
        offset-index entry at or past the end of the bytes read (the segment's end + 1 when
        there is none)."""
        if not data.records:
            return replace(data, aborted_transactions=())
        start_offset, _length = _LOG_OVERHEAD.unpack_from(data.records)
        with self.index_cache.acquire(metadata) as entry:
            upper = entry.fetch_upper_bound_offset(
                data.fetch_offset, data.first_batch_position, len(data.records)
            )
        upper_bound_offset = metadata.end_offset + 1 if upper is None else upper
        aborted = collect_aborted_transactions(
            rlmm=self._rlmm,
            index_cache=self.index_cache,
            segment=metadata,
            start_offset=start_offset,
            upper_bound_offset=upper_bound_offset,
            epochs=epochs,
            local_log=local_log if local_log is not None else _NO_LOCAL_LOG,
        )
        return replace(data, aborted_transactions=tuple(aborted))

    def _missing_object_error(
        self, metadata: RemoteLogSegmentMetadata, exc: RemoteResourceNotFoundError
    ) -> RemoteStorageError:
        """A segment's object is gone: lost if the segment is still COPY_SEGMENT_FINISHED."""
        tip = metadata.remote_log_segment_id.topic_id_partition
        segment_id = metadata.remote_log_segment_id
        still_finished = any(
            m.remote_log_segment_id == segment_id
            and m.state is RemoteLogSegmentState.COPY_SEGMENT_FINISHED
            for m in self._rlmm.list_remote_log_segments(tip)
        )
        where = (
            f"partition {tip.topic_partition}: remote segment {segment_id.id}"
            f" (offsets {metadata.start_offset}..{metadata.end_offset}, inclusive)"
        )
        if not still_finished:
            return RemoteStorageError(f"{where} was deleted while being read ({exc}); fetch again")
        return RemoteSegmentMissingError(
            f"{where} is COPY_SEGMENT_FINISHED but an object of it is missing from the"
            f" store ({exc}): these records are lost from the remote tier. Restore the"
            " objects from a backup of the store if there is one; `python -m jobs.reconcile`"
            " lists every such segment",
            segment_id=segment_id.id,
        )

    def _read_from_segment(
        self,
        metadata: RemoteLogSegmentMetadata,
        position: int,
        info: RemoteStorageFetchInfo,
        epoch_end: int | None,
        memory_hits: list[ChunkKey] | None = None,
    ) -> RemoteFetchData | None:
        """Whole batches from ``position`` holding offsets >= the fetch offset, ending below
        ``epoch_end`` (exclusive; ``None``: the epoch is the latest one, no bound). With
        ``memory_hits`` from memory alone, the chunks read appended to it."""
        memory_only = memory_hits is not None
        # The batches are views of the windows they were read in, and consecutive batches of
        # one window are taken as one slice of it: a read inside one cached chunk copies
        # nothing. Growing one buffer batch by batch cost a copy (and fresh pages) per batch,
        # which made remote reads a third of local ones.
        out: list[memoryview] = []
        out_size = out_end = 0
        last_offset = -1
        first_position = position
        if memory_hits is not None:
            if not isinstance(self._rsm, ChunkedRemoteStorageManager):
                raise RemoteReadNeedsStoreError("the segments' bytes are the store's")
            stream = self._rsm.fetch_cached_log_segment(metadata, position, memory_hits)
            check_crc = False  # only a chunked segment's manifest is cached
        else:
            stream = self._rsm.fetch_log_segment(metadata, position)
            check_crc = not self._chunks_checked(metadata)
        with stream:
            window = info.max_bytes + READ_AHEAD_BYTES
            batches = _batches(stream, metadata, position, window, check_crc=check_crc)
            limit = MEMORY_READ_MAX_BATCHES if memory_only else None
            for count, (window_view, batch_start, batch_bytes, batch) in enumerate(batches, 1):
                if limit is not None and count > limit:
                    raise RemoteReadNeedsStoreError(
                        f"more than {limit} batches: too long a read for the event loop"
                    )
                if batch.last_offset < info.fetch_offset:
                    first_position += len(batch_bytes)
                    continue
                if epoch_end is not None and batch.last_offset >= epoch_end:
                    break  # past the epoch's end in this lineage: another leader's records
                size = len(batch_bytes)
                if not out and size > info.max_bytes and not info.min_one_message:
                    return RemoteFetchData(
                        fetch_offset=info.fetch_offset, records=b"", first_entry_incomplete=True
                    )
                if out and out_size + size > info.max_bytes:
                    break
                if out and out[-1].obj is window_view.obj and out_end == batch_start:
                    out[-1] = window_view[batch_start - len(out[-1]) : batch_start + size]
                else:
                    out.append(batch_bytes)
                out_end = batch_start + size
                out_size += size
                last_offset = batch.last_offset
                if out_size >= info.max_bytes:
                    break
        if not out:
            return None
        self.read_positions.remember(
            metadata.remote_log_segment_id.id, last_offset + 1, first_position + out_size
        )
        return RemoteFetchData(
            fetch_offset=info.fetch_offset,
            records=out[0] if len(out) == 1 else b"".join(out),
            first_batch_position=first_position,
        )

    def _chunks_checked(self, metadata: RemoteLogSegmentMetadata) -> bool:
        """Whether the segment's bytes reach the reader checked chunk by chunk (the chunked
        format: a CRC32C per chunk, and the tag when encrypted), so that checking every
        batch's CRC again is wasted work; plain segments have no other check."""
        return (
            isinstance(self._rsm, ChunkedRemoteStorageManager)
            and self._rsm.segment_manifest(metadata) is not None
        )

    # ------------------------------------------------------------------ timestamps
    def find_offset_by_timestamp(
        self,
        tip: TopicIdPartition,
        timestamp: int,
        starting_offset: int,
        epochs: LeaderEpochLookup,
    ) -> TimestampAndOffset | None:
        """Kafka's ``RemoteLogManager.findOffsetByTimestamp``: the first record with
        ``timestamp >= timestamp`` and ``offset >= starting_offset`` in the remote segments of
        the partition's epoch lineage, oldest epoch first; None if no remote record matches."""
        for entry in epochs.epoch_entries():
            for metadata in self._rlmm.list_remote_log_segments(tip, entry.epoch):
                if (
                    metadata.state is not RemoteLogSegmentState.COPY_SEGMENT_FINISHED
                    or metadata.max_timestamp_ms < timestamp
                    or metadata.end_offset < starting_offset
                ):
                    continue
                found = self._lookup_timestamp(metadata, timestamp, starting_offset)
                if found is not None:
                    return found
        return None

    def _lookup_timestamp(
        self, metadata: RemoteLogSegmentMetadata, timestamp: int, starting_offset: int
    ) -> TimestampAndOffset | None:
        position = self.index_cache.lookup_timestamp(metadata, timestamp, starting_offset)
        stream = self._rsm.fetch_log_segment(metadata, position)
        with stream:
            for _window, _start, _bytes, batch in _batches(stream, metadata, position):
                if batch.max_timestamp < timestamp or batch.last_offset < starting_offset:
                    continue
                for record in batch.records():
                    if record.timestamp >= timestamp and record.offset >= starting_offset:
                        epoch = batch.partition_leader_epoch
                        return TimestampAndOffset(
                            record.timestamp, record.offset, epoch if epoch >= 0 else None
                        )
        return None


class _NoLocalLog:
    """No local segments to search (a read without the partition's log)."""

    def collect_aborted_transactions(
        self, start_offset: int, upper_bound_offset: int
    ) -> list[AbortedTxn]:
        return []


_NO_LOCAL_LOG = _NoLocalLog()


def epoch_end_offset(entries: list[EpochEntry], epoch: int) -> int | None:
    """Where ``epoch`` ends (exclusive) in the lineage ``entries``: the start offset of the
    entry after it; ``None`` for the latest epoch (or one the lineage does not hold)."""
    for entry, following in itertools.pairwise(entries):
        if entry.epoch == epoch:
            return following.start_offset
    return None


def _batches(
    stream: RemoteStream,
    metadata: RemoteLogSegmentMetadata,
    position: int,
    window_bytes: int = DEFAULT_WINDOW_BYTES,
    *,
    check_crc: bool = True,
) -> Iterator[tuple[memoryview, int, memoryview, RecordBatch]]:
    """Each whole, CRC-checked batch of a remote ``.log`` stream starting at a batch, as a
    view of the window it was read in: the stream is read ``window_bytes`` at a time (a
    fetch reads its ``max_bytes`` and a little more in one go) and batches are cut from the
    window without copying them: ``(window, start, batch bytes, batch)``. ``check_crc``
    False skips the batches' CRCs (their bytes were checked as chunks)."""
    where = f"remote segment {metadata.remote_log_segment_id}"
    limit = min(max(metadata.segment_size_in_bytes, MIN_BATCH_LENGTH), MAX_BATCH_BYTES)
    window = memoryview(_read_up_to(stream, window_bytes))
    start = 0  # of the next batch in ``window``
    while True:
        if len(window) - start < LOG_OVERHEAD:
            window, start = _refill(stream, window, start, window_bytes), 0
            if not window:
                return
            if len(window) < LOG_OVERHEAD:
                raise CorruptRecordError(
                    f"{where}: truncated batch header at position {position}"
                    f" ({len(window)} of {LOG_OVERHEAD} bytes)"
                )
        _base_offset, length = _LOG_OVERHEAD.unpack_from(window, start)
        if not MIN_BATCH_LENGTH <= length <= limit:
            raise CorruptRecordError(
                f"{where}: batch at position {position} has length {length}, outside"
                f" [{MIN_BATCH_LENGTH}, {limit}]"
            )
        size = LOG_OVERHEAD + length
        if start + size > len(window):
            missing = start + size - len(window)
            # Only what the batch lacks: a fetch often stops at this very batch (max_bytes).
            window, start = _refill(stream, window, start, missing), 0
            if size > len(window):
                raise CorruptRecordError(
                    f"{where}: batch at position {position} ends after"
                    f" {len(window) - LOG_OVERHEAD} of {length} bytes"
                )
        batch = RecordBatch.from_buffer(window[: start + size], start, file=where)
        if check_crc:
            batch.ensure_valid()
        yield window, start, window[start : start + size], batch
        start += size
        position += size


def _refill(stream: RemoteStream, window: memoryview, start: int, more: int) -> memoryview:
    """The unread tail of ``window`` followed by up to ``more`` bytes of ``stream``."""
    return memoryview(bytes(window[start:]) + _read_up_to(stream, more))


def _read_up_to(stream: RemoteStream, size: int) -> bytes | memoryview:
    """``size`` bytes, fewer only at the end of the stream; store failures are
    ``RemoteStorageError``. A chunked segment's stream hands out views of its cached chunks
    (``ChunkStream.read_view``): bytes inside one chunk are not copied."""
    raw = getattr(stream, "raw", None)
    read = raw.read_view if isinstance(raw, ChunkStream) else stream.read
    parts: list[bytes | memoryview] = []
    remaining = size
    try:
        while remaining > 0:
            chunk = read(remaining)
            if not chunk:
                break
            parts.append(chunk)
            remaining -= len(chunk)
    except OSError as exc:
        raise RemoteStorageError(f"reading a remote segment failed: {exc}") from exc
    return parts[0] if len(parts) == 1 else b"".join(parts)
