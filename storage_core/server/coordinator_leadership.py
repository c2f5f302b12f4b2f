"""Tell the coordinators which of their partitions this broker now leads or no longer leads
(Kafka's ``onLeadershipChange`` of ``BrokerServer``: group coordinator on
``__consumer_offsets``, transaction coordinator on ``__transaction_state`` with the leader
epoch as its coordinator epoch)."""

from __future__ import annotations

from storage_core.coordinator.group.group_coordinator import GroupCoordinator
from storage_core.coordinator.group.offsets_records import OFFSETS_TOPIC_NAME
from storage_core.coordinator.transaction.transaction_coordinator import TransactionCoordinator
from storage_core.coordinator.transaction.transaction_log import TRANSACTION_STATE_TOPIC_NAME
from storage_core.replication.leader_and_isr import LeadershipChanges


def _resigned(changes: LeadershipChanges, topic: str) -> list[int]:
    return [
        p.topic_partition.partition for p in changes.followers if p.topic_partition.topic == topic
    ] + [tp.partition for tp in changes.stopped if tp.topic == topic]


def notify_coordinators(
    changes: LeadershipChanges,
    group_coordinator: GroupCoordinator | None,
    transaction_coordinator: TransactionCoordinator | None,
) -> None:
    if group_coordinator is not None:
        group_coordinator.on_leadership_changes(
            elected=[
                p.topic_partition.partition
                for p in changes.leaders
                if p.topic_partition.topic == OFFSETS_TOPIC_NAME
            ],
            resigned=_resigned(changes, OFFSETS_TOPIC_NAME),
        )
    if transaction_coordinator is not None:
        transaction_coordinator.on_leadership_changes(
            elected={
                p.topic_partition.partition: p.leader_epoch
                for p in changes.leaders
                if p.topic_partition.topic == TRANSACTION_STATE_TOPIC_NAME
            },
            resigned=_resigned(changes, TRANSACTION_STATE_TOPIC_NAME),
        )
