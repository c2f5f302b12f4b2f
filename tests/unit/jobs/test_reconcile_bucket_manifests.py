"""The reconcile plan keeps topic manifests and consumer offsets backups, counted apart from
other foreign keys, even where no metadata names the topic (a topic deleted, or a bucket
read by a new cluster)."""

from __future__ import annotations

from storage_core.tiered.metadata.states import RemoteLogSegmentState
from storage_core.tiered.remote_object_keys import offsets_backup_key, topic_manifest_key
from storage_core.tiered.remote_storage_manager import RemoteObjectInfo
from tests.unit.jobs.test_reconcile_plan import (
    DEADLINE_MS,
    NOW_MS,
    OTHER_TIP,
    PREFIX,
    TIP,
    objects_of,
    plan,
    segment,
)


def old_object(key: str) -> RemoteObjectInfo:
    return RemoteObjectInfo(key=key, size_bytes=100, last_modified_ms=NOW_MS - 100 * DEADLINE_MS)


def test_topic_manifests_and_offsets_backups_are_kept_and_counted_apart() -> None:
    finished = segment(0, RemoteLogSegmentState.COPY_SEGMENT_FINISHED, age_ms=10 * DEADLINE_MS)
    manifests = [
        topic_manifest_key(PREFIX, TIP.topic_partition.topic, TIP.topic_id),
        # a topic the metadata knows nothing of (deleted, or another cluster's)
        topic_manifest_key(PREFIX, OTHER_TIP.topic_partition.topic, OTHER_TIP.topic_id),
    ]
    backups = [offsets_backup_key(PREFIX, NOW_MS - 86_400_000), offsets_backup_key(PREFIX, NOW_MS)]
    stray = f"{PREFIX}/NOTES.txt"
    result = plan(
        {TIP: [finished]},
        [*objects_of(finished), *(old_object(k) for k in [*manifests, *backups, stray])],
        orphan_grace_ms=0,
    )
    assert result.actions == () and result.lost == ()
    assert result.topic_manifest_keys == tuple(sorted(manifests))
    assert result.offsets_backup_keys == tuple(backups)
    assert result.foreign_keys == (stray,)
