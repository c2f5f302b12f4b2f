"""``delete_segment``: remove one remote segment (DELETE_SEGMENT_STARTED -> objects ->
DELETE_SEGMENT_FINISHED).

Order (DESIGN section 4): the STARTED event first, which hides the segment from readers;
then the objects; FINISHED only once the remote storage manager reported every object gone.
If deleting the objects fails the segment stays DELETE_SEGMENT_STARTED and the error
propagates; calling ``delete_segment`` again (expiry lists such segments as
``DELETE_RETRY``) resumes without publishing STARTED twice. Every step is idempotent.
"""

from __future__ import annotations

import logging

from storage_core.clock import SYSTEM_CLOCK, Clock
from storage_core.tiered.metadata.metadata import (
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
)
from storage_core.tiered.metadata.states import RemoteLogSegmentState
from storage_core.tiered.operations.fencing import LeaderEpochFence
from storage_core.tiered.remote_log_metadata_manager import RemoteLogMetadataManager
from storage_core.tiered.remote_storage_manager import RemoteStorageManager

logger = logging.getLogger(__name__)


def delete_segment(
    metadata: RemoteLogSegmentMetadata,
    *,
    rsm: RemoteStorageManager,
    rlmm: RemoteLogMetadataManager,
    broker_id: int,
    clock: Clock = SYSTEM_CLOCK,
    fence: LeaderEpochFence | None = None,
    reason: str = "",
) -> None:
    """Delete ``metadata``'s segment; see the module docstring.

    ``fence`` is checked before DELETE_SEGMENT_STARTED only: a deletion already started is
    always finished (the segment is invisible already, finishing loses nothing).
    """
    segment_id = metadata.remote_log_segment_id
    partition = segment_id.topic_id_partition.topic_partition
    if metadata.state is RemoteLogSegmentState.DELETE_SEGMENT_FINISHED:
        return
    if metadata.state is not RemoteLogSegmentState.DELETE_SEGMENT_STARTED:
        if fence is not None:
            fence.check(partition, f"delete remote segment {segment_id.id}")
        _publish(rlmm, metadata, RemoteLogSegmentState.DELETE_SEGMENT_STARTED, broker_id, clock)
    rsm.delete_log_segment_data(metadata)
    _publish(rlmm, metadata, RemoteLogSegmentState.DELETE_SEGMENT_FINISHED, broker_id, clock)
    logger.info(
        "deleted remote segment partition=%s segment_id=%s start_offset=%d end_offset=%d reason=%r",
        partition,
        segment_id.id,
        metadata.start_offset,
        metadata.end_offset,
        reason,
    )


def _publish(
    rlmm: RemoteLogMetadataManager,
    metadata: RemoteLogSegmentMetadata,
    state: RemoteLogSegmentState,
    broker_id: int,
    clock: Clock,
) -> None:
    rlmm.update_remote_log_segment_metadata(
        RemoteLogSegmentMetadataUpdate(
            remote_log_segment_id=metadata.remote_log_segment_id,
            event_timestamp_ms=clock.milliseconds(),
            state=state,
            broker_id=broker_id,
            custom_metadata=metadata.custom_metadata,
        )
    )
