"""``TopicDeletionManager``: deleting the topics marked in ``/admin/delete_topics`` (Kafka's
class of that name, ZooKeeper mode).

    marked     the topic joins the context's topics to delete; its partitions lose their
               leaders (OfflinePartition: leader -1 at the next leader epoch)
    waiting    each replica's broker removes its logs and acknowledges under the marker
    deleted    every replica acknowledged: the topic's znodes and its marker go

A marker whose topic does not exist is cleared, as Kafka ignores deletions of unknown topics.
Only the controller's event thread calls it: no lock.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from storage_core.common import TopicPartition
from storage_core.controller.controller_context import ControllerContext
from storage_core.controller.partition_state_machine import PartitionStateMachine, without_leader
from storage_core.zk.controller_zk import ControllerEpoch
from storage_core.zk.kafka_zk_client import KafkaZkClient
from storage_core.zk.zk_data import NO_LEADER, LeaderAndIsr

# the controller's lines keep the logger they had before its state machines had modules
logger = logging.getLogger("storage_core.controller.kafka_controller")


class TopicDeletionManager:
    def __init__(
        self,
        zk: KafkaZkClient,
        context: ControllerContext,
        partition_state_machine: PartitionStateMachine,
        *,
        epoch: Callable[[], ControllerEpoch],
        is_active: Callable[[], bool],
        load_topic: Callable[[str], list[TopicPartition]],
        watch: Callable[[Any], None],
    ) -> None:
        """``epoch()``: the controller's epoch, raising ``ControllerMovedError`` once it is
        not the controller; ``is_active()``: whether it is; ``load_topic(topic)``: read a
        topic into the context, returning its partitions the context did not know; ``watch``:
        the controller's watch on the markers."""
        self.zk = zk
        self.context = context
        self._partition_state_machine = partition_state_machine
        self._epoch = epoch
        self._is_active = is_active
        self._load_topic = load_topic
        self._watch_deletions = watch

    def enqueue_topics_for_deletion(self, topics: Iterable[str]) -> None:
        """Mark topics for deletion (DeleteTopics); they go once every replica acknowledged."""
        for topic in topics:
            self.zk.mark_topic_for_deletion(topic)
        self.resume_deletions()

    def resume_deletions(self) -> None:
        """Topics marked for deletion lose their leaders; once every replica's broker has
        acknowledged removing its logs, the topic's znodes go."""
        if not self._is_active():
            return
        ctx = self.context
        marked = set(self.zk.get_topics_marked_for_deletion(watch=self._watch_deletions))
        epoch = self._epoch()
        for topic in sorted(marked):
            # a topic written since the last TopicChange is read now; one that is still
            # unknown is gone, and its marker (with any of its znodes left) is cleared
            if topic not in ctx.topic_ids and not self._load_topic(topic):
                logger.warning("deletion of an unknown topic ignored, topic=%s", topic)
                self.zk.delete_topic_znodes(epoch, topic)
                continue
            if topic not in ctx.topics_to_delete or any(
                ctx.states.get(tp) is not None and ctx.states[tp].leader != NO_LEADER
                for tp in ctx.partitions_of(topic)
            ):
                ctx.topics_to_delete.add(topic)
                self._stop_partitions(topic)
            replicas = {b for tp in ctx.partitions_of(topic) for b in ctx.assignments[tp].replicas}
            acknowledged = self.zk.get_topic_deletion_acknowledgements(
                topic, watch=self._watch_deletions
            )
            if replicas <= acknowledged:
                self.zk.delete_topic_znodes(epoch, topic)
                ctx.remove_topic(topic)
                logger.info("topic deleted, topic=%s", topic)
            else:
                logger.info(
                    "topic deletion waits for replicas, topic=%s waiting_for=%s",
                    topic,
                    sorted(replicas - acknowledged),
                )

    def _stop_partitions(self, topic: str) -> None:
        ctx = self.context
        changes = {
            tp: without_leader(ctx.states[tp], self._epoch().epoch)
            for tp in ctx.partitions_of(topic)
            if tp in ctx.states and ctx.states[tp].leader != NO_LEADER
        }
        self._partition_state_machine.write_states(changes, reread=self._reread_stop)

    def _reread_stop(self, _tp: TopicPartition, state: LeaderAndIsr) -> LeaderAndIsr | None:
        if state.leader == NO_LEADER:
            return None
        return without_leader(state, self._epoch().epoch)
