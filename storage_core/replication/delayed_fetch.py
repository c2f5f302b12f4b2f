"""Kafka's fetch purgatory (``DelayedFetch``) and the fetch's request and result types.

A fetch that finds less than ``min_bytes`` parks, up to ``max_wait_ms``, until the high
watermark of one of its partitions advances, or for a follower's fetch its log end offset.
Unlike the produce purgatory (``delayed_operation``), a parked fetch is a future its
``ReplicaManager.fetch_messages`` awaits and then reads again itself, not a callback object:
a follower's fetch may be handed, instead of None, the read an append made for it on its
I/O thread (``claim_follower_reads``, ``hand_over_reads``), as Kafka's appending request
thread completes the delayed fetches it unblocks.

Thread-safety: loop thread only; wake-ups from other threads go through the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Container, Iterable, Mapping
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import TypeVar

from storage_core.common import TopicPartition, Uuid
from storage_core.errors import StorageError
from storage_core.records.file_region import FileRegion
from storage_core.replication.delayed_produce import ProduceResult
from storage_core.replication.log_read import LogReadResult
from storage_core.replication.partition import NO_EPOCH_CHECK

# The lines keep the logger they were always written with.
logger = logging.getLogger("storage_core.replication.replica_manager")

T = TypeVar("T")

MAX_WAITERS = 10_000  # bounded purgatory: beyond it, fetches answer at once


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchRequestPartition:
    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int = NO_EPOCH_CHECK
    last_fetched_epoch: int = -1
    log_start_offset: int = -1  # a follower's, reported in its fetch
    topic_id: Uuid | None = None  # set when the request names topics by id (Fetch v13+)


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchResult:
    """One partition's fetch outcome: records (possibly empty) or an error.

    ``records`` are bytes, or with ``zero_copy`` a ``FileRegion`` of the segment file that
    the caller must send or close.

    ``diverging_epoch`` is ``(epoch, end offset)`` when the fetcher's last fetched epoch
    ends before its fetch offset on this leader (KIP-595 truncation detection); no records
    are returned then.

    ``remote_read`` is set while the records are still to be read from the remote tier
    (``(fetch offset, max bytes, min one message)``); ``fetch_messages`` completes it.
    """

    read: LogReadResult | None = None
    records: bytes | memoryview | FileRegion = b""
    error: StorageError | None = None
    diverging_epoch: tuple[int, int] | None = None
    remote_read: tuple[int, int, bool] | None = None


FetchResults = dict[TopicPartition, FetchResult]
# Woken with None (read again), or for a follower's fetch maybe with the read an append made
# for it on its I/O thread (``_claim_follower_reads``).
Waiter = asyncio.Future[FetchResults | None]


class DelayedFetchPurgatory:
    """The parked fetches, per partition they wait on."""

    __slots__ = (
        "_claimed_reads",
        "_follower_reads",
        "_replica_waiters",
        "_session_watches",
        "_waiters",
    )

    def __init__(self) -> None:
        # Follower fetches park here until the leader's log end offset moves (they read
        # beyond the HW); consumer fetches in ``_waiters`` (HW moves).
        self._replica_waiters: dict[TopicPartition, set[Waiter]] = {}
        # Follower fetches waiting in the purgatory and how each reads: an append reads for
        # them on its own I/O thread once it is written (as Kafka's appending request thread
        # completes the delayed fetches it unblocks), and hands the read over. Claimed:
        # being read for by an append.
        self._follower_reads: dict[Waiter, Callable[[], FetchResults]] = {}
        self._claimed_reads: set[Waiter] = set()
        self._waiters: dict[TopicPartition, set[Waiter]] = {}
        # Incremental fetch sessions watching all their partitions at once (a follower's
        # session may hold thousands): one entry each, checked at every wake-up of a
        # follower fetch; there are as many as fetcher threads follow this broker.
        self._session_watches: set[SessionWatch] = set()

    def wake_high_watermark_waiters(self, tp: TopicPartition) -> None:
        """Wake the fetches waiting on ``tp``'s HW (sessions only note it)."""
        waiters = self._waiters.pop(tp, None)
        for waiter in waiters or ():
            if not waiter.done():
                waiter.set_result(None)
        self._note_sessions(tp, wake=False)

    def wake(self, tp: TopicPartition) -> None:
        """Wake every fetch parked on ``tp``, follower fetches included."""
        for waiters in (self._waiters, self._replica_waiters):
            for waiter in waiters.pop(tp, set()):
                if not waiter.done():
                    waiter.set_result(None)
        self._note_sessions(tp, wake=True)

    def wake_replica_fetches(self, tp: TopicPartition) -> None:
        """Wake the follower fetches parked on ``tp``, except those an append reads for."""
        for waiter in self._replica_waiters.pop(tp, set()):
            if not waiter.done() and waiter not in self._claimed_reads:
                waiter.set_result(None)
        self._note_sessions(tp, wake=True)

    def _note_sessions(self, tp: TopicPartition, *, wake: bool) -> None:
        if self._session_watches:
            for watch in self._session_watches:
                if tp in watch.partitions:
                    watch.moved.add(tp)
                    waiter = watch.waiter
                    if wake and waiter is not None and not waiter.done():
                        waiter.set_result(None)

    def watch_session(self, partitions: Container[TopicPartition]) -> SessionWatch:
        """A standing watch of an incremental fetch session's ``partitions`` (read at each
        event, so they may change), until closed. Bounded by the fetch session cache."""
        watch = SessionWatch(self, partitions)
        self._session_watches.add(watch)
        return watch

    def unwatch_session(self, watch: SessionWatch) -> None:
        self._session_watches.discard(watch)

    def claim_follower_reads(
        self, tps: Iterable[TopicPartition]
    ) -> dict[Waiter, Callable[[], FetchResults]]:
        """The follower fetches parked on ``tps`` that an append is about to read for
        (loop thread); each is handed its read, or woken, by ``hand_over_reads``."""
        claimed: dict[Waiter, Callable[[], FetchResults]] = {}
        for tp in tps:
            for waiter in self._replica_waiters.get(tp, ()):
                read = self._follower_reads.get(waiter)
                if read is not None and waiter not in self._claimed_reads:
                    claimed[waiter] = read
        self._claimed_reads.update(claimed)
        return claimed

    @staticmethod
    def read_for_followers(
        claimed: Mapping[Waiter, Callable[[], FetchResults]],
    ) -> dict[Waiter, FetchResults | None]:
        """Run the claimed follower fetches' reads (I/O thread, after the append); None for
        one whose read failed: that fetch reads again itself."""
        reads: dict[Waiter, FetchResults | None] = {}
        for waiter, read in claimed.items():
            try:
                reads[waiter] = read()
            except Exception:
                logger.exception("read for a parked follower fetch failed")
                reads[waiter] = None
        return reads

    def hand_over_reads(self, reads: Mapping[Waiter, FetchResults | None]) -> None:
        """Give each claimed follower fetch still waiting the read made for it (loop
        thread); the read of one that has gone (answered, expired, cancelled) is dropped."""
        for waiter, results in reads.items():
            self._claimed_reads.discard(waiter)
            if waiter in self._follower_reads and not waiter.done():
                waiter.set_result(results)
            elif results is not None:
                close_regions(results.values())

    def release_claims(self, claimed: Iterable[Waiter]) -> None:
        """Nothing was appended: the claimed follower fetches keep waiting (loop thread)."""
        self._claimed_reads.difference_update(claimed)

    async def append_then_read(
        self,
        io: Executor,
        append_all: Callable[[], dict[TopicPartition, ProduceResult]],
        claimed: dict[Waiter, Callable[[], FetchResults]],
    ) -> dict[TopicPartition, ProduceResult]:
        """Append on an I/O thread, answer the produce, then on the same thread read for the
        follower fetches parked on these partitions and hand the reads over: the followers
        get the new batches without another round trip to an I/O thread."""
        loop = asyncio.get_running_loop()
        appended: asyncio.Future[dict[TopicPartition, ProduceResult]] = loop.create_future()

        def append_then_read() -> None:
            try:
                results = append_all()
            except BaseException as error:
                call_soon_threadsafe(loop, self._append_failed, appended, error, claimed)
                return
            reads = (
                self.read_for_followers(claimed)
                if any(r.info is not None for r in results.values())
                else None
            )
            call_soon_threadsafe(loop, self._appended, appended, results, claimed, reads)

        io.submit(append_then_read)
        return await appended

    def _appended(
        self,
        appended: asyncio.Future[dict[TopicPartition, ProduceResult]],
        results: dict[TopicPartition, ProduceResult],
        claimed: Iterable[Waiter],
        reads: Mapping[Waiter, FetchResults | None] | None,
    ) -> None:
        """The append and the reads made for the followers arrive together (loop thread):
        one wake-up of the loop per append. The followers' fetches are answered first: the
        acks=all produce waits for their next fetches anyway."""
        if reads is None:  # nothing was appended
            self.release_claims(claimed)
        else:
            self.hand_over_reads(reads)
        set_result(appended, results)

    def _append_failed(
        self,
        appended: asyncio.Future[dict[TopicPartition, ProduceResult]],
        error: BaseException,
        claimed: Iterable[Waiter],
    ) -> None:
        self.release_claims(claimed)
        set_exception(appended, error)

    def read_for(self, waiter: Waiter, read: Callable[[], FetchResults]) -> None:
        """A parked follower fetch reads with ``read``: an append may run it for it."""
        self._follower_reads[waiter] = read

    def forget_read(self, waiter: Waiter) -> None:
        self._follower_reads.pop(waiter, None)

    def park(self, tps: Iterable[TopicPartition], *, replica: bool) -> Waiter | None:
        """A waiter woken when one of ``tps`` moves (None: the purgatory is full)."""
        table = self._replica_waiters if replica else self._waiters
        if sum(len(w) for w in table.values()) >= MAX_WAITERS:
            return None
        waiter: Waiter = asyncio.get_running_loop().create_future()
        for tp in tps:
            table.setdefault(tp, set()).add(waiter)
        return waiter

    def unpark(self, waiter: Waiter, tps: Iterable[TopicPartition], *, replica: bool) -> None:
        table = self._replica_waiters if replica else self._waiters
        for tp in tps:
            waiting = table.get(tp)
            if waiting is not None:
                waiting.discard(waiter)
                if not waiting:
                    del table[tp]


