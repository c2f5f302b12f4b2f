"""Copying closed segments to the remote tier (Kafka's ``RLMCopyTask``), from a log view.

Planning (``candidate_segments``)::

    highest remote offset  = findHighestRemoteOffset over the view's epochs, newest first
    from offset            = max(highest remote offset + 1, local log start offset)
    candidates             = segments from the one holding ``from offset`` on, that are
                             closed and whose next segment's base offset <= LSO (the
                             leader's last stable offset: no undecided transaction is copied)

Nothing is planned when ``remote.storage.enable`` is false or ``remote.log.copy.disable``
is true, when the view has no leader-epoch entries, or when the LSO is below ``from offset``.

Copying one segment (``copy_segment``), in the order DESIGN section 4 requires::

    fence check -> COPY_SEGMENT_STARTED (fresh segment id, the segment's epoch entries)
      -> RSM copy (.log, .index, .timeindex, producer snapshot, leader-epoch checkpoint)
      -> verify the objects -> fence check -> COPY_SEGMENT_FINISHED

Any failure after COPY_SEGMENT_STARTED (the RSM, the verification, the custom metadata
limit, the fence, the FINISHED publish) rolls back: DELETE_SEGMENT_STARTED, delete the
objects, DELETE_SEGMENT_FINISHED, then the original error propagates. If the rollback itself
fails the segment stays in COPY_SEGMENT_STARTED or DELETE_SEGMENT_STARTED, the error names
it, and expiry (DELETE_RETRY) or the reconcile job finishes it later.
"""

from __future__ import annotations

import io
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from storage_core.clock import SYSTEM_CLOCK, Clock
from storage_core.log.log_config import LogConfig
from storage_core.tiered.metadata.metadata import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
)
from storage_core.tiered.metadata.states import RemoteLogSegmentState
from storage_core.tiered.operations.errors import (
    CustomMetadataSizeLimitExceededError,
    PartitionDeletedError,
    RemoteCopyVerificationError,
    SegmentNotEligibleError,
)
from storage_core.tiered.operations.fencing import LeaderEpochFence
from storage_core.tiered.operations.lineage import (
    OffsetAndEpoch,
    epoch_entries_in_range,
    find_highest_remote_offset,
    leader_epoch_checkpoint_bytes,
)
from storage_core.tiered.operations.log_view import LogView, SegmentView
from storage_core.tiered.operations.segment_deletion import delete_segment
from storage_core.tiered.remote_log_metadata_manager import RemoteLogMetadataManager
from storage_core.tiered.remote_storage_manager import (
    IndexType,
    LogSegmentData,
    RemoteStorageManager,
)

logger = logging.getLogger(__name__)

# Kafka's remote.log.metadata.custom.metadata.max.bytes default.
CUSTOM_METADATA_MAX_BYTES_DEFAULT = 128
VERIFY_CHUNK_BYTES = 1 << 20


# ---------------------------------------------------------------------------- planning
def highest_remote_offset(view: LogView, rlmm: RemoteLogMetadataManager) -> OffsetAndEpoch:
    """Kafka's ``findHighestRemoteOffset`` for the view's lineage (asks the RLMM per epoch)."""
    topic_id_partition = view.topic_id_partition
    return find_highest_remote_offset(
        view.epoch_entries,
        view.log_end_offset,
        lambda epoch: rlmm.highest_offset_for_epoch(topic_id_partition, epoch),
    )


def is_eligible_for_upload(segment: SegmentView, *, last_stable_offset: int) -> bool:
    """Closed, and every offset below the LSO: the next segment starts at or below it."""
    return segment.next_base_offset is not None and segment.next_base_offset <= last_stable_offset


def is_copy_enabled(config: LogConfig) -> bool:
    return config.remote_storage_enable and not config.remote_log_copy_disable


def plan_upload(
    view: LogView, *, highest_remote_offset: int, last_stable_offset: int
) -> list[SegmentView]:
    """The segments to copy, oldest first, given the highest copied offset (inclusive; -1
    for none) and the LSO (exclusive). Pure."""
    if not view.epoch_entries:
        return []
    from_offset = max(highest_remote_offset + 1, view.local_log_start_offset)
    if last_stable_offset < from_offset:
        return []
    out = []
    for segment in view.segments:
        holds_or_follows = (
            segment.next_base_offset is None or segment.next_base_offset > from_offset
        )
        if not holds_or_follows:
            continue
        if not is_eligible_for_upload(segment, last_stable_offset=last_stable_offset):
            break
        out.append(segment)
    return out


