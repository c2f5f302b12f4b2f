"""A response frame made of in-memory bytes and file regions, and how it goes out.

The first part starts with the int32 frame size, patched by ``seal`` to the total of every
part after it. ``send_response_parts`` writes bytes through the connection's transport and
each file region with ``sendfile`` on an I/O thread (the region's bytes never enter Python):

    transport.write(bytes) ... wait until the transport's buffer is empty
    I/O thread: os.sendfile(socket, file) until done or the socket is full
    loop: wait until the socket is writable (a dup of the socket's descriptor, so the
          transport's own registration is untouched), then back to the I/O thread

A ``resident`` region (bytes the log's last appends just wrote, in the page cache) is sent
from the event loop itself: sendfile then copies from memory, and a thread round trip would
cost more than the copy. Otherwise the event loop never touches a file. An I/O thread never
waits for a slow client. When the transport has nothing queued, the parts first go straight to
the socket (bytes with write, resident regions with sendfile) until it is full or a region
must be read from disk; only what is left takes the way above, with its waits.

Over TLS no file can go to the socket (its bytes must be encrypted): ``zero_copy=False`` copies
each region through the connection's transport in TLS_CHUNK_BYTES chunks read on an I/O
thread (or on the loop when ``resident``), draining each before the next is read, so a
connection holds at most one chunk plus the transport's buffer, whatever the segment's size.
Kafka's ``SslTransportLayer.transferFrom`` does the same with 32 KiB.

Thread safety: a ``ResponseParts`` belongs to one connection's task; its regions are used on
one I/O thread at a time. ``close`` releases the regions' descriptors, sent or not.
"""

from __future__ import annotations

import asyncio
import functools
import os
import struct
from collections.abc import Awaitable, Callable
from typing import TypeVar

from storage_core.records.file_region import FileRegion

T = TypeVar("T")
RunIo = Callable[[Callable[[], T]], Awaitable[T]]
OnProgress = Callable[[], None]

_SIZE = struct.Struct(">i")
MAX_FRAME_BYTES = (1 << 31) - 1
WRITE_CHUNK_BYTES = 256 * 1024
TLS_CHUNK_BYTES = 256 * 1024
"""Bytes of a file region copied through TLS at a time (Kafka: 32 KiB; more, here, costs
fewer thread round trips and transport writes per MiB)."""


class ResponseParts:
    """An encoded response frame: bytes and file regions, in wire order."""

    def __init__(self) -> None:
        self.parts: list[bytes | bytearray | memoryview | FileRegion] = []
        self.size_in_bytes = 0

    def append_bytes(self, data: bytes | bytearray | memoryview) -> None:
        """Add bytes; a ``bytearray`` is kept as it is, not copied: the caller hands it over
        (a fetch response's inline records are 64 KiB and more)."""
        if data:
            self.parts.append(data)
            self.size_in_bytes += len(data)

    def append_region(self, region: FileRegion) -> None:
        self.parts.append(region)
        self.size_in_bytes += region.size

    def seal(self) -> None:
        """Write the frame size (every byte after the size field) into the first part."""
        head = self.parts[0] if self.parts else None
        if not isinstance(head, bytes | bytearray) or len(head) < 4:
            raise ValueError("a response frame starts with its 4-byte size field")
        if self.size_in_bytes - 4 > MAX_FRAME_BYTES:
            raise ValueError(f"a response frame of {self.size_in_bytes} bytes is too large")
        if isinstance(head, bytearray):  # in place: no copy of a head that holds records
            _SIZE.pack_into(head, 0, self.size_in_bytes - 4)
        else:
            self.parts[0] = _SIZE.pack(self.size_in_bytes - 4) + head[4:]

    @property
    def has_regions(self) -> bool:
        return any(isinstance(p, FileRegion) for p in self.parts)

    def to_bytes(self) -> bytes:
        """The whole frame in memory (reads the regions; for tests and fallbacks)."""
        return b"".join(p.read() if isinstance(p, FileRegion) else p for p in self.parts)

    def close(self) -> None:
        for part in self.parts:
            if isinstance(part, FileRegion):
                part.close()


def _no_progress() -> None:
    pass


async def write_all(
    writer: asyncio.StreamWriter,
    data: bytes | bytearray | memoryview,
    on_progress: OnProgress = _no_progress,
) -> None:
    """Write ``data`` in chunks, draining each; ``on_progress`` runs after each drained chunk
    (the connection's activity for the idle check: a client that reads nothing stalls it)."""
    view = memoryview(data)
    for start in range(0, len(view), WRITE_CHUNK_BYTES):
        writer.write(view[start : start + WRITE_CHUNK_BYTES])
        await writer.drain()
        on_progress()


