"""The chunk cache: original (checked, decrypted, decompressed) chunks of remote segments, LRU
by bytes, in memory or on disk (Aiven's ``MemoryChunkCache`` / ``DiskChunkCache``).

Consumer reads and follower aux-state builds share it. An entry not read for ``retention_ms``
is dropped. The disk cache keeps one file per chunk under ``<path>/chunks`` (emptied at start:
nothing in it outlives the broker process that wrote it) written to a temp file and renamed, so
a reader never sees half a chunk, and checked against the CRC32C it was written with, so a file
cut short or altered on disk is a miss, never served; a directory that fills up or disappears
while in use makes the cache miss and skip writes (logged once), never fails a read.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import shutil
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from crc32c import crc32c

logger = logging.getLogger(__name__)

TEMP_SUFFIX = ".tmp"


@dataclass(frozen=True, slots=True)
class ChunkKey:
    segment_id: str
    chunk_id: int


@dataclass(frozen=True, slots=True)
class ChunkCacheStats:
    hits: int
    misses: int
    evictions: int
    size_bytes: int
    entries: int


class ChunkCache:
    """LRU by bytes with expiry after access; subclasses keep the bytes. Thread safe."""

    def __init__(
        self,
        *,
        max_bytes: int,
        retention_ms: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_bytes <= 0:
            raise ValueError(f"chunk cache size must be > 0 bytes, got {max_bytes}")
        self.max_bytes = max_bytes
        self.retention_s = retention_ms / 1000
        self._clock = clock
        self._lock = threading.Lock()
        self._entries: OrderedDict[ChunkKey, tuple[int, float]] = OrderedDict()  # size, used
        self._size = 0
        self._hits = self._misses = self._evictions = 0

    in_memory = False  # whether ``get`` reads no file (the bytes are in this process)

    def get(self, key: ChunkKey, *, count: bool = True) -> bytes | None:
        """The chunk's bytes, or None; ``count`` False for a look that counts neither a hit
        nor a miss (a read from memory, which counts its hits once it is served with
        ``count_hits``, and is retried elsewhere, counted there, when it is not)."""
        now = self._clock()
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and now - entry[1] > self.retention_s:
                self._drop(key)
                entry = None
            if entry is None:
                if count:
                    self._misses += 1
                return None
            self._entries[key] = (entry[0], now)
            self._entries.move_to_end(key)
        data = self._load(key)
        with self._lock:
            if data is None:  # the bytes went away under us (disk): a miss
                if key in self._entries:
                    self._drop(key)
                self._misses += count
            else:
                self._hits += count
        return data

    def count_hits(self, hits: int) -> None:
        with self._lock:
            self._hits += hits

    def put(self, key: ChunkKey, data: bytes) -> None:
        if len(data) > self.max_bytes or not self._store(key, data):
            return
        with self._lock:
            if key in self._entries:
                self._size -= self._entries[key][0]
            self._entries[key] = (len(data), self._clock())
            self._entries.move_to_end(key)
            self._size += len(data)
            while self._size > self.max_bytes:
                oldest = next(iter(self._entries))
                self._drop(oldest)
                self._evictions += 1

    def contains(self, key: ChunkKey) -> bool:
        with self._lock:
            return key in self._entries

    def remove_segment(self, segment_id: str) -> None:
        with self._lock:
            for key in [k for k in self._entries if k.segment_id == segment_id]:
                self._drop(key)

    def stats(self) -> ChunkCacheStats:
        with self._lock:
            return ChunkCacheStats(
                hits=self._hits,
                misses=self._misses,
                evictions=self._evictions,
                size_bytes=self._size,
                entries=len(self._entries),
            )

    def _drop(self, key: ChunkKey) -> None:
        """Forget ``key`` (lock held) and its bytes."""
        size, _ = self._entries.pop(key)
        self._size -= size
        self._discard(key)

    # What subclasses keep: ``_store`` returns whether the bytes were kept.
    def _store(self, key: ChunkKey, data: bytes) -> bool:
        raise NotImplementedError

    def _load(self, key: ChunkKey) -> bytes | None:
        raise NotImplementedError

    def _discard(self, key: ChunkKey) -> None:
        raise NotImplementedError

    def close(self) -> None:
        """Nothing to release by default."""


class MemoryChunkCache(ChunkCache):
    in_memory = True

    def __init__(
        self,
        *,
        max_bytes: int,
        retention_ms: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(max_bytes=max_bytes, retention_ms=retention_ms, clock=clock)
        self._data: dict[ChunkKey, bytes] = {}

    def _store(self, key: ChunkKey, data: bytes) -> bool:
        self._data[key] = data
        return True

    def _load(self, key: ChunkKey) -> bytes | None:
        return self._data.get(key)

    def _discard(self, key: ChunkKey) -> None:
        self._data.pop(key, None)


class DiskChunkCache(ChunkCache):
    def __init__(
        self,
        path: Path,
        *,
        max_bytes: int,
        retention_ms: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(max_bytes=max_bytes, retention_ms=retention_ms, clock=clock)
        if not path.is_dir():
            raise ValueError(
                f"rsm.config.fetch.chunk.cache.path={path} is not an existing directory"
            )
        self.directory = path / "chunks"
        shutil.rmtree(self.directory, ignore_errors=True)
        self.directory.mkdir()
        self._warned = False
        self._checksums: dict[ChunkKey, int] = {}

    def _file(self, key: ChunkKey) -> Path:
        return self.directory / f"{key.segment_id}-{key.chunk_id}"

    def _store(self, key: ChunkKey, data: bytes) -> bool:
        target = self._file(key)
        temp = target.with_name(f"{target.name}.{secrets.token_hex(4)}{TEMP_SUFFIX}")
        try:
            try:
                temp.write_bytes(data)
            except FileNotFoundError:  # the directory was removed: make it again, once
                self.directory.mkdir(parents=True, exist_ok=True)
                temp.write_bytes(data)
            self._checksums[key] = crc32c(data)
            os.replace(temp, target)
        except OSError as exc:
            with contextlib.suppress(OSError):
                temp.unlink(missing_ok=True)
            if not self._warned:
                self._warned = True
                logger.warning(
                    "chunk cache cannot write, reads go to the remote store directory=%s error=%s",
                    self.directory,
                    exc,
                )
            return False
        return True

    def _load(self, key: ChunkKey) -> bytes | None:
        try:
            data = self._file(key).read_bytes()
        except OSError:
            return None
        if crc32c(data) != self._checksums.get(key):
            logger.warning(
                "chunk cache file damaged, read from the remote store file=%s", self._file(key)
            )
            return None
        return data

    def _discard(self, key: ChunkKey) -> None:
        self._checksums.pop(key, None)
        with contextlib.suppress(OSError):
            self._file(key).unlink(missing_ok=True)

    def close(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)
