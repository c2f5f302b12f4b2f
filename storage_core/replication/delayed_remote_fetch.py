"""Kafka's ``DelayedRemoteFetch``: a consumer's fetch of a tiered offset.

A fetch offset below the local log start of a remote-enabled log is read from the remote
tier (only the first such partition of a request; the others answer no records this time,
as Kafka). The fetch answers when that read completes, or after ``remote.fetch.max.wait.ms``
with KAFKA_STORAGE_ERROR for that partition (the read carries on for the next fetch). A
replica's fetch of such an offset is told to build its state from the remote tier instead
(OFFSET_MOVED_TO_TIERED_STORAGE). A read_committed fetch (``FetchIsolation.TXN_COMMITTED``)
gets the aborted transactions of what the remote read returned (``remote_aborted_txns``) and,
as every fetch, the LSO.

Thread-safety: loop thread only; the remote read itself runs on the remote log reader's
threads.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import replace
from typing import TypeVar

from storage_core.common import TopicPartition
from storage_core.errors import OffsetOutOfRangeError, StorageError
from storage_core.log.log_segment import FetchDataInfo, LogOffsetMetadata
from storage_core.replication.delayed_fetch import FetchResult
from storage_core.replication.fetch_isolation import FetchIsolation
from storage_core.replication.log_read import LogReadResult
from storage_core.replication.partition import Partition
from storage_core.tiered.remote_log_manager import (
    OffsetMovedToTieredStorageError,
    RemoteLogManager,
)

# The lines keep the logger they were always written with.
logger = logging.getLogger("storage_core.replication.replica_manager")

T = TypeVar("T")


def tiered_fetch_result(
    partition: Partition,
    fetch_offset: int,
    replica_id: int,
    *,
    remote_read: tuple[int, int, bool] | None,
    isolation: FetchIsolation = FetchIsolation.HIGH_WATERMARK,
) -> FetchResult:
    """A fetch of a tiered offset: replicas are told to build their state from the remote
    tier; for consumers the records are read by ``complete_remote_reads`` (only the first
    such partition of a request; the others answer no records this time, as Kafka). A
    read_committed read carries aborted transactions (an empty list until the read)."""
    log = partition.log
    high_watermark = log.high_watermark
    read = LogReadResult(
        info=FetchDataInfo(LogOffsetMetadata(fetch_offset), None),
        high_watermark=high_watermark,
        last_stable_offset=log.last_stable_offset,
        log_start_offset=log.log_start_offset,
        log_end_offset=log.log_end_offset,
        aborted_transactions=[] if isolation is FetchIsolation.TXN_COMMITTED else None,
    )
    if replica_id >= 0:
        # With the leader's offsets, as Kafka answers: the follower takes the log start
        # offset from this response when it rebuilds its log.
        return FetchResult(
            read=read,
            error=OffsetMovedToTieredStorageError(
                f"partition {partition.topic_partition}: offset {fetch_offset} is below the"
                f" local log start offset {log.local_log_start_offset}; it is in tiered"
                " storage"
            ),
        )
    return FetchResult(read=read, remote_read=remote_read)


async def complete_remote_reads(
    rlm: RemoteLogManager | None,
    get_partition: Callable[[TopicPartition], Partition],
    results: dict[TopicPartition, FetchResult],
) -> None:
    """Wait for the pending remote read up to ``remote.fetch.max.wait.ms`` (Kafka's
    ``DelayedRemoteFetch``); a store failure or a read still running then is an error for
    that partition only (KAFKA_STORAGE_ERROR, or UNKNOWN_SERVER_ERROR for lost objects)."""
    for tp, result in list(results.items()):
        if result.remote_read is None:
            continue
        fetch_offset, max_bytes, min_one_message = result.remote_read
        read_committed = result.read is not None and result.read.aborted_transactions is not None
        try:
            if rlm is None:
                raise OffsetOutOfRangeError(f"partition {tp}: tiered storage is not enabled")
            pending = rlm.read_async(
                get_partition(tp),
                fetch_offset,
                max_bytes,
                min_one_message=min_one_message,
                include_aborted_txns=read_committed,
            )
            try:
                if pending.future.done():  # read from memory as it was asked for
                    data = pending.future.result()
                else:
                    data = await _outcome(pending.future, rlm.remote_fetch_max_wait_ms)
            except TimeoutError:
                raise rlm.read_timed_out(tp, fetch_offset, pending) from None
            except StorageError:
                rlm.read_collected(tp, pending)
                raise
            rlm.read_collected(tp, pending)
            read = result.read
            if read is not None and read_committed:
                read = replace(read, aborted_transactions=list(data.aborted_transactions or ()))
            results[tp] = FetchResult(read=read, records=data.records)
        except StorageError as error:
            # Logged where it arises, at WARN and rate-limited: a retrying consumer
            # fetches many times a second.
            logger.debug("remote fetch failed partition=%s error=%s", tp, error)
            results[tp] = FetchResult(error=error)


async def _outcome(future: Future[T], max_wait_ms: int) -> T:
    """The read's outcome, waited for at most ``max_wait_ms`` (``TimeoutError``; the read
    carries on, for the next fetch). The reader thread's answer sets a future of the loop,
    which wakes this task: wrapping its future in an asyncio one, shielded and waited for with
    ``wait_for``, took two more iterations of the loop before the answer left (5 against 3,
    counted by a callback that runs once an iteration)."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()

    def wake(_: Future[T]) -> None:
        with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits any more
            loop.call_soon_threadsafe(_set_done, done)

    future.add_done_callback(wake)
    async with asyncio.timeout(max_wait_ms / 1000):
        await done
    return future.result()


def _set_done(done: asyncio.Future[None]) -> None:
    if not done.done():  # not cancelled by the timeout
        done.set_result(None)
