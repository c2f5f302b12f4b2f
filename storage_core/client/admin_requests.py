"""The admin client's requests, built at whichever version the session negotiated through the
protocol layer's ``build`` (Kafka's ``CreateTopicsRequest.Builder``,
``DeleteTopicsRequest.Builder``, ``DescribeConfigsRequest.Builder``,
``IncrementalAlterConfigsRequest.Builder``, ``DescribeLogDirsRequest.Builder``), and what they
carry (Kafka's admin ``NewTopic`` and ``AlterConfigOp``).

One construction serves every version: fields a version does not have are dropped. Only
DeleteTopics changed the shape of a field (v6 names topics by ``DeleteTopicState``, older
versions by ``topic_names``), so its builder picks the field by version, as Kafka's does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kio.schema.types import TopicName
from kio.static.primitive import i8, i16, i32

from storage_core.client.framing import i32_timedelta
from storage_core.client.negotiation import ApiKey
from storage_core.protocol.config_resource import AlterConfigOpType, ConfigResourceType
from storage_core.protocol.messages import build, request_module


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
class AlterConfigOp:
    name: str
    op: AlterConfigOpType
    value: str | None = None


def create_topics_request(
    version: int, topics: Sequence[NewTopic], *, timeout_ms: int, validate_only: bool
) -> Any:
    m = request_module(ApiKey.CREATE_TOPICS, version)
    return build(
        m.CreateTopicsRequest,
        topics=tuple(
            build(
                m.CreatableTopic,
                name=TopicName(t.name),
                num_partitions=i32(t.num_partitions),
                replication_factor=i16(t.replication_factor),
                assignments=(),
                configs=tuple(
                    build(m.CreatableTopicConfig, name=k, value=v) for k, v in t.configs.items()
                ),
            )
            for t in topics
        ),
        timeout=i32_timedelta(timeout_ms),
        validate_only=validate_only,
    )


def delete_topics_request(version: int, names: Sequence[str], *, timeout_ms: int) -> Any:
    m = request_module(ApiKey.DELETE_TOPICS, version)
    by_name: dict[str, Any] = {}
    if version >= 6:
        by_name["topics"] = tuple(
            build(m.DeleteTopicState, name=TopicName(name), topic_id=None) for name in names
        )
    else:
        by_name["topic_names"] = tuple(TopicName(name) for name in names)
    return build(m.DeleteTopicsRequest, timeout=i32_timedelta(timeout_ms), **by_name)


def describe_configs_request(
    version: int, resource_type: ConfigResourceType, name: str, keys: Sequence[str] | None
) -> Any:
    m = request_module(ApiKey.DESCRIBE_CONFIGS, version)
    return build(
        m.DescribeConfigsRequest,
        resources=(
            build(
                m.DescribeConfigsResource,
                resource_type=i8(resource_type),
                resource_name=name,
                configuration_keys=None if keys is None else tuple(keys),
            ),
        ),
        include_synonyms=False,
        include_documentation=False,
    )


def incremental_alter_configs_request(
    version: int,
    resource_type: ConfigResourceType,
    name: str,
    ops: Sequence[AlterConfigOp],
    *,
    validate_only: bool,
) -> Any:
    m = request_module(ApiKey.INCREMENTAL_ALTER_CONFIGS, version)
    return build(
        m.IncrementalAlterConfigsRequest,
        resources=(
            build(
                m.AlterConfigsResource,
                resource_type=i8(resource_type),
                resource_name=name,
                configs=tuple(
                    build(
                        m.AlterableConfig,
                        name=op.name,
                        config_operation=i8(op.op),
                        value=op.value,
                    )
                    for op in ops
                ),
            ),
        ),
        validate_only=validate_only,
    )


def describe_log_dirs_request(version: int, topics: Mapping[str, Sequence[int]] | None) -> Any:
    m = request_module(ApiKey.DESCRIBE_LOG_DIRS, version)
    return build(
        m.DescribeLogDirsRequest,
        topics=None
        if topics is None
        else tuple(
            build(
                m.DescribableLogDirTopic,
                topic=TopicName(name),
                partitions=tuple(i32(p) for p in partitions),
            )
            for name, partitions in sorted(topics.items())
        ),
    )