class SessionWatch:
    """An incremental fetch session's watch of its partitions, for the session's life: each
    partition that moves is noted in ``moved`` (records appended, the log start offset moved,
    leadership lost, the high watermark moved) and wakes the session's parked fetch
    (``waiter``), except a moved high watermark, which a follower's fetch does not wait for.
    Loop thread only."""

    __slots__ = ("_purgatory", "moved", "partitions", "pending", "waiter")

    def __init__(
        self, purgatory: DelayedFetchPurgatory, partitions: Container[TopicPartition]
    ) -> None:
        self._purgatory = purgatory
        self.partitions = partitions
        self.moved: set[TopicPartition] = set()
        # Found with something to answer at the last look: looked at again until quiet.
        self.pending: set[TopicPartition] = set()
        self.waiter: Waiter | None = None

    def park(self) -> Waiter:
        self.waiter = asyncio.get_running_loop().create_future()
        return self.waiter

    def unpark(self) -> None:
        self.waiter = None

    def take_moved(self) -> set[TopicPartition]:
        moved, self.moved = self.moved, set()
        return moved

    def close(self) -> None:
        """The session is gone (closed, evicted): stop watching, wake a parked fetch."""
        self._purgatory.unwatch_session(self)
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)


def close_regions(results: Iterable[FetchResult]) -> None:
    """Release the file regions of zero-copy fetch results that will not be sent."""
    for result in results:
        if isinstance(result.records, FileRegion):
            result.records.close()


def close_regions_of_read(reading: asyncio.Future[dict[TopicPartition, FetchResult]]) -> None:
    if not reading.cancelled() and reading.exception() is None:
        close_regions(reading.result().values())


async def until(waiter: Waiter, timeout_s: float) -> None:
    """Wait for ``waiter`` at most ``timeout_s``: on time out it is woken with None ("look
    again"), as any other wake-up. A timer, not ``asyncio.wait_for``, whose shield and inner
    futures cost loop callbacks at each of the several parkings of an acks=all round."""
    timer = asyncio.get_running_loop().call_later(timeout_s, set_result, waiter, None)
    try:
        await waiter
    finally:
        timer.cancel()


def set_result(future: asyncio.Future[T], result: T) -> None:
    if not future.done():
        future.set_result(result)


def set_exception(future: asyncio.Future[T], error: BaseException) -> None:
    if not future.done():
        future.set_exception(error)


def call_soon_threadsafe(
    loop: asyncio.AbstractEventLoop, callback: Callable[..., object], *args: object
) -> None:
    """Schedule ``callback`` on ``loop`` from an I/O thread; dropped once the loop is closed
    (the broker is stopping)."""
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(callback, *args)
