"""What the topic_manifests and backup_consumer_offsets jobs write, planned from what they
read: only finished segments count, only the remote-enabled topics' offsets are kept, and the
backups beyond the newest N are the only keys ever deleted."""

from __future__ import annotations

import pytest

from jobs.planning.bucket_manifests import (
    TopicAtBackup,
    backups_to_delete,
    offsets_backup,
    partition_remote_log,
)
from storage_core.client.group_offsets import OffsetAndMetadata
from storage_core.common import TopicPartition
from storage_core.tiered.metadata.states import RemoteLogSegmentState
from storage_core.tiered.remote_object_keys import offsets_backup_key, offsets_backups_prefix
from tests.unit.jobs.test_reconcile_plan import PREFIX, TIP, segment

FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED


def test_only_finished_segments_make_the_remote_log() -> None:
    segments = [
        segment(10, FINISHED),
        segment(20, FINISHED),
        segment(30, RemoteLogSegmentState.COPY_SEGMENT_STARTED),
        segment(0, RemoteLogSegmentState.DELETE_SEGMENT_STARTED),
    ]
    log = partition_remote_log(0, segments)
    assert (log.remote_log_start_offset, log.remote_log_end_offset) == (10, 29)
    assert (log.remote_segments, log.remote_bytes) == (2, 200)
    empty = partition_remote_log(1, [segment(0, RemoteLogSegmentState.COPY_SEGMENT_STARTED)])
    assert (empty.remote_log_start_offset, empty.remote_segments) == (None, 0)


def test_a_backup_keeps_the_remote_enabled_topics_offsets_only() -> None:
    orders = TopicAtBackup(topic="orders", topic_id=TIP.topic_id, high_watermarks={0: 50})
    backup = offsets_backup(
        taken_at_ms=1,
        topics=[orders],
        committed={
            "billing": {
                TopicPartition("orders", 0): OffsetAndMetadata(
                    offset=40, leader_epoch=2, metadata="m"
                ),
                TopicPartition("orders", 9): OffsetAndMetadata(
                    offset=1, leader_epoch=-1, metadata=""
                ),
                TopicPartition("clicks", 0): OffsetAndMetadata(
                    offset=7, leader_epoch=-1, metadata=""
                ),
            },
            "clicks-only": {
                TopicPartition("clicks", 0): OffsetAndMetadata(
                    offset=7, leader_epoch=-1, metadata=""
                )
            },
            "idle": {},
        },
    )
    assert [g.group_id for g in backup.groups] == ["billing"]
    ((offsets,),) = [backup.groups[0].topics]
    assert offsets.topic == "orders" and offsets.topic_id == TIP.topic_id
    assert [
        (p.partition, p.committed_offset, p.committed_leader_epoch) for p in offsets.partitions
    ] == [(0, 40, 2)]


def test_retention_deletes_the_oldest_backups_and_nothing_else() -> None:
    backups = [offsets_backup_key(PREFIX, ms) for ms in (5, 1, 3, 4, 2)]
    others = [
        offsets_backups_prefix(PREFIX) + "README.json",
        f"{PREFIX}/orders-{TIP.topic_id}/topic-manifest.json",
        offsets_backup_key("another-prefix", 0),
    ]
    doomed = backups_to_delete([*backups, *others], key_prefix=PREFIX, keep=2)
    assert doomed == [offsets_backup_key(PREFIX, ms) for ms in (1, 2, 3)]
    assert backups_to_delete(backups, key_prefix=PREFIX, keep=30) == []
    with pytest.raises(ValueError, match="keep"):
        backups_to_delete(backups, key_prefix=PREFIX, keep=0)