def candidate_segments(
    view: LogView,
    rlmm: RemoteLogMetadataManager,
    *,
    config: LogConfig,
    last_stable_offset: int | None = None,
) -> list[SegmentView]:
    """Segments of ``view`` to copy now, oldest first (see the module docstring).

    ``last_stable_offset`` defaults to the view's LSO: a segment holding an undecided
    transaction is not copied until it is decided.
    """
    if not is_copy_enabled(config) or not view.epoch_entries:
        return []
    lso = view.stable_offset if last_stable_offset is None else last_stable_offset
    highest = highest_remote_offset(view, rlmm)
    return plan_upload(view, highest_remote_offset=highest.offset, last_stable_offset=lso)


# ---------------------------------------------------------------------------- building
def segment_leader_epochs(view: LogView, segment: SegmentView) -> dict[int, int]:
    """``epoch -> first offset`` of the epochs with records in ``segment`` (Kafka's
    ``epochEntriesInRange(base offset, next base offset)``)."""
    return {
        entry.epoch: entry.start_offset
        for entry in epoch_entries_in_range(
            view.epoch_entries, segment.base_offset, segment.end_offset + 1
        )
    }


def build_log_segment_data(view: LogView, segment: SegmentView) -> LogSegmentData:
    """The files of ``segment`` to upload, and the epoch entries up to its end as a
    ``leader-epoch-checkpoint`` file."""
    if segment.next_base_offset is None:
        raise SegmentNotEligibleError(
            f"partition {view.topic_partition}: segment {segment.base_offset} is the active"
            " segment and can not be copied"
        )
    epochs_up_to_end = [e for e in view.epoch_entries if e.start_offset < segment.next_base_offset]
    txn_index = segment.transaction_index_path
    return LogSegmentData(
        log_segment=segment.log_path,
        offset_index=segment.offset_index_path,
        time_index=segment.time_index_path,
        producer_snapshot=view.producer_snapshot(segment.next_base_offset),
        transaction_index=txn_index if _non_empty(txn_index) else None,
        leader_epoch_index=leader_epoch_checkpoint_bytes(epochs_up_to_end),
        aborted_txns_past_end=view.aborted_txns_past(segment),
    )


def _non_empty(path: Path) -> bool:
    try:
        return path.stat().st_size > 0
    except FileNotFoundError:
        return False


# ---------------------------------------------------------------------------- copying
@dataclass(frozen=True, slots=True, kw_only=True)
class CopyResult:
    """A finished copy: the segment's metadata in COPY_SEGMENT_FINISHED."""

    metadata: RemoteLogSegmentMetadata


def copy_segment(
    view: LogView,
    segment: SegmentView,
    *,
    rsm: RemoteStorageManager,
    rlmm: RemoteLogMetadataManager,
    fence: LeaderEpochFence,
    broker_id: int,
    clock: Clock = SYSTEM_CLOCK,
    custom_metadata_max_bytes: int = CUSTOM_METADATA_MAX_BYTES_DEFAULT,
) -> CopyResult:
    """Copy one closed segment of ``view`` (see the module docstring)."""
    topic_id_partition = view.topic_id_partition
    partition = view.topic_partition
    if view.segment(segment.base_offset) != segment:
        raise SegmentNotEligibleError(
            f"partition {partition}: segment {segment.base_offset} is not a segment of this view"
        )
    data = build_log_segment_data(view, segment)
    epochs = segment_leader_epochs(view, segment)
    if not epochs:
        raise SegmentNotEligibleError(
            f"partition {partition}: no leader-epoch entry covers segment"
            f" [{segment.base_offset}, {segment.end_offset}] (inclusive); the"
            " leader-epoch-checkpoint does not reach back that far"
        )
    if rlmm.remote_partition_delete_metadata(topic_id_partition) is not None:
        raise PartitionDeletedError(
            f"partition {partition} is marked for deletion; its segments are not copied"
        )
    fence.check(partition, f"copy segment {segment.base_offset}")
    started = RemoteLogSegmentMetadata(
        remote_log_segment_id=RemoteLogSegmentId.generate_new(topic_id_partition),
        start_offset=segment.base_offset,
        end_offset=segment.end_offset,
        max_timestamp_ms=segment.max_timestamp_ms if segment.max_timestamp_ms is not None else -1,
        broker_id=broker_id,
        event_timestamp_ms=clock.milliseconds(),
        segment_size_in_bytes=segment.size_bytes,
        segment_leader_epochs=epochs,
        state=RemoteLogSegmentState.COPY_SEGMENT_STARTED,
        txn_idx_empty=data.transaction_index is None,
    )
    rlmm.add_remote_log_segment_metadata(started)
    segment_id = started.remote_log_segment_id.id
    try:
        custom_metadata = rsm.copy_log_segment_data(started, data)
        verify_uploaded_segment(rsm, started, data, log_size_bytes=segment.size_bytes)
        if custom_metadata is not None and len(custom_metadata) > custom_metadata_max_bytes:
            raise CustomMetadataSizeLimitExceededError(
                f"partition {partition} segment {segment_id}: custom metadata of"
                f" {len(custom_metadata)} bytes exceeds remote.log.metadata.custom.metadata"
                f".max.bytes={custom_metadata_max_bytes}"
            )
        fence.check(partition, f"finish the copy of segment {segment.base_offset}")
        finished = RemoteLogSegmentMetadataUpdate(
            remote_log_segment_id=started.remote_log_segment_id,
            event_timestamp_ms=clock.milliseconds(),
            state=RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
            broker_id=broker_id,
            custom_metadata=custom_metadata,
        )
        rlmm.update_remote_log_segment_metadata(finished)
    except Exception as exc:
        _roll_back(started, exc, rsm=rsm, rlmm=rlmm, broker_id=broker_id, clock=clock)
        raise
    logger.info(
        "copied segment partition=%s segment_id=%s start_offset=%d end_offset=%d bytes=%d"
        " epochs=%s",
        partition,
        segment_id,
        started.start_offset,
        started.end_offset,
        started.segment_size_in_bytes,
        dict(epochs),
    )
    return CopyResult(metadata=started.create_with_updates(finished))


