"""Sending a response of bytes and file regions over a loopback socket: every byte arrives,
in order, even when the socket fills up many times (a slow reader), and descriptors are
released afterwards."""

from __future__ import annotations

import asyncio
import os
import socket
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

from storage_core.records import FileRecords
from storage_core.records.file_region import FileRegion
from storage_core.server.response_parts import ResponseParts, send_response_parts

T = TypeVar("T")


def _frame(regions: list[FileRegion], head: bytes, tail: bytes) -> ResponseParts:
    parts = ResponseParts()
    parts.append_bytes(b"\x00\x00\x00\x00" + head)
    for region in regions:
        parts.append_region(region)
        parts.append_bytes(tail)
    parts.seal()
    return parts


def _serve_and_read(
    parts: ResponseParts,
    *,
    slow_reader: bool,
    io_calls: list[int] | None = None,
    before: bytes = b"before",
) -> bytes:
    """What a client reads from a connection that sends ``parts`` between two writes (the
    first ``before``); ``io_calls[0]`` counts the calls that went to an I/O thread."""
    io = ThreadPoolExecutor(max_workers=2)

    async def run_io(function: Callable[[], T]) -> T:
        if io_calls is not None:
            io_calls[0] += 1
        return await asyncio.get_running_loop().run_in_executor(io, function)

    async def main() -> bytes:
        async def on_connection(_r: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writer.write(before)  # an earlier response, maybe still in the transport's buffer
            await send_response_parts(writer, parts, run_io)
            writer.write(b"after")
            await writer.drain()
            writer.close()

        server = await asyncio.start_server(on_connection, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 16)
        received = bytearray()
        while chunk := await reader.read(1 << 16):
            received += chunk
            if slow_reader:
                await asyncio.sleep(0.0005)
        writer.close()
        server.close()
        await server.wait_closed()
        return bytes(received)

    try:
        return asyncio.run(main())
    finally:
        io.shutdown()


def test_bytes_and_regions_arrive_in_order(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.log"
    data = os.urandom(6 * 1024 * 1024)
    path.write_bytes(data)
    with FileRecords.open(path, mutable=False) as file:
        regions = [FileRegion.of(file, 5, 4 * 1024 * 1024), FileRegion.of(file, 0, 70_000)]
    parts = _frame(regions, b"head", b"tail")
    expected = parts.to_bytes()
    assert expected[8:] == data[5 : 5 + 4 * 1024 * 1024] + b"tail" + data[:70_000] + b"tail"
    for slow in (False, True):
        parts = _frame(
            [
                FileRegion(os.open(path, os.O_RDONLY), 5, 4 * 1024 * 1024, path=str(path)),
                FileRegion(os.open(path, os.O_RDONLY), 0, 70_000, path=str(path)),
            ],
            b"head",
            b"tail",
        )
        assert _serve_and_read(parts, slow_reader=slow) == b"before" + expected + b"after"
        assert all(r.closed for r in parts.parts if isinstance(r, FileRegion))
    for region in regions:
        region.close()


def test_a_frame_of_one_bytearray_is_sealed_in_place_and_sent_whole() -> None:
    """The encoder hands over its bytearray (inline records of 64 KiB and more): the size goes
    into it without a copy, and the frame arrives as sealed, behind a slow reader too."""
    records = os.urandom(300_000)
    head = bytearray(b"\x00\x00\x00\x00" + b"header" + records)
    parts = ResponseParts()
    parts.append_bytes(head)
    parts.seal()
    assert parts.parts == [head] and parts.parts[0] is head
    assert head[:4] == (len(head) - 4).to_bytes(4, "big")
    assert _serve_and_read(parts, slow_reader=True) == b"before" + bytes(head) + b"after"


def test_record_sets_in_memory_arrive_whole_behind_a_slow_reader() -> None:
    """A remote read's answer: views of cached chunks, megabytes of them, each sent as it is
    (not joined into one copy first), arrive whole and in order."""
    chunk = os.urandom(4 * 1024 * 1024)
    parts = ResponseParts()
    parts.append_bytes(b"\x00\x00\x00\x00" + b"header")
    parts.append_bytes(memoryview(chunk)[3_000_000:])
    parts.append_bytes(memoryview(chunk)[: 2 * 1024 * 1024])
    parts.append_bytes(b"tail")
    parts.seal()
    expected = parts.to_bytes()
    for slow in (False, True):
        assert _serve_and_read(parts, slow_reader=slow) == b"before" + expected + b"after"


def test_resident_regions_are_sent_from_the_event_loop(tmp_path: Path) -> None:
    """A region of bytes just written (the log's tail, in the page cache) goes out with
    sendfile from the loop itself, also when the socket fills many times; any other region
    goes through an I/O thread."""
    path = tmp_path / "00000000000000000000.log"
    data = os.urandom(3 * 1024 * 1024)
    path.write_bytes(data)
    for resident in (True, False):
        region = FileRegion(os.open(path, os.O_RDONLY), 7, len(data) - 7, path=str(path))
        region.resident = resident
        parts = _frame([region], b"head", b"tail")
        io_calls = [0]
        received = _serve_and_read(parts, slow_reader=True, io_calls=io_calls)
        assert received[len(b"before") + 8 :] == data[7:] + b"tail" + b"after"
        assert region.closed
        assert (io_calls[0] == 0) is resident


def test_a_response_waits_behind_bytes_still_queued_in_the_transport(tmp_path: Path) -> None:
    """The socket is written directly only when the transport has nothing queued. Here an
    earlier response is larger than the socket buffers, and the client (another thread)
    empties the socket while the transport still holds the rest of it: the response's
    bytes, a resident region's among them, still come after it, never in the middle."""
    path = tmp_path / "00000000000000000000.log"
    data = os.urandom(200_000)
    path.write_bytes(data)
    earlier = os.urandom(16 * 1024 * 1024)
    region = FileRegion(os.open(path, os.O_RDONLY), 0, len(data), path=str(path))
    region.resident = True
    parts = _frame([region], b"head", b"tail")
    expected = parts.to_bytes()
    received = bytearray()

    def read_all(port: int) -> None:
        with socket.create_connection(("127.0.0.1", port)) as client:
            while chunk := client.recv(1 << 16):
                received.extend(chunk)

    async def main() -> None:
        async def on_connection(_r: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writer.write(earlier)
            assert writer.transport.get_write_buffer_size() > 0
            time.sleep(0.2)  # the loop stands still: the client drains the socket meanwhile
            await send_response_parts(writer, parts, _never_io)
            await writer.drain()
            writer.close()

        server = await asyncio.start_server(on_connection, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        await asyncio.to_thread(read_all, port)
        server.close()
        await server.wait_closed()

    asyncio.run(main())
    assert bytes(received) == earlier + expected
    assert region.closed


async def _never_io(function: Callable[[], T]) -> T:
    raise AssertionError("a resident region needs no I/O thread")
