"""Kafka's ``ReplicaManager.readFromLog``: the reads of one fetch, partition by partition.

The response budget (``max_bytes``) shrinks as partitions are read; the first non-empty
partition may exceed it by one batch (``min_one_message``). A follower's read (``replica_id
>= 0``) goes up to the log end offset and records the follower's fetch state, which may move
the high watermark; a consumer's stops at the high watermark. A fetch offset below the local
log start of a remote-enabled log becomes a tiered read (``delayed_remote_fetch``), or for a
consumer over the remote fetch quota no records and no error (KIP-956). With
``zero_copy``, large record sets come back as file regions of the segment, which the caller
must send or close (``close_regions``).

Thread-safety: runs on an I/O thread, or on the loop with every partition held: for a follower
at the log end (``read_log_tail``) and for a consumer's tiered offsets (``read_tiered_offsets``);
each partition takes its own locks.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol

from storage_core.clock import Clock
from storage_core.common import TopicPartition, Uuid
from storage_core.errors import InconsistentTopicIdError, OffsetOutOfRangeError, StorageError
from storage_core.log.log_manager import LogManager
from storage_core.records.file_region import FileRegion
from storage_core.replication.delayed_fetch import (
    FetchRequestPartition,
    FetchResult,
    close_regions,
)
from storage_core.replication.delayed_remote_fetch import tiered_fetch_result
from storage_core.replication.fetch_isolation import FetchIsolation
from storage_core.replication.partition import Partition
from storage_core.tiered.remote_log_manager import RemoteLogManager


class ReadAll(Protocol):
    """``ReplicaManager._read_all``: ``read_from_log`` over the manager."""

    def __call__(
        self,
        requests: Mapping[TopicPartition, FetchRequestPartition],
        max_bytes: int,
        isolation: FetchIsolation,
        zero_copy: bool = False,
        replica_id: int = -1,
    ) -> dict[TopicPartition, FetchResult]: ...


class ReplicaReads(Protocol):
    """What a read needs of the ``ReplicaManager``."""

    @property
    def log_manager(self) -> LogManager: ...
    @property
    def clock(self) -> Clock: ...
    @property
    def remote_log_manager(self) -> RemoteLogManager | None: ...
    def get_partition(self, tp: TopicPartition) -> Partition: ...


# A follower fetch of at most this many partitions, each at or just behind the leader's log
# end, is answered on the event loop (``_read_log_tail``); a larger one goes to an I/O thread.
LOG_END_READ_MAX_PARTITIONS = 64
# ... and at most this many bytes behind it in all (one replica.fetch.max.bytes by default):
# bytes the last appends wrote, in the page cache.
LOG_TAIL_READ_BYTES_MAX = 1024 * 1024
# Zero-copy fetches copy record sets smaller than this: a sendfile round trip through an
# I/O thread costs more than copying a few KiB.
ZERO_COPY_MIN_BYTES = 64 * 1024


def read_from_log(
    manager: ReplicaReads,
    requests: Mapping[TopicPartition, FetchRequestPartition],
    max_bytes: int,
    isolation: FetchIsolation,
    *,
    zero_copy: bool = False,
    replica_id: int = -1,
) -> dict[TopicPartition, FetchResult]:
    """Kafka's ``readFromLog``: the response budget shrinks as partitions are read; the
    first non-empty partition may exceed it by one batch (``min_one_message``)."""
    results: dict[TopicPartition, FetchResult] = {}
    try:
        _read_each(
            manager,
            requests,
            max_bytes,
            isolation,
            zero_copy,
            results=results,
            replica_id=replica_id,
        )
    except BaseException:
        close_regions(results.values())
        raise
    return results


def read_log_tail(
    hosted_partition: Callable[[TopicPartition], Partition | None],
    read_all: ReadAll,
    requests: Mapping[TopicPartition, FetchRequestPartition],
    *,
    max_bytes: int,
    zero_copy: bool,
    replica_id: int,
) -> dict[TopicPartition, FetchResult] | None:
    """A follower's fetch at or just behind the leader's log end, answered on the event
    loop (None: read on an I/O thread). It waits for no disk: at the log end it reads
    nothing (the follower's fetch state is recorded, which may move the HW and complete
    acks=all produces, and the answer holds the offsets only); just behind, it takes
    what the last appends wrote, from the page cache: with ``zero_copy``, as ``resident``
    file regions that are sent from the loop too. These are the fetches of followers in
    sync, so an acks=all round never waits for an I/O thread there.

    The same ``read_all`` (``ReplicaManager._read_all``) runs, with every partition's lock
    and log lock taken without waiting: the loop never waits for an append, a roll or an
    fsync. A follower fetch (``replica_id >= 0``) of up to ``LOG_END_READ_MAX_PARTITIONS``
    partitions qualifies when each partition is hosted here, both its locks are free, and
    its fetch offset is its log end offset or starts one of its last appends
    (``Log.recent_tail_bytes``), at most ``LOG_TAIL_READ_BYTES_MAX`` bytes behind in all."""
    if replica_id < 0 or not requests or len(requests) > LOG_END_READ_MAX_PARTITIONS:
        return None
    behind_bytes = 0
    held: list[Partition] = []
    try:
        for tp, request in requests.items():
            partition = hosted_partition(tp)
            if partition is None or not partition.try_hold():
                return None
            held.append(partition)
            tail_bytes = partition.log.recent_tail_bytes(request.fetch_offset)
            if tail_bytes is None:
                return None
            behind_bytes += tail_bytes
            if behind_bytes > LOG_TAIL_READ_BYTES_MAX:
                return None
        results = read_all(
            requests, max_bytes, FetchIsolation.LOG_END, zero_copy=zero_copy, replica_id=replica_id
        )
    finally:
        for partition in held:
            partition.release_hold()
    for result in results.values():
        if isinstance(result.records, FileRegion):
            result.records.resident = True
    return results


def read_tiered_offsets(
    hosted_partition: Callable[[TopicPartition], Partition | None],
    read_all: ReadAll,
    requests: Mapping[TopicPartition, FetchRequestPartition],
    *,
    remote_log_manager: RemoteLogManager | None,
    max_bytes: int,
    isolation: FetchIsolation,
    replica_id: int,
) -> dict[TopicPartition, FetchResult] | None:
    """A consumer's fetch of tiered offsets only, answered on the event loop (None: read on
    an I/O thread). Such a read touches no local segment: each partition becomes a remote read
    (or, over the remote fetch quota, no records), which runs on the remote log reader's
    threads unless its bytes are all in memory (``RemoteLogReader.read(memory_only=True)``).
    Sending it through an I/O thread first only added a round trip between threads, about a
    quarter of a millisecond here, to the first batch of every remote read.

    The same ``read_all`` runs, with every partition's locks taken without waiting, as in
    ``read_log_tail``. A consumer fetch (``replica_id < 0``) of up to
    ``LOG_END_READ_MAX_PARTITIONS`` partitions qualifies when each partition is hosted here,
    both its locks are free, it asks for no diverging-epoch check, and its fetch offset is in
    ``[log start, local log start)`` of a remote-enabled log."""
    if (
        replica_id >= 0
        or remote_log_manager is None
        or not requests
        or len(requests) > LOG_END_READ_MAX_PARTITIONS
    ):
        return None
    held: list[Partition] = []
    try:
        for tp, request in requests.items():
            partition = hosted_partition(tp)
            if partition is None or request.last_fetched_epoch >= 0 or not partition.try_hold():
                return None
            held.append(partition)
            if not remote_log_manager.needs_remote_read(partition, request.fetch_offset):
                return None
        return read_all(requests, max_bytes, isolation, replica_id=replica_id)
    finally:
        for partition in held:
            partition.release_hold()


def _read_each(
    manager: ReplicaReads,
    requests: Mapping[TopicPartition, FetchRequestPartition],
    max_bytes: int,
    isolation: FetchIsolation,
    zero_copy: bool,
    *,
    results: dict[TopicPartition, FetchResult],
    replica_id: int = -1,
) -> None:
    budget = max_bytes
    for tp, request in requests.items():
        try:
            _check_topic_id(manager.log_manager, tp, request.topic_id)
            partition = manager.get_partition(tp)
            diverging = _diverging_epoch(partition, request)
            if diverging is not None:
                results[tp] = FetchResult(
                    read=partition.read_records(
                        # No data is read: a diverged follower may be past this LEO,
                        # which is not OFFSET_OUT_OF_RANGE here (Kafka's readRecords).
                        min(request.fetch_offset, partition.log.log_end_offset),
                        0,
                        current_leader_epoch=request.current_leader_epoch,
                        min_one_message=False,
                    ),
                    diverging_epoch=diverging,
                )
                continue
            limit = max(min(request.max_bytes, budget), 0)
            try:
                read = partition.read_records(
                    request.fetch_offset,
                    limit,
                    current_leader_epoch=request.current_leader_epoch,
                    # followers read up to the LEO: the HW moves once they have it
                    isolation=FetchIsolation.LOG_END if replica_id >= 0 else isolation,
                    min_one_message=budget == max_bytes,
                )
                if replica_id >= 0:
                    partition.update_follower_fetch_state(
                        replica_id,
                        fetch_offset=request.fetch_offset,
                        follower_log_start_offset=request.log_start_offset,
                        leader_end_offset=read.log_end_offset,
                        fetch_time_ms=manager.clock.milliseconds(),
                    )
            except OffsetOutOfRangeError:
                # Raised after the leadership checks: maybe a tiered offset.
                rlm = manager.remote_log_manager
                if rlm is None or not rlm.needs_remote_read(partition, request.fetch_offset):
                    raise
                # KIP-956: over the remote fetch quota, a consumer's tiered partition answers
                # no records and no error, and the fetch waits as one without data does.
                throttled = replica_id < 0 and rlm.quotas.maybe_throttle_fetch() > 0
                results[tp] = tiered_fetch_result(
                    partition,
                    request.fetch_offset,
                    replica_id,
                    remote_read=None
                    if throttled or any(r.remote_read is not None for r in results.values())
                    else (request.fetch_offset, limit, budget == max_bytes),
                    isolation=isolation,
                )
                continue
            records: bytes | FileRegion
            data = read.info.records
            if zero_copy and data is not None and data.size >= ZERO_COPY_MIN_BYTES:
                records = FileRegion.of(data.file_records, data.position, data.size)
            else:
                records = read.info.read_bytes()
            budget -= len(records)
            results[tp] = FetchResult(read=read, records=records)
        except StorageError as error:
            results[tp] = FetchResult(error=error)


def _diverging_epoch(
    partition: Partition, request: FetchRequestPartition
) -> tuple[int, int] | None:
    if request.last_fetched_epoch < 0:
        return None
    epoch, end_offset = partition.last_offset_for_leader_epoch(
        request.last_fetched_epoch, current_leader_epoch=request.current_leader_epoch
    )
    if epoch < request.last_fetched_epoch or end_offset < request.fetch_offset:
        return epoch, end_offset
    return None


def _check_topic_id(log_manager: LogManager, tp: TopicPartition, topic_id: Uuid | None) -> None:
    """Kafka's ``hasConsistentTopicId`` for a fetch that named the topic by id."""
    log = log_manager.get_log(tp) if topic_id is not None else None
    if log is not None and log.topic_id is not None and log.topic_id != topic_id:
        raise InconsistentTopicIdError(
            "Topic ID in the fetch session did not match the topic ID in the log."
        )
