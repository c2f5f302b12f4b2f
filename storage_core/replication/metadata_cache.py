"""``MetadataCache``: the broker's view of the cluster as the controller decided it (Kafka's
class of that name): live brokers and their endpoints, the controller, every topic with its
id, configs and partitions (replicas, leader, leader epoch, ISR, offline replicas).

Request handlers read it instead of asking ZooKeeper; ``ZkMetadataListener`` replaces its
content as ZooKeeper reports changes. Each update builds a new immutable ``MetadataImage`` and
swaps it in, so a handler that took ``image()`` reads one consistent picture however long it
runs. Thread-safety: readers never lock; updates are serialised by the listener's thread.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from storage_core.common import TopicPartition, Uuid
from storage_core.zk.zk_data import NO_LEADER, BrokerRegistration

INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__remote_log_metadata", "__transaction_state"})


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionMetadata:
    partition: int
    replicas: tuple[int, ...]
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...] = ()
    partition_epoch: int = 0  # the state znode's version: changes with every leader/ISR change
    controller_epoch: int = 0  # of the controller that decided the leader

    @property
    def is_online(self) -> bool:
        return self.leader != NO_LEADER


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicMetadata:
    name: str
    topic_id: Uuid | None
    partitions: tuple[PartitionMetadata, ...]
    configs: Mapping[str, str] = field(default_factory=dict)
    marked_for_deletion: bool = False

    @property
    def internal(self) -> bool:
        return self.name in INTERNAL_TOPICS

    def partition(self, index: int) -> PartitionMetadata | None:
        if 0 <= index < len(self.partitions) and self.partitions[index].partition == index:
            return self.partitions[index]
        return next((p for p in self.partitions if p.partition == index), None)


@dataclass(frozen=True, slots=True, kw_only=True)
class MetadataImage:
    """One consistent picture of the cluster."""

    cluster_id: str = ""
    controller_id: int = -1
    brokers: Mapping[int, BrokerRegistration] = field(default_factory=dict)
    topics: Mapping[str, TopicMetadata] = field(default_factory=dict)

    def topic(self, name: str) -> TopicMetadata | None:
        return self.topics.get(name)

    def topic_by_id(self, topic_id: Uuid) -> TopicMetadata | None:
        return next((t for t in self.topics.values() if t.topic_id == topic_id), None)

    def partition(self, tp: TopicPartition) -> PartitionMetadata | None:
        topic = self.topics.get(tp.topic)
        return topic.partition(tp.partition) if topic is not None else None

    def is_alive(self, broker_id: int) -> bool:
        return broker_id in self.brokers

    def under_replicated(self) -> list[TopicPartition]:
        """Online partitions whose ISR is smaller than their replica set."""
        return sorted(
            TopicPartition(t.name, p.partition)
            for t in self.topics.values()
            for p in t.partitions
            if p.is_online and len(p.isr) < len(p.replicas)
        )

    def offline(self) -> list[TopicPartition]:
        return sorted(
            TopicPartition(t.name, p.partition)
            for t in self.topics.values()
            for p in t.partitions
            if not p.is_online and not t.marked_for_deletion
        )


class MetadataCache:
    def __init__(self, broker_id: int) -> None:
        self.broker_id = broker_id
        self._image = MetadataImage()

    def image(self) -> MetadataImage:
        return self._image

    def set_image(self, image: MetadataImage) -> None:
        """Show ``image`` from now on; its offline replicas must be worked out already
        (``with_offline_replicas``)."""
        self._image = image


def with_offline_replicas(
    image: MetadataImage, names: Iterable[str] | None = None
) -> MetadataImage:
    """The image with each partition's offline replicas (assigned replicas whose broker is not
    registered) worked out against its live brokers: for the topics ``names`` only (the others
    are taken as they are), or for every topic when ``names`` is None."""
    if names is None:
        names = image.topics.keys()
    topics = dict(image.topics)
    for name in names:
        topic = topics.get(name)
        if topic is None:
            continue
        partitions = tuple(_with_offline(p, image.brokers) for p in topic.partitions)
        if any(a is not b for a, b in zip(partitions, topic.partitions, strict=True)):
            topics[name] = replace(topic, partitions=partitions)
    return replace(image, topics=topics)


def _with_offline(
    partition: PartitionMetadata, brokers: Mapping[int, BrokerRegistration]
) -> PartitionMetadata:
    offline = tuple(r for r in partition.replicas if r not in brokers)
    if offline == partition.offline_replicas:
        return partition
    return replace(partition, offline_replicas=offline)


def removed_by_reassignment(
    old: MetadataImage,
    new: MetadataImage,
    broker_id: int,
    partitions: Iterable[TopicPartition],
) -> list[TopicPartition]:
    """Of ``partitions``, those that listed ``broker_id`` among their replicas in ``old`` and no
    longer do in ``new`` while their topic (the same topic id) lives on. Only a reassignment
    takes a replica off a live partition (completed: its removing replicas; replaced or
    cancelled: the adding replicas it no longer needs); Kafka's controller then sends
    StopReplica with delete, and the broker deletes its replica."""
    removed = []
    for tp in partitions:
        was, now = old.partition(tp), new.partition(tp)
        before, after = old.topic(tp.topic), new.topic(tp.topic)
        if was is None or now is None or before is None or after is None:
            continue
        if before.topic_id != after.topic_id or after.marked_for_deletion:
            continue
        if broker_id in was.replicas and broker_id not in now.replicas:
            removed.append(tp)
    return sorted(removed)
