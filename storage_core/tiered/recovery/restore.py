"""Restoring a partition's remote segments under a new topic id (the I/O of a restore).

The restored topic is a new incarnation (a new topic id): its segments are copies of the
source's objects under its own keys, made inside the store (``restore_segment_objects``: an
S3 ``CopyObject``, the bytes never leave the bucket), each with a manifest of its own written
last. Copies rather than references, because the restored topic lives its own life: its
retention and its deletion delete its objects, never the source's, and the source, if it still
lives, is never touched (a restore writes only under the target's topic id).

Every step can run again and converge, so a restore killed at any point is finished by running
it again:

- the target segment's id is derived from the target topic id and the source segment's id,
  so a second run addresses the same keys and the same metadata;
- a segment already COPY_SEGMENT_FINISHED in the target's metadata is left as it is;
- otherwise its objects are copied again whole (a copy cut short is simply redone), then
  COPY_SEGMENT_STARTED (unless already published) and COPY_SEGMENT_FINISHED are published,
  with the custom metadata a chunked copy returns (the stored size of its objects, manifest
  included, and the format version).

Aborted transactions: the restored log ends with its last segment, so the ABORT markers of
transactions with records there and markers beyond it (never copied) are not in it. That
segment's manifest is marked ``abortsClosedAtEnd``: its transaction index is served with those
transactions (its manifest's ``abortedPastEnd``, recorded by the copy) closed at its end, and
its metadata says the index is not empty, so read_committed consumers skip their records.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import logging
from collections.abc import Mapping

from storage_core.common import TopicIdPartition, Uuid
from storage_core.tiered.chunked.custom_metadata import encode_custom_metadata, remote_size
from storage_core.tiered.chunked.segment_manifest import SegmentDescription
from storage_core.tiered.metadata import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
)
from storage_core.tiered.recovery.bucket_inventory import BucketSegment, BucketStore
from storage_core.tiered.remote_object_keys import RemoteObjectSuffix
from storage_core.tiered.remote_storage_manager import RemoteSegmentRef
from storage_core.tiered.topic_based_rlmm.manager import TopicBasedRemoteLogMetadataManager

logger = logging.getLogger(__name__)


class SegmentRestore(enum.Enum):
    RESTORED = "restored"
    ALREADY_RESTORED = "already_restored"


def restored_segment_id(target_topic_id: Uuid, source_segment_id: Uuid) -> Uuid:
    """The target segment's id: the same for every run of one restore, new for another
    incarnation. Never Kafka's reserved zero or one ids."""
    digest = hashlib.sha256(
        b"restored-segment" + target_topic_id.to_bytes() + source_segment_id.to_bytes()
    ).digest()
    candidate = Uuid.from_bytes(digest[:16])
    return candidate if str(candidate) not in _RESERVED else Uuid.from_bytes(digest[16:32])


_RESERVED = {"AAAAAAAAAAAAAAAAAAAAAA", "AAAAAAAAAAAAAAAAAAAAAQ"}


def restored_description(segment: BucketSegment, *, ends_the_log: bool) -> SegmentDescription:
    """The source's description with ``aborts_closed_at_end`` set when the restored log ends
    with ``segment`` and transactions aborted past its end have records in it (and kept
    from an earlier restore)."""
    manifest = segment.manifest
    assert manifest is not None and manifest.segment is not None
    source = manifest.segment
    if ends_the_log and source.aborted_past_end is None:
        logger.warning(
            "segment %s ends the restored log and was copied before the aborted transactions"
            " running past its end were recorded: records of a transaction aborted after it"
            " was copied read as committed",
            segment.ref,
        )
    closed = source.aborts_closed_at_end or (ends_the_log and bool(source.aborted_past_end))
    return dataclasses.replace(source, aborts_closed_at_end=closed)


def restored_metadata(
    segment: BucketSegment, target: TopicIdPartition, *, now_ms: int, closes_aborts: bool = False
) -> RemoteLogSegmentMetadata:
    """The target segment as its restore starts it (COPY_SEGMENT_STARTED): the source's
    offsets, timestamps, size, epochs and broker under the target's ids; its transaction
    index is not empty when it ``closes_aborts`` (``SegmentDescription.closing_aborts``)."""
    source = segment.metadata
    segment_id = RemoteLogSegmentId(
        topic_id_partition=target,
        id=restored_segment_id(target.topic_id, source.remote_log_segment_id.id),
    )
    return dataclasses.replace(
        source,
        remote_log_segment_id=segment_id,
        event_timestamp_ms=now_ms,
        custom_metadata=None,
        state=RemoteLogSegmentState.COPY_SEGMENT_STARTED,
        txn_idx_empty=source.txn_idx_empty and not closes_aborts,
    )


def restore_segment(
    store: BucketStore,
    rlmm: TopicBasedRemoteLogMetadataManager,
    segment: BucketSegment,
    target: TopicIdPartition,
    *,
    known: Mapping[Uuid, RemoteLogSegmentMetadata],
    now_ms: int,
    ends_the_log: bool = False,
) -> tuple[SegmentRestore, int]:
    """Copy ``segment`` to ``target`` and publish it; ``known``: the target's segments in
    its metadata, by id; ``ends_the_log``: the restored log ends with it. Returns what was
    done and the bytes the target segment holds."""
    description = restored_description(segment, ends_the_log=ends_the_log)
    started = restored_metadata(
        segment, target, now_ms=now_ms, closes_aborts=bool(description.closing_aborts())
    )
    segment_id = started.remote_log_segment_id
    already = known.get(segment_id.id)
    if already is not None and already.state is RemoteLogSegmentState.COPY_SEGMENT_FINISHED:
        return SegmentRestore.ALREADY_RESTORED, remote_size(already.custom_metadata) or 0
    manifest = segment.manifest
    assert manifest is not None
    described = dataclasses.replace(
        manifest, description=dataclasses.replace(description, metadata=started)
    )
    suffixes = [RemoteObjectSuffix.LOG] + [RemoteObjectSuffix(name) for name in manifest.objects]
    stored = store.restore_segment_objects(
        segment.ref, RemoteSegmentRef.of(started), suffixes, described.to_bytes()
    )
    if already is None:
        rlmm.add_remote_log_segment_metadata(started)
    rlmm.update_remote_log_segment_metadata(
        RemoteLogSegmentMetadataUpdate(
            remote_log_segment_id=segment_id,
            event_timestamp_ms=now_ms,
            state=RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
            broker_id=started.broker_id,
            custom_metadata=encode_custom_metadata(
                remote_size=stored, format_version=manifest.version
            ),
        )
    )
    logger.info(
        "restored segment source=%s target=%s offsets=%d..%d bytes=%d",
        segment.ref,
        segment_id,
        started.start_offset,
        started.end_offset,
        stored,
    )
    return SegmentRestore.RESTORED, stored
