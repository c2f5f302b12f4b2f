"""Rewriting remote segments in the configured format (key rotation, a new chunk size,
compression or encryption switched on or off), copy-then-swap, nothing lost.

Planning (``plan_rewrite``, pure over the listing and each segment's manifest)::

    group the COPY_SEGMENT_FINISHED segments by (start offset, end offset, leader epochs):
    the copies of one segment (one, or two when a rewrite was interrupted between the new
    copy's FINISHED and the old one's deletion); the member readers resolve (referenced)
      is in the configured format   -> keep it, delete the others
      is not                        -> rewrite it, then delete them all
      no referenced member          -> left alone (displaced or off-lineage copies: expiry's)

    in the configured format = chunked, chunk size, compression (with the heuristic on, a
    segment stored uncompressed also matches), encryption on or off, and when on, the data
    key wrapped by the ring's active key pair; and its largest timestamp is not the 0 that
    copies made during a segment roll recorded (``timestamp_difference``)

Rewriting one segment (``rewrite_segment``)::

    read the original bytes through the chunked RSM (checked and restored: .log, indexes,
    producer snapshot, transaction index, leader-epoch checkpoint) into scratch files
    fence check -> COPY_SEGMENT_STARTED (new segment id; offsets, epochs, size, max
    timestamp and transaction-index flag of the old; a max timestamp of 0 taken again from
    the batches read back) -> RSM copy -> verify -> fence check -> COPY_SEGMENT_FINISHED

then, per batch of segments (``swap_grace_s`` after the last FINISHED of the batch),
``delete_segment`` of the old copies: DELETE_SEGMENT_STARTED -> objects -> FINISHED.

Why readers never miss a record: both copies cover the same offsets with the same leader
epochs, and the metadata of one partition is one ordered stream. Until the new copy's
FINISHED a reader resolves the old one; that event maps the segment's start offsets to the
new copy (``RemoteLogLeaderEpochState``: a copy finishing at a start offset displaces the
segment mapped there), so later reads resolve the new one; the old one's
DELETE_SEGMENT_STARTED unmaps nothing of the new one. The earliest FINISHED start offset
(the broker's log start offset) never moves: the new copy is FINISHED before the old goes.
A read that resolved the old copy just before the swap and reaches its objects after they
are deleted would fail once with a retriable storage error (the client fetches again and
gets the new copy); the grace between the FINISHED and the deletion (brokers apply the
event within their consumer's poll) makes that a read slower than the grace.

While both copies are FINISHED (at most ``SEGMENTS_PER_SWAP_MAX`` segments of a partition,
for the grace and the deletions) sums over FINISHED segments count the segment twice: the
remote size gauges, and a size-based expiry (``retention.bytes``) planned in that window,
which may then expire the oldest segment one run early.

A rewrite killed part way converges when run again: a new copy left COPY_SEGMENT_STARTED is
never read and is rolled back by ``jobs.reconcile`` after its copy deadline (as any stale
copy); a new copy left FINISHED beside the old is the kept member of its group and the old
one is deleted; an old copy left DELETE_SEGMENT_STARTED is finished by expiry's DELETE_RETRY
or reconcile.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from storage_core.clock import SYSTEM_CLOCK, Clock
from storage_core.log.time_index import TIME_INDEX_ENTRY
from storage_core.records import FileRecords
from storage_core.tiered.chunked.chunked_storage_manager import ChunkedRemoteStorageManager
from storage_core.tiered.chunked.format_config import ChunkedFormatConfig
from storage_core.tiered.chunked.segment_manifest import SegmentManifest
from storage_core.tiered.metadata.metadata import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
)
from storage_core.tiered.metadata.states import RemoteLogSegmentState
from storage_core.tiered.operations.copy import (
    CUSTOM_METADATA_MAX_BYTES_DEFAULT,
    verify_uploaded_segment,
)
from storage_core.tiered.operations.errors import CustomMetadataSizeLimitExceededError
from storage_core.tiered.operations.fencing import LeaderEpochFence
from storage_core.tiered.operations.segment_deletion import delete_segment
from storage_core.tiered.remote_log_metadata_manager import RemoteLogMetadataManager
from storage_core.tiered.remote_storage_manager import (
    IndexType,
    LogSegmentData,
    RemoteResourceNotFoundError,
    RemoteStorageError,
    RemoteStorageManager,
)

logger = logging.getLogger(__name__)

SWAP_GRACE_S_DEFAULT = 2.0
SEGMENTS_PER_SWAP_MAX = 16  # old copies kept beside their new ones at most, per partition
COPY_BYTES = 1 << 20
FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED


class RewriteNotSupportedError(RemoteStorageError):
    """The configured remote storage manager does not write the chunked format (it is not
    wrapped in ``ChunkedRemoteStorageManager``), so there is no format to rewrite into."""


# ---------------------------------------------------------------------------- planning
def format_difference(manifest: SegmentManifest | None, config: ChunkedFormatConfig) -> str | None:
    """Why a segment stored with ``manifest`` (``None``: the plain format) is not in the
    ``config``'s format, or ``None`` when it is."""
    if manifest is None:
        return "plain format"
    reasons = []
    index = manifest.chunk_index
    if index.chunk_size != config.chunk_size:
        reasons.append(f"chunk size {index.chunk_size}, not {config.chunk_size}")
    if not index.framed:
        reasons.append(f"format version {manifest.version}: one check per chunk")
    elif index.chunk_size == config.chunk_size and index.frame_size != config.effective_frame_size:
        reasons.append(f"frame size {index.frame_size}, not {config.effective_frame_size}")
    if manifest.compression and not config.compression:
        reasons.append("compressed, compression is off")
    if not manifest.compression and config.compression and not config.compression_heuristic:
        reasons.append("not compressed, compression is on")
    if manifest.encryption is None and config.encryption:
        reasons.append("not encrypted, encryption is on")
    if manifest.encryption is not None and not config.encryption:
        reasons.append("encrypted, encryption is off")
    if manifest.encryption is not None and config.encryption and config.key_ring is not None:
        key_id = manifest.encryption.wrapped_data_key.key_id
        if key_id != config.key_ring.active_key_id:
            reasons.append(f"key pair {key_id}, not the active {config.key_ring.active_key_id}")
    return "; ".join(reasons) or None


