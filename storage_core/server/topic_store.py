"""``TopicStore``: the broker's door to the cluster's topics. Reads come from the
``MetadataCache`` (what the controller decided, as ZooKeeper delivered it); changes go to the
controller (create, delete, add partitions: only on the controller's broker, else
NOT_CONTROLLER as Kafka answers) or, for topic configs, straight to ``/config/topics`` (any
broker, as Kafka's AdminZkClient writes them). A change returns once this broker's cache shows
it, so a client that creates a topic can produce to it at once.

Validation is Kafka's: topic names and '.'/'_' collisions, partition counts, replication
factors against the registered brokers, manual assignments, remote storage settings. Placement
is Kafka's ``AdminUtils`` over the registered brokers (racks when every broker has one).
Thread-safety: methods may run on any I/O thread; values handed out are immutable.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from storage_core.common import ZERO_UUID, Uuid, validate_topic_name
from storage_core.controller.kafka_controller import KafkaController
from storage_core.controller.manual_assignment import (
    validate_added_partitions_assignment,
    validate_manual_partition_assignment,
)
from storage_core.controller.replica_assignment import (
    BrokerMetadata,
    assign_replicas_to_brokers,
)
from storage_core.errors import (
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    InvalidTopicError,
    RequestTimedOutError,
    TopicExistsError,
    UnknownTopicOrPartitionError,
)
from storage_core.log.log_config import LogConfig, validate_remote_storage
from storage_core.replication.metadata_cache import (
    MetadataCache,
    MetadataImage,
    TopicMetadata,
)
from storage_core.zk.controller_zk import ControllerMovedError
from storage_core.zk.kafka_zk_client import KafkaZkClient
from storage_core.zk.zk_data import ReplicaAssignment, TopicAssignment

# the logger keeps the name it had when the topic store lived in controller/
logger = logging.getLogger("storage_core.controller.topic_store")

MAX_PARTITIONS_PER_TOPIC = 10_000  # a limit on everything: one request cannot create millions
PROPAGATION_TIMEOUT_S = 30.0
_POLL_S = 0.01


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionAssignment:
    """Replicas, in-sync replicas, leader and leader epoch of one partition."""

    partition: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int
    offline_replicas: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicInfo:
    name: str
    topic_id: Uuid
    partitions: tuple[PartitionAssignment, ...]
    configs: Mapping[str, str]
    internal: bool = False

    def partition(self, index: int) -> PartitionAssignment | None:
        if 0 <= index < len(self.partitions):
            return self.partitions[index]
        return None


def topic_info(topic: TopicMetadata) -> TopicInfo:
    return TopicInfo(
        name=topic.name,
        topic_id=topic.topic_id or ZERO_UUID,
        partitions=tuple(
            PartitionAssignment(
                partition=p.partition,
                replicas=p.replicas,
                isr=p.isr,
                leader=p.leader,
                leader_epoch=p.leader_epoch,
                offline_replicas=p.offline_replicas,
            )
            for p in topic.partitions
        ),
        configs=dict(topic.configs),
        internal=topic.internal,
    )


class TopicStore:
    def __init__(
        self,
        *,
        broker_id: int,
        zk: KafkaZkClient,
        controller: KafkaController,
        cache: MetadataCache,
        remote_storage_system_enable: bool = False,
        propagation_timeout_s: float = PROPAGATION_TIMEOUT_S,
    ) -> None:
        self.broker_id = broker_id
        self._zk = zk
        self._controller = controller
        self._cache = cache
        self._remote_storage_system_enable = remote_storage_system_enable
        self._timeout_s = propagation_timeout_s

    # ------------------------------------------------------------------ queries
    @property
    def cluster_id(self) -> str:
        return self._cache.image().cluster_id

    def topics(self) -> dict[str, TopicInfo]:
        return {
            name: topic_info(t)
            for name, t in self._cache.image().topics.items()
            if not t.marked_for_deletion
        }

    def get(self, name: str) -> TopicInfo | None:
        topic = self._served(name)
        return None if topic is None else topic_info(topic)

    def exists(self, name: str) -> bool:
        """``get(name) is not None``, without building the ``TopicInfo`` (every produce asks)."""
        return self._served(name) is not None

    def _served(self, name: str) -> TopicMetadata | None:
        """The topic's metadata, unless it is unknown or marked for deletion."""
        topic = self._cache.image().topic(name)
        return None if topic is None or topic.marked_for_deletion else topic

    def get_by_id(self, topic_id: Uuid) -> TopicInfo | None:
        topic = self._cache.image().topic_by_id(topic_id)
        if topic is None or topic.marked_for_deletion:
            return None
        return topic_info(topic)

    def broker_ids(self) -> tuple[int, ...]:
        return tuple(sorted(self._cache.image().brokers))

    # ------------------------------------------------------------------ changes
    def validate_new_topic(
        self,
        name: str,
        num_partitions: int,
        replication_factor: int,
        configs: Mapping[str, str],
        default_config: LogConfig,
        *,
        replica_assignment: Sequence[Sequence[int]] | None = None,
    ) -> TopicInfo:
        """Raise the error Kafka would answer CreateTopics with; change nothing. Returns the
        topic as it would be placed (with the zero topic id)."""
        validate_topic_name(name)
        image = self._cache.image()
        if name in image.topics:
            raise TopicExistsError(f"Topic '{name}' already exists.")
        colliding = _collision_key(name)
        for other in image.topics:
            if _collision_key(other) == colliding:
                raise InvalidTopicError(f"Topic '{name}' collides with existing topic: {other}")
        brokers = sorted(image.brokers)
        if replica_assignment is not None:
            num_partitions = len(replica_assignment)
            replication_factor = len(replica_assignment[0]) if replica_assignment else 0
            for replicas in replica_assignment:
                validate_manual_partition_assignment(
                    replicas, replication_factor=replication_factor, brokers=brokers
                )
        if not 1 <= num_partitions <= MAX_PARTITIONS_PER_TOPIC:
            raise InvalidPartitionsError(
                f"Number of partitions must be between 1 and {MAX_PARTITIONS_PER_TOPIC},"
                f" got {num_partitions}."
            )
        if replication_factor < 1:
            raise InvalidReplicationFactorError(
                f"Replication factor must be larger than 0, got {replication_factor}."
            )
        if replication_factor > len(brokers):
            raise InvalidReplicationFactorError(
                f"Unable to replicate the partition {replication_factor} time(s): The target"
                f" replication factor of {replication_factor} cannot be reached because only"
                f" {len(brokers)} broker(s) are registered."
            )
        validate_remote_storage(
            default_config.with_overrides(configs),  # raises InvalidConfigError naming the key
            previous=None,
            system_enabled=self._remote_storage_system_enable,
        )
        if replica_assignment is None:
            placed = assign_replicas_to_brokers(
                _broker_metadata(image), num_partitions, replication_factor
            )
        else:
            placed = {p: tuple(r) for p, r in enumerate(replica_assignment)}
        return TopicInfo(
            name=name,
            topic_id=ZERO_UUID,
            partitions=tuple(
                PartitionAssignment(partition=p, replicas=r, isr=r, leader=r[0], leader_epoch=0)
                for p, r in sorted(placed.items())
            ),
            configs=configs,
        )

    def create_topic(
        self,
        name: str,
        num_partitions: int,
        replication_factor: int,
        configs: Mapping[str, str],
        default_config: LogConfig,
        *,
        internal: bool = False,
        replica_assignment: Sequence[Sequence[int]] | None = None,
        from_any_broker: bool = False,
        wait_s: float | None = None,
    ) -> TopicInfo:
        """Create through the controller (NOT_CONTROLLER elsewhere); ``from_any_broker``: a
        topic this broker creates on its own (automatically, or an internal one) is written
        directly, as Kafka's brokers do, and the controller elects its leaders. Then wait
        ``wait_s`` (default: the store's propagation timeout) for this broker's metadata to
        show it online (REQUEST_TIMED_OUT after, the creation going on); ``wait_s <= 0``
        answers at once with the planned assignment, as Kafka does for a timeout of 0."""
        planned = self.validate_new_topic(
            name,
            num_partitions,
            replication_factor,
            configs,
            default_config,
            replica_assignment=replica_assignment,
        )
        topic_id = Uuid.random()
        assignment = TopicAssignment(
            topic=name,
            topic_id=topic_id,
            partitions={
                p.partition: ReplicaAssignment(replicas=p.replicas) for p in planned.partitions
            },
        )
        if self._controller.is_active:
            created = self._controller.create_topic(assignment, configs).result(self._timeout_s)
        elif from_any_broker:
            created = self._zk.create_topic(None, assignment, configs)
        else:
            raise ControllerMovedError(
                f"This is not the correct controller for this cluster (broker {self.broker_id};"
                f" the controller is broker {self._cache.image().controller_id})."
            )
        if not created:
            raise TopicExistsError(f"Topic '{name}' already exists.")
        logger.info(
            "created topic topic=%s topic_id=%s partitions=%d replication_factor=%d manual=%s",
            name,
            assignment.topic_id,
            len(planned.partitions),
            len(planned.partitions[0].replicas),
            replica_assignment is not None,
        )
        if wait_s is not None and wait_s <= 0:
            return replace(planned, topic_id=topic_id)
        return self._await(
            name,
            f"the new topic {name}",
            lambda image: _online(image, name, len(planned.partitions)),
            timeout_s=wait_s,
        )

    def await_topic(self, name: str) -> TopicInfo:
        """A topic another broker created (its znode exists) as soon as this broker's metadata
        shows it online."""
        return self._await(
            name,
            f"the topic {name}",
            lambda image: (
                (t := image.topic(name)) is not None and _online(image, name, len(t.partitions))
            ),
        )

    def delete_topic(self, name: str) -> TopicInfo:
        """Mark for deletion through the controller; returns the topic as it was. It is gone
        from the cache once every replica's broker removed its logs (``await_deleted``)."""
        topic = self._require(name)
        self._controller.delete_topics([name]).result(self._timeout_s)
        logger.info("deleting topic topic=%s topic_id=%s", name, topic.topic_id)
        return topic

    def await_deleted(self, name: str, topic_id: Uuid) -> None:
        self._await(
            name,
            f"the deletion of {name}",
            lambda image: (t := image.topic(name)) is None or t.topic_id != topic_id,
        )

    def create_partitions(
        self,
        name: str,
        new_total: int,
        *,
        validate_only: bool,
        replica_assignment: Sequence[Sequence[int]] | None = None,
    ) -> TopicInfo:
        """Grow ``name`` to ``new_total`` partitions; ``replica_assignment`` gives the replicas
        of the added partitions only, in order (Kafka's CreatePartitions assignments)."""
        topic = self._require(name)
        current = len(topic.partitions)
        if new_total <= current:
            raise InvalidPartitionsError(
                f"Topic currently has {current} partitions, which is higher than or equal"
                f" to the requested {new_total}."
            )
        if new_total > MAX_PARTITIONS_PER_TOPIC:
            raise InvalidPartitionsError(
                f"Number of partitions must be at most {MAX_PARTITIONS_PER_TOPIC}."
            )
        factor = len(topic.partitions[0].replicas)
        image = self._cache.image()
        if replica_assignment is None:
            placed = assign_replicas_to_brokers(
                _broker_metadata(image), new_total - current, factor, start_partition_id=current
            )
            added = [placed[p] for p in range(current, new_total)]
        else:
            added = list(
                validate_added_partitions_assignment(
                    replica_assignment,
                    added=new_total - current,
                    replication_factor=factor,
                    brokers=sorted(image.brokers),
                )
            )
        planned = TopicInfo(
            name=topic.name,
            topic_id=topic.topic_id,
            configs=topic.configs,
            internal=topic.internal,
            partitions=topic.partitions
            + tuple(
                PartitionAssignment(
                    partition=current + i, replicas=r, isr=r, leader=r[0], leader_epoch=0
                )
                for i, r in enumerate(added)
            ),
        )
        if validate_only:
            return planned
        self._controller.add_partitions(
            name,
            {current + i: ReplicaAssignment(replicas=tuple(r)) for i, r in enumerate(added)},
        ).result(self._timeout_s)
        return self._await(
            name, f"the new partitions of {name}", lambda image: _online(image, name, new_total)
        )

    def alter_configs(
        self,
        name: str,
        set_configs: Mapping[str, str],
        delete_configs: tuple[str, ...],
        default_config: LogConfig,
        *,
        validate_only: bool,
    ) -> TopicInfo:
        """Apply an incremental change (SET / DELETE); the result must be a valid config."""
        topic = self._require(name)
        configs = dict(topic.configs)
        configs.update(set_configs)
        for key in delete_configs:
            configs.pop(key, None)
        validate_remote_storage(
            default_config.with_overrides(configs),  # raises InvalidConfigError naming the key
            previous=default_config.with_overrides(topic.configs),
            system_enabled=self._remote_storage_system_enable,
        )
        if validate_only:
            return TopicInfo(
                name=topic.name,
                topic_id=topic.topic_id,
                partitions=topic.partitions,
                configs=configs,
                internal=topic.internal,
            )
        self._zk.set_topic_config(name, configs)
        return self._await(
            name,
            f"the configs of {name}",
            lambda image: (t := image.topic(name)) is not None and dict(t.configs) == configs,
        )

    # ------------------------------------------------------------------ helpers
    def _require(self, name: str) -> TopicInfo:
        topic = self.get(name)
        if topic is None:
            raise UnknownTopicOrPartitionError(f"This server does not host topic '{name}'.")
        return topic

    def _await(
        self,
        name: str,
        what: str,
        ready: Callable[[MetadataImage], object],
        *,
        timeout_s: float | None = None,
    ) -> TopicInfo:
        """Wait until this broker's metadata satisfies ``ready``; the topic as it shows then."""
        timeout_s = self._timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + timeout_s
        while True:
            image = self._cache.image()
            if ready(image):
                topic = image.topic(name)
                if topic is None:
                    return TopicInfo(name=name, topic_id=ZERO_UUID, partitions=(), configs={})
                return topic_info(topic)
            if time.monotonic() > deadline:
                raise RequestTimedOutError(
                    f"{what} did not reach broker {self.broker_id}'s metadata within"
                    f" {timeout_s:g} s; it is being created all the same"
                )
            time.sleep(_POLL_S)


def _online(image: MetadataImage, name: str, partitions: int) -> bool:
    """The topic has its partitions, each with a first state (a leader, or offline because no
    replica is alive: the controller elects one when a replica returns)."""
    topic = image.topic(name)
    return (
        topic is not None
        and len(topic.partitions) == partitions
        and all(p.leader_epoch >= 0 for p in topic.partitions)
    )


def _broker_metadata(image: MetadataImage) -> list[BrokerMetadata]:
    return [BrokerMetadata(broker_id=b, rack=r.rack) for b, r in sorted(image.brokers.items())]


def _collision_key(name: str) -> str:
    return name.replace(".", "_")
