"""The client (admin, producer, consumer, metadata, reassignments) builds its requests at every
version it negotiates through the protocol layer's ``build``: the bytes on the wire are those
of the per-version kio classes it used to construct one by one (written out here as they
were), for every version in ``CLIENT_API_VERSIONS``."""

from __future__ import annotations

from typing import Any

import pytest
from kio.schema.alter_partition_reassignments.v0 import request as reassign_v0
from kio.schema.alter_partition_reassignments.v1 import request as reassign_v1
from kio.schema.create_topics.v4 import request as create_v4
from kio.schema.create_topics.v7 import request as create_v7
from kio.schema.delete_topics.v1.request import DeleteTopicsRequest as DeleteTopicsRequestV1
from kio.schema.delete_topics.v6.request import DeleteTopicsRequest as DeleteTopicsRequestV6
from kio.schema.delete_topics.v6.request import DeleteTopicState
from kio.schema.describe_configs.v1 import request as describe_v1
from kio.schema.describe_configs.v4 import request as describe_v4
from kio.schema.describe_log_dirs.v1 import request as log_dirs_v1
from kio.schema.describe_log_dirs.v4 import request as log_dirs_v4
from kio.schema.fetch.v4 import request as fetch_v4
from kio.schema.fetch.v12 import request as fetch_v12
from kio.schema.incremental_alter_configs.v0 import request as alter_v0
from kio.schema.incremental_alter_configs.v1 import request as alter_v1
from kio.schema.list_offsets.v1 import request as list_v1
from kio.schema.list_offsets.v7 import request as list_v7
from kio.schema.metadata.v4.request import MetadataRequest as MetadataRequestV4
from kio.schema.metadata.v4.request import MetadataRequestTopic as MetadataRequestTopicV4
from kio.schema.metadata.v12.request import MetadataRequest as MetadataRequestV12
from kio.schema.metadata.v12.request import MetadataRequestTopic as MetadataRequestTopicV12
from kio.schema.produce.v3 import request as produce_v3
from kio.schema.produce.v9 import request as produce_v9
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import Records, i8, i16, i32, i64

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
from storage_core.client.consumer import fetch_request, list_offsets_request
from storage_core.client.framing import i32_timedelta
from storage_core.client.metadata import metadata_request
from storage_core.client.negotiation import CLIENT_API_VERSIONS, ApiKey
from storage_core.client.producer import produce_request
from storage_core.client.reassignments import alter_partition_reassignments_request
from storage_core.common import TopicPartition
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


TP = TopicPartition("events", 3)


def _old_produce(version: int, payload: bytes, acks: int) -> Any:
    m: Any = produce_v9 if version >= 9 else produce_v3
    return m.ProduceRequest(
        transactional_id=None,
        acks=i16(acks),
        timeout=i32_timedelta(30_000),
        topic_data=(
            m.TopicProduceData(
                name=TopicName(TP.topic),
                partition_data=(m.PartitionProduceData(index=i32(3), records=Records(payload)),),
            ),
        ),
    )


@pytest.mark.parametrize("version", CLIENT_API_VERSIONS[ApiKey.PRODUCE])
@pytest.mark.parametrize("acks", [0, 1, -1])
def test_produce_bytes_at_every_version(version: int, acks: int) -> None:
    payload = bytes(range(256)) * 3
    new = produce_request(version, TP, payload, acks=acks, timeout_ms=30_000)
    _same_bytes(new, _old_produce(version, payload, acks), version)


def _old_list_offsets(version: int, timestamp: int, isolation_level: int) -> Any:
    if version >= 7:
        return list_v7.ListOffsetsRequest(
            replica_id=BrokerId(-1),
            isolation_level=i8(isolation_level),
            topics=(
                list_v7.ListOffsetsTopic(
                    name=TopicName(TP.topic),
                    partitions=(
                        list_v7.ListOffsetsPartition(
                            partition_index=i32(3),
                            current_leader_epoch=i32(-1),
                            timestamp=i64(timestamp),
                        ),
                    ),
                ),
            ),
        )
    return list_v1.ListOffsetsRequest(
        replica_id=BrokerId(-1),
        topics=(
            list_v1.ListOffsetsTopic(
                name=TopicName(TP.topic),
                partitions=(
                    list_v1.ListOffsetsPartition(partition_index=i32(3), timestamp=i64(timestamp)),
                ),
            ),
        ),
    )