def timestamp_difference(
    metadata: RemoteLogSegmentMetadata, time_index: Callable[[], bytes]
) -> str | None:
    """Why ``metadata`` records a wrong largest timestamp, or ``None``. A copy that read its
    segment while the broker was rolling it took the roll's still zero-filled time index for
    the last entry and recorded 0 (fixed in 89e4435): remote retention by time would expire
    such a segment at once. A largest timestamp of 0 is wrong when the segment's time index
    (``time_index``, read only then) holds a later one."""
    if metadata.max_timestamp_ms != 0:
        return None
    content = time_index()
    whole = len(content) - len(content) % TIME_INDEX_ENTRY.size
    indexed = max(
        (timestamp for timestamp, _ in TIME_INDEX_ENTRY.iter_unpack(content[:whole])), default=0
    )
    if indexed <= 0:
        return None
    return f"largest timestamp recorded as 0, its time index holds {indexed}"


def largest_timestamp(log_segment: Path) -> int:
    """The largest batch timestamp of a ``.log`` (Kafka's ``maxTimestampSoFar`` as a segment's
    recovery rebuilds it); -1 (no timestamp) for a segment without batches."""
    with FileRecords.open(log_segment, mutable=False) as records:
        return records.largest_timestamp_after(0)[0]


def rewrite_reason(
    rsm: ChunkedRemoteStorageManager, metadata: RemoteLogSegmentMetadata
) -> str | None:
    """Why ``plan_rewrite`` rewrites a segment: not in ``rsm``'s configured format, or a wrong
    largest timestamp in its metadata (both, joined); ``None``: kept as it is."""

    def time_index() -> bytes:
        with rsm.fetch_index(metadata, IndexType.TIMESTAMP) as stream:
            return stream.read()

    reasons = (
        format_difference(rsm.segment_manifest(metadata), rsm.config),
        timestamp_difference(metadata, time_index),
    )
    return "; ".join(reason for reason in reasons if reason) or None


