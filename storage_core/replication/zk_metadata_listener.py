"""``ZkMetadataListener``: how controller decisions reach a broker. It keeps the broker's
``MetadataCache`` equal to what ZooKeeper holds, through watches, and tells the broker what
changed for the partitions it hosts.

Watched (each watch is one-shot and set again when it fires):

    /controller                         the controller's id
    /brokers/ids                        live brokers and endpoints
    /brokers/topics                     topics created or removed
    /brokers/topics/<t>                 partitions added
    /brokers/topics/<t>/partitions      partitions given their states (children)
    /brokers/topics/<t>/partitions/<p>/state   leader, leader epoch, ISR
    /config/topics/<t>                  topic configs
    /admin/delete_topics                topics marked for deletion

A topic is listed together with its partitions' states, as a Kafka broker learns a topic from
the controller's UpdateMetadata, which carries them: the controller writes a new topic's
assignment first and its partitions' states a moment later, one by one, and a topic listed
in between had partitions without a leader (LEADER_NOT_AVAILABLE), which librdkafka takes
for an error of the partition rather than a topic not known yet. So the listener keeps the
topics as ZooKeeper holds them (``_read``) and lists from them (``listed_topic``): a topic
once every partition of its assignment has a state (until then clients are told
UNKNOWN_TOPIC_OR_PARTITION and retry), added partitions once all of them have one. A
partition whose state says it has no leader (its replicas are down) is listed as it is. A
partition none of whose replicas was alive at its creation gets no state until one returns
(the controller leaves it new, as Kafka's does); its topic waits with it, where Kafka would
list the other partitions and a client would see fewer partitions than were created.

Only the partitions whose znode exists are read: the controller creates a partition's znode
and its state in one transaction, so a partition without its znode has no state to read, and
the children watch on ``partitions`` reports the ones given their states later. A broker that
sees a new topic before the controller has written its states thus waits for them with one
watch, instead of reading 1,000 missing states and watching each for its creation (3,000
requests, queued on the session ahead of the controller's own writes when it is the
controller's broker). A partition whose znode exists without its state (a controller that
died between the two) is watched for its state's creation.

All reads and the callbacks run on the listener's event thread, in the order ZooKeeper
reported the changes. Partition state changes are applied as deltas and in batches (Kafka's
LeaderAndIsr carries many partitions, and a broker applies a metadata delta, not a whole
image): a state watch only records its partition as pending, and one event reads every
pending partition's state (pipelined where the client allows it), updates those partitions
in the image, and publishes once. A burst of changes (a topic of 1,000 partitions created, a
broker's leaderships moved) thus reaches the broker as a few batches, and each publish costs
what changed, not the cluster's size: only the topics touched are re-listed and compared, and
offline replicas are worked out again for them alone (for every topic only when the live
brokers change). After the session is re-established (a new session loses its watches)
everything is read again. ``on_partitions`` receives the partitions whose state, replicas or
topic configs changed (the role of Kafka's LeaderAndIsr request: the broker becomes leader or
follower, or stops hosting); ``on_deletion_marked`` the topics to remove locally (the role of
StopReplica with delete), after which the broker acknowledges in ZooKeeper.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import replace
from typing import Any

from kazoo.exceptions import NoNodeError

from storage_core.common import TopicPartition
from storage_core.controller.event_manager import EventManager
from storage_core.replication.metadata_cache import (
    MetadataCache,
    MetadataImage,
    PartitionMetadata,
    TopicMetadata,
    with_offline_replicas,
)
from storage_core.replication.partition_state_reader import read_partition_states
from storage_core.zk import zk_data
from storage_core.zk.kafka_zk_client import KafkaZkClient

logger = logging.getLogger(__name__)

PartitionsCallback = Callable[
    [MetadataImage, Mapping[TopicPartition, PartitionMetadata | None]], None
]
DeletionCallback = Callable[[MetadataImage, set[str]], None]

NO_STATE = -1  # ``partition_epoch`` of a partition whose state znode does not exist yet


def has_state(partition: PartitionMetadata) -> bool:
    """The controller has given the partition its state (a leader, or none while its
    replicas are down)."""
    return partition.partition_epoch != NO_STATE


def listed_topic(read: TopicMetadata, before: TopicMetadata | None) -> TopicMetadata | None:
    """What a broker lists of a topic read from ZooKeeper (``read``), given what it listed
    before (``before``): ``read`` once each of its partitions has a state; until then the
    partitions listed before, at their newest state (a topic being created: none, so the topic
    is not listed; partitions being added: the earlier ones)."""
    if all(has_state(p) for p in read.partitions):
        return read
    if before is None or before.topic_id != read.topic_id:
        return None
    partitions = []
    for previous in before.partitions:
        now = read.partition(previous.partition)
        partitions.append(now if now is not None and has_state(now) else previous)
    return replace(read, partitions=tuple(partitions))


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
        # every topic as ZooKeeper holds it, partitions without a state yet included
        self._read: dict[str, TopicMetadata] = {}
        # partitions whose state watch fired and that no event has read yet; guarded by
        # ``_pending_lock`` (watches add on ZooKeeper's thread, the event thread takes them)
        self._pending_states: set[TopicPartition] = set()
        self._pending_lock = threading.Lock()

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

    def _state_watch(self, tp: TopicPartition) -> Callable[[Any], None]:
        """The watch of one partition's state znode: it records the partition as pending and
        schedules one read for all pending partitions (none if one is scheduled already)."""
        watch = self._watchers.get(("PartitionState", tp))
        if watch is None:

            def watch(_event: Any) -> None:
                with self._pending_lock:
                    first = not self._pending_states
                    self._pending_states.add(tp)
                if first:
                    self._events.put("PartitionStates", self._read_pending_states)

            self._watchers[("PartitionState", tp)] = watch
        return watch

    # --- reads (on the event thread) ---------------------------------------------------------

    def _refresh(self) -> None:
        old = self.cache.image()
        controller = self.zk.get_controller(watch=self._watch("Controller", self._read_controller))
        brokers = self.zk.get_all_brokers(watch=self._watch("Brokers", self._read_brokers))
        read = {}
        names = self.zk.get_all_topics(watch=self._watch("Topics", self._read_topics))
        for name in names:
            topic = self._read_topic_metadata(name)
            if topic is not None:
                read[name] = topic
        marked = self.zk.get_deletion_markers(watch=self._watch("Deletions", self._read_deletions))
        self._read = {n: replace(t, marked_for_deletion=n in marked) for n, t in read.items()}
        image = MetadataImage(
            cluster_id=old.cluster_id,
            controller_id=controller.broker_id if controller is not None else -1,
            brokers=brokers,
            topics=old.topics,
        )
        every_topic = set(self._read) | set(old.topics)
        self._publish(old, self._relisted(image, every_topic), every_topic)
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
        created = self._partitions_created(name)
        states = self._read_states(
            TopicPartition(name, p) for p in assignment.partitions if p in created
        )
        partitions = []
        for partition, replicas in sorted(assignment.partitions.items()):
            state = states.get(TopicPartition(name, partition))
            partitions.append(
                PartitionMetadata(
                    partition=partition,
                    replicas=replicas.replicas,
                    leader=state.leader if state else zk_data.NO_LEADER,
                    leader_epoch=state.leader_epoch if state else -1,
                    isr=state.isr if state else (),
                    partition_epoch=state.zk_version if state else NO_STATE,
                    controller_epoch=state.controller_epoch if state else 0,
                )
            )
        return TopicMetadata(
            name=name, topic_id=assignment.topic_id, partitions=tuple(partitions), configs=configs
        )

    def _partitions_created(self, name: str) -> set[int]:
        """The topic's partitions whose znode exists (the controller has given them their
        states), with the children watch set again; none while ``partitions`` is missing (its
        creation is watched)."""
        path = zk_data.partitions_path(name)
        watch = self._watch("TopicPartitions", lambda: self._read_partitions_created(name), name)
        for _attempt in range(2):
            try:
                children = self.zk.zk.get_children(path, watch=watch)
            except NoNodeError:
                if self.zk.zk.exists(path, watch=watch) is None:
                    return set()
                continue  # created between the two reads: list it now
            return {int(child) for child in children if child.isdigit()}
        return set()

    def _read_partitions_created(self, name: str) -> None:
        """Partitions of ``name`` given their znodes since the last look: their states are
        read in one batch with every other pending state."""
        known = self._read.get(name)
        if known is None:
            return  # removed meanwhile, or not read yet: the topic's own read lists them
        created = self._partitions_created(name)
        waiting = {
            TopicPartition(name, p.partition)
            for p in known.partitions
            if not has_state(p) and p.partition in created
        }
        if waiting:
            with self._pending_lock:
                self._pending_states |= waiting
            self._read_pending_states()

    def _read_states(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, zk_data.LeaderAndIsr]:
        """The states of ``partitions`` that exist, each with its watch set again (a missing
        one is watched for its creation)."""
        return read_partition_states(self.zk.zk, partitions, self._state_watch)

    def _read_controller(self) -> None:
        controller = self.zk.get_controller(watch=self._watch("Controller", self._read_controller))
        old = self.cache.image()
        new = replace(old, controller_id=controller.broker_id if controller else -1)
        self._publish(old, new, ())

    def _read_brokers(self) -> None:
        brokers = self.zk.get_all_brokers(watch=self._watch("Brokers", self._read_brokers))
        old = self.cache.image()
        self._publish(old, replace(old, brokers=brokers), ())

    def _read_topics(self) -> None:
        names = set(self.zk.get_all_topics(watch=self._watch("Topics", self._read_topics)))
        gone = set(self._read) - names
        for name in gone:
            del self._read[name]
        added = sorted(names - set(self._read))
        for name in added:
            topic = self._read_topic_metadata(name)
            if topic is not None:
                self._read[name] = replace(topic, marked_for_deletion=name in self._known_marked)
        old = self.cache.image()
        relisted = gone | set(added) | (set(old.topics) - names)
        self._publish(old, self._relisted(old, relisted), relisted)

    def _read_topic(self, name: str) -> None:
        known = self._read.get(name)
        if known is None:
            return  # removed meanwhile: the topics watch handles it
        topic = self._read_topic_metadata(name)
        if topic is None:
            del self._read[name]
        else:
            self._read[name] = replace(topic, marked_for_deletion=known.marked_for_deletion)
        old = self.cache.image()
        self._publish(old, self._relisted(old, {name}), {name})

    def _read_pending_states(self) -> None:
        """Every partition whose state changed since the last read, applied in one batch."""
        with self._pending_lock:
            pending, self._pending_states = self._pending_states, set()
        known = sorted(tp for tp in pending if tp.topic in self._read)
        states = self._read_states(known)  # missing: not created yet, or gone with its topic
        by_topic: dict[str, dict[int, zk_data.LeaderAndIsr]] = {}
        for tp, state in states.items():
            by_topic.setdefault(tp.topic, {})[tp.partition] = state
        for name, updates in by_topic.items():
            topic = self._read[name]
            partitions = tuple(
                p if p.partition not in updates else _with_state(p, updates[p.partition])
                for p in topic.partitions
            )
            self._read[name] = replace(topic, partitions=partitions)
        if by_topic:
            old = self.cache.image()
            self._publish(old, self._relisted(old, set(by_topic)), by_topic.keys())

    def _read_deletions(self) -> None:
        marked = self.zk.get_deletion_markers(watch=self._watch("Deletions", self._read_deletions))
        flipped = {n for n, t in self._read.items() if t.marked_for_deletion != (n in marked)}
        for name in flipped:
            self._read[name] = replace(self._read[name], marked_for_deletion=name in marked)
        old = self.cache.image()
        self._publish(old, self._relisted(old, flipped), flipped)
        self._notify_deletions(marked)

    def _relisted(self, image: MetadataImage, names: set[str]) -> MetadataImage:
        """``image`` with the topics ``names`` listed anew from what was read of them."""
        topics = dict(image.topics)
        for name in names:
            read = self._read.get(name)
            listed = None if read is None else listed_topic(read, image.topics.get(name))
            if listed is None:
                topics.pop(name, None)
            else:
                topics[name] = listed
        return replace(image, topics=topics)

    # --- publishing --------------------------------------------------------------------------

    def _publish(self, old: MetadataImage, new: MetadataImage, names: Collection[str]) -> None:
        """Tell the broker first, then show the new picture to request handlers: a handler
        that sees a partition led here finds it hosted (as a broker applies LeaderAndIsr
        before it answers Metadata with the new leader). ``names``: the topics that may differ
        between ``old`` and ``new``; the others are carried over as they are."""
        brokers_changed = old.brokers.keys() != new.brokers.keys()
        image = with_offline_replicas(new, None if brokers_changed else names)
        if self._on_partitions is not None:
            changes = _partition_changes(old, image, names)
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


def _with_state(partition: PartitionMetadata, state: zk_data.LeaderAndIsr) -> PartitionMetadata:
    return replace(
        partition,
        leader=state.leader,
        leader_epoch=state.leader_epoch,
        isr=state.isr,
        partition_epoch=state.zk_version,
        controller_epoch=state.controller_epoch,
    )


def _partition_changes(
    old: MetadataImage, new: MetadataImage, names: Iterable[str]
) -> dict[TopicPartition, PartitionMetadata | None]:
    """Of the topics ``names``, the partitions whose replicas, leader, epoch or ISR changed,
    or whose topic's configs did; None for those that no longer exist."""
    changes: dict[TopicPartition, PartitionMetadata | None] = {}
    for name in names:
        before = old.topics.get(name)
        after = new.topics.get(name)
        if before is after:
            continue
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
