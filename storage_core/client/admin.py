"""``KafkaAdminClient``: create, list, describe and delete topics; describe and alter configs;
describe one broker's log dirs; describe a partition's active producers
(``storage_core.client.admin_producers``).

CreateTopics (v7/v4) and DeleteTopics (v6/v1) go to the controller; DescribeConfigs (v4/v1)
and IncrementalAlterConfigs (v1/v0) to any broker (topic configs live with the controller's
metadata, which every broker serves); DescribeLogDirs (v4/v1) to the broker described.
Errors the broker reports for a topic or resource raise ``BrokerResponseError`` naming it.

Not thread-safe (it uses a ``KafkaCluster``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from storage_core.client.admin_producers import PartitionProducers, describe_producers
from storage_core.client.admin_requests import (
    AlterConfigOp,
    NewTopic,
    create_topics_request,
    delete_topics_request,
    describe_configs_request,
    describe_log_dirs_request,
    incremental_alter_configs_request,
)
from storage_core.client.cluster import KafkaCluster
from storage_core.client.errors import (
    BrokerResponseError,
    UnsupportedVersionError,
    raise_for_error,
)
from storage_core.client.metadata import TopicMetadata
from storage_core.client.negotiation import ApiKey
from storage_core.client.topic_partitions import describe_topic_partitions
from storage_core.common import TopicPartition, Uuid
from storage_core.protocol.config_resource import ConfigResourceType, ConfigSource
from storage_core.protocol.messages import response_schema

DEFAULT_ADMIN_TIMEOUT_MS = 30_000
MAX_TOPICS_PER_REQUEST = 1000


@dataclass(frozen=True, slots=True, kw_only=True)
class CreatedTopic:
    """What the broker reports for a created topic (v7; older versions report only names)."""

    name: str
    topic_id: Uuid | None
    num_partitions: int
    replication_factor: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ConfigEntry:
    name: str
    value: str | None
    read_only: bool
    source: ConfigSource
    is_sensitive: bool

    @property
    def is_default(self) -> bool:
        return self.source in (ConfigSource.DEFAULT_CONFIG, ConfigSource.STATIC_BROKER_CONFIG)


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicDescription:
    metadata: TopicMetadata
    configs: tuple[ConfigEntry, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class LogDirDescription:
    """One log dir as its broker reports it (its own path) and the partitions it holds;
    ``error`` is the broker's error for the dir (KAFKA_STORAGE_ERROR: offline)."""

    log_dir: str
    error: ErrorCode
    partitions: frozenset[TopicPartition]