@dataclass(frozen=True, slots=True, kw_only=True)
class SegmentRewrite:
    """One segment's copies: ``source`` is read and rewritten (``None``: ``keep`` is already
    in the configured format), ``obsolete`` are deleted once the new copy is FINISHED."""

    source: RemoteLogSegmentMetadata | None
    keep: RemoteLogSegmentMetadata | None
    obsolete: tuple[RemoteLogSegmentMetadata, ...]
    reason: str

    def __post_init__(self) -> None:
        if (self.source is None) == (self.keep is None):
            raise ValueError("a segment rewrite has a source to rewrite or a copy to keep")


def _group_key(metadata: RemoteLogSegmentMetadata) -> tuple[int, int, tuple[tuple[int, int], ...]]:
    return (
        metadata.start_offset,
        metadata.end_offset,
        tuple(sorted(metadata.segment_leader_epochs.items())),
    )


def plan_rewrite(
    segments: Sequence[RemoteLogSegmentMetadata],
    differences: Callable[[RemoteLogSegmentMetadata], str | None],
    is_referenced: Callable[[RemoteLogSegmentMetadata], bool],
) -> list[SegmentRewrite]:
    """The work for a partition's segments, by start offset (see the module docstring).
    ``differences`` is ``format_difference`` of a segment's manifest; ``is_referenced``
    whether readers resolve the segment's offsets to it (``is_referenced_segment``). Groups
    without a referenced member (copies displaced by another leader's upload, off the
    lineage) are left to expiry: rewriting one would make readers resolve it."""
    groups: dict[tuple[int, int, tuple[tuple[int, int], ...]], list[RemoteLogSegmentMetadata]]
    groups = {}
    for metadata in segments:
        if metadata.state is FINISHED:
            groups.setdefault(_group_key(metadata), []).append(metadata)
    plan = []
    for key in sorted(groups):
        members = groups[key]
        referenced = [m for m in members if is_referenced(m)]
        if not referenced:
            continue
        current = referenced[0]
        others = tuple(m for m in members if m is not current)
        reason = differences(current)
        if reason is None:
            if others:
                plan.append(
                    SegmentRewrite(
                        source=None, keep=current, obsolete=others, reason="superseded copy"
                    )
                )
            continue
        plan.append(
            SegmentRewrite(source=current, keep=None, obsolete=(current, *others), reason=reason)
        )
    return plan


def is_referenced_segment(
    rlmm: RemoteLogMetadataManager, metadata: RemoteLogSegmentMetadata
) -> bool:
    """Whether a reader of any of the segment's epochs resolves its first offset of that
    epoch to this segment."""
    tip = metadata.topic_id_partition
    for epoch, epoch_start in metadata.segment_leader_epochs.items():
        offset = max(metadata.start_offset, epoch_start)
        found = rlmm.remote_log_segment_metadata(tip, epoch, offset)
        if found is None or found.remote_log_segment_id != metadata.remote_log_segment_id:
            return False
    return True


# ---------------------------------------------------------------------------- rewriting
def chunked_manager(rsm: RemoteStorageManager) -> ChunkedRemoteStorageManager:
    if not isinstance(rsm, ChunkedRemoteStorageManager):
        raise RewriteNotSupportedError(
            f"{rsm!r} does not write the chunked format: nothing to rewrite segments into"
            " (use LocalTieredStorage or S3RemoteStorageManager)"
        )
    return rsm


