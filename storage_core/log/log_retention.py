"""Where one partition's log starts: moving its log start offset forward (DeleteRecords,
retention) and applying local retention (Kafka's ``UnifiedLog.maybeIncrementLogStartOffset``
and ``deleteOldSegments``), over the parts ``Log`` owns and shares with it.

Which segments go is decided by ``retention.plan_local_retention`` (pure); this class applies
the decision: it removes the segments and their files, moves the log start offset (not past
the high watermark; with tiered storage only when the offsets are gone remotely too, since the
remote copy still serves them), truncates the leader epoch cache from the start and drops the
producer snapshots below the new start. ``deletion_guard`` (installed by tiered storage) must
allow each local deletion.

Thread-safety: every method takes the log's lock, which ``Log`` shares with it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from storage_core.clock import Clock
from storage_core.errors import OffsetOutOfRangeError
from storage_core.log.leader_epoch_cache import LeaderEpochFileCache
from storage_core.log.local_log import LocalLog
from storage_core.log.log_offsets import LogOffsets
from storage_core.log.producer_state import ProducerStateManager
from storage_core.log.retention import RetentionReason, SegmentDeletionGuard, plan_local_retention

logger = logging.getLogger(__name__)


class LogRetention:
    """Moves one partition's log start offset and applies local retention (see the module
    docstring)."""

    def __init__(
        self,
        local_log: LocalLog,
        offsets: LogOffsets,
        leader_epoch_cache: LeaderEpochFileCache,
        producer_state_manager: ProducerStateManager,
        *,
        clock: Clock,
        lock: threading.RLock,
        check_open: Callable[[], None],
    ) -> None:
        self._local = local_log
        self._offsets = offsets
        self._epochs = leader_epoch_cache
        self._producer_state = producer_state_manager
        self._clock = clock
        self._lock = lock
        self._check_open = check_open
        self.topic_partition = local_log.topic_partition
        self.deletion_guard: SegmentDeletionGuard | None = None

    def maybe_increment_log_start_offset(self, new_log_start_offset: int, reason: str) -> bool:
        """Move the log start offset forward (DeleteRecords, retention); never past the HW."""
        with self._lock:
            if new_log_start_offset > self._offsets.high_watermark:
                raise OffsetOutOfRangeError(
                    f"partition {self.topic_partition}: cannot move the log start offset to"
                    f" {new_log_start_offset}, above the high watermark"
                    f" {self._offsets.high_watermark}"
                )
            if new_log_start_offset <= self._offsets.log_start_offset:
                return False
            logger.info(
                "log start offset moved partition=%s from=%d to=%d reason=%r",
                self.topic_partition,
                self._offsets.log_start_offset,
                new_log_start_offset,
                reason,
            )
            self._offsets.log_start_offset = new_log_start_offset
            self._epochs.truncate_from_start(new_log_start_offset)
            local = self._local
            local.recovery_point = max(local.recovery_point, new_log_start_offset)
            self.on_log_start_offset_incremented()
            return True

    def delete_old_segments(self) -> int:
        """Apply local retention once; returns how many segments were deleted."""
        with self._lock:
            self._check_open()
            config = self._local.config
            local = self._local
            decision = plan_local_retention(
                self._local.segment_summaries(),
                config,
                now_ms=self._clock.milliseconds(),
                log_start_offset=self._offsets.log_start_offset,
                high_watermark=self._offsets.high_watermark,
                deletion_guard=self.deletion_guard,
            )
            if decision.segment_count == 0:
                return 0
            doomed = local.segments.remove_first(decision.segment_count)
            new_local_start = local.segments[0].base_offset
            logger.info(
                "deleting segments partition=%s count=%d up_to_offset=%d reason=%r",
                self.topic_partition,
                len(doomed),
                new_local_start,
                decision.reason.value if decision.reason else None,
            )
            local.delete_segment_files(doomed)
            if (
                not config.remote_storage_enable
                or decision.reason is RetentionReason.LOG_START_OFFSET
            ):
                # With tiered storage, the remote copy still serves these offsets.
                self._offsets.log_start_offset = max(
                    self._offsets.log_start_offset, new_local_start
                )
                self._epochs.truncate_from_start(self._offsets.log_start_offset)
            local.recovery_point = max(local.recovery_point, new_local_start)
            # The snapshots of the deleted segments go; the one at the new first segment's
            # base offset (or the newest below it) stays.
            self._producer_state.delete_snapshots_before(
                new_local_start, keep_newest_at_or_below=True
            )
            self.on_log_start_offset_incremented()
            return len(doomed)

    def on_log_start_offset_incremented(self) -> None:
        manager = self._producer_state
        manager.delete_snapshots_before(
            self._offsets.log_start_offset, keep_newest_at_or_below=True
        )
        manager.on_log_start_offset_incremented(self._offsets.log_start_offset)
