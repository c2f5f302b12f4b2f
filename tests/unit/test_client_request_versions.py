"""The admin client builds its requests at every version it negotiates through the protocol
layer's ``build``: the bytes on the wire are those of the per-version kio classes it used to
construct one by one (written out here as they were), for every version in
``CLIENT_API_VERSIONS``."""

from __future__ import annotations

from typing import Any

import pytest
from kio.schema.create_topics.v4 import request as create_v4
from kio.schema.create_topics.v7 import request as create_v7
from kio.schema.delete_topics.v1.request import DeleteTopicsRequest as DeleteTopicsRequestV1
from kio.schema.delete_topics.v6.request import DeleteTopicsRequest as DeleteTopicsRequestV6
from kio.schema.delete_topics.v6.request import DeleteTopicState
from kio.schema.describe_configs.v1 import request as describe_v1
from kio.schema.describe_configs.v4 import request as describe_v4
from kio.schema.describe_log_dirs.v1 import request as log_dirs_v1
from kio.schema.describe_log_dirs.v4 import request as log_dirs_v4
from kio.schema.incremental_alter_configs.v0 import request as alter_v0
from kio.schema.incremental_alter_configs.v1 import request as alter_v1
from kio.schema.types import TopicName
from kio.static.primitive import i8, i16, i32

from storage_core.client.admin_requests import (
    AlterConfigOp,
    NewTopic,
    create_topics_request,
    delete_topics_request,
    describe_configs_request,
    describe_log_dirs_request,
    incremental_alter_configs_request,
)
from storage_core.client.connection import encode_body
from storage_core.client.framing import i32_timedelta
from storage_core.client.negotiation import CLIENT_API_VERSIONS, ApiKey
from storage_core.protocol.config_resource import AlterConfigOpType, ConfigResourceType

TOPICS = (
    NewTopic(name="a", num_partitions=3, replication_factor=2, configs={"retention.ms": "5"}),
    NewTopic(name="b"),
)
OPS = (
    AlterConfigOp(name="retention.ms", op=AlterConfigOpType.SET, value="7"),
    AlterConfigOp(name="segment.ms", op=AlterConfigOpType.DELETE),
)


def _old_create_topics(version: int, validate_only: bool) -> Any:
    m: Any = create_v7 if version >= 7 else create_v4
    return m.CreateTopicsRequest(
        topics=tuple(
            m.CreatableTopic(
                name=TopicName(t.name),
                num_partitions=i32(t.num_partitions),
                replication_factor=i16(t.replication_factor),
                assignments=(),
                configs=tuple(
                    m.CreatableTopicConfig(name=k, value=v) for k, v in t.configs.items()
                ),
            )
            for t in TOPICS
        ),
        timeout=i32_timedelta(30_000),
        validate_only=validate_only,
    )


def _old_delete_topics(version: int) -> Any:
    names = ("a", "b")
    if version >= 6:
        return DeleteTopicsRequestV6(
            topics=tuple(DeleteTopicState(name=TopicName(n), topic_id=None) for n in names),
            timeout=i32_timedelta(30_000),
        )
    return DeleteTopicsRequestV1(
        topic_names=tuple(TopicName(n) for n in names), timeout=i32_timedelta(30_000)
    )


def _old_describe_configs(version: int, keys: tuple[str, ...] | None) -> Any:
    if version >= 4:
        return describe_v4.DescribeConfigsRequest(
            resources=(
                describe_v4.DescribeConfigsResource(
                    resource_type=i8(ConfigResourceType.TOPIC),
                    resource_name="a",
                    configuration_keys=keys,
                ),
            ),
            include_synonyms=False,
            include_documentation=False,
        )
    return describe_v1.DescribeConfigsRequest(
        resources=(
            describe_v1.DescribeConfigsResource(
                resource_type=i8(ConfigResourceType.TOPIC),
                resource_name="a",
                configuration_keys=keys,
            ),
        ),
        include_synonyms=False,
    )


def _old_incremental_alter_configs(version: int, validate_only: bool) -> Any:
    m: Any = alter_v1 if version >= 1 else alter_v0
    return m.IncrementalAlterConfigsRequest(
        resources=(
            m.AlterConfigsResource(
                resource_type=i8(ConfigResourceType.BROKER),
                resource_name="1",
                configs=tuple(
                    m.AlterableConfig(name=op.name, config_operation=i8(op.op), value=op.value)
                    for op in OPS
                ),
            ),
        ),
        validate_only=validate_only,
    )


def _old_describe_log_dirs(version: int, topics: dict[str, list[int]] | None) -> Any:
    m: Any = log_dirs_v4 if version >= 4 else log_dirs_v1
    return m.DescribeLogDirsRequest(
        topics=None
        if topics is None
        else tuple(
            m.DescribableLogDirTopic(
                topic=TopicName(name), partitions=tuple(i32(p) for p in partitions)
            )
            for name, partitions in sorted(topics.items())
        )
    )


def _same_bytes(new: Any, old: Any, version: int) -> None:
    assert new.__version__ == version
    assert type(new) is type(old)
    assert encode_body(new) == encode_body(old)


@pytest.mark.parametrize("version", CLIENT_API_VERSIONS[ApiKey.CREATE_TOPICS])
@pytest.mark.parametrize("validate_only", [False, True])
def test_create_topics_bytes_at_every_version(version: int, validate_only: bool) -> None:
    new = create_topics_request(version, TOPICS, timeout_ms=30_000, validate_only=validate_only)
    _same_bytes(new, _old_create_topics(version, validate_only), version)


@pytest.mark.parametrize("version", CLIENT_API_VERSIONS[ApiKey.DELETE_TOPICS])
def test_delete_topics_bytes_at_every_version(version: int) -> None:
    new = delete_topics_request(version, ["a", "b"], timeout_ms=30_000)
    _same_bytes(new, _old_delete_topics(version), version)


@pytest.mark.parametrize("version", CLIENT_API_VERSIONS[ApiKey.DESCRIBE_CONFIGS])
@pytest.mark.parametrize("keys", [None, ("retention.ms", "segment.ms")])
def test_describe_configs_bytes_at_every_version(
    version: int, keys: tuple[str, ...] | None
) -> None:
    new = describe_configs_request(version, ConfigResourceType.TOPIC, "a", keys)
    _same_bytes(new, _old_describe_configs(version, keys), version)


@pytest.mark.parametrize("version", CLIENT_API_VERSIONS[ApiKey.INCREMENTAL_ALTER_CONFIGS])
@pytest.mark.parametrize("validate_only", [False, True])
def test_incremental_alter_configs_bytes_at_every_version(
    version: int, validate_only: bool
) -> None:
    new = incremental_alter_configs_request(
        version, ConfigResourceType.BROKER, "1", OPS, validate_only=validate_only
    )
    _same_bytes(new, _old_incremental_alter_configs(version, validate_only), version)


@pytest.mark.parametrize("version", CLIENT_API_VERSIONS[ApiKey.DESCRIBE_LOG_DIRS])
@pytest.mark.parametrize("topics", [None, {"b": [1, 0], "a": [2]}])
def test_describe_log_dirs_bytes_at_every_version(
    version: int, topics: dict[str, list[int]] | None
) -> None:
    new = describe_log_dirs_request(version, topics)
    _same_bytes(new, _old_describe_log_dirs(version, topics), version)