def read_original_segment(
    rsm: RemoteStorageManager, metadata: RemoteLogSegmentMetadata, directory: Path
) -> LogSegmentData:
    """The segment's original files, read back through ``rsm`` (chunks checked and
    restored) into ``directory``."""
    log_path = directory / "segment.log"
    with rsm.fetch_log_segment(metadata, 0) as stream, open(log_path, "wb") as out:
        shutil.copyfileobj(stream, out, COPY_BYTES)
    if log_path.stat().st_size != metadata.segment_size_in_bytes:
        raise RemoteStorageError(
            f"remote segment {metadata.remote_log_segment_id}: its .log reads back"
            f" {log_path.stat().st_size} bytes, the metadata says"
            f" {metadata.segment_size_in_bytes}; not rewritten"
        )

    def index(index_type: IndexType, name: str, *, optional: bool) -> Path | None:
        try:
            stream = rsm.fetch_index(metadata, index_type)
        except RemoteResourceNotFoundError:
            if optional:
                return None
            raise
        path = directory / name
        with stream, open(path, "wb") as out:
            shutil.copyfileobj(stream, out, COPY_BYTES)
        return path

    offset_index = index(IndexType.OFFSET, "segment.index", optional=False)
    time_index = index(IndexType.TIMESTAMP, "segment.timeindex", optional=False)
    assert offset_index is not None and time_index is not None  # optional=False
    snapshot = index(IndexType.PRODUCER_SNAPSHOT, "segment.snapshot", optional=True)
    transaction_index = (
        None
        if metadata.txn_idx_empty
        else index(IndexType.TRANSACTION, "segment.txnindex", optional=True)
    )
    with rsm.fetch_index(metadata, IndexType.LEADER_EPOCH) as stream:
        epochs = stream.read()
    return LogSegmentData(
        log_segment=log_path,
        offset_index=offset_index,
        time_index=time_index,
        producer_snapshot=snapshot,
        transaction_index=transaction_index,
        leader_epoch_index=epochs,
    )


def rewrite_segment(
    old: RemoteLogSegmentMetadata,
    *,
    rsm: RemoteStorageManager,
    rlmm: RemoteLogMetadataManager,
    fence: LeaderEpochFence,
    broker_id: int,
    clock: Clock = SYSTEM_CLOCK,
    custom_metadata_max_bytes: int = CUSTOM_METADATA_MAX_BYTES_DEFAULT,
) -> RemoteLogSegmentMetadata:
    """A new copy of ``old`` in ``rsm``'s format, COPY_SEGMENT_FINISHED; the old one is left
    as it is. A failure after COPY_SEGMENT_STARTED rolls the new copy back and propagates."""
    partition = old.topic_id_partition.topic_partition
    with tempfile.TemporaryDirectory(prefix="rsm-rewrite-") as scratch:
        data = read_original_segment(rsm, old, Path(scratch))
        fence.check(partition, f"rewrite remote segment {old.remote_log_segment_id.id}")
        started = RemoteLogSegmentMetadata(
            remote_log_segment_id=RemoteLogSegmentId.generate_new(old.topic_id_partition),
            start_offset=old.start_offset,
            end_offset=old.end_offset,
            max_timestamp_ms=old.max_timestamp_ms or largest_timestamp(data.log_segment),
            broker_id=broker_id,
            event_timestamp_ms=clock.milliseconds(),
            segment_size_in_bytes=old.segment_size_in_bytes,
            segment_leader_epochs=dict(old.segment_leader_epochs),
            state=RemoteLogSegmentState.COPY_SEGMENT_STARTED,
            txn_idx_empty=old.txn_idx_empty,
        )
        rlmm.add_remote_log_segment_metadata(started)
        try:
            custom_metadata = rsm.copy_log_segment_data(started, data)
            verify_uploaded_segment(rsm, started, data, log_size_bytes=old.segment_size_in_bytes)
            if custom_metadata is not None and len(custom_metadata) > custom_metadata_max_bytes:
                raise CustomMetadataSizeLimitExceededError(
                    f"partition {partition}: custom metadata of {len(custom_metadata)} bytes"
                    " exceeds remote.log.metadata.custom.metadata.max.bytes="
                    f"{custom_metadata_max_bytes}"
                )
            fence.check(partition, f"finish the rewrite of segment {old.remote_log_segment_id.id}")
            finished = RemoteLogSegmentMetadataUpdate(
                remote_log_segment_id=started.remote_log_segment_id,
                event_timestamp_ms=clock.milliseconds(),
                state=FINISHED,
                broker_id=broker_id,
                custom_metadata=custom_metadata,
            )
            rlmm.update_remote_log_segment_metadata(finished)
        except Exception as exc:
            _roll_back(started, exc, rsm=rsm, rlmm=rlmm, broker_id=broker_id, clock=clock)
            raise
    logger.info(
        "rewrote remote segment partition=%s old_segment_id=%s segment_id=%s start_offset=%d"
        " end_offset=%d",
        partition,
        old.remote_log_segment_id.id,
        started.remote_log_segment_id.id,
        old.start_offset,
        old.end_offset,
    )
    return started.create_with_updates(finished)


