"""``KafkaAdminClient``: create, list, describe and delete topics; describe and alter configs;
describe one broker's log dirs.

CreateTopics (v7/v4) and DeleteTopics (v6/v1) go to the controller; DescribeConfigs (v4/v1)
and IncrementalAlterConfigs (v1/v0) to any broker (topic configs live with the controller's
metadata, which every broker serves); DescribeLogDirs (v4/v1) to the broker described.
Errors the broker reports for a topic or resource raise ``BrokerResponseError`` naming it.

Not thread-safe (it uses a ``KafkaCluster``).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kio.schema.create_topics.v4 import request as create_v4
from kio.schema.create_topics.v4.response import CreateTopicsResponse as CreateTopicsResponseV4
from kio.schema.create_topics.v7 import request as create_v7
from kio.schema.create_topics.v7.response import CreateTopicsResponse as CreateTopicsResponseV7
from kio.schema.delete_topics.v1.request import DeleteTopicsRequest as DeleteTopicsRequestV1
from kio.schema.delete_topics.v1.response import DeleteTopicsResponse as DeleteTopicsResponseV1
from kio.schema.delete_topics.v6.request import DeleteTopicsRequest as DeleteTopicsRequestV6
from kio.schema.delete_topics.v6.request import DeleteTopicState
from kio.schema.delete_topics.v6.response import DeleteTopicsResponse as DeleteTopicsResponseV6
from kio.schema.describe_configs.v1 import request as describe_v1
from kio.schema.describe_configs.v1.response import (
    DescribeConfigsResponse as DescribeConfigsResponseV1,
)
from kio.schema.describe_configs.v4 import request as describe_v4
from kio.schema.describe_configs.v4.response import (
    DescribeConfigsResponse as DescribeConfigsResponseV4,
)
from kio.schema.describe_log_dirs.v1 import request as log_dirs_v1
from kio.schema.describe_log_dirs.v1.response import (
    DescribeLogDirsResponse as DescribeLogDirsResponseV1,
)
from kio.schema.describe_log_dirs.v4 import request as log_dirs_v4
from kio.schema.describe_log_dirs.v4.response import (
    DescribeLogDirsResponse as DescribeLogDirsResponseV4,
)
from kio.schema.errors import ErrorCode
from kio.schema.incremental_alter_configs.v0 import request as alter_v0
from kio.schema.incremental_alter_configs.v0.response import (
    IncrementalAlterConfigsResponse as AlterResponseV0,
)
from kio.schema.incremental_alter_configs.v1 import request as alter_v1
from kio.schema.incremental_alter_configs.v1.response import (
    IncrementalAlterConfigsResponse as AlterResponseV1,
)
from kio.schema.types import TopicName
from kio.static.primitive import i8, i16, i32

from storage_core.client.cluster import KafkaCluster
from storage_core.client.errors import (
    BrokerResponseError,
    UnsupportedVersionError,
    raise_for_error,
)
from storage_core.client.framing import i32_timedelta
from storage_core.client.metadata import TopicMetadata
from storage_core.client.negotiation import ApiKey
from storage_core.client.topic_partitions import describe_topic_partitions
from storage_core.common import TopicPartition, Uuid

DEFAULT_ADMIN_TIMEOUT_MS = 30_000
MAX_TOPICS_PER_REQUEST = 1000


class ConfigResourceType(enum.IntEnum):
    """Kafka's ``ConfigResource.Type`` (the ``resource_type`` of config requests)."""

    TOPIC = 2
    BROKER = 4


class ConfigSource(enum.IntEnum):
    """Where a config value comes from (DescribeConfigs ``config_source``)."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6
    CLIENT_METRICS_CONFIG = 7
    GROUP_CONFIG = 8

    @staticmethod
    def from_id(value: int) -> ConfigSource:
        try:
            return ConfigSource(value)
        except ValueError:
            return ConfigSource.UNKNOWN


class AlterConfigOpType(enum.IntEnum):
    """IncrementalAlterConfigs ``config_operation``."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


