"""The append path of one partition's log (Kafka's ``UnifiedLog.appendAsLeader``,
``appendAsFollower``, ``append``, ``maybeRoll`` and ``roll``).

It works on the parts ``Log`` owns (the ``LocalLog``, the leader epoch cache, the producer state)
under the log's lock, which ``Log`` shares with it: an append validates the batches
(``log_validator``) before taking the lock, then checks them against the producer state, assigns
offsets and epochs, rolls the active segment when it is due, writes, and records the new epochs
and producer state. A snapshot of the producer state is written at every roll (at the new
segment's base offset), the one tiered storage uploads with the rolled segment.

Thread-safety: every method takes the shared lock.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from storage_core.clock import Clock
from storage_core.errors import InvalidOffsetError
from storage_core.log.leader_epoch_cache import LeaderEpochFileCache
from storage_core.log.local_log import LocalLog
from storage_core.log.log_config import LogConfig
from storage_core.log.log_producer_state import analyze_and_validate_producer_state
from storage_core.log.log_segment import LogSegment
from storage_core.log.log_validator import (
    LogAppendInfo,
    analyze_and_validate,
    assign_offsets,
    duplicate_append_info,
    validate_follower_offsets,
)
from storage_core.log.producer_append_info import AppendOrigin, ProducerAppendInfo
from storage_core.log.producer_state import ProducerStateManager
from storage_core.log.producer_state_entry import BatchMetadata, CompletedTxn
from storage_core.log.timestamp_window import TimestampWindow
from storage_core.log.verification_guard import VerificationGuard

logger = logging.getLogger(__name__)


class AppendWouldWaitError(Exception):
    """An append that may not wait for the disk (on the event loop) would have: it must roll
    a segment, fsync (``flush.messages``) or write a new leader epoch's checkpoint. Nothing
    was written: append again where waiting is allowed (an I/O thread)."""


class LogAppender:
    """Appends to one partition's log and rolls its segments (see the module docstring)."""

    def __init__(
        self,
        local_log: LocalLog,
        leader_epoch_cache: LeaderEpochFileCache,
        producer_state_manager: ProducerStateManager,
        *,
        clock: Clock,
        lock: threading.RLock,
        check_open: Callable[[], None],
    ) -> None:
        self._local = local_log
        self._epochs = leader_epoch_cache
        self._producer_state = producer_state_manager
        self._clock = clock
        self._lock = lock
        self._check_open = check_open
        self.topic_partition = local_log.topic_partition

    @property
    def config(self) -> LogConfig:
        return self._local.config

    def append_as_leader(
        self,
        records: bytes | bytearray | memoryview,
        *,
        leader_epoch: int,
        disk_wait_allowed: bool = True,
        origin: AppendOrigin = AppendOrigin.CLIENT,
        verification_guard: VerificationGuard | None = None,
    ) -> LogAppendInfo:
        """Validate, assign offsets from the LEO and the leader epoch, and append.

        Batches with a producer id are checked against the producer state first: a retry of
        one of the producer's last five batches writes nothing and returns an info with
        ``is_duplicate`` set and the original batch's offsets (Kafka's duplicate handling);
        a stale epoch raises ``InvalidProducerEpochError`` and a sequence gap
        ``OutOfOrderSequenceError``, with nothing written. Without ``disk_wait_allowed``, an
        append that would roll, fsync or checkpoint a new epoch raises
        ``AppendWouldWaitError`` instead, with nothing written: the others only copy bytes
        into the page cache. ``verification_guard``: see ``analyze_and_validate_producer_state``
        (a transactional batch that needed verification and lacks it raises
        ``InvalidTxnStateError``, nothing written).
        """
        info = analyze_and_validate(
            records,
            max_message_bytes=self.config.max_message_bytes,
            segment_bytes=self.config.segment_bytes,
            timestamp_window=TimestampWindow.maybe_of(self.config, self._clock.milliseconds()),
        )
        with self._lock:
            self._check_open()
            append_time = self._clock.milliseconds() if self.config.uses_log_append_time else None
            assigned, parts = assign_offsets(
                records,
                info,
                next_offset=self._local.log_end_offset,
                leader_epoch=leader_epoch,
                log_append_time_ms=append_time,
            )
            updates, completed, duplicate = analyze_and_validate_producer_state(
                self._producer_state, records, assigned, origin, verification_guard
            )
            if duplicate is not None:
                return self._duplicate_append_info(assigned, duplicate)
            now_ms = self._clock.milliseconds()
            if not disk_wait_allowed and self._append_waits_for_disk(assigned, now_ms):
                raise AppendWouldWaitError(
                    f"partition {self.topic_partition}: the append at offset"
                    f" {self._local.log_end_offset} must roll, fsync or checkpoint an epoch"
                )
            # without disk waits the check above, under this lock and at this time, found
            # that the segment does not roll
            self._append(
                parts, assigned, updates, completed, now_ms=now_ms, roll_check=disk_wait_allowed
            )
            return assigned

    def maybe_start_transaction_verification(
        self, producer_id: int, sequence: int, epoch: int
    ) -> VerificationGuard:
        """Kafka's ``UnifiedLog.maybeStartTransactionVerification``: the sentinel when the
        producer has a transaction ongoing here (nothing to verify), else the guard of its
        verification entry, created now if needed."""
        with self._lock:
            manager = self._producer_state
            if manager.has_ongoing_transaction(producer_id):
                return VerificationGuard.SENTINEL
            entry = manager.maybe_create_verification_state_entry(
                producer_id, sequence, epoch, self._clock.milliseconds()
            )
            return entry.verification_guard

    def _append_waits_for_disk(self, info: LogAppendInfo, now_ms: int) -> bool:
        """Whether appending ``info`` would do more than write to the page cache: write a new
        leader epoch's checkpoint, roll the active segment, or fsync (``flush.messages``)."""
        if any(self._is_new_epoch(b.partition_leader_epoch) for b in info.batches):
            return True
        local = self._local
        appended_messages = info.last_offset + 1 - local.log_end_offset
        if local.unflushed_messages + appended_messages >= self.config.flush_messages:
            return True
        return local.segments.active_segment.should_roll(
            local.roll_params(info.valid_bytes, info, now_ms)
        )

    def _is_new_epoch(self, epoch: int) -> bool:
        """Whether a batch of leader epoch ``epoch`` starts an epoch the cache does not have."""
        latest = self._epochs.latest_epoch
        return epoch >= 0 and (latest is None or epoch > latest)

    def _duplicate_append_info(
        self, info: LogAppendInfo, duplicate: BatchMetadata
    ) -> LogAppendInfo:
        logger.debug(
            "duplicate produce partition=%s first_offset=%d last_offset=%d",
            self.topic_partition,
            duplicate.first_offset,
            duplicate.last_offset,
        )
        return duplicate_append_info(
            info, duplicate, uses_log_append_time=self.config.uses_log_append_time
        )

    def append_as_follower(self, records: bytes | bytearray | memoryview) -> LogAppendInfo:
        """Append batches that already carry offsets and epochs; they must start at the LEO.

        Producer state is updated from the batches without refusing any (the leader did).
        """
        info = analyze_and_validate(
            records,
            max_message_bytes=max(self.config.max_message_bytes, self.config.segment_bytes),
            segment_bytes=self.config.segment_bytes,
        )
        with self._lock:
            self._check_open()
            validate_follower_offsets(
                info,
                log_end_offset=self._local.log_end_offset,
                partition=str(self.topic_partition),
            )
            updates, completed, _ = analyze_and_validate_producer_state(
                self._producer_state, records, info, AppendOrigin.REPLICATION
            )
            self._append([records], info, updates, completed)
            return info

    def _append(
        self,
        parts: list[bytes | bytearray | memoryview],
        info: LogAppendInfo,
        producer_updates: list[ProducerAppendInfo],
        completed_txns: list[CompletedTxn],
        *,
        now_ms: int | None = None,
        roll_check: bool = True,
    ) -> None:
        """``roll_check`` False: the caller found, under the lock, that the append does not roll
        (``_append_waits_for_disk``), so the roll check is not run again."""
        for batch in info.batches:
            if self._is_new_epoch(batch.partition_leader_epoch):
                self._epochs.assign(batch.partition_leader_epoch, batch.base_offset)
        now = self._clock.milliseconds() if now_ms is None else now_ms
        local = self._local
        if roll_check:
            segment = self._maybe_roll(info.valid_bytes, info, now)
        else:
            segment = local.segments.active_segment
        local.append(segment, parts, info)
        manager = self._producer_state
        for update in producer_updates:
            manager.update(update)
        for completed in completed_txns:  # Kafka's order: indexed with the LSO it ends at
            segment.update_txn_index(completed, manager.last_stable_offset(completed))
            manager.complete_txn(completed)
        manager.update_map_end_offset(local.log_end_offset)
        if local.unflushed_messages >= self.config.flush_messages:
            local.flush()

    def _maybe_roll(self, messages_size: int, info: LogAppendInfo, now_ms: int) -> LogSegment:
        local = self._local
        segment = local.segments.active_segment
        if segment.should_roll(local.roll_params(messages_size, info, now_ms)):
            logger.debug(
                "rolling partition=%s segment=%d size=%d",
                self.topic_partition,
                segment.base_offset,
                segment.size,
            )
            return self.roll(info.first_offset)
        return segment

    def roll(self, expected_next_offset: int | None = None) -> LogSegment:
        """Close the active segment and start a new one at the LEO (Kafka's ``roll``)."""
        with self._lock:
            self._check_open()
            new_offset = max(expected_next_offset or 0, self._local.log_end_offset)
            active = self._local.segments.active_segment
            if active.base_offset == new_offset:
                if active.size == 0:
                    return active  # nothing to roll away from
                raise InvalidOffsetError(
                    f"partition {self.topic_partition}: cannot roll to offset {new_offset},"
                    " the active segment already starts there"
                )
            segment = self._local.roll(new_offset)
            # The rolled segment will not change again: make it durable now.
            self._local.flush(new_offset)
            # A snapshot at the new segment's base offset lets recovery start there, and is
            # the one tiered storage uploads with the rolled segment. The LEO may be below
            # the new base offset, so the state's end offset is moved there first (as Kafka).
            self._producer_state.update_map_end_offset(new_offset)
            self._local.run_evicting(
                self._take_snapshot, f"the producer snapshot of {self.topic_partition}"
            )
            return segment

    def _take_snapshot(self) -> None:
        self._producer_state.take_snapshot()
