"""What the ``topic_manifests`` and ``backup_consumer_offsets`` jobs write, built from what they
read (metadata, configs, remote segments, committed offsets, high watermarks). Pure.

- ``partition_remote_log``: one partition's entry of a topic manifest, from its segments'
  metadata: only COPY_SEGMENT_FINISHED segments count (a copy in progress or a deletion
  started is not something a restore can rely on).
- ``topic_manifest``: the manifest of one topic.
- ``offsets_backup``: the backup of the groups' offsets in the remote-enabled topics.
- ``backups_to_delete``: the backup keys beyond the newest ``keep`` (other keys under the
  backups' prefix are never returned).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from storage_core.client.group_offsets import OffsetAndMetadata
from storage_core.common import TopicPartition, Uuid
from storage_core.tiered.metadata.metadata import RemoteLogSegmentMetadata
from storage_core.tiered.metadata.states import RemoteLogSegmentState
from storage_core.tiered.recovery.offsets_backup import (
    CommittedOffset,
    GroupOffsets,
    OffsetsBackup,
    TopicHighWatermarks,
    TopicOffsets,
)
from storage_core.tiered.recovery.topic_manifest import (
    DescribedConfig,
    PartitionRemoteLog,
    TopicManifest,
    topic_configs,
)
from storage_core.tiered.remote_object_keys import (
    InvalidRemoteObjectKeyError,
    parse_offsets_backup_key,
)

KEEP_MAX = 100_000


def partition_remote_log(
    partition: int, segments: Iterable[RemoteLogSegmentMetadata]
) -> PartitionRemoteLog:
    """The partition's remote log: lowest start and highest end offset (inclusive) of its
    COPY_SEGMENT_FINISHED segments, their count and bytes."""
    finished = [s for s in segments if s.state is RemoteLogSegmentState.COPY_SEGMENT_FINISHED]
    return PartitionRemoteLog(
        partition=partition,
        remote_log_start_offset=min((s.start_offset for s in finished), default=None),
        remote_log_end_offset=max((s.end_offset for s in finished), default=None),
        remote_segments=len(finished),
        remote_bytes=sum(s.segment_size_in_bytes for s in finished),
    )


def topic_manifest(
    *,
    topic: str,
    topic_id: Uuid,
    replication_factor: int,
    configs: Iterable[DescribedConfig],
    segments_by_partition: Mapping[int, Sequence[RemoteLogSegmentMetadata]],
    written_at_ms: int,
) -> TopicManifest:
    """The manifest of one topic whose partitions are the keys of ``segments_by_partition``."""
    return TopicManifest(
        topic=topic,
        topic_id=topic_id,
        partition_count=len(segments_by_partition),
        replication_factor=replication_factor,
        configs=topic_configs(configs),
        partitions=tuple(
            partition_remote_log(p, segments_by_partition[p]) for p in sorted(segments_by_partition)
        ),
        written_at_ms=written_at_ms,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicAtBackup:
    """A remote-enabled topic as the backup saw it: its id and partitions' high watermarks."""

    topic: str
    topic_id: Uuid
    high_watermarks: Mapping[int, int]


def offsets_backup(
    *,
    taken_at_ms: int,
    topics: Sequence[TopicAtBackup],
    committed: Mapping[str, Mapping[TopicPartition, OffsetAndMetadata]],
) -> OffsetsBackup:
    """The groups' committed offsets in ``topics`` only (of a partition the topic has); a
    group with none there is left out."""
    by_name = {t.topic: t for t in topics}
    groups: list[GroupOffsets] = []
    for group_id in sorted(committed):
        by_topic: dict[str, list[CommittedOffset]] = {}
        for tp, offset in committed[group_id].items():
            known = by_name.get(tp.topic)
            if known is None or tp.partition not in known.high_watermarks:
                continue
            by_topic.setdefault(tp.topic, []).append(
                CommittedOffset(
                    partition=tp.partition,
                    committed_offset=offset.offset,
                    committed_leader_epoch=max(offset.leader_epoch, -1),
                    metadata=offset.metadata,
                )
            )
        if by_topic:
            groups.append(
                GroupOffsets(
                    group_id=group_id,
                    topics=tuple(
                        TopicOffsets(
                            topic=name,
                            topic_id=by_name[name].topic_id,
                            partitions=tuple(sorted(offsets, key=lambda o: o.partition)),
                        )
                        for name, offsets in sorted(by_topic.items())
                    ),
                )
            )
    return OffsetsBackup(
        taken_at_ms=taken_at_ms,
        topics=tuple(
            TopicHighWatermarks(
                topic=t.topic, topic_id=t.topic_id, high_watermarks=dict(t.high_watermarks)
            )
            for t in sorted(topics, key=lambda t: t.topic)
        ),
        groups=tuple(groups),
    )


def backups_to_delete(keys: Iterable[str], *, key_prefix: str, keep: int) -> list[str]:
    """The offsets backup keys among ``keys`` older than the newest ``keep`` (oldest first);
    a key that is not an offsets backup is never among them."""
    if not 1 <= keep <= KEEP_MAX:
        raise ValueError(f"keep must be within 1..{KEEP_MAX}, got {keep}")
    backups: list[tuple[int, str]] = []
    for key in keys:
        try:
            backups.append((parse_offsets_backup_key(key, key_prefix).taken_at_ms, key))
        except InvalidRemoteObjectKeyError:
            continue
    backups.sort()
    return [key for _, key in backups[: max(len(backups) - keep, 0)]]