def _roll_back(
    started: RemoteLogSegmentMetadata,
    cause: Exception,
    *,
    rsm: RemoteStorageManager,
    rlmm: RemoteLogMetadataManager,
    broker_id: int,
    clock: Clock,
) -> None:
    try:
        delete_segment(
            started, rsm=rsm, rlmm=rlmm, broker_id=broker_id, clock=clock, reason="failed rewrite"
        )
    except Exception as rollback_error:
        cause.add_note(
            f"rolling back segment {started.remote_log_segment_id.id} failed too"
            f" ({rollback_error!r}); `python -m jobs.reconcile` rolls it back after its copy"
            " deadline"
        )


def delete_obsolete(
    obsolete: Sequence[RemoteLogSegmentMetadata],
    *,
    rsm: RemoteStorageManager,
    rlmm: RemoteLogMetadataManager,
    fence: LeaderEpochFence,
    broker_id: int,
    clock: Clock = SYSTEM_CLOCK,
) -> int:
    """Delete the old copies (their state as the RLMM knows it now: one another process
    deleted meanwhile is finished, not deleted twice); the count deleted by this call."""
    if not obsolete:
        return 0
    tip = obsolete[0].topic_id_partition
    current = {m.remote_log_segment_id: m for m in rlmm.list_remote_log_segments(tip)}
    deleted = 0
    for metadata in obsolete:
        now = current.get(metadata.remote_log_segment_id)
        if now is None:
            continue  # DELETE_SEGMENT_FINISHED already
        delete_segment(
            now,
            rsm=rsm,
            rlmm=rlmm,
            broker_id=broker_id,
            clock=clock,
            fence=fence,
            reason="rewritten",
        )
        deleted += 1
    return deleted


@dataclass(slots=True)
class RewriteOutcome:
    """What ``rewrite_partition`` did: new copies written, old copies deleted, and the
    original bytes rewritten."""

    rewritten: int = 0
    deleted: int = 0
    size_bytes: int = 0


def rewrite_partition(
    plan: Sequence[SegmentRewrite],
    *,
    rsm: RemoteStorageManager,
    rlmm: RemoteLogMetadataManager,
    fence: LeaderEpochFence,
    broker_id: int,
    clock: Clock = SYSTEM_CLOCK,
    swap_grace_s: float = SWAP_GRACE_S_DEFAULT,
    on_segment: Callable[[RewriteOutcome], None] | None = None,
) -> RewriteOutcome:
    """Carry out ``plan`` in batches of ``SEGMENTS_PER_SWAP_MAX``: new copies, the grace,
    then the old copies' deletion (see the module docstring)."""
    outcome = RewriteOutcome()
    for start in range(0, len(plan), SEGMENTS_PER_SWAP_MAX):
        batch = plan[start : start + SEGMENTS_PER_SWAP_MAX]
        for item in batch:
            if item.source is not None:
                rewrite_segment(
                    item.source, rsm=rsm, rlmm=rlmm, fence=fence, broker_id=broker_id, clock=clock
                )
                outcome.rewritten += 1
                outcome.size_bytes += item.source.segment_size_in_bytes
                if on_segment is not None:
                    on_segment(outcome)
        if any(item.source is not None for item in batch):
            time.sleep(swap_grace_s)
        for item in batch:
            outcome.deleted += delete_obsolete(
                item.obsolete, rsm=rsm, rlmm=rlmm, fence=fence, broker_id=broker_id, clock=clock
            )
    return outcome