@dataclass(frozen=True, slots=True, kw_only=True)
class NewTopic:
    """A topic to create; ``replication_factor`` and ``num_partitions`` are positive, or -1
    for the broker's defaults."""

    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    configs: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.num_partitions == 0 or self.num_partitions < -1:
            raise ValueError(f"num_partitions must be positive or -1, got {self.num_partitions}")
        if self.replication_factor == 0 or self.replication_factor < -1:
            raise ValueError(
                f"replication_factor must be positive or -1, got {self.replication_factor}"
            )


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
class AlterConfigOp:
    name: str
    op: AlterConfigOpType
    value: str | None = None


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
        results: list[CreatedTopic] = []
        if version >= 7:
            response7 = session.send(
                create_v7.CreateTopicsRequest(
                    topics=tuple(
                        create_v7.CreatableTopic(
                            name=TopicName(t.name),
                            num_partitions=i32(t.num_partitions),
                            replication_factor=i16(t.replication_factor),
                            assignments=(),
                            configs=tuple(
                                create_v7.CreatableTopicConfig(name=k, value=v)
                                for k, v in t.configs.items()
                            ),
                        )
                        for t in topics
                    ),
                    timeout=i32_timedelta(self.timeout_ms),
                    validate_only=validate_only,
                ),
                CreateTopicsResponseV7,
            )
            for r7 in response7.topics:
                raise_for_error(
                    r7.error_code, resource=f"topic {r7.name!r}", broker_message=r7.error_message
                )
                topic_id = None if r7.topic_id is None else Uuid.from_bytes(r7.topic_id.bytes)
                results.append(
                    CreatedTopic(
                        name=str(r7.name),
                        topic_id=topic_id,
                        num_partitions=int(r7.num_partitions),
                        replication_factor=int(r7.replication_factor),
                    )
                )
        else:
            response4 = session.send(
                create_v4.CreateTopicsRequest(
                    topics=tuple(
                        create_v4.CreatableTopic(
                            name=TopicName(t.name),
                            num_partitions=i32(t.num_partitions),
                            replication_factor=i16(t.replication_factor),
                            assignments=(),
                            configs=tuple(
                                create_v4.CreatableTopicConfig(name=k, value=v)
                                for k, v in t.configs.items()
                            ),
                        )
                        for t in topics
                    ),
                    timeout=i32_timedelta(self.timeout_ms),
                    validate_only=validate_only,
                ),
                CreateTopicsResponseV4,
            )
            by_name = {t.name: t for t in topics}
            for r4 in response4.topics:
                raise_for_error(
                    r4.error_code, resource=f"topic {r4.name!r}", broker_message=r4.error_message
                )
                asked = by_name.get(str(r4.name))
                results.append(
                    CreatedTopic(
                        name=str(r4.name),
                        topic_id=None,
                        num_partitions=asked.num_partitions if asked else -1,
                        replication_factor=asked.replication_factor if asked else -1,
                    )
                )
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
        if version >= 6:
            response6 = session.send(
                DeleteTopicsRequestV6(
                    topics=tuple(
                        DeleteTopicState(name=TopicName(name), topic_id=None) for name in names
                    ),
                    timeout=i32_timedelta(self.timeout_ms),
                ),
                DeleteTopicsResponseV6,
            )
            for r6 in response6.responses:
                raise_for_error(
                    r6.error_code, resource=f"topic {r6.name!r}", broker_message=r6.error_message
                )
        else:
            response1 = session.send(
                DeleteTopicsRequestV1(
                    topic_names=tuple(TopicName(name) for name in names),
                    timeout=i32_timedelta(self.timeout_ms),
                ),
                DeleteTopicsResponseV1,
            )
            for r1 in response1.responses:
                raise_for_error(r1.error_code, resource=f"topic {r1.name!r}")
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

    # ------------------------------------------------------------------ configs
    def describe_configs(
        self,
        resource_type: ConfigResourceType,
        name: str,
        keys: Sequence[str] | None = None,
    ) -> tuple[ConfigEntry, ...]:
        """The configs of one resource (all of them, or only ``keys``)."""
        session = self.cluster.any_session()
        version = session.version(ApiKey.DESCRIBE_CONFIGS)
        key_tuple = None if keys is None else tuple(keys)
        resource = f"{resource_type.name.lower()} {name!r}"
        if version >= 4:
            response4 = session.send(
                describe_v4.DescribeConfigsRequest(
                    resources=(
                        describe_v4.DescribeConfigsResource(
                            resource_type=i8(resource_type),
                            resource_name=name,
                            configuration_keys=key_tuple,
                        ),
                    ),
                    include_synonyms=False,
                    include_documentation=False,
                ),
                DescribeConfigsResponseV4,
            )
            entries: list[ConfigEntry] = []
            for r4 in response4.results:
                raise_for_error(r4.error_code, resource=resource, broker_message=r4.error_message)
                entries += [
                    ConfigEntry(
                        name=c.name,
                        value=c.value,
                        read_only=c.read_only,
                        source=ConfigSource.from_id(int(c.config_source)),
                        is_sensitive=c.is_sensitive,
                    )
                    for c in r4.configs
                ]
            return tuple(entries)
        response1 = session.send(
            describe_v1.DescribeConfigsRequest(
                resources=(
                    describe_v1.DescribeConfigsResource(
                        resource_type=i8(resource_type),
                        resource_name=name,
                        configuration_keys=key_tuple,
                    ),
                ),
                include_synonyms=False,
            ),
            DescribeConfigsResponseV1,
        )
        entries = []
        for r1 in response1.results:
            raise_for_error(r1.error_code, resource=resource, broker_message=r1.error_message)
            entries += [
                ConfigEntry(
                    name=c.name,
                    value=c.value,
                    read_only=c.read_only,
                    source=ConfigSource.from_id(int(c.config_source)),
                    is_sensitive=c.is_sensitive,
                )
                for c in r1.configs
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
        if version >= 1:
            response1 = session.send(
                alter_v1.IncrementalAlterConfigsRequest(
                    resources=(
                        alter_v1.AlterConfigsResource(
                            resource_type=i8(resource_type),
                            resource_name=name,
                            configs=tuple(
                                alter_v1.AlterableConfig(
                                    name=op.name, config_operation=i8(op.op), value=op.value
                                )
                                for op in ops
                            ),
                        ),
                    ),
                    validate_only=validate_only,
                ),
                AlterResponseV1,
            )
            for r1 in response1.responses:
                raise_for_error(r1.error_code, resource=resource, broker_message=r1.error_message)
            return
        response0 = session.send(
            alter_v0.IncrementalAlterConfigsRequest(
                resources=(
                    alter_v0.AlterConfigsResource(
                        resource_type=i8(resource_type),
                        resource_name=name,
                        configs=tuple(
                            alter_v0.AlterableConfig(
                                name=op.name, config_operation=i8(op.op), value=op.value
                            )
                            for op in ops
                        ),
                    ),
                ),
                validate_only=validate_only,
            ),
            AlterResponseV0,
        )
        for r0 in response0.responses:
            raise_for_error(r0.error_code, resource=resource, broker_message=r0.error_message)

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
        # v1 and v4 requests have the same fields; v4 answers carry a top-level error too
        request: Any = log_dirs_v4 if version >= 4 else log_dirs_v1
        response_type: Any = (
            DescribeLogDirsResponseV4 if version >= 4 else DescribeLogDirsResponseV1
        )
        response = session.send(
            request.DescribeLogDirsRequest(
                topics=None
                if topics is None
                else tuple(
                    request.DescribableLogDirTopic(
                        topic=TopicName(name), partitions=tuple(i32(p) for p in partitions)
                    )
                    for name, partitions in sorted(topics.items())
                )
            ),
            response_type,
        )
        if version >= 4:
            raise_for_error(response.error_code, resource=broker)
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
