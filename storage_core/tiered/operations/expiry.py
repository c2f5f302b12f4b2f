"""Expiring remote segments (Kafka's ``RLMExpirationTask``), planned as a pure function.

``expired_segments`` decides, from the partition's remote segments and a view of its log,
which segments to delete and why (``ExpiryReason``)::

    1. DELETE_RETRY      segments already DELETE_SEGMENT_STARTED (a delete that failed)
    2. walk the segments sharing an epoch with the lineage, by start offset (Kafka's loop):
         LOG_START_OFFSET   all its epochs <= the lineage's first epoch and
                            end offset < log start offset
         if on the lineage:
           RETENTION_MS     max timestamp <= now - retention.ms
           RETENTION_BYTES  while (local-only bytes + remote lineage bytes) - retention.bytes
                            still covers the segment's size
         the walk stops at the first lineage segment that is kept
    3. BEFORE_LINEAGE    all its epochs < the lineage's earliest epoch (the leader-epoch
                         cache was truncated by the log start offset)
    4. OFF_LINEAGE       provably off the current lineage (unclean election leftovers)

Sizes as Kafka's ``buildRetentionSizeData``: the local-only bytes are the local segments
whose base offset >= the highest remote offset (``onlyLocalLogSegmentsSize``), the remote
bytes those of the COPY_SEGMENT_FINISHED segments on the lineage.

Deliberate differences from Kafka:
- Step 4 is ours (DESIGN: the expire job deletes segments off the lineage); Kafka leaves
  them until step 3 catches them. Only ``LineageCheck.OFF_LINEAGE`` counts: a segment that
  reaches past the view (``BEYOND_VIEW``) is kept, since the view is a snapshot.
- COPY_SEGMENT_STARTED segments are neither counted nor deleted nor do they stop the walk
  (Kafka stops at a segment its own process is copying; here a copy may run in another
  process, or have died: the reconcile job owns stale ones).
- Remote bytes count COPY_SEGMENT_FINISHED only (Kafka also counts segments being copied or
  deleted, whose local copy is still counted or which are going away).
- For a consistent size, ``plan_expiry`` lists the remote segments before it asks for the
  highest remote offset: a copy finishing in between is then counted nowhere (deleting less),
  never twice.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from storage_core.clock import SYSTEM_CLOCK, Clock
from storage_core.log.leader_epoch_cache import EpochEntry
from storage_core.log.log_config import LogConfig
from storage_core.tiered.metadata.metadata import RemoteLogSegmentMetadata
from storage_core.tiered.metadata.states import RemoteLogSegmentState
from storage_core.tiered.operations.copy import highest_remote_offset
from storage_core.tiered.operations.errors import StaleLeaderEpochError
from storage_core.tiered.operations.fencing import LeaderEpochFence
from storage_core.tiered.operations.lineage import (
    LineageCheck,
    check_remote_segment_lineage,
    filtered_leader_epoch_map,
)
from storage_core.tiered.operations.log_view import LogView, SegmentView
from storage_core.tiered.operations.segment_deletion import delete_segment
from storage_core.tiered.remote_log_metadata_manager import RemoteLogMetadataManager
from storage_core.tiered.remote_storage_manager import RemoteStorageManager

logger = logging.getLogger(__name__)


class ExpiryReason(enum.Enum):
    """Why a remote segment is deleted; the value is the reason string."""

    DELETE_RETRY = "deletion started earlier and did not finish"
    RETENTION_MS = "retention.ms breach"
    RETENTION_BYTES = "retention.bytes breach"
    LOG_START_OFFSET = "log start offset breach"
    BEFORE_LINEAGE = "all epochs before the earliest leader epoch"
    OFF_LINEAGE = "off the leader-epoch lineage"


@dataclass(frozen=True, slots=True, kw_only=True)
class ExpiredSegment:
    metadata: RemoteLogSegmentMetadata
    reason: ExpiryReason

    @property
    def reason_text(self) -> str:
        m = self.metadata
        return (
            f"{self.reason.value}: segment {m.remote_log_segment_id.id}"
            f" [{m.start_offset}, {m.end_offset}] (inclusive)"
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class ExpiryPlan:
    """Segments to delete, oldest first per rule; ``log_start_offset`` is the log start
    offset the time and size breaches move the partition to (``None``: unchanged). The
    broker moves it when it applies the segments' DELETE_SEGMENT_STARTED."""

    expired: tuple[ExpiredSegment, ...] = ()
    log_start_offset: int | None = None
    remote_size_bytes: int = 0
    local_only_size_bytes: int = 0


