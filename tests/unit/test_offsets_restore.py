"""Which offsets a restore commits for each group: the backup's, clamped to what was restored."""

from __future__ import annotations

from storage_core.common import TopicIdPartition, TopicPartition, Uuid
from storage_core.tiered.recovery.offsets_backup import (
    CommittedOffset,
    GroupOffsets,
    OffsetsBackup,
    TopicHighWatermarks,
    TopicOffsets,
)
from storage_core.tiered.recovery.offsets_restore import plan_group_offsets
from storage_core.tiered.recovery.restore_plan import OffsetGap, PartitionRestorePlan
from tests.unit.test_restore_plan import segment

SOURCE_ID = Uuid(1, 2)
OTHER_ID = Uuid(3, 4)


def restored(start: int, end: int) -> PartitionRestorePlan:
    return PartitionRestorePlan(
        source=TopicIdPartition(SOURCE_ID, TopicPartition("orders", 0)),
        segments=(segment(start, end, {2: start}, [(2, start)]),),
        leader_epochs=(),
    )


def backup(*offsets: tuple[str, Uuid, int, int]) -> OffsetsBackup:
    groups = {}
    for group, topic_id, partition, offset in offsets:
        groups.setdefault((group, topic_id), []).append(
            CommittedOffset(partition=partition, committed_offset=offset, committed_leader_epoch=2)
        )
    return OffsetsBackup(
        taken_at_ms=1,
        topics=tuple(
            TopicHighWatermarks(topic="orders", topic_id=tid, high_watermarks={0: 900, 1: 900})
            for tid in {tid for _g, tid, _p, _o in offsets}
        ),
        groups=tuple(
            GroupOffsets(
                group_id=group,
                topics=(TopicOffsets(topic="orders", topic_id=tid, partitions=tuple(parts)),),
            )
            for (group, tid), parts in groups.items()
        ),
    )


def test_offsets_are_clamped_to_the_restored_range_and_lose_their_epoch_when_moved() -> None:
    plans = {0: restored(100, 499), 1: restored(0, 299)}
    planned = plan_group_offsets(
        backup(
            ("within", SOURCE_ID, 0, 250),
            ("expired", SOURCE_ID, 0, 40),
            ("beyond", SOURCE_ID, 1, 800),
        ),
        source="orders",
        source_id=SOURCE_ID,
        target="orders-restored",
        plans=plans,
    )
    by_group = {
        g: [(o.target, o.offset.offset, o.offset.leader_epoch, o.clamped) for o in v]
        for g, v in planned.items()
    }
    assert by_group == {
        "within": [(TopicPartition("orders-restored", 0), 250, 2, False)],
        "expired": [(TopicPartition("orders-restored", 0), 100, -1, True)],
        "beyond": [(TopicPartition("orders-restored", 1), 300, -1, True)],
    }
    # a backup of another incarnation of the name restores nothing
    other = backup(("within", OTHER_ID, 0, 250))
    assert (
        plan_group_offsets(
            other, source="orders", source_id=SOURCE_ID, target="orders-restored", plans=plans
        )
        == {}
    )


def test_partitions_not_restored_get_no_offset() -> None:
    stopped = PartitionRestorePlan(
        source=TopicIdPartition(SOURCE_ID, TopicPartition("orders", 0)),
        segments=(),
        leader_epochs=(),
        gap=OffsetGap(10, 19),
        stopped="offsets 10..19 are missing",
    )
    planned = plan_group_offsets(
        backup(("g", SOURCE_ID, 0, 5), ("g", SOURCE_ID, 1, 5)),
        source="orders",
        source_id=SOURCE_ID,
        target="t",
        plans={0: stopped},
    )
    assert planned == {}