class KafkaAdminClient:
    """Topic and config administration over a ``KafkaCluster``."""

    def __init__(self, cluster: KafkaCluster, *, timeout_ms: int = DEFAULT_ADMIN_TIMEOUT_MS):
        if timeout_ms <= 0:
            raise ValueError(f"timeout_ms must be positive, got {timeout_ms}")
        self.cluster = cluster
        self.timeout_ms = timeout_ms

    # ------------------------------------------------------------------ topics
    def create_topics(
        self, topics: Sequence[NewTopic], *, validate_only: bool = False
    ) -> list[CreatedTopic]:
        """Create ``topics``; raises ``BrokerResponseError`` for the first that failed."""
        _check_count(len(topics))
        session = self.cluster.controller_session()
        version = session.version(ApiKey.CREATE_TOPICS)
        response = session.send(
            create_topics_request(
                version, topics, timeout_ms=self.timeout_ms, validate_only=validate_only
            ),
            response_schema(ApiKey.CREATE_TOPICS, version),
        )
        by_name = {t.name: t for t in topics}
        results: list[CreatedTopic] = []
        for r in response.topics:
            raise_for_error(
                r.error_code,
                resource=f"topic {r.name!r}",
                broker_message=r.error_message,
                operation="Create",
            )
            results.append(_created_topic(r, by_name.get(str(r.name))))
        self.cluster.invalidate_metadata()
        return results

    def create_topic(
        self,
        name: str,
        *,
        num_partitions: int = -1,
        replication_factor: int = -1,
        configs: Mapping[str, str] | None = None,
    ) -> CreatedTopic:
        new_topic = NewTopic(
            name=name,
            num_partitions=num_partitions,
            replication_factor=replication_factor,
            configs=dict(configs or {}),
        )
        return self.create_topics([new_topic])[0]

    def delete_topics(self, names: Sequence[str]) -> None:
        """Delete topics by name; raises ``BrokerResponseError`` for the first that failed."""
        _check_count(len(names))
        session = self.cluster.controller_session()
        version = session.version(ApiKey.DELETE_TOPICS)
        response = session.send(
            delete_topics_request(version, names, timeout_ms=self.timeout_ms),
            response_schema(ApiKey.DELETE_TOPICS, version),
        )
        for r in response.responses:
            # v1 answers carry no error message
            raise_for_error(
                r.error_code,
                resource=f"topic {r.name!r}",
                broker_message=getattr(r, "error_message", None),
                operation="Delete",
            )
        self.cluster.invalidate_metadata()

    def list_topics(self, *, include_internal: bool = False) -> list[str]:
        """Names of the cluster's topics, sorted."""
        metadata = self.cluster.refresh_metadata(None)
        return sorted(
            t.name
            for t in metadata.topics
            if t.error == ErrorCode.none and (include_internal or not t.is_internal)
        )

    def describe_topics(self, names: Sequence[str]) -> list[TopicDescription]:
        """Partitions (leader, replicas, isr) and configs of ``names``, in that order; through
        DescribeTopicPartitions where the broker has it (the ISR as the controller wrote it),
        else Metadata."""
        _check_count(len(names))
        described = self.describe_topic_partitions(names)
        descriptions: list[TopicDescription] = []
        for name in names:
            topic = next((t for t in described if t.name == name), None)
            if topic is None:
                raise BrokerResponseError(
                    ErrorCode.unknown_topic_or_partition, resource=f"topic {name!r}"
                )
            topic.raise_for_error()
            configs = self.describe_configs(ConfigResourceType.TOPIC, name)
            descriptions.append(TopicDescription(metadata=topic, configs=configs))
        return descriptions

    def describe_topic_partitions(self, names: Sequence[str]) -> list[TopicMetadata]:
        """Topics (none named: all of them, internal ones included) with their partitions, by
        DescribeTopicPartitions, or Metadata from a broker without it."""
        try:
            return describe_topic_partitions(self.cluster.any_session(), names)
        except UnsupportedVersionError:
            metadata = self.cluster.refresh_metadata(list(names) or None)
            return sorted(metadata.topics, key=lambda t: t.name)

    # ------------------------------------------------------------------ producers
    def describe_producers(self, topic: str, partitions: Sequence[int]) -> list[PartitionProducers]:
        """The active producers of ``topic``'s ``partitions`` (DescribeProducers to each
        partition's leader), in that order; a partition's error is in its answer."""
        return describe_producers(self.cluster, topic, partitions)

    # ------------------------------------------------------------------ configs
    def describe_configs(
        self,
        resource_type: ConfigResourceType,
        name: str,
        keys: Sequence[str] | None = None,
        *,
        node_id: int | None = None,
    ) -> tuple[ConfigEntry, ...]:
        """The configs of one resource (all of them, or only ``keys``), asked of broker
        ``node_id`` when given (a BROKER resource is described by that broker), else any."""
        session = (
            self.cluster.any_session()
            if node_id is None
            else self.cluster.session_for_node(node_id)
        )
        version = session.version(ApiKey.DESCRIBE_CONFIGS)
        resource = f"{resource_type.name.lower()} {name!r}"
        response = session.send(
            describe_configs_request(version, resource_type, name, keys),
            response_schema(ApiKey.DESCRIBE_CONFIGS, version),
        )
        entries: list[ConfigEntry] = []
        for r in response.results:
            raise_for_error(
                r.error_code,
                resource=resource,
                broker_message=r.error_message,
                operation="DescribeConfigs",
            )
            entries += [
                ConfigEntry(
                    name=c.name,
                    value=c.value,
                    read_only=c.read_only,
                    source=ConfigSource.from_id(int(c.config_source)),
                    is_sensitive=c.is_sensitive,
                )
                for c in r.configs
            ]
        return tuple(entries)

    def incremental_alter_configs(
        self,
        resource_type: ConfigResourceType,
        name: str,
        ops: Sequence[AlterConfigOp],
        *,
        validate_only: bool = False,
    ) -> None:
        """Apply ``ops`` (set, delete...) to one resource's configs."""
        if not ops:
            raise ValueError("no config change given")
        session = self.cluster.controller_session()
        version = session.version(ApiKey.INCREMENTAL_ALTER_CONFIGS)
        resource = f"{resource_type.name.lower()} {name!r}"
        response = session.send(
            incremental_alter_configs_request(
                version, resource_type, name, ops, validate_only=validate_only
            ),
            response_schema(ApiKey.INCREMENTAL_ALTER_CONFIGS, version),
        )
        for r in response.responses:
            raise_for_error(
                r.error_code,
                resource=resource,
                broker_message=r.error_message,
                operation="AlterConfigs",
            )

    # ------------------------------------------------------------------ log dirs
    def describe_log_dirs(
        self, broker_id: int, topics: Mapping[str, Sequence[int]] | None = None
    ) -> tuple[LogDirDescription, ...]:
        """Broker ``broker_id``'s log dirs and the partitions each holds (of ``topics`` only,
        topic -> partition indexes, when given)."""
        if topics is not None:
            _check_count(len(topics))
        session = self.cluster.session_for_node(broker_id)
        version = session.version(ApiKey.DESCRIBE_LOG_DIRS)
        broker = f"broker {broker_id}"
        response = session.send(
            describe_log_dirs_request(version, topics),
            response_schema(ApiKey.DESCRIBE_LOG_DIRS, version),
        )
        # v4 answers carry a top-level error too
        if version >= 4:
            raise_for_error(response.error_code, resource=broker, operation="Describe")
        results: tuple[Any, ...] = response.results
        return tuple(
            LogDirDescription(
                log_dir=r.log_dir,
                error=r.error_code,
                partitions=frozenset(
                    TopicPartition(t.name, int(p.partition_index))
                    for t in r.topics
                    for p in t.partitions
                ),
            )
            for r in results
        )


def _check_count(count: int) -> None:
    if count == 0:
        raise ValueError("no topic given")
    if count > MAX_TOPICS_PER_REQUEST:
        raise ValueError(f"{count} topics in one request; at most {MAX_TOPICS_PER_REQUEST}")


def _created_topic(result: Any, asked: NewTopic | None) -> CreatedTopic:
    """A created topic as the broker reports it (v5+: its id, partitions and replication
    factor; before: only its name, the rest as asked)."""
    if not hasattr(result, "num_partitions"):
        return CreatedTopic(
            name=str(result.name),
            topic_id=None,
            num_partitions=asked.num_partitions if asked else -1,
            replication_factor=asked.replication_factor if asked else -1,
        )
    topic_id = None if result.topic_id is None else Uuid.from_bytes(result.topic_id.bytes)
    return CreatedTopic(
        name=str(result.name),
        topic_id=topic_id,
        num_partitions=int(result.num_partitions),
        replication_factor=int(result.replication_factor),
    )