@dataclass(slots=True)
class _SizeBudget:
    """Kafka's ``RetentionSizeData``: bytes still above ``retention.bytes`` (0: none)."""

    remaining_breached_bytes: int = 0


def is_breach_by_retention_ms(
    metadata: RemoteLogSegmentMetadata, *, now_ms: int, retention_ms: int
) -> bool:
    """Kafka's ``isSegmentBreachedByRetentionTime``: max timestamp <= now - retention.ms."""
    return retention_ms > -1 and metadata.max_timestamp_ms <= now_ms - retention_ms


def is_breach_by_retention_bytes(metadata: RemoteLogSegmentMetadata, budget: _SizeBudget) -> bool:
    """Kafka's ``isSegmentBreachByRetentionSize``; consumes the segment's size if it breaches."""
    remaining = budget.remaining_breached_bytes - metadata.segment_size_in_bytes
    if budget.remaining_breached_bytes > 0 and remaining >= 0:
        budget.remaining_breached_bytes = remaining
        return True
    return False


def is_breach_by_log_start_offset(
    metadata: RemoteLogSegmentMetadata, *, log_start_offset: int, first_lineage_epoch: int
) -> bool:
    """Kafka's ``isSegmentBreachByLogStartOffset``: wholly below the log start offset, with
    no epoch after the lineage's first."""
    return (
        all(epoch <= first_lineage_epoch for epoch in metadata.segment_leader_epochs)
        and metadata.end_offset < log_start_offset
    )


def local_only_size_bytes(segments: Sequence[SegmentView], highest_remote_offset: int) -> int:
    """Kafka's ``onlyLocalLogSegmentsSize``: local segments with base offset >= the highest
    remote offset (inclusive)."""
    return sum(s.size_bytes for s in segments if s.base_offset >= highest_remote_offset)


def expired_segments(
    remote_segments: Sequence[RemoteLogSegmentMetadata],
    *,
    leader_epochs: Sequence[EpochEntry],
    log_start_offset: int,
    log_end_offset: int,
    local_only_size_bytes: int,
    retention_ms: int,
    retention_bytes: int,
    now_ms: int,
) -> ExpiryPlan:
    """The segments to delete and why (see the module docstring). Pure."""
    segments = sorted(
        {m.remote_log_segment_id: m for m in remote_segments}.values(),
        key=lambda m: (m.start_offset, m.end_offset, m.remote_log_segment_id),
    )
    expired = [
        ExpiredSegment(metadata=m, reason=ExpiryReason.DELETE_RETRY)
        for m in segments
        if m.state is RemoteLogSegmentState.DELETE_SEGMENT_STARTED
    ]
    finished = [m for m in segments if m.state is RemoteLogSegmentState.COPY_SEGMENT_FINISHED]
    lineage = filtered_leader_epoch_map({e.epoch: e.start_offset for e in leader_epochs})
    if not lineage:
        return ExpiryPlan(expired=tuple(expired), local_only_size_bytes=local_only_size_bytes)
    checks = {
        m.remote_log_segment_id: check_remote_segment_lineage(
            m.segment_leader_epochs,
            m.end_offset,
            leader_epochs=lineage,
            log_end_offset=log_end_offset,
        )
        for m in finished
    }
    # Copies of the same offsets (a rewrite keeps the old one until the new one finished)
    # hold the same bytes once.
    remote_size_bytes = sum(
        {
            (m.start_offset, m.end_offset): m.segment_size_in_bytes
            for m in finished
            if checks[m.remote_log_segment_id] is LineageCheck.ON_LINEAGE
        }.values()
    )
    budget = _SizeBudget()
    total_bytes = local_only_size_bytes + remote_size_bytes
    if retention_bytes > -1 and total_bytes > retention_bytes:
        budget.remaining_breached_bytes = total_bytes - retention_bytes
    first_lineage_epoch = min(lineage)
    chosen: set[object] = set()
    new_log_start_offset: int | None = None
    for m in finished:
        if not any(epoch in lineage for epoch in m.segment_leader_epochs):
            continue  # Kafka's loop lists segments per lineage epoch
        reason: ExpiryReason | None = None
        is_valid = False
        if is_breach_by_log_start_offset(
            m, log_start_offset=log_start_offset, first_lineage_epoch=first_lineage_epoch
        ):
            reason = ExpiryReason.LOG_START_OFFSET
        else:
            is_valid = checks[m.remote_log_segment_id] is LineageCheck.ON_LINEAGE
            if is_valid:
                if is_breach_by_retention_ms(m, now_ms=now_ms, retention_ms=retention_ms):
                    budget.remaining_breached_bytes = max(
                        0, budget.remaining_breached_bytes - m.segment_size_in_bytes
                    )
                    reason = ExpiryReason.RETENTION_MS
                elif is_breach_by_retention_bytes(m, budget):
                    reason = ExpiryReason.RETENTION_BYTES
                if reason is not None:
                    new_log_start_offset = max(new_log_start_offset or 0, m.end_offset + 1)
        if reason is not None:
            expired.append(ExpiredSegment(metadata=m, reason=reason))
            chosen.add(m.remote_log_segment_id)
        elif is_valid:
            break  # the first lineage segment kept ends the walk
    earliest_epoch = leader_epochs[0].epoch
    for m in finished:
        if m.remote_log_segment_id in chosen:
            continue
        if all(epoch < earliest_epoch for epoch in m.segment_leader_epochs):
            expired.append(ExpiredSegment(metadata=m, reason=ExpiryReason.BEFORE_LINEAGE))
            chosen.add(m.remote_log_segment_id)
        elif checks[m.remote_log_segment_id] is LineageCheck.OFF_LINEAGE:
            expired.append(ExpiredSegment(metadata=m, reason=ExpiryReason.OFF_LINEAGE))
            chosen.add(m.remote_log_segment_id)
    return ExpiryPlan(
        expired=tuple(expired),
        log_start_offset=new_log_start_offset,
        remote_size_bytes=remote_size_bytes,
        local_only_size_bytes=local_only_size_bytes,
    )


