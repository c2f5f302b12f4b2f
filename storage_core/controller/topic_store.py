"""The cluster's topic metadata: names, topic ids, partition assignments, leader epochs, configs.

This is the controller's persisted state for a single-node cluster (KRaft keeps the same facts
in ``__cluster_metadata``). It lives in the first log dir as ``topic-metadata.json``, written
atomically (temp file, fsync, rename, fsync dir) after every change:

    {"version": 1, "cluster_id": "...", "topics": [
        {"name": "t", "topic_id": "<base64 uuid>", "internal": false,
         "configs": {"retention.ms": "60000"},
         "partitions": [{"partition": 0, "replicas": [0], "isr": [0],
                         "leader": 0, "leader_epoch": 3}]}]}

Thread-safety: every method takes the store's lock; values handed out are immutable.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from storage_core.common import ZERO_UUID, Uuid, validate_topic_name
from storage_core.controller.manual_assignment import (
    validate_added_partitions_assignment,
    validate_manual_partition_assignment,
)
from storage_core.errors import (
    CorruptCheckpointError,
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    InvalidTopicError,
    TopicExistsError,
    UnknownTopicOrPartitionError,
)
from storage_core.log.checkpoints import write_atomically
from storage_core.log.log_config import LogConfig, validate_remote_storage

logger = logging.getLogger(__name__)

TOPIC_METADATA_FILE = "topic-metadata.json"
FORMAT_VERSION = 1
MAX_PARTITIONS_PER_TOPIC = 10_000  # a limit on everything: one request cannot create millions


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionAssignment:
    """Replicas, in-sync replicas, leader and leader epoch of one partition."""

    partition: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int


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


class TopicStore:
    """Creates, changes and persists topics; the single source of topic ids and epochs."""

    def __init__(
        self,
        metadata_dir: Path,
        *,
        broker_ids: tuple[int, ...],
        remote_storage_system_enable: bool = False,
    ) -> None:
        self._remote_storage_system_enable = remote_storage_system_enable
        self._path = metadata_dir / TOPIC_METADATA_FILE
        self._broker_ids = broker_ids
        self._lock = threading.RLock()
        self._topics: dict[str, TopicInfo] = {}
        self.cluster_id = ""
        self._load()

    # ------------------------------------------------------------------ persistence
    def _load(self) -> None:
        if not self._path.exists():
            return
        try:
            document = json.loads(self._path.read_text(encoding="utf-8"))
            if document.get("version") != FORMAT_VERSION:
                raise ValueError(f"unsupported version {document.get('version')!r}")
            self.cluster_id = str(document.get("cluster_id", ""))
            for entry in document["topics"]:
                partitions = tuple(
                    PartitionAssignment(
                        partition=int(p["partition"]),
                        replicas=tuple(int(r) for r in p["replicas"]),
                        isr=tuple(int(r) for r in p["isr"]),
                        leader=int(p["leader"]),
                        leader_epoch=int(p["leader_epoch"]),
                    )
                    for p in entry["partitions"]
                )
                topic = TopicInfo(
                    name=str(entry["name"]),
                    topic_id=Uuid.from_string(str(entry["topic_id"])),
                    partitions=partitions,
                    configs={str(k): str(v) for k, v in entry["configs"].items()},
                    internal=bool(entry.get("internal", False)),
                )
                self._topics[topic.name] = topic
        except (ValueError, KeyError, TypeError) as error:
            raise CorruptCheckpointError(
                f"topic metadata file {self._path} cannot be read ({error}); restore it from a"
                " backup: without it the topic ids and configs of this cluster are unknown"
            ) from None

    def _persist(self) -> None:
        document = {
            "version": FORMAT_VERSION,
            "cluster_id": self.cluster_id,
            "topics": [
                {
                    "name": t.name,
                    "topic_id": str(t.topic_id),
                    "internal": t.internal,
                    "configs": dict(t.configs),
                    "partitions": [dataclasses.asdict(p) for p in t.partitions],
                }
                for t in sorted(self._topics.values(), key=lambda t: t.name)
            ],
        }
        write_atomically(self._path, json.dumps(document, indent=1) + "\n")

    def set_cluster_id(self, cluster_id: str) -> None:
        with self._lock:
            self.cluster_id = cluster_id
            self._persist()

    # ------------------------------------------------------------------ queries
    def topics(self) -> dict[str, TopicInfo]:
        with self._lock:
            return dict(self._topics)

    def get(self, name: str) -> TopicInfo | None:
        with self._lock:
            return self._topics.get(name)

    def get_by_id(self, topic_id: Uuid) -> TopicInfo | None:
        with self._lock:
            for topic in self._topics.values():
                if topic.topic_id == topic_id:
                    return topic
            return None

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
        """Raise the error Kafka would answer CreateTopics with; change nothing.

        Returns the topic as it would be created (with the zero topic id). With a
        ``replica_assignment`` (replicas by partition 0..n-1, already checked by
        ``validate_new_topic_assignment``) the partition count and replication factor follow it.
        """
        validate_topic_name(name)
        with self._lock:
            if name in self._topics:
                raise TopicExistsError(f"Topic '{name}' already exists.")
            colliding = _collision_key(name)
            for other in self._topics:
                if _collision_key(other) == colliding:
                    raise InvalidTopicError(f"Topic '{name}' collides with existing topic: {other}")
        if replica_assignment is not None:
            num_partitions = len(replica_assignment)
            replication_factor = len(replica_assignment[0]) if replica_assignment else 0
            for replicas in replica_assignment:
                validate_manual_partition_assignment(
                    replicas, replication_factor=replication_factor, brokers=self._broker_ids
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
        if replication_factor > len(self._broker_ids):
            raise InvalidReplicationFactorError(
                f"Unable to replicate the partition {replication_factor} time(s): The target"
                f" replication factor of {replication_factor} cannot be reached because only"
                f" {len(self._broker_ids)} broker(s) are registered."
            )
        validate_remote_storage(
            default_config.with_overrides(configs),  # raises InvalidConfigError naming the key
            previous=None,
            system_enabled=self._remote_storage_system_enable,
        )
        partitions = (
            tuple(self._assign(p, replication_factor) for p in range(num_partitions))
            if replica_assignment is None
            else tuple(_manual(p, replicas) for p, replicas in enumerate(replica_assignment))
        )
        return TopicInfo(name=name, topic_id=ZERO_UUID, partitions=partitions, configs=configs)

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
    ) -> TopicInfo:
        with self._lock:
            planned = self.validate_new_topic(
                name,
                num_partitions,
                replication_factor,
                configs,
                default_config,
                replica_assignment=replica_assignment,
            )
            topic = dataclasses.replace(
                planned, topic_id=Uuid.random(), configs=dict(configs), internal=internal
            )
            self._topics[name] = topic
            self._persist()
        logger.info(
            "created topic topic=%s topic_id=%s partitions=%d replication_factor=%d manual=%s",
            name,
            topic.topic_id,
            len(topic.partitions),
            len(topic.partitions[0].replicas),
            replica_assignment is not None,
        )
        return topic

    def _assign(self, partition: int, replication_factor: int) -> PartitionAssignment:
        brokers = self._broker_ids
        replicas = tuple(brokers[(partition + i) % len(brokers)] for i in range(replication_factor))
        return PartitionAssignment(
            partition=partition, replicas=replicas, isr=replicas, leader=replicas[0], leader_epoch=0
        )

    def delete_topic(self, name: str) -> TopicInfo:
        with self._lock:
            topic = self._topics.get(name)
            if topic is None:
                raise UnknownTopicOrPartitionError(f"This server does not host topic '{name}'.")
            del self._topics[name]
            self._persist()
        logger.info("deleted topic topic=%s topic_id=%s", name, topic.topic_id)
        return topic

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
        with self._lock:
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
            if replica_assignment is None:
                added = tuple(self._assign(p, factor) for p in range(current, new_total))
            else:
                manual = validate_added_partitions_assignment(
                    replica_assignment,
                    added=new_total - current,
                    replication_factor=factor,
                    brokers=self._broker_ids,
                )
                added = tuple(_manual(current + i, r) for i, r in enumerate(manual))
            updated = dataclasses.replace(topic, partitions=topic.partitions + added)
            if not validate_only:
                self._topics[name] = updated
                self._persist()
            return updated

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
        with self._lock:
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
            updated = dataclasses.replace(topic, configs=configs)
            if not validate_only:
                self._topics[name] = updated
                self._persist()
            return updated

    def bump_leader_epochs(self, broker_id: int) -> None:
        """On broker start-up: every partition this broker leads gets a new leader epoch.

        A restarted broker is a new leader as far as followers and clients are concerned
        (KRaft fences the broker and elects it again), so fetches from the previous epoch are
        fenced and the leader-epoch cache gets a new entry at the log end offset.
        """
        with self._lock:
            for name, topic in list(self._topics.items()):
                partitions = tuple(
                    dataclasses.replace(p, leader_epoch=p.leader_epoch + 1)
                    if p.leader == broker_id
                    else p
                    for p in topic.partitions
                )
                self._topics[name] = dataclasses.replace(topic, partitions=partitions)
            self._persist()

    def _require(self, name: str) -> TopicInfo:
        topic = self._topics.get(name)
        if topic is None:
            raise UnknownTopicOrPartitionError(f"This server does not host topic '{name}'.")
        return topic


def _manual(partition: int, replicas: Sequence[int]) -> PartitionAssignment:
    """A manually assigned partition: its preferred (first) replica leads, all are in sync."""
    return PartitionAssignment(
        partition=partition,
        replicas=tuple(replicas),
        isr=tuple(replicas),
        leader=replicas[0],
        leader_epoch=0,
    )


def _collision_key(name: str) -> str:
    return name.replace(".", "_")
