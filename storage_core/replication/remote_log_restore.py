"""A new replica of a restored partition starts its log after the remote tier.

A restore from the bucket (``jobs.restore_topic``) creates the topic with
``remote.log.restore.leader.epoch`` (the restored lineage's last epoch: the controller starts
the new partitions' leader epochs after it), copies the segments' objects to the new topic's
keys and publishes their metadata, then sets ``remote.log.restore.enable``. A new, empty
replica of such a topic stays offline until then (``awaiting_restore``); once enabled, before
it leads or follows, it takes the state the restored segments give it, as a follower does when
its leader's log starts in the remote tier (``TierStateMachine``)::

    the RLMM has read this partition's metadata    wait (bounded) until it has caught up
                                                   with everything published before now
    no COPY_SEGMENT_FINISHED segment               nothing restored: the log starts at 0
    segment with the highest end offset E          next offset E + 1, its leader-epoch
                                                   entries (checked)
    log start offset                               the lowest restored start offset
    truncate fully, start at E + 1, assign the entries

Unlike a follower's, the restored replica takes no producer state from the segment's
snapshot: the restored topic is a new incarnation, its producers are new producers, and on a
cluster restored from the bucket alone the new controller hands out producer ids from 0 again,
the lost cluster's: an idempotent producer given one of them would meet the restored state of
another producer (OUT_OF_ORDER_SEQUENCE_NUMBER on its first record). The restored records keep
their producer ids and sequences; only deduplication across the restore is lost, as it is when
a producer's state expires.

Only a log still empty (log end offset 0) is touched, so a broker restarted after the restore
keeps what it has. Everything is read and checked before the log changes; a failure keeps the
replica offline with the reason logged (``RemoteLogRestoreError``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from storage_core.common import TopicIdPartition
from storage_core.errors import StorageError
from storage_core.log.log import Log
from storage_core.replication.tier_state_machine import (
    read_leader_epoch_entries,
    restored_epoch_entries,
)
from storage_core.tiered.metadata import RemoteLogSegmentState
from storage_core.tiered.remote_log_manager import RemoteLogManager

logger = logging.getLogger(__name__)

RLMM_READY_TIMEOUT_S = 120.0  # Kafka's remote.log.metadata.initialization.retry.max.timeout.ms
_POLL_S = 0.05


class RemoteLogRestoreError(StorageError):
    """A restored partition's replica could not take its state from the remote tier."""


def needs_restore(log: Log) -> bool:
    """A new, empty replica of a topic being restored."""
    config = log.config
    return (
        config.remote_storage_enable
        and config.remote_log_restore_leader_epoch >= 0
        and log.log_end_offset == 0
    )


def awaiting_restore(log: Log) -> bool:
    """``needs_restore``, and the restored segments are not published yet."""
    return needs_restore(log) and not log.config.remote_log_restore_enable


def restore_from_remote_tier(
    rlm: RemoteLogManager | None,
    tip: TopicIdPartition,
    log: Log,
    *,
    timeout_s: float = RLMM_READY_TIMEOUT_S,
    clock: Callable[[], float] = time.monotonic,
) -> int | None:
    """Start ``log`` after ``tip``'s remote segments; the offset it starts at, or ``None``
    when there is nothing to restore. ``RemoteLogRestoreError`` leaves the log as it was."""
    if rlm is None:
        raise RemoteLogRestoreError(
            f"partition {tip.topic_partition} is being restored from the remote tier but"
            " remote storage is not enabled on this broker (remote.log.storage.system.enable)"
        )
    try:
        rlmm = rlm.rlmm
    except StorageError as exc:
        raise RemoteLogRestoreError(
            f"partition {tip.topic_partition} is being restored from the remote tier: {exc}"
        ) from exc
    rlmm.on_partition_leadership_changes(set(), {tip})  # track its metadata partition
    deadline = clock() + timeout_s
    while not rlmm.is_ready(tip):
        if clock() >= deadline:
            raise RemoteLogRestoreError(
                f"partition {tip.topic_partition} is being restored from the remote tier but"
                f" its remote log metadata was not read within {timeout_s:.0f} s"
            )
        time.sleep(_POLL_S)
    # Ready means read up to where the metadata partition ended when the partition was
    # tracked: at its creation, before the restore published its segments. Catch up with
    # what was published since (all of it, once remote.log.restore.enable is seen).
    catch_up = getattr(rlmm, "wait_until_caught_up", None)
    if catch_up is not None:
        try:
            catch_up(tip, max(1, int((deadline - clock()) * 1000)))
        except StorageError as exc:
            raise RemoteLogRestoreError(
                f"partition {tip.topic_partition} is being restored from the remote tier but"
                f" its remote log metadata did not catch up: {exc}"
            ) from exc
    finished = [
        segment
        for segment in rlmm.list_remote_log_segments(tip)
        if segment.state is RemoteLogSegmentState.COPY_SEGMENT_FINISHED
    ]
    if not finished:
        logger.info(
            "restored partition has no remote segment: its log starts at 0 partition=%s",
            tip.topic_partition,
        )
        return None
    last = max(finished, key=lambda segment: segment.end_offset)
    next_offset = last.end_offset + 1
    log_start_offset = min(segment.start_offset for segment in finished)
    source = f"remote segment {last.remote_log_segment_id.id} of {tip.topic_partition}"
    try:
        entries = restored_epoch_entries(
            read_leader_epoch_entries(rlm.rsm, last, source=source),
            next_offset=next_offset,
            source=source,
        )
    except StorageError as exc:
        raise RemoteLogRestoreError(
            f"partition {tip.topic_partition} cannot be restored from the remote tier: {exc}"
        ) from exc
    log.truncate_fully_and_start_at(next_offset, log_start_offset=log_start_offset)
    cache = log.leader_epoch_cache
    for entry in entries:
        cache.assign(entry.epoch, entry.start_offset)
    cache.truncate_from_start(log_start_offset)
    logger.info(
        "restored from the remote tier partition=%s log_start_offset=%d next_offset=%d"
        " remote_segments=%d epoch_entries=%d",
        tip.topic_partition,
        log_start_offset,
        next_offset,
        len(finished),
        len(entries),
    )
    return next_offset
