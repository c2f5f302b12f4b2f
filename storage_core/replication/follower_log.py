"""What a follower does to its log with the leader's answers (Kafka's
``ReplicaFetcherThread.processPartitionData`` and ``AbstractFetcherThread.truncate``).

Log-level only: no sockets, no fetch states, no locks of their own. The fetcher thread calls
these with its partition lock held; the replication state-machine test calls them on logs
directly, so both exercise the same code path.

* ``process_partition_data``: append a fetched partition's batches as they are (offsets and
  epochs from the leader), then follower HW = min(leader HW, own LEO) and the leader's log
  start offset (never past this log's HW);
* ``plan_truncation`` + ``truncate``: where the leader's ``(epoch, end offset)`` answer
  (DivergingEpoch or OffsetForLeaderEpoch) puts this log's end, planned by
  ``offset_truncation`` (KIP-101, KIP-279), then applied.
"""

from __future__ import annotations

import logging
import struct
from dataclasses import dataclass

from storage_core.errors import KafkaStorageError, UnexpectedAppendOffsetError
from storage_core.log.log import Log
from storage_core.log.log_validator import LogAppendInfo
from storage_core.records.batch import LOG_OVERHEAD
from storage_core.records.memory_records import iter_batches
from storage_core.replication.leader_end_point import FetchPartitionData
from storage_core.replication.offset_truncation import (
    EpochEndOffset,
    OffsetTruncationState,
    offset_truncation_state,
)

logger = logging.getLogger(__name__)

_BATCH_PREFIX = struct.Struct(">qi")  # base offset, batch length (after these 12 bytes)


@dataclass(frozen=True, slots=True, kw_only=True)
class FollowerAppendResult:
    """``valid_bytes`` appended (0: nothing); ``last_offset`` (inclusive) and ``last_epoch``
    of the last batch appended."""

    valid_bytes: int
    last_offset: int
    last_epoch: int | None


def complete_batches(records: bytes | memoryview) -> bytes | memoryview:
    """The record batches of a fetch response without a partial batch at the end (the leader
    cuts at the byte limits; the rest comes with the next fetch)."""
    end = 0
    while end + LOG_OVERHEAD <= len(records):
        _base_offset, length = _BATCH_PREFIX.unpack_from(records, end)
        if length <= 0 or end + LOG_OVERHEAD + length > len(records):
            break
        end += LOG_OVERHEAD + length
    return records if end == len(records) else records[:end]


def process_partition_data(
    log: Log, fetch_offset: int, data: FetchPartitionData
) -> FollowerAppendResult:
    """Append the fetched batches at ``fetch_offset`` (the LEO), then move the HW and the log
    start offset. Raises ``KafkaStorageError`` if the fetch offset is not the LEO."""
    if fetch_offset != log.log_end_offset:
        raise KafkaStorageError(
            f"partition {log.topic_partition}: fetched offset {fetch_offset} is not the log end"
            f" offset {log.log_end_offset}; the fetch state and the log disagree"
        )
    records = complete_batches(data.records)
    result = FollowerAppendResult(valid_bytes=0, last_offset=fetch_offset - 1, last_epoch=None)
    if records:
        info = append_as_follower(log, records)
        result = FollowerAppendResult(
            valid_bytes=len(records),
            last_offset=info.last_offset,
            last_epoch=info.batches[-1].partition_leader_epoch,
        )
    # Follower HW = min(leader HW, own LEO); update_high_watermark clamps to the LEO.
    log.update_high_watermark(data.high_watermark)
    # The leader's log start offset, never past this log's HW (it may lag a round).
    leader_start = min(data.log_start_offset, log.high_watermark)
    if leader_start > log.log_start_offset:
        log.maybe_increment_log_start_offset(leader_start, "leader offset incremented")
    return result


def append_as_follower(log: Log, records: bytes | memoryview) -> LogAppendInfo:
    """Append; an empty log whose start falls inside the leader's first batch (the leader's
    log start moved mid-batch, DeleteRecords) restarts at that batch's base offset, as
    Kafka's ``Partition.appendRecordsToFollowerOrFutureReplica``."""
    try:
        return log.append_as_follower(records)
    except UnexpectedAppendOffsetError:
        _position, first = next(iter_batches(records))
        end = log.log_end_offset
        if not (end == log.log_start_offset and first.base_offset < end <= first.last_offset):
            raise
        logger.info(
            "leader's first batch starts before this empty log, restarting the log there"
            " partition=%s log_start_offset=%d batch_base_offset=%d",
            log.topic_partition,
            end,
            first.base_offset,
        )
        log.truncate_fully_and_start_at(first.base_offset)
        return log.append_as_follower(records)


def plan_truncation(log: Log, leader: EpochEndOffset) -> OffsetTruncationState:
    """Where this log must end given the leader's ``(epoch, end offset)`` answer."""
    return offset_truncation_state(
        leader,
        follower_epochs=log.leader_epoch_cache.epoch_entries(),
        log_end_offset=log.log_end_offset,
        high_watermark=log.high_watermark,
    )


def truncate(log: Log, plan: OffsetTruncationState) -> None:
    """Apply ``plan``: remove every offset >= ``plan.offset``."""
    high_watermark = log.high_watermark
    log.truncate_to(plan.offset)
    if plan.offset < high_watermark:
        logger.warning(
            "truncated below the high watermark partition=%s offset=%d high_watermark=%d",
            log.topic_partition,
            plan.offset,
            high_watermark,
        )
