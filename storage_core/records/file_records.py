"""The ``.log`` file of a segment (Kafka's ``FileRecords``).

File format: record batches v2 back to back, exactly as produced and stamped by the leader
(see ``records.batch``)::

    position 0                    p1                  p2                     size_in_bytes
    | batch (61-byte header + records) | batch ...    | batch ...            | (preallocated
                                                                               zeros, if any)

No file header, no padding and no index: positions are byte offsets from the start of the file
and fit an int32, so a file never grows beyond 2 GiB - 1. A file created with
``preallocate_bytes`` is extended with zeros up front (as Kafka does with
``file.preallocate``); ``size_in_bytes`` then counts only the bytes appended, and ``trim``
(or ``close``) cuts the unused tail.

Descriptors: a file opened with an ``OpenFileCache`` (a broker's segments) holds its descriptor
only while it is used or among the cache's recently used files: every read and write pins the
file (opening it again if the cache closed it) and unpins it when done, so a descriptor is never
closed under a read in progress. Without a cache (tools, jobs) the descriptor stays open until
``close``.

Thread safety: one writer at a time (``append``, ``truncate_to``, ``trim``, ``rename_to``,
``close``); reads (``read``, ``batches`` and the searches) use ``os.pread`` and may run
concurrently with each other and with the writer, seeing the file as of their start.
"""

from __future__ import annotations

import contextlib
import io
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import TracebackType

from storage_core.errors import CorruptRecordError, RecordBatchTooLargeError
from storage_core.records.batch import BATCH_HEADER_SIZE
from storage_core.records.open_file_cache import CachedHandle, OpenFileCache
from storage_core.records.record import NO_TIMESTAMP, Record
from storage_core.records.record_batch_header import RecordBatchHeader, parse_batch_header

# Positions in a segment are int32 (offset index entries, Kafka's FileRecords).
MAX_FILE_BYTES = (1 << 31) - 1
_IOV_MAX = 1024

_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