@pytest.mark.parametrize("version", CLIENT_API_VERSIONS[ApiKey.LIST_OFFSETS])
@pytest.mark.parametrize("timestamp", [-2, -1, 1_700_000_000_000])
@pytest.mark.parametrize("isolation_level", [0, 1])
def test_list_offsets_bytes_at_every_version(
    version: int, timestamp: int, isolation_level: int
) -> None:
    new = list_offsets_request(
        version, TP, timestamp, replica_id=-1, isolation_level=isolation_level
    )
    _same_bytes(new, _old_list_offsets(version, timestamp, isolation_level), version)


def _old_fetch(version: int, offset: int) -> Any:
    if version >= 12:
        return fetch_v12.FetchRequest(
            replica_id=BrokerId(-1),
            max_wait=i32_timedelta(500),
            min_bytes=i32(1),
            max_bytes=i32(50 * 1024 * 1024),
            isolation_level=i8(1),
            session_id=i32(0),
            session_epoch=i32(-1),
            topics=(
                fetch_v12.FetchTopic(
                    topic=TopicName(TP.topic),
                    partitions=(
                        fetch_v12.FetchPartition(
                            partition=i32(3),
                            current_leader_epoch=i32(-1),
                            fetch_offset=i64(offset),
                            last_fetched_epoch=i32(-1),
                            log_start_offset=i64(-1),
                            partition_max_bytes=i32(1024 * 1024),
                        ),
                    ),
                ),
            ),
            forgotten_topics_data=(),
            rack_id="",
        )
    return fetch_v4.FetchRequest(
        replica_id=BrokerId(-1),
        max_wait=i32_timedelta(500),
        min_bytes=i32(1),
        max_bytes=i32(50 * 1024 * 1024),
        isolation_level=i8(1),
        topics=(
            fetch_v4.FetchTopic(
                topic=TopicName(TP.topic),
                partitions=(
                    fetch_v4.FetchPartition(
                        partition=i32(3),
                        fetch_offset=i64(offset),
                        partition_max_bytes=i32(1024 * 1024),
                    ),
                ),
            ),
        ),
    )


@pytest.mark.parametrize("version", CLIENT_API_VERSIONS[ApiKey.FETCH])
def test_fetch_bytes_at_every_version(version: int) -> None:
    new = fetch_request(
        version,
        TP,
        12_345,
        replica_id=-1,
        max_wait_ms=500,
        min_bytes=1,
        max_bytes=50 * 1024 * 1024,
        partition_max_bytes=1024 * 1024,
        isolation_level=1,
    )
    _same_bytes(new, _old_fetch(version, 12_345), version)


def _old_metadata(version: int, topics: list[str] | None) -> Any:
    if version >= 12:
        return MetadataRequestV12(
            topics=None
            if topics is None
            else tuple(MetadataRequestTopicV12(topic_id=None, name=TopicName(n)) for n in topics),
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )
    return MetadataRequestV4(
        topics=None
        if topics is None
        else tuple(MetadataRequestTopicV4(name=TopicName(n)) for n in topics),
        allow_auto_topic_creation=False,
    )


@pytest.mark.parametrize("version", CLIENT_API_VERSIONS[ApiKey.METADATA])
@pytest.mark.parametrize("topics", [None, [], ["a", "b"]])
def test_metadata_bytes_at_every_version(version: int, topics: list[str] | None) -> None:
    _same_bytes(metadata_request(version, topics), _old_metadata(version, topics), version)


REASSIGNMENTS = {"a": [(0, (1, 2, 3)), (1, None)], "b": [(2, (3,))]}


def _old_alter_partition_reassignments(version: int, allow: bool) -> Any:
    m: Any = reassign_v1 if version >= 1 else reassign_v0
    fields: dict[str, Any] = {"allow_replication_factor_change": allow} if version >= 1 else {}
    return m.AlterPartitionReassignmentsRequest(
        timeout=i32_timedelta(30_000),
        topics=tuple(
            m.ReassignableTopic(
                name=TopicName(topic),
                partitions=tuple(
                    m.ReassignablePartition(
                        partition_index=i32(partition),
                        replicas=None if replicas is None else tuple(BrokerId(r) for r in replicas),
                    )
                    for partition, replicas in parts
                ),
            )
            for topic, parts in REASSIGNMENTS.items()
        ),
        **fields,
    )


@pytest.mark.parametrize("version", CLIENT_API_VERSIONS[ApiKey.ALTER_PARTITION_REASSIGNMENTS])
@pytest.mark.parametrize("allow", [True, False])
def test_alter_partition_reassignments_bytes_at_every_version(version: int, allow: bool) -> None:
    if version == 0 and not allow:
        pytest.skip("v0 cannot refuse replication factor changes: the client raises first")
    new = alter_partition_reassignments_request(
        version, REASSIGNMENTS, allow_replication_factor_change=allow, timeout_ms=30_000
    )
    _same_bytes(new, _old_alter_partition_reassignments(version, allow), version)
