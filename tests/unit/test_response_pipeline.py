"""ResponsePipeline: responses still being completed go out in the order they were added."""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path

import pytest

from storage_core.records.file_region import FileRegion
from storage_core.server.response_parts import ResponseParts
from storage_core.server.response_pipeline import (
    DeferredResponse,
    Response,
    ResponsePipeline,
)


class Connection:
    """What the pipeline sends to: the frames in the order sent, and whether it closed."""

    def __init__(self, *, fail_on: bytes | None = None) -> None:
        self.sent: list[Response] = []
        self.closed = False
        self.pending_counts: list[int] = []
        self._fail_on = fail_on

    async def send(self, response: Response) -> None:
        await asyncio.sleep(0)  # a real write yields to the loop
        if self._fail_on is not None and isinstance(response, bytes) and self._fail_on in response:
            raise ConnectionResetError("the client went away")
        self.sent.append(response)

    def close(self) -> None:
        self.closed = True

    def pipeline(self, pending_max: int = 5) -> ResponsePipeline:
        return ResponsePipeline(
            send=self.send,
            close=self.close,
            client="127.0.0.1:5555",
            on_pending=self.pending_counts.append,
            pending_max=pending_max,
        )


def deferred(done: asyncio.Future[bytes]) -> DeferredResponse:
    """A response that is complete once ``done`` has its bytes."""
    ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    done.add_done_callback(lambda _: ready.set_result(None))
    return DeferredResponse(ready, done.result)


def test_a_later_response_complete_first_still_goes_out_after_the_earlier() -> None:
    async def run() -> Connection:
        connection = Connection()
        pipeline = connection.pipeline()
        loop = asyncio.get_running_loop()
        first, second = loop.create_future(), loop.create_future()
        pipeline.add(deferred(first))
        pipeline.add(deferred(second))
        pipeline.add(b"third, complete at once")
        assert pipeline.busy
        second.set_result(b"second")
        await asyncio.sleep(0.01)
        assert connection.sent == []  # the first is not complete: nothing may go out
        first.set_result(b"first")
        assert await pipeline.drain()
        assert not pipeline.busy
        return connection

    connection = asyncio.run(run())
    # Complete together once the first is: in order, in one write.
    assert connection.sent == [b"first" + b"second" + b"third, complete at once"]
    assert not connection.closed
    assert connection.pending_counts[-1] == 0
    assert max(connection.pending_counts) == 3


def test_a_response_that_cannot_complete_closes_the_connection_and_nothing_follows_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def run() -> tuple[Connection, bool]:
        connection = Connection()
        pipeline = connection.pipeline()

        def broken() -> bytes:
            raise RuntimeError("handler bug")

        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        ready.set_result(None)
        pipeline.add(b"before")
        pipeline.add(DeferredResponse(ready, broken))
        pipeline.add(b"after")
        return connection, await pipeline.drain()

    with caplog.at_level(logging.ERROR):
        connection, drained = asyncio.run(run())
    assert not drained
    assert connection.closed
    assert connection.sent == [b"before"]
    assert "client=127.0.0.1:5555" in caplog.text
    assert "handler bug" in caplog.text


def test_a_failed_send_closes_the_connection_and_later_responses_are_dropped() -> None:
    async def run() -> tuple[Connection, bool]:
        connection = Connection(fail_on=b"second")
        pipeline = connection.pipeline()
        second: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        pipeline.add(b"first")
        pipeline.add(deferred(second))
        pipeline.add(b"third")
        await asyncio.sleep(0.01)
        second.set_result(b"second")
        return connection, await pipeline.drain()

    connection, drained = asyncio.run(run())
    assert not drained
    assert connection.closed
    assert connection.sent == [b"first"]


