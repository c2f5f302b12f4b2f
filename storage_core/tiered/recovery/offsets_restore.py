"""Consumer group offsets for a restored topic, from the newest offsets backup in the bucket.

The nightly backup (``jobs.backup_consumer_offsets``) holds each group's committed offsets in
the remote-enabled topics, by topic name and id. For a topic restored from the bucket
(``jobs.restore_topic --restore-offsets``), each group that had committed offsets in the
source incarnation gets them committed again in the target, clamped to what was restored:

- below the restored log start (history that expired, or a gap left out): the log start;
- above the offset producers continue at (records the bucket never had: acknowledged after
  the last copy): that offset;
- otherwise as it was, with its leader epoch (the restored lineage keeps the source's epochs)
  and metadata. A clamped offset loses its epoch (-1): it names no record the group read.

A group resumes from its restored offset: at most the records consumed after the backup are
delivered again, never one skipped. ``plan_group_offsets`` is pure; ``newest_backup`` reads.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from storage_core.client.group_offsets import OffsetAndMetadata
from storage_core.common import TopicPartition, Uuid
from storage_core.tiered.recovery.offsets_backup import OffsetsBackup
from storage_core.tiered.recovery.restore_plan import PartitionRestorePlan
from storage_core.tiered.remote_object_keys import (
    InvalidRemoteObjectKeyError,
    offsets_backups_prefix,
    parse_offsets_backup_key,
)
from storage_core.tiered.remote_storage_manager import RemoteObjectStore


@dataclass(frozen=True, slots=True, kw_only=True)
class RestoredOffset:
    target: TopicPartition
    offset: OffsetAndMetadata
    backed_up: int  # the offset in the backup
    clamped: bool


def plan_group_offsets(
    backup: OffsetsBackup,
    *,
    source: str,
    source_id: Uuid,
    target: str,
    plans: Mapping[int, PartitionRestorePlan],
) -> dict[str, list[RestoredOffset]]:
    """Group id -> the offsets to commit in ``target`` (only partitions restored)."""
    restored: dict[str, list[RestoredOffset]] = {}
    for group in backup.groups:
        for topic in group.topics:
            if topic.topic != source or topic.topic_id != source_id:
                continue
            for committed in topic.partitions:
                plan = plans.get(committed.partition)
                if plan is None or plan.stopped is not None:
                    continue
                low, high = plan.log_start_offset, plan.next_offset
                offset = min(max(committed.committed_offset, low), high)
                clamped = offset != committed.committed_offset
                restored.setdefault(group.group_id, []).append(
                    RestoredOffset(
                        target=TopicPartition(target, committed.partition),
                        offset=OffsetAndMetadata(
                            offset=offset,
                            leader_epoch=-1 if clamped else committed.committed_leader_epoch,
                            metadata=committed.metadata,
                        ),
                        backed_up=committed.committed_offset,
                        clamped=clamped,
                    )
                )
    return restored


def newest_backup(store: RemoteObjectStore) -> tuple[str, OffsetsBackup] | None:
    """The newest consumer offsets backup under the store's prefix (key and content), or
    ``None`` when there is none."""
    newest: tuple[int, str] | None = None
    for info in store.list_objects(offsets_backups_prefix(store.prefix)):
        try:
            taken_at_ms = parse_offsets_backup_key(info.key, store.prefix).taken_at_ms
        except InvalidRemoteObjectKeyError:
            continue
        if newest is None or taken_at_ms > newest[0]:
            newest = (taken_at_ms, info.key)
    if newest is None:
        return None
    key = newest[1]
    return key, OffsetsBackup.from_bytes(store.get_object(key), where=key)