async def send_response_parts(
    writer: asyncio.StreamWriter,
    response: ResponseParts,
    run_io: RunIo[int],
    on_progress: OnProgress = _no_progress,
    *,
    zero_copy: bool = True,
) -> None:
    """Send the frame, bytes through ``writer`` and regions with sendfile (or, with
    ``zero_copy`` False, copied through ``writer`` in chunks: TLS); closes the parts.
    ``on_progress`` runs whenever the client has taken more of it."""
    try:
        if not response.has_regions:
            # Each part as it is: joining them would copy a record set read into memory (a
            # remote read's megabyte) once more on the event loop.
            for part in response.parts:
                await write_all(writer, part, on_progress)  # type: ignore[arg-type]
            return
        if not zero_copy:
            await _send_copied(writer, response.parts, run_io, on_progress)  # type: ignore[arg-type]
            return
        transport = writer.transport
        parts = response.parts
        first, offset = 0, 0
        sock = writer.get_extra_info("socket")
        if sock is not None and transport.get_write_buffer_size() == 0:
            # Nothing queued in the transport: the socket is written now, without a wait
            # (a follower's fetch at the log tail goes out whole here, as a rule).
            first, offset = _send_at_once(sock.fileno(), parts)
            if (first, offset) != (0, 0):
                on_progress()
            if first == len(parts):
                return
        low, high = transport.get_write_buffer_limits()
        # The transport must have sent everything before the socket is written directly:
        # with a high-water mark of 0, drain() returns only once its buffer is empty.
        transport.set_write_buffer_limits(high=0)
        try:
            for index in range(first, len(parts)):
                part = parts[index]
                start = offset if index == first else 0
                if not isinstance(part, FileRegion):
                    await write_all(writer, memoryview(part)[start:], on_progress)
                else:
                    await writer.drain()
                    await _send_region(writer, part, run_io, on_progress, start)
        finally:
            if not transport.is_closing():
                transport.set_write_buffer_limits(high=high, low=low)
    finally:
        response.close()


async def _send_copied(
    writer: asyncio.StreamWriter,
    parts: list[bytes | bytearray | memoryview | FileRegion],
    run_io: RunIo[bytes],
    on_progress: OnProgress,
) -> None:
    """Every part through the transport (TLS encrypts it), regions a chunk at a time."""
    for part in parts:
        if not isinstance(part, FileRegion):
            await write_all(writer, part, on_progress)
            continue
        for start in range(0, part.size, TLS_CHUNK_BYTES):
            if part.resident:
                chunk = part.read_range(start, TLS_CHUNK_BYTES)
            else:
                chunk = await _shielded_io(
                    run_io, functools.partial(part.read_range, start, TLS_CHUNK_BYTES)
                )
            writer.write(chunk)
            del chunk
            await writer.drain()
            on_progress()


async def _shielded_io(run_io: RunIo[T], call: Callable[[], T]) -> T:
    # Shielded: if this task is cancelled, the I/O thread still finishes its call before
    # the descriptors it uses are closed.
    running = asyncio.ensure_future(run_io(call))
    try:
        return await asyncio.shield(running)
    except asyncio.CancelledError:
        await asyncio.wait([running])
        raise


def _send_at_once(
    socket_fd: int, parts: list[bytes | bytearray | memoryview | FileRegion]
) -> tuple[int, int]:
    """Send ``parts`` to the socket until it is full or a region must be read from disk
    (not ``resident``); returns where sending stopped: (part index, bytes of it sent)."""
    for index, part in enumerate(parts):
        if isinstance(part, FileRegion):
            if not part.resident:
                return index, 0
            sent = part.transfer_to(socket_fd, 0)
        else:
            sent = 0
            view = memoryview(part)
            while sent < len(view):
                try:
                    sent += os.write(socket_fd, view[sent:])
                except BlockingIOError:
                    break
        if sent < len(part):
            return index, sent
    return len(parts), 0


async def _send_region(
    writer: asyncio.StreamWriter,
    region: FileRegion,
    run_io: RunIo[int],
    on_progress: OnProgress,
    start: int = 0,
) -> None:
    sock = writer.get_extra_info("socket")
    if sock is None:
        raise ConnectionError("the connection has no socket to send a file to")
    loop = asyncio.get_running_loop()
    # A dup of the transport's descriptor, made once the region waits for the socket or goes
    # to an I/O thread: the transport has its own registration of its descriptor, and may
    # close it while an I/O thread sends. A resident region sent at once needs neither.
    socket_fd = -1
    try:
        sent = start
        while sent < region.size:
            if region.resident:  # in the page cache: sendfile waits for no disk
                sent += region.transfer_to(sock.fileno() if socket_fd < 0 else socket_fd, sent)
            else:
                if socket_fd < 0:
                    socket_fd = os.dup(sock.fileno())
                sent += await _transfer_on_io_thread(region, socket_fd, sent, run_io)
            on_progress()
            if sent < region.size:
                if socket_fd < 0:
                    socket_fd = os.dup(sock.fileno())
                await _writable(loop, socket_fd)
    finally:
        if socket_fd >= 0:
            os.close(socket_fd)


async def _transfer_on_io_thread(
    region: FileRegion, socket_fd: int, start: int, run_io: RunIo[int]
) -> int:
    # Shielded: if this task is cancelled, the I/O thread still finishes its call before
    # the descriptors it uses are closed.
    sending = asyncio.ensure_future(run_io(functools.partial(region.transfer_to, socket_fd, start)))
    try:
        return await asyncio.shield(sending)
    except asyncio.CancelledError:
        await asyncio.wait([sending])
        raise


async def _writable(loop: asyncio.AbstractEventLoop, fd: int) -> None:
    ready: asyncio.Future[None] = loop.create_future()

    def on_writable() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_writer(fd, on_writable)
    try:
        await ready
    finally:
        loop.remove_writer(fd)