def test_no_more_than_pending_max_responses_wait() -> None:
    async def run() -> list[str]:
        connection = Connection()
        pipeline = connection.pipeline(pending_max=2)
        loop = asyncio.get_running_loop()
        first, second = loop.create_future(), loop.create_future()
        pipeline.add(deferred(first))
        pipeline.add(deferred(second))
        events: list[str] = []

        async def reader() -> None:
            await pipeline.wait_for_room()
            events.append("room")

        waiting = asyncio.create_task(reader())
        await asyncio.sleep(0.01)
        events.append("first completes")
        first.set_result(b"first")
        await waiting
        second.set_result(b"second")
        await pipeline.drain()
        return events

    assert asyncio.run(run()) == ["first completes", "room"]


def test_cancel_sends_nothing_more() -> None:
    async def run() -> Connection:
        connection = Connection()
        pipeline = connection.pipeline()
        never: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        pipeline.add(deferred(never))
        pipeline.add(b"behind it")
        pipeline.cancel()
        await asyncio.sleep(0.01)
        assert not pipeline.busy
        return connection

    connection = asyncio.run(run())
    assert connection.sent == []


def test_a_response_of_none_keeps_its_place() -> None:
    async def run() -> Connection:
        connection = Connection()
        pipeline = connection.pipeline()
        pipeline.add(None)  # an acks=0 produce behind a pending one: no answer
        pipeline.add(b"next")
        assert await pipeline.drain()
        return connection

    assert asyncio.run(run()).sent == [None, b"next"]


def test_pending_max_must_be_positive() -> None:
    with pytest.raises(ValueError, match="pending_max must be >= 1"):
        Connection().pipeline(pending_max=0)


def test_cancel_releases_the_file_of_a_fetch_answer_not_yet_sent(tmp_path: Path) -> None:
    """A fetch answer queued behind a produce still waiting holds a segment file open; when
    the connection ends, that descriptor is closed, not left to the garbage collector."""
    segment = tmp_path / "00000000000000000000.log"
    segment.write_bytes(b"batches")

    async def run() -> FileRegion:
        connection = Connection()
        pipeline = connection.pipeline()
        never: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        region = FileRegion(os.open(segment, os.O_RDONLY), 0, 7, path=str(segment))
        answer = ResponseParts()
        answer.append_bytes(b"\x00\x00\x00\x00header")
        answer.append_region(region)
        answer.seal()
        pipeline.add(deferred(never))
        pipeline.add(answer)
        await asyncio.sleep(0)
        pipeline.cancel()
        await asyncio.sleep(0.01)
        assert connection.sent == []
        return region

    assert asyncio.run(run()).closed


def test_responses_complete_together_go_out_in_one_write_up_to_one_with_file_regions(
    tmp_path: Path,
) -> None:
    """Produces that one high-watermark move completes are answered with one send; a fetch
    answer with file regions behind them goes out on its own, after them, then the rest."""
    segment = tmp_path / "00000000000000000000.log"
    segment.write_bytes(b"batches")

    async def run() -> tuple[list[Response], ResponseParts]:
        connection = Connection()
        pipeline = connection.pipeline(pending_max=10)
        loop = asyncio.get_running_loop()
        first, second, later = (loop.create_future() for _ in range(3))
        answer = ResponseParts()
        answer.append_bytes(b"\x00\x00\x00\x00header")
        answer.append_region(FileRegion(os.open(segment, os.O_RDONLY), 0, 7, path=str(segment)))
        answer.seal()
        for entry in (deferred(first), deferred(second), None, answer, b"fifth"):
            pipeline.add(entry)
        pipeline.add(deferred(later))
        await asyncio.sleep(0.01)
        second.set_result(b"second")
        first.set_result(b"first")
        await asyncio.sleep(0.01)
        sent_before_later = list(connection.sent)
        later.set_result(b"later")
        assert await pipeline.drain()
        assert sent_before_later == [b"firstsecond", answer, b"fifth"]
        return connection.sent, answer

    sent, answer = asyncio.run(run())
    assert sent == [b"firstsecond", answer, b"fifth", b"later"]
