"""``ZkMetadataListener``: how controller decisions reach a broker. It keeps the broker's
``MetadataCache`` equal to what ZooKeeper holds, through watches, and tells the broker what
changed for the partitions it hosts.

Watched (each watch is one-shot and set again when it fires):

    /controller                         the controller's id
    /brokers/ids                        live brokers and endpoints
    /brokers/topics                     topics created or removed
    /brokers/topics/<t>                 partitions added
    /brokers/topics/<t>/partitions/<p>/state   leader, leader epoch, ISR
    /config/topics/<t>                  topic configs
    /admin/delete_topics                topics marked for deletion

All reads and the callbacks run on the listener's event thread, in the order ZooKeeper
reported the changes. After the session is re-established (a new session loses its watches)
everything is read again. ``on_partitions`` receives the partitions whose state, replicas or
topic configs changed (the role of Kafka's LeaderAndIsr request: the broker becomes leader or
follower, or stops hosting); ``on_deletion_marked`` the topics to remove locally (the role of
StopReplica with delete), after which the broker acknowledges in ZooKeeper.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from storage_core.common import TopicPartition
from storage_core.controller import zk_data
from storage_core.controller.event_manager import EventManager
from storage_core.controller.kafka_zk_client import KafkaZkClient
from storage_core.replication.metadata_cache import (
    MetadataCache,
    MetadataImage,
    PartitionMetadata,
    TopicMetadata,
    with_offline_replicas,
)

logger = logging.getLogger(__name__)

PartitionsCallback = Callable[
    [MetadataImage, Mapping[TopicPartition, PartitionMetadata | None]], None
]
DeletionCallback = Callable[[MetadataImage, set[str]], None]


class ZkMetadataListener:
    def __init__(
        self,
        broker_id: int,
        zk: KafkaZkClient,
        cache: MetadataCache,
        *,
        on_partitions: PartitionsCallback | None = None,
        on_deletion_marked: DeletionCallback | None = None,
    ) -> None:
        """``on_partitions(image, changes)``: ``changes`` maps each changed partition to its
        new metadata, or to None when it no longer exists."""
        self.broker_id = broker_id
        self.zk = zk
        self.cache = cache
        self._on_partitions = on_partitions
        self._on_deletion_marked = on_deletion_marked
        self._events = EventManager(f"metadata-listener-{broker_id}")
        # each known marker's creation zxid: a marker replaced between two reads is new
        self._known_marked: dict[str, int] = {}
        self._watchers: dict[tuple[str, object], Callable[[Any], None]] = {}

    def start(self) -> None:
        """Read everything once (synchronously, so the cache is full when this returns), then
        follow changes."""
        self._events.start()
        self._events.call("Refresh", self._refresh).result(timeout=60)
        self.zk.add_session_listener(self._on_session_state)

    def stop(self) -> None:
        self._events.stop()

    def sync(self, timeout_s: float = 30.0) -> None:
        """Wait until every change reported so far has been applied (tests, shutdown)."""
        self._events.call("Sync", lambda: None).result(timeout=timeout_s)

    def _on_session_state(self, state: str) -> None:
        if state == "CONNECTED":
            self._events.put("Refresh", self._refresh)

    # --- watches (on ZooKeeper's thread: only enqueue) ----------------------------------------

    def _watch(
        self, name: str, handler: Callable[[], None], key: object = None
    ) -> Callable[[Any], None]:
        """The watch for one znode, the same function each time: ZooKeeper clients keep a set
        of watchers per znode, so setting it again does not add a second one."""
        watch = self._watchers.get((name, key))
        if watch is None:

            def watch(_event: Any) -> None:
                self._events.put(name, handler)

            self._watchers[(name, key)] = watch
        return watch

    # --- reads (on the event thread) ---------------------------------------------------------

    def _refresh(self) -> None:
        old = self.cache.image()
        controller = self.zk.get_controller(watch=self._watch("Controller", self._read_controller))
        brokers = self.zk.get_all_brokers(watch=self._watch("Brokers", self._read_brokers))
        topics = {}
        names = self.zk.get_all_topics(watch=self._watch("Topics", self._read_topics))
        for name in names:
            topic = self._read_topic_metadata(name)
            if topic is not None:
                topics[name] = topic
        marked = self.zk.get_deletion_markers(watch=self._watch("Deletions", self._read_deletions))
        topics = {n: replace(t, marked_for_deletion=n in marked) for n, t in topics.items()}
        image = MetadataImage(
            cluster_id=old.cluster_id,
            controller_id=controller.broker_id if controller is not None else -1,
            brokers=brokers,
            topics=topics,
        )
        self._publish(old, image)
        self._notify_deletions(marked)

    def _read_topic_metadata(self, name: str) -> TopicMetadata | None:
        read = self.zk.get_topic_assignment(
            name, watch=self._watch("Topic", lambda: self._read_topic(name), name)
        )
        if read is None:
            return None
        assignment, _ = read
        configs = self.zk.get_topic_config(name)
        self.zk.zk.exists(
            zk_data.topic_config_path(name),
            watch=self._watch("TopicConfig", lambda: self._read_topic(name), name),
        )
        partitions = []
        for partition, replicas in sorted(assignment.partitions.items()):
            tp = TopicPartition(name, partition)
            state = self._read_state(tp)
            partitions.append(
                PartitionMetadata(
                    partition=partition,
                    replicas=replicas.replicas,
                    leader=state.leader if state else zk_data.NO_LEADER,
                    leader_epoch=state.leader_epoch if state else -1,
                    isr=state.isr if state else (),
                    partition_epoch=state.zk_version if state else -1,
                    controller_epoch=state.controller_epoch if state else 0,
                )
            )
        return TopicMetadata(
            name=name, topic_id=assignment.topic_id, partitions=tuple(partitions), configs=configs
        )

    def _read_state(self, tp: TopicPartition) -> zk_data.LeaderAndIsr | None:
        path = zk_data.partition_state_path(tp)
        watch = self._watch("PartitionState", lambda: self._read_partition(tp), tp)
        if self.zk.zk.exists(path, watch=watch) is None:
            return None  # not yet created: the exists-watch fires when it is
        return self.zk.get_partition_states([tp]).get(tp)

    def _read_controller(self) -> None:
        controller = self.zk.get_controller(watch=self._watch("Controller", self._read_controller))
        old = self.cache.image()
        self._publish(old, replace(old, controller_id=controller.broker_id if controller else -1))

    def _read_brokers(self) -> None:
        brokers = self.zk.get_all_brokers(watch=self._watch("Brokers", self._read_brokers))
        old = self.cache.image()
        self._publish(old, replace(old, brokers=brokers))

    def _read_topics(self) -> None:
        names = set(self.zk.get_all_topics(watch=self._watch("Topics", self._read_topics)))
        old = self.cache.image()
        topics = {n: t for n, t in old.topics.items() if n in names}
        for name in sorted(names - set(old.topics)):
            topic = self._read_topic_metadata(name)
            if topic is not None:
                topics[name] = replace(topic, marked_for_deletion=name in self._known_marked)
        self._publish(old, replace(old, topics=topics))

    def _read_topic(self, name: str) -> None:
        old = self.cache.image()
        if name not in old.topics:
            return  # removed meanwhile: the topics watch handles it
        topic = self._read_topic_metadata(name)
        topics = dict(old.topics)
        if topic is None:
            topics.pop(name, None)
        else:
            topics[name] = replace(topic, marked_for_deletion=old.topics[name].marked_for_deletion)
        self._publish(old, replace(old, topics=topics))

    def _read_partition(self, tp: TopicPartition) -> None:
        old = self.cache.image()
        topic = old.topics.get(tp.topic)
        current = topic.partition(tp.partition) if topic is not None else None
        if topic is None or current is None:
            return
        state = self._read_state(tp)
        if state is None:
            return
        updated = replace(
            current,
            leader=state.leader,
            leader_epoch=state.leader_epoch,
            isr=state.isr,
            partition_epoch=state.zk_version,
            controller_epoch=state.controller_epoch,
        )
        partitions = tuple(updated if p.partition == tp.partition else p for p in topic.partitions)
        self._publish(
            old,
            replace(old, topics={**old.topics, tp.topic: replace(topic, partitions=partitions)}),
        )

    def _read_deletions(self) -> None:
        marked = self.zk.get_deletion_markers(watch=self._watch("Deletions", self._read_deletions))
        old = self.cache.image()
        topics = {n: replace(t, marked_for_deletion=n in marked) for n, t in old.topics.items()}
        self._publish(old, replace(old, topics=topics))
        self._notify_deletions(marked)

    # --- publishing --------------------------------------------------------------------------

    def _publish(self, old: MetadataImage, new: MetadataImage) -> None:
        """Tell the broker first, then show the new picture to request handlers: a handler
        that sees a partition led here finds it hosted (as a broker applies LeaderAndIsr
        before it answers Metadata with the new leader)."""
        image = with_offline_replicas(new)
        if self._on_partitions is not None:
            changes = _partition_changes(old, image)
            if changes:
                self._on_partitions(image, changes)
        self.cache.set_image(image)

    def _notify_deletions(self, marked: dict[str, int]) -> None:
        fresh = {topic for topic, zxid in marked.items() if self._known_marked.get(topic) != zxid}
        replaced = sorted(fresh & set(self._known_marked))
        if replaced:
            logger.info("deletion markers replaced since the last read, topics=%s", replaced)
        self._known_marked = dict(marked)
        if fresh and self._on_deletion_marked is not None:
            self._on_deletion_marked(self.cache.image(), fresh)


def _partition_changes(
    old: MetadataImage, new: MetadataImage
) -> dict[TopicPartition, PartitionMetadata | None]:
    """Partitions whose replicas, leader, epoch or ISR changed, or whose topic's configs did;
    None for those that no longer exist."""
    changes: dict[TopicPartition, PartitionMetadata | None] = {}
    for name in set(old.topics) | set(new.topics):
        before = old.topics.get(name)
        after = new.topics.get(name)
        configs_changed = (
            before is not None and after is not None and before.configs != after.configs
        )
        indexes = {p.partition for t in (before, after) if t is not None for p in t.partitions}
        for index in indexes:
            was = before.partition(index) if before is not None else None
            now = after.partition(index) if after is not None else None
            if _essence(was) != _essence(now) or (configs_changed and now is not None):
                changes[TopicPartition(name, index)] = now
    return changes


def _essence(p: PartitionMetadata | None) -> tuple[Any, ...] | None:
    """What a broker acts on (offline replicas aside: they follow from live brokers)."""
    if p is None:
        return None
    return (p.replicas, p.leader, p.leader_epoch, p.isr)
