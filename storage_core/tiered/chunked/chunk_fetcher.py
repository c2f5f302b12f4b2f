"""Original chunks of remote segments, from the chunk cache or the store, with prefetch.

A reader asks for part of one chunk: a cached chunk is served from the cache; a chunk another
thread is already fetching (a prefetch) is awaited for a bounded time; otherwise the reader
fetches it with one ranged read of the store, checks and restores it, and caches it, or, when
it needs only some of the chunk's frames, reads and checks those alone and leaves the whole
chunk to a prefetch thread, prefetch on or off (the first batch of a cold segment waits for
one frame, not for 4 MiB). Each read then asks for the chunks after it, up to
``prefetch_max_bytes`` of original bytes: the planner thread claims them shortly after (once
the read's answer has left) and hands them to the prefetch threads, one ranged read per run
of uncached chunks; past the end of a segment the window goes on into the next segment of the
same lineage when ``next_segment`` knows it. A slow store then holds the planner or a prefetch
thread, never a reader's own reads.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeoutError
from dataclasses import dataclass
from typing import Any

from storage_core.tiered.chunked.chunk_cache import ChunkCache, ChunkKey
from storage_core.tiered.chunked.chunk_index import Chunk, Frame
from storage_core.tiered.chunked.chunk_transform import ChunkTransform
from storage_core.tiered.chunked.delayed_runner import DelayedRunner
from storage_core.tiered.chunked.segment_manifest import SegmentManifest
from storage_core.tiered.remote_storage_manager import (
    RemoteLogSegmentMetadataLike,
    RemoteReadNeedsStoreError,
    RemoteSegmentRef,
    RemoteStorageError,
    RemoteStorageManager,
)

logger = logging.getLogger(__name__)

PREFETCH_THREADS = 2
# Read-ahead is planned this long after the read that asks for it: by then that read's answer
# has left (1-2 ms on two cores), and the prefetch does not compete with it.
PREFETCH_START_DELAY_S = 0.0015
IN_FLIGHT_WAIT_S = 2.0  # then the reader reads the chunk itself


@dataclass(frozen=True, slots=True)
class ReadableSegment:
    """A chunked segment as a reader needs it: its metadata, manifest and transformation."""

    metadata: RemoteLogSegmentMetadataLike
    segment: RemoteSegmentRef
    manifest: SegmentManifest
    transform: ChunkTransform


class ChunkFetcher:
    """Thread safe; ``next_segment`` (set by the broker) names the segment after another."""

    def __init__(
        self,
        store: RemoteStorageManager,
        cache: ChunkCache,
        *,
        prefetch_max_bytes: int,
        readable_segment: Callable[[RemoteLogSegmentMetadataLike], ReadableSegment | None],
    ) -> None:
        self._store = store
        self.cache = cache
        self.prefetch_max_bytes = prefetch_max_bytes
        self._readable_segment = readable_segment
        self.next_segment: Callable[[Any], RemoteLogSegmentMetadataLike | None] | None = None
        self._lock = threading.Lock()
        self._in_flight: dict[ChunkKey, Future[None]] = {}
        self._executor: ThreadPoolExecutor | None = None
        self._planner = DelayedRunner(PREFETCH_START_DELAY_S, name="rsm-prefetch-planner")
        self._closed = False
        self.prefetched_chunks = 0

    def chunk_part(
        self, readable: ReadableSegment, chunk: Chunk, first: int, last: int
    ) -> memoryview:
        """The original bytes of ``chunk`` from ``first`` on (chunk-relative), at least
        through ``last``; ``RemoteStorageError`` when the store fails or a frame fails its
        checks (never wrong bytes). A chunk neither cached nor being prefetched is read whole
        when the bytes wanted need all its frames; else only the frames holding them are read
        and checked, and the whole chunk is left to a prefetch thread (with prefetch off too:
        nothing else would cache it)."""
        key = ChunkKey(str(readable.segment.segment_id), chunk.id)
        data = self._cached(key)
        if data is None:
            frames = chunk.frames_for(first, last)
            if len(frames) < len(chunk.frames):
                part = self._fetch_frames(readable, chunk, frames)
                self._schedule_read_ahead(readable, chunk.id, fill=True)
                skipped = frames[0].original_position - chunk.original_position
                return memoryview(part)[first - skipped :]
            data = self._fetch(readable, [chunk])[0]
            self.cache.put(key, data)
        self._schedule_read_ahead(readable, chunk.id + 1)
        return memoryview(data)[first:]

    def cached_chunk_part(
        self, readable: ReadableSegment, chunk: Chunk, first: int, last: int, hits: list[ChunkKey]
    ) -> memoryview:
        """``chunk_part`` from a chunk cache in memory alone: ``RemoteReadNeedsStoreError``
        when the chunk is not there (a chunk being prefetched is not waited for) or when the
        cache keeps its chunks on disk. The look counts no hit: the chunk's key is appended to
        ``hits``, for the reader to count once its read is served."""
        data = None
        key = ChunkKey(str(readable.segment.segment_id), chunk.id)
        if self.cache.in_memory:
            data = self.cache.get(key, count=False)
        if data is None:
            raise RemoteReadNeedsStoreError(f"{_chunk_where(readable, chunk)} is not in memory")
        hits.append(key)
        self._schedule_read_ahead(readable, chunk.id + 1)
        return memoryview(data)[first:]

    def _cached(self, key: ChunkKey) -> bytes | None:
        """The chunk from the cache, waiting a bounded time for a prefetch reading it."""
        data = self.cache.get(key)
        if data is None:
            with self._lock:
                pending = self._in_flight.get(key)
            if pending is not None:
                # A prefetch that failed or hangs: read the chunk ourselves (a failure shows).
                with contextlib.suppress(FutureTimeoutError, Exception):
                    pending.result(timeout=IN_FLIGHT_WAIT_S)
                data = self.cache.get(key)
        return data

    def _fetch(self, readable: ReadableSegment, chunks: Sequence[Chunk]) -> list[bytes]:
        """Consecutive ``chunks`` with one ranged read, checked and restored."""
        out = []
        with self._store.fetch_log_segment(
            readable.metadata, chunks[0].stored_position, chunks[-1].stored_end - 1
        ) as stream:
            for chunk in chunks:
                where = _chunk_where(readable, chunk)
                stored = _read_up_to(stream, chunk.stored_size)
                out.append(readable.transform.restore_chunk(chunk, stored, where=where))
        return out

    def _fetch_frames(
        self, readable: ReadableSegment, chunk: Chunk, frames: tuple[Frame, ...]
    ) -> bytes:
        """Consecutive ``frames`` of ``chunk`` with one ranged read, checked and restored."""
        start, end = frames[0].stored_position, frames[-1].stored_position + frames[-1].stored_size
        where = _chunk_where(readable, chunk)
        with self._store.fetch_log_segment(readable.metadata, start, end - 1) as stream:
            stored = _read_up_to(stream, end - start)
        return readable.transform.restore_frames(frames, stored, where=where)

    # -- prefetch -----------------------------------------------------------------------------

    def _schedule_read_ahead(
        self, readable: ReadableSegment, first_id: int, *, fill: bool = False
    ) -> None:
        """Read ahead from chunk ``first_id`` of ``readable``, planned on the planner thread
        once this read's answer has left: going on into the next segments loads their
        manifests (and unwraps their data keys), which the reader must not wait for. With
        prefetch off, only the chunk a read took part of (``fill``) is read whole: nothing
        else would cache it."""
        if self.prefetch_max_bytes > 0:
            self._planner.submit(self._prefetch_from, readable, first_id)
        elif fill:
            self._planner.submit(self._fill, readable, first_id)

    def _fill(self, readable: ReadableSegment, chunk_id: int) -> None:
        chunk = readable.manifest.chunk_index.chunk(chunk_id)
        if self._claim(readable, chunk):
            self._submit(readable, [chunk])

    def _prefetch_from(self, readable: ReadableSegment, first_id: int) -> None:
        budget = self.prefetch_max_bytes
        current: ReadableSegment | None = readable
        next_id = first_id
        while current is not None and budget > 0:
            index = current.manifest.chunk_index
            run: list[Chunk] = []
            while next_id < len(index) and budget > 0:
                candidate = index.chunk(next_id)
                budget -= candidate.original_size
                next_id += 1
                if self._claim(current, candidate):
                    run.append(candidate)
                elif run:
                    self._submit(current, run)
                    run = []
            if run:
                self._submit(current, run)
            if budget <= 0:
                return
            current = self._following(current)
            next_id = 0

    def _following(self, readable: ReadableSegment) -> ReadableSegment | None:
        """The next segment of the lineage, when the broker can say which."""
        if self.next_segment is None:
            return None
        try:
            metadata = self.next_segment(readable.metadata)
            return None if metadata is None else self._readable_segment(metadata)
        except RemoteStorageError as exc:
            logger.debug("no prefetch past %s: %s", readable.segment, exc)
            return None

    def _claim(self, readable: ReadableSegment, chunk: Chunk) -> bool:
        """Whether ``chunk`` is neither cached nor in flight; if so it is now in flight."""
        key = ChunkKey(str(readable.segment.segment_id), chunk.id)
        if self.cache.contains(key):
            return False
        with self._lock:
            if key in self._in_flight:
                return False
            self._in_flight[key] = Future()
            return True

    def _submit(self, readable: ReadableSegment, run: list[Chunk]) -> None:
        """Fetch the claimed ``run`` on a prefetch thread (released at once when closed)."""
        with self._lock:
            closed = self._closed
            if not closed and self._executor is None:
                self._executor = ThreadPoolExecutor(
                    PREFETCH_THREADS, thread_name_prefix="rsm-prefetch"
                )
            executor = self._executor
        if closed or executor is None:
            self._release(readable, run, RemoteStorageError("the chunk fetcher is closed"))
        else:
            executor.submit(self._prefetch, readable, run)

    def _prefetch(self, readable: ReadableSegment, run: list[Chunk]) -> None:
        error: BaseException | None = None
        try:
            segment_id = str(readable.segment.segment_id)
            for chunk, data in zip(run, self._fetch(readable, run), strict=True):
                self.cache.put(ChunkKey(segment_id, chunk.id), data)
                self.prefetched_chunks += 1
        except Exception as exc:  # a reader that needs the chunk reads it and sees why
            error = exc
            logger.debug(
                "prefetch of %s chunks %s failed: %s", readable.segment, [c.id for c in run], exc
            )
        self._release(readable, run, error)

    def _release(
        self, readable: ReadableSegment, run: list[Chunk], error: BaseException | None
    ) -> None:
        """The claimed ``run`` is no longer in flight; its waiters learn how it went."""
        segment_id = str(readable.segment.segment_id)
        keys = [ChunkKey(segment_id, chunk.id) for chunk in run]
        with self._lock:
            futures = [self._in_flight.pop(key) for key in keys if key in self._in_flight]
        for future in futures:
            if error is None:
                future.set_result(None)
            else:
                future.set_exception(error)

    def close(self) -> None:
        self._planner.close()
        with self._lock:
            self._closed = True
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=False, cancel_futures=True)
        self.cache.close()


def _chunk_where(readable: ReadableSegment, chunk: Chunk) -> str:
    return (
        f"remote segment {readable.segment} .log chunk {chunk.id} (original bytes"
        f" {chunk.original_position}-{chunk.original_end - 1})"
    )


def _read_up_to(stream: Any, size: int) -> bytes:
    """``size`` bytes, fewer only at the end of the object (each frame's check then names it
    truncated)."""
    parts = []
    remaining = size
    while remaining > 0:
        part = stream.read(remaining)
        if not part:
            break
        parts.append(part)
        remaining -= len(part)
    return b"".join(parts)
