"""A byte range of a segment file held open on its own descriptor, to be sent with sendfile.

``FileRegion.of`` duplicates the segment's descriptor (pinned in the broker's open-file cache
while it does), so the region stays readable (the same
inode, the same bytes) even if the segment is closed, rolled or deleted before the region is
sent; bytes below a segment's observed size never change while it serves reads. The owner
must ``close`` the region once it is sent or dropped.

Thread safety: one user at a time. ``transfer_to`` does disk work (sendfile may have to read
the file) and belongs on an I/O thread, unless the region is ``resident``: bytes the last
appends just wrote, still in the page cache, which sendfile copies without reading the disk.
It never waits for the socket: on a full socket it returns what it sent so the caller can
wait for writability without holding a thread.
"""

from __future__ import annotations

import os

from storage_core.errors import KafkaStorageError, TooManyOpenFilesError
from storage_core.records.file_records import FileRecords
from storage_core.records.open_file_cache import is_out_of_descriptors

SENDFILE_SUPPORTED = hasattr(os, "sendfile")


class FileRegion:
    """``size`` bytes of a file from ``position`` (inclusive), on a descriptor it owns."""

    __slots__ = ("_fd", "_path", "position", "resident", "size")

    def __init__(self, fd: int, position: int, size: int, *, path: str) -> None:
        if position < 0 or size < 0:
            os.close(fd)
            raise ValueError(f"invalid region of {size} bytes at position {position} of {path}")
        self._fd = fd
        self._path = path
        self.position = position
        self.size = size
        # Set by a reader that knows the bytes were just written (the log's tail): sending
        # them waits for no disk, so they may go out from the event loop.
        self.resident = False

    @staticmethod
    def of(file_records: FileRecords, position: int, size: int) -> FileRegion:
        """The region ``[position, position + size)`` of a segment file, on a dup'd descriptor."""
        try:
            fd = file_records.dup()  # pinned while dup'd: never a descriptor the cache closes
        except OSError as exc:
            if is_out_of_descriptors(exc):
                raise TooManyOpenFilesError(
                    f"cannot hold {file_records.path} open to send it: {exc.strerror}; the"
                    " broker is at its open-file limit (ulimit -n), the fetch may be retried"
                ) from exc
            raise KafkaStorageError(
                f"cannot hold {file_records.path} open to send it: {exc}"
            ) from exc
        except ValueError as exc:
            raise KafkaStorageError(
                f"cannot hold {file_records.path} open to send it: {exc}"
            ) from exc
        return FileRegion(fd, position, size, path=str(file_records.path))

    def __len__(self) -> int:
        return self.size

    @property
    def closed(self) -> bool:
        return self._fd < 0

    def read(self) -> bytes:
        """The region's bytes (for callers that cannot send a file)."""
        parts = []
        done = 0
        while done < self.size:
            data = os.pread(self._fd, self.size - done, self.position + done)
            if not data:
                raise self._short(done)
            parts.append(data)
            done += len(data)
        return b"".join(parts)

    def read_range(self, start: int, size: int) -> bytes:
        """``size`` bytes of the region from its byte ``start`` (a TLS connection copies the
        region through its encryption in chunks, as it cannot send a file)."""
        size = min(size, self.size - start)
        parts = []
        done = 0
        while done < size:
            data = os.pread(self._fd, size - done, self.position + start + done)
            if not data:
                raise self._short(start + done)
            parts.append(data)
            done += len(data)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def transfer_to(self, socket_fd: int, start: int) -> int:
        """Send the region from its byte ``start`` to a non-blocking socket until it is all
        sent or the socket is full; returns the bytes sent (0 if the socket was full)."""
        sent = 0
        while start + sent < self.size:
            try:
                n = os.sendfile(
                    socket_fd, self._fd, self.position + start + sent, self.size - start - sent
                )
            except BlockingIOError:
                break
            if n == 0:  # the file ends before the region does: it was truncated under us
                raise self._short(start + sent)
            sent += n
        return sent

    def _short(self, done: int) -> KafkaStorageError:
        return KafkaStorageError(
            f"{self._path} ended {self.size - done} bytes before the end of the region"
            f" [{self.position}, {self.position + self.size}) being sent"
        )

    def close(self) -> None:
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            os.close(fd)

    def __repr__(self) -> str:
        return f"FileRegion({self._path}, position={self.position}, size={self.size})"