class FileRecords(CachedHandle[int]):
    """One ``.log`` file: appends at the end, positional reads, batch-header scans."""

    def __init__(
        self,
        path: Path,
        fd: int,
        size_in_bytes: int,
        *,
        mutable: bool,
        cache: OpenFileCache | None = None,
    ) -> None:
        super().__init__()
        self._path = path
        self._size = size_in_bytes
        self._mutable = mutable
        self._closed = False
        self._cache = cache
        if cache is None:
            self._handle = fd
        else:
            cache.adopt(self, fd)

    @staticmethod
    def open(
        path: Path,
        *,
        mutable: bool = True,
        preallocate_bytes: int = 0,
        cache: OpenFileCache | None = None,
    ) -> FileRecords:
        """Open ``path``; a mutable file is created when missing (then preallocated).

        With a ``cache`` the descriptor joins it (see the module docstring), and running out
        of descriptors closes idle segment files and tries again before raising
        ``TooManyOpenFilesError``.
        """
        path = Path(path)
        if not 0 <= preallocate_bytes <= MAX_FILE_BYTES:
            raise ValueError(
                f"preallocate_bytes must be within 0..{MAX_FILE_BYTES}, got {preallocate_bytes}"
            )
        created = False

        def open_fd() -> int:
            nonlocal created
            if mutable:
                try:
                    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | _O_CLOEXEC, 0o644)
                    created = True
                    return fd
                except FileExistsError:
                    return os.open(path, os.O_RDWR | _O_CLOEXEC)
            return os.open(path, os.O_RDONLY | _O_CLOEXEC)

        fd = open_fd() if cache is None else cache.call_evicting(open_fd, str(path))
        try:
            if created and preallocate_bytes > 0:
                os.ftruncate(fd, preallocate_bytes)
                size = 0
            else:
                # An existing preallocated file counts its zeros; recovery cuts them off.
                size = os.fstat(fd).st_size
            if size > MAX_FILE_BYTES:
                raise CorruptRecordError(
                    f"segment file is {size} bytes, more than the {MAX_FILE_BYTES} bytes a"
                    " segment can address; it was not written by this engine",
                    file=str(path),
                )
        except BaseException:
            os.close(fd)
            raise
        return FileRecords(path, fd, size, mutable=mutable, cache=cache)

    # ------------------------------------------------------------------ descriptor
    def _open_handle(self) -> int:
        flags = os.O_RDWR if self._mutable else os.O_RDONLY
        return os.open(self._path, flags | _O_CLOEXEC)

    def _close_handle(self, handle: int) -> None:
        os.close(handle)

    def _describe(self) -> str:
        return str(self._path)

    @contextlib.contextmanager
    def _pinned(self) -> Iterator[int]:
        """The descriptor, held open (and opened again if the cache closed it) until the
        block ends."""
        cache = self._cache
        if cache is None:
            yield self._check_open()
            return
        if self._closed:
            raise ValueError(f"{self._path} is closed")
        fd = cache.pin(self)
        try:
            yield fd
        finally:
            cache.unpin(self)

    def set_evictable(self, evictable: bool) -> None:
        """Whether the cache may close the descriptor while the file is idle: not for the
        active segment's file, which takes the appends."""
        if self._cache is not None:
            self._cache.set_evictable(self, evictable)

    def dup(self) -> int:
        """A new descriptor of the file that the caller owns (e.g. to send it later); out of
        descriptors, idle segment files are closed to make room (``TooManyOpenFilesError``
        if that is not enough)."""
        with self._pinned() as fd:
            if self._cache is None:
                return os.dup(fd)
            return self._cache.call_evicting(lambda: os.dup(fd), str(self._path))

    # ------------------------------------------------------------------ properties
    @property
    def path(self) -> Path:
        return self._path

    @property
    def fd(self) -> int:
        """The descriptor of a file opened without a cache (with one, use ``dup``)."""
        if self._cache is not None:
            raise ValueError(f"{self._path} is in an open-file cache: its descriptor may change")
        return self._check_open()

    @property
    def size_in_bytes(self) -> int:
        """Bytes of batches in the file (exclusive end position of the last one)."""
        return self._size

    @property
    def mutable(self) -> bool:
        return self._mutable

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def holds_descriptor(self) -> bool:
        """Whether a descriptor of the file is open now."""
        return self._handle is not None

    def _check_open(self) -> int:
        if self._closed or self._handle is None:
            raise ValueError(f"{self._path} is closed")
        return self._handle

    def _check_mutable(self) -> None:
        if self._closed:
            raise ValueError(f"{self._path} is closed")
        if not self._mutable:
            raise io.UnsupportedOperation(f"{self._path} was opened read-only")

    # ------------------------------------------------------------------ writing
    def append(self, data: bytes | bytearray | memoryview) -> int:
        """Write ``data`` at the end of the file; returns the bytes written. No fsync."""
        self._check_mutable()
        if isinstance(data, memoryview) and (data.itemsize != 1 or data.ndim != 1):
            data = data.cast("B")
        total = len(data)
        if total == 0:
            return 0
        position = self._size
        if total > MAX_FILE_BYTES - position:
            raise RecordBatchTooLargeError(
                f"append of {total} bytes is too large for {self._path} at position"
                f" {position}: a segment holds at most {MAX_FILE_BYTES} bytes; roll first"
            )
        with self._pinned() as fd:
            written = os.pwrite(fd, data, position)
            while written < total:
                n = os.pwrite(fd, memoryview(data)[written:], position + written)
                if n <= 0:
                    raise OSError(f"short write to {self._path} at position {position + written}")
                written += n
        # Publish the new size only once every byte is in the file, so readers never see a
        # partial batch; a failed write leaves bytes past the end that the next append
        # overwrites.
        self._size = position + total
        return total

    def append_vectored(self, parts: Sequence[bytes | bytearray | memoryview]) -> int:
        """Write ``parts`` back to back at the end of the file in one ``pwritev``; no fsync.

        Lets a leader write patched batch headers next to the untouched batch bodies without
        copying the bodies into one buffer first.
        """
        self._check_mutable()
        views = [memoryview(p).cast("B") for p in parts if len(p)]
        total = sum(len(v) for v in views)
        if total == 0:
            return 0
        position = self._size
        if total > MAX_FILE_BYTES - position:
            raise RecordBatchTooLargeError(
                f"append of {total} bytes is too large for {self._path} at position"
                f" {position}: a segment holds at most {MAX_FILE_BYTES} bytes; roll first"
            )
        with self._pinned() as fd:
            _pwritev_all(fd, views, position, self._path)
        self._size = position + total
        return total

    def truncate_to(self, size: int) -> int:
        """Cut the file to ``size`` bytes (at most the current size); returns bytes removed."""
        self._check_mutable()
        original = self._size
        if not 0 <= size <= original:
            raise ValueError(
                f"cannot truncate {self._path} to {size} bytes: it holds {original} bytes"
                " (truncation only shrinks a file)"
            )
        with self._pinned() as fd:
            if size < os.fstat(fd).st_size:
                os.ftruncate(fd, size)
        self._size = size
        return original - size

    def trim(self) -> None:
        """Drop the preallocated tail beyond ``size_in_bytes``, if any."""
        self.truncate_to(self._size)

    def flush(self) -> None:
        with self._pinned() as fd:
            os.fsync(fd)

    def close(self) -> None:
        """Trim and fsync a mutable file, then close it (as Kafka does). Idempotent.

        A file whose descriptor the cache had closed is only marked closed: it was trimmed
        and fsynced when its segment rolled."""
        if self._closed:
            return
        self._closed = True
        fd = self._take_descriptor()
        if fd is None:
            return
        try:
            if self._mutable:
                if self._size < os.fstat(fd).st_size:
                    os.ftruncate(fd, self._size)
                os.fsync(fd)
        finally:
            os.close(fd)

    def _take_descriptor(self) -> int | None:
        """Give up the descriptor (None when there is none or a read still uses it; the
        read's end closes it then)."""
        if self._cache is not None:
            return self._cache.retire(self)
        fd, self._handle = self._handle, None
        return fd

    def rename_to(self, new_path: Path) -> None:
        """Rename the file (atomically replacing ``new_path``); the fd stays valid."""
        new_path = Path(new_path)
        os.replace(self._path, new_path)
        self._path = new_path

    def delete(self) -> None:
        """Close without flushing and remove the file if it exists."""
        self._closed = True
        fd = self._take_descriptor()
        if fd is not None:
            os.close(fd)
        self._path.unlink(missing_ok=True)

    def __enter__(self) -> FileRecords:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    # ------------------------------------------------------------------ reading
    def read(self, position: int, size: int) -> bytes:
        """Up to ``size`` bytes from ``position``, clamped to ``size_in_bytes``."""
        if position < 0 or size < 0:
            raise ValueError(f"invalid read of {size} bytes at position {position}")
        end = min(position + size, self._size)
        if position >= end:
            return b""
        with self._pinned() as fd:
            return _pread_all(fd, position, end)

    def batches(
        self, start_position: int = 0, *, max_position: int | None = None
    ) -> Iterator[tuple[int, RecordBatchHeader]]:
        """Yield ``(position, header)`` of each batch from ``start_position`` on.

        Reads only the 61-byte headers and skips the records. Stops at ``size_in_bytes`` as
        of the first call, or before the first batch that would end after ``max_position``
        (exclusive). A truncated or garbage header raises ``CorruptRecordError`` with the
        file, position and (when readable) base offset; the batches before it were yielded.
        """
        end = self._size
        limit = end if max_position is None else min(max_position, end)
        if start_position < 0:
            raise ValueError(f"start_position must be >= 0, got {start_position}")
        if self._closed:
            raise ValueError(f"{self._path} is closed")
        if start_position >= limit:
            return
        file = str(self._path)
        position = start_position
        # Pinned while the caller iterates: a scan holds one descriptor, never a closed one.
        with self._pinned() as fd:
            while position < limit:
                available = end - position
                head = os.pread(fd, BATCH_HEADER_SIZE, position)
                if len(head) < BATCH_HEADER_SIZE and len(head) < available:
                    available = len(head)  # the file shrank underneath us
                header = parse_batch_header(head, available=available, file=file, position=position)
                size = header.size_in_bytes
                if position + size > limit:
                    return
                yield position, header
                position += size

    def search_for_offset_with_size(
        self, target_offset: int, starting_position: int
    ) -> tuple[int, int, int] | None:
        """First batch from ``starting_position`` whose last offset >= ``target_offset``.

        Returns ``(last offset, position, size in bytes)`` of that batch, or None.
        """
        for position, header in self.batches(starting_position):
            last_offset = header.last_offset
            if last_offset >= target_offset:
                return last_offset, position, header.size_in_bytes
        return None

    def search_for_timestamp(
        self, target_timestamp: int, starting_position: int, starting_offset: int
    ) -> tuple[int, int] | None:
        """``(timestamp, offset)`` of the first record at or after both targets, or None.

        Kafka's ``searchForTimestamp``: batches whose max timestamp is below the target are
        skipped by header; the others are decoded until a record has
        ``timestamp >= target_timestamp`` and ``offset >= starting_offset``.
        """
        for _position, header in self.batches(starting_position):
            if header.max_timestamp < target_timestamp:
                continue
            record: Record
            for record in header.load(self).records():
                if record.timestamp >= target_timestamp and record.offset >= starting_offset:
                    return record.timestamp, record.offset
        return None

    def largest_timestamp_after(self, start_position: int) -> tuple[int, int]:
        """``(max timestamp, last offset of its batch)`` over batches from ``start_position``.

        ``(-1, -1)`` when there is no batch or none carries a timestamp.
        """
        max_timestamp = NO_TIMESTAMP
        offset_of_max_timestamp = -1
        for _position, header in self.batches(start_position):
            if header.max_timestamp > max_timestamp:
                max_timestamp = header.max_timestamp
                offset_of_max_timestamp = header.last_offset
        return max_timestamp, offset_of_max_timestamp

    def __repr__(self) -> str:
        return f"FileRecords(path={str(self._path)!r}, size={self._size})"


def _pread_all(fd: int, position: int, end: int) -> bytes:
    """The bytes ``[position, end)`` of ``fd``; fewer if the file ends first."""
    data = os.pread(fd, end - position, position)
    if len(data) == end - position:
        return data
    parts = [data]
    got = len(data)
    while got < end - position:
        chunk = os.pread(fd, end - position - got, position + got)
        if not chunk:
            break
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)


def _pwritev_all(fd: int, views: list[memoryview], position: int, path: Path) -> None:
    """Write ``views`` back to back from ``position``; pwritev takes at most IOV_MAX buffers
    per call and may write fewer bytes."""
    written = 0
    while views:
        chunk = views[:_IOV_MAX]
        n = os.pwritev(fd, chunk, position + written)
        if n <= 0:
            raise OSError(f"short write to {path} at position {position + written}")
        written += n
        while views and n >= len(views[0]):
            n -= len(views[0])
            views.pop(0)
        if views and n:
            views[0] = views[0][n:]
