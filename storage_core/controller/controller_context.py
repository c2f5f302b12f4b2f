"""``ControllerContext``: what the active controller knows of the cluster, read from ZooKeeper
at failover and kept current from the watches it handles (Kafka's class of that name).

Only the controller's event thread reads or changes it: no lock. ZooKeeper stays the source
of truth; the context is a cache the controller rebuilds whenever it becomes controller.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from storage_core.common import TopicPartition, Uuid
from storage_core.zk.controller_zk import ControllerEpoch
from storage_core.zk.zk_data import (
    NO_LEADER,
    BrokerRegistration,
    LeaderAndIsr,
    ReplicaAssignment,
)


@dataclass(slots=True)
class ControllerContext:
    epoch: ControllerEpoch | None = None
    live_brokers: dict[int, BrokerRegistration] = field(default_factory=dict)
    shutting_down: set[int] = field(default_factory=set)
    topic_ids: dict[str, Uuid | None] = field(default_factory=dict)
    assignments: dict[TopicPartition, ReplicaAssignment] = field(default_factory=dict)
    states: dict[TopicPartition, LeaderAndIsr] = field(default_factory=dict)
    topics_to_delete: set[str] = field(default_factory=set)
    # partitions whose assignment has adding or removing replicas (Kafka's
    # partitionsBeingReassigned): their state znodes are watched for ISR changes
    partitions_being_reassigned: set[TopicPartition] = field(default_factory=set)

    def clear(self) -> None:
        self.epoch = None
        self.live_brokers.clear()
        self.shutting_down.clear()
        self.topic_ids.clear()
        self.assignments.clear()
        self.states.clear()
        self.topics_to_delete.clear()
        self.partitions_being_reassigned.clear()

    @property
    def live_broker_ids(self) -> set[int]:
        """Registered brokers that are not shutting down: candidates for leadership."""
        return set(self.live_brokers) - self.shutting_down

    def partitions_of(self, topic: str) -> list[TopicPartition]:
        return sorted(tp for tp in self.assignments if tp.topic == topic)

    def partitions_on_broker(self, broker_id: int) -> list[TopicPartition]:
        return sorted(tp for tp, a in self.assignments.items() if broker_id in a.replicas)

    def partitions_led_by(self, broker_id: int) -> list[TopicPartition]:
        return sorted(tp for tp, s in self.states.items() if s.leader == broker_id)

    def offline_partitions(self) -> list[TopicPartition]:
        """Partitions without a live leader, and new ones without a state (not being deleted)."""
        return sorted(
            tp
            for tp in self.assignments
            if tp.topic not in self.topics_to_delete
            and (
                tp not in self.states
                or self.states[tp].leader == NO_LEADER
                or self.states[tp].leader not in self.live_brokers
            )
        )

    def remove_topic(self, topic: str) -> None:
        for tp in self.partitions_of(topic):
            self.assignments.pop(tp, None)
            self.states.pop(tp, None)
            self.partitions_being_reassigned.discard(tp)
        self.topic_ids.pop(topic, None)
        self.topics_to_delete.discard(topic)