def _roll_back(
    started: RemoteLogSegmentMetadata,
    cause: Exception,
    *,
    rsm: RemoteStorageManager,
    rlmm: RemoteLogMetadataManager,
    broker_id: int,
    clock: Clock,
) -> None:
    """Delete what this copy attempt uploaded; notes a failed rollback on ``cause``."""
    partition = started.topic_id_partition.topic_partition
    segment_id = started.remote_log_segment_id.id
    logger.warning(
        "copy failed, rolling back partition=%s segment_id=%s start_offset=%d error=%r",
        partition,
        segment_id,
        started.start_offset,
        cause,
    )
    try:
        delete_segment(
            started, rsm=rsm, rlmm=rlmm, broker_id=broker_id, clock=clock, reason="failed copy"
        )
    except Exception as rollback_error:
        logger.error(
            "rollback of a failed copy failed partition=%s segment_id=%s error=%r",
            partition,
            segment_id,
            rollback_error,
        )
        cause.add_note(
            f"rolling back segment {segment_id} of {partition} failed too ({rollback_error!r});"
            " it stays in a STARTED state for expiry or the reconcile job to finish"
        )


# ---------------------------------------------------------------------------- verifying
def verify_uploaded_segment(
    rsm: RemoteStorageManager,
    metadata: RemoteLogSegmentMetadata,
    data: LogSegmentData,
    *,
    log_size_bytes: int,
) -> None:
    """Check the objects just uploaded against the local files.

    The ``.log`` by its exact size and its last byte (a full compare would read the segment
    twice; the stores check their own checksums); the indexes, the producer snapshot and the
    leader-epoch checkpoint byte for byte. Raises ``RemoteCopyVerificationError``.
    """
    if log_size_bytes > 0:
        with open(data.log_segment, "rb") as local:
            local.seek(log_size_bytes - 1)
            last_byte = local.read(1)
        with rsm.fetch_log_segment(metadata, log_size_bytes - 1) as remote:
            tail = remote.read(2)
        if tail != last_byte:
            raise RemoteCopyVerificationError(
                f"remote .log of segment {metadata.remote_log_segment_id} does not end like"
                f" the local {data.log_segment} of {log_size_bytes} bytes"
            )
    checks: Sequence[tuple[IndexType, Path | bytes | None]] = (
        (IndexType.OFFSET, data.offset_index),
        (IndexType.TIMESTAMP, data.time_index),
        (IndexType.PRODUCER_SNAPSHOT, data.producer_snapshot),
        (IndexType.TRANSACTION, data.transaction_index),
        (IndexType.LEADER_EPOCH, data.leader_epoch_index),
    )
    for index_type, source in checks:
        if source is None:
            continue
        with rsm.fetch_index(metadata, index_type) as remote:
            if isinstance(source, bytes):
                same = _same_streams(remote, io.BytesIO(source))
            else:
                with open(source, "rb") as local:
                    same = _same_streams(remote, local)
        if not same:
            raise RemoteCopyVerificationError(
                f"remote {index_type.name} object of segment {metadata.remote_log_segment_id}"
                " differs from the local file it was copied from"
            )


def _same_streams(left: BinaryIO, right: BinaryIO) -> bool:
    """Whether two streams hold the same bytes (chunk by chunk; short reads are fine)."""
    pending_left = pending_right = b""
    while True:
        if not pending_left:
            pending_left = left.read(VERIFY_CHUNK_BYTES)
        if not pending_right:
            pending_right = right.read(VERIFY_CHUNK_BYTES)
        if not pending_left or not pending_right:
            return not pending_left and not pending_right
        count = min(len(pending_left), len(pending_right))
        if pending_left[:count] != pending_right[:count]:
            return False
        pending_left, pending_right = pending_left[count:], pending_right[count:]