def plan_expiry(
    view: LogView, rlmm: RemoteLogMetadataManager, *, config: LogConfig, now_ms: int
) -> ExpiryPlan:
    """``expired_segments`` for ``view``'s partition with ``config``'s retention.ms/bytes."""
    topic_id_partition = view.topic_id_partition
    remote_segments = list(rlmm.list_remote_log_segments(topic_id_partition))
    highest = highest_remote_offset(view, rlmm)  # after the listing: see the module doc
    return expired_segments(
        remote_segments,
        leader_epochs=view.epoch_entries,
        log_start_offset=view.log_start_offset,
        log_end_offset=view.log_end_offset,
        local_only_size_bytes=local_only_size_bytes(view.segments, highest.offset),
        retention_ms=config.retention_ms,
        retention_bytes=config.retention_bytes,
        now_ms=now_ms,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class ExpiryOutcome:
    """What ``delete_expired_segments`` did: segments deleted, and those that failed (they
    stay DELETE_SEGMENT_STARTED and come back as DELETE_RETRY)."""

    deleted: tuple[ExpiredSegment, ...] = ()
    failed: tuple[tuple[ExpiredSegment, Exception], ...] = field(default=())


def delete_expired_segments(
    plan: ExpiryPlan,
    *,
    rsm: RemoteStorageManager,
    rlmm: RemoteLogMetadataManager,
    fence: LeaderEpochFence,
    broker_id: int,
    clock: Clock = SYSTEM_CLOCK,
) -> ExpiryOutcome:
    """Delete every segment of ``plan``, oldest first; a failure moves on to the next one,
    a stale leader epoch stops everything (``StaleLeaderEpochError`` propagates)."""
    deleted: list[ExpiredSegment] = []
    failed: list[tuple[ExpiredSegment, Exception]] = []
    for item in plan.expired:
        try:
            delete_segment(
                item.metadata,
                rsm=rsm,
                rlmm=rlmm,
                broker_id=broker_id,
                clock=clock,
                fence=fence,
                reason=item.reason.value,
            )
        except StaleLeaderEpochError:
            raise
        except Exception as exc:
            logger.warning(
                "remote segment deletion failed partition=%s segment_id=%s reason=%r error=%r",
                item.metadata.topic_id_partition.topic_partition,
                item.metadata.remote_log_segment_id.id,
                item.reason.value,
                exc,
            )
            failed.append((item, exc))
        else:
            deleted.append(item)
    return ExpiryOutcome(deleted=tuple(deleted), failed=tuple(failed))
