"""Local retention decisions, as pure functions over segment summaries.

Retention deletes whole segments from the oldest on, and only a prefix: Kafka's three rules
(``retention.ms`` by the segment's largest timestamp, ``retention.bytes`` by the partition's
size, and segments wholly below the log start offset). A segment is a candidate only if it is
closed (never the active segment) and wholly below the high watermark. A guard (for tiered
storage: "is this segment safely copied?") can stop the prefix at any segment.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum

from storage_core.log.log_config import LogConfig


class RetentionReason(Enum):
    RETENTION_MS = "retention.ms breach"
    RETENTION_BYTES = "retention.bytes breach"
    LOG_START_OFFSET = "log start offset breach"


@dataclass(frozen=True, slots=True, kw_only=True)
class SegmentSummary:
    """What retention needs to know about one segment."""

    base_offset: int
    # Base offset of the next segment (exclusive end of this one); None for the active segment.
    next_base_offset: int | None
    size_bytes: int
    largest_timestamp_ms: int

    @property
    def is_active(self) -> bool:
        return self.next_base_offset is None


@dataclass(frozen=True, slots=True)
class RetentionDecision:
    """How many of the oldest segments to delete, and under which rule."""

    segment_count: int
    reason: RetentionReason | None


NO_DELETION = RetentionDecision(0, None)

# A predicate that may forbid deleting a segment locally (tiered storage: "not yet copied").
SegmentDeletionGuard = Callable[[SegmentSummary], bool]


def is_breach_by_retention_ms(segment: SegmentSummary, *, now_ms: int, retention_ms: int) -> bool:
    return retention_ms >= 0 and now_ms - segment.largest_timestamp_ms > retention_ms


def is_breach_by_log_start_offset(segment: SegmentSummary, *, log_start_offset: int) -> bool:
    # Every offset of the segment is below the log start offset.
    return segment.next_base_offset is not None and segment.next_base_offset <= log_start_offset


def candidate_segments(
    segments: Sequence[SegmentSummary],
    *,
    high_watermark: int,
    may_delete: Callable[[SegmentSummary], bool] | None = None,
) -> list[SegmentSummary]:
    """The oldest closed segments wholly below the high watermark that the guard allows."""
    out: list[SegmentSummary] = []
    for segment in segments:
        if segment.next_base_offset is None or segment.next_base_offset > high_watermark:
            break
        if may_delete is not None and not may_delete(segment):
            break
        out.append(segment)
    return out


def plan_retention(
    segments: Sequence[SegmentSummary],
    *,
    now_ms: int,
    retention_ms: int,
    retention_bytes: int,
    log_start_offset: int,
    high_watermark: int,
    delete_by_time_and_size: bool = True,
    may_delete: Callable[[SegmentSummary], bool] | None = None,
) -> RetentionDecision:
    """The longest deletable prefix under the first rule that deletes anything.

    Rules are tried in Kafka's order (time, size, log start offset); ``delete_by_time_and_size``
    is False for compacted topics, which keep only the log-start-offset rule.
    """
    candidates = candidate_segments(segments, high_watermark=high_watermark, may_delete=may_delete)
    if not candidates:
        return NO_DELETION
    if delete_by_time_and_size:
        count = _prefix_length(
            candidates,
            lambda s: is_breach_by_retention_ms(s, now_ms=now_ms, retention_ms=retention_ms),
        )
        if count:
            return RetentionDecision(count, RetentionReason.RETENTION_MS)
        count = _size_breach_count(candidates, segments, retention_bytes)
        if count:
            return RetentionDecision(count, RetentionReason.RETENTION_BYTES)
    count = _prefix_length(
        candidates, lambda s: is_breach_by_log_start_offset(s, log_start_offset=log_start_offset)
    )
    if count:
        return RetentionDecision(count, RetentionReason.LOG_START_OFFSET)
    return NO_DELETION


def _prefix_length(
    candidates: Sequence[SegmentSummary], predicate: Callable[[SegmentSummary], bool]
) -> int:
    count = 0
    for segment in candidates:
        if not predicate(segment):
            break
        count += 1
    return count


def _size_breach_count(
    candidates: Sequence[SegmentSummary],
    segments: Sequence[SegmentSummary],
    retention_bytes: int,
) -> int:
    total_bytes = sum(s.size_bytes for s in segments)
    if retention_bytes < 0 or total_bytes < retention_bytes:
        return 0
    excess_bytes = total_bytes - retention_bytes
    count = 0
    for segment in candidates:  # delete while the log stays at or above retention.bytes
        if excess_bytes - segment.size_bytes < 0:
            break
        excess_bytes -= segment.size_bytes
        count += 1
    return count


def plan_local_retention(
    segments: Sequence[SegmentSummary],
    config: LogConfig,
    *,
    now_ms: int,
    log_start_offset: int,
    high_watermark: int,
    deletion_guard: SegmentDeletionGuard | None,
) -> RetentionDecision:
    """One log's local retention: ``local.retention.*`` on a remote-enabled log, else
    ``retention.*``; ``deletion_guard`` is the installed guard (``deletion_guard_for``)."""
    return plan_retention(
        segments,
        now_ms=now_ms,
        retention_ms=config.effective_local_retention_ms
        if config.remote_storage_enable
        else config.retention_ms,
        retention_bytes=config.effective_local_retention_bytes
        if config.remote_storage_enable
        else config.retention_bytes,
        log_start_offset=log_start_offset,
        high_watermark=high_watermark,
        delete_by_time_and_size=config.is_delete,
        may_delete=deletion_guard_for(config, deletion_guard, log_start_offset),
    )


def deletion_guard_for(
    config: LogConfig, guard: SegmentDeletionGuard | None, log_start_offset: int
) -> SegmentDeletionGuard | None:
    """The installed guard; on a remote-enabled log without one (tiered storage not
    running yet), only segments below the log start offset may go: deleting any other
    one locally could lose data that was never copied."""
    if guard is not None or not config.remote_storage_enable:
        return guard
    return lambda segment: (
        segment.next_base_offset is not None and segment.next_base_offset <= log_start_offset
    )
