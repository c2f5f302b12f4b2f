"""Cluster metadata as the client sees it (brokers, topics, partition leaders).

Fetched with Metadata v12 (topic ids, flexible) or v4. Topics are asked for by name and
never auto-created (``allow_auto_topic_creation`` false); ``None`` asks for all topics.
Immutable values, safe to share between threads.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.metadata.v4.response import MetadataResponse as MetadataResponseV4
from kio.schema.metadata.v12.response import MetadataResponse as MetadataResponseV12
from kio.schema.types import TopicName

from storage_core.client.errors import BrokerResponseError
from storage_core.client.negotiation import ApiKey, BrokerSession
from storage_core.common import ZERO_UUID, TopicPartition, Uuid
from storage_core.protocol.messages import build, request_module, response_schema

NO_LEADER = -1


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerNode:
    node_id: int
    host: str
    port: int
    rack: str | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionMetadata:
    """One partition; ``leader_id`` is ``NO_LEADER`` (-1) while no leader is elected."""

    partition: int
    leader_id: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...]
    error: ErrorCode


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicMetadata:
    """One topic; ``error`` is not ``none`` when the topic could not be described."""

    name: str
    topic_id: Uuid | None
    is_internal: bool
    partitions: tuple[PartitionMetadata, ...]
    error: ErrorCode

    def partition(self, index: int) -> PartitionMetadata | None:
        for partition in self.partitions:
            if partition.partition == index:
                return partition
        return None

    def raise_for_error(self) -> None:
        if self.error != ErrorCode.none:
            raise BrokerResponseError(
                self.error, resource=f"topic {self.name!r}", operation="Describe"
            )


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterMetadata:
    cluster_id: str | None
    controller_id: int
    brokers: tuple[BrokerNode, ...]
    topics: tuple[TopicMetadata, ...]

    def broker(self, node_id: int) -> BrokerNode | None:
        for broker in self.brokers:
            if broker.node_id == node_id:
                return broker
        return None

    def topic(self, name: str) -> TopicMetadata | None:
        for topic in self.topics:
            if topic.name == name:
                return topic
        return None

    def leader_of(self, topic_partition: TopicPartition) -> BrokerNode:
        """The leader's node; ``BrokerResponseError`` if the topic, partition or leader is
        unknown."""
        topic = self.topic(topic_partition.topic)
        if topic is None:
            raise BrokerResponseError(
                ErrorCode.unknown_topic_or_partition, resource=f"topic {topic_partition.topic!r}"
            )
        topic.raise_for_error()
        partition = topic.partition(topic_partition.partition)
        if partition is None:
            raise BrokerResponseError(
                ErrorCode.unknown_topic_or_partition,
                resource=f"partition {topic_partition}",
                broker_message=f"the topic has {len(topic.partitions)} partitions",
            )
        leader = self.broker(partition.leader_id)
        if partition.leader_id == NO_LEADER or leader is None:
            raise BrokerResponseError(
                ErrorCode.leader_not_available, resource=f"partition {topic_partition}"
            )
        return leader


def fetch_metadata(session: BrokerSession, topics: Sequence[str] | None) -> ClusterMetadata:
    """Ask ``session``'s broker for the metadata of ``topics`` (``None``: all topics)."""
    version = session.version(ApiKey.METADATA)
    response = session.send(
        metadata_request(version, topics), response_schema(ApiKey.METADATA, version)
    )
    # v10+ answers carry topic ids, v7+ leader epochs, v5+ offline replicas
    return _from_v12(response) if version >= 12 else _from_v4(response)


def metadata_request(version: int, topics: Sequence[str] | None) -> Any:
    """A Metadata request of any version (Kafka's ``MetadataRequest.Builder``); ``None``
    asks for all topics. Topics are never created by asking."""
    m = request_module(ApiKey.METADATA, version)
    return build(
        m.MetadataRequest,
        topics=None
        if topics is None
        else tuple(
            build(m.MetadataRequestTopic, topic_id=None, name=TopicName(name)) for name in topics
        ),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )


def _from_v12(response: MetadataResponseV12) -> ClusterMetadata:
    return ClusterMetadata(
        cluster_id=response.cluster_id,
        controller_id=int(response.controller_id),
        brokers=tuple(
            BrokerNode(node_id=int(b.node_id), host=b.host, port=int(b.port), rack=b.rack)
            for b in response.brokers
        ),
        topics=tuple(
            TopicMetadata(
                name=str(t.name or ""),
                topic_id=_topic_id(t.topic_id),
                is_internal=t.is_internal,
                error=t.error_code,
                partitions=tuple(partition_metadata(p) for p in t.partitions),
            )
            for t in response.topics
        ),
    )


def _from_v4(response: MetadataResponseV4) -> ClusterMetadata:
    return ClusterMetadata(
        cluster_id=response.cluster_id,
        controller_id=int(response.controller_id),
        brokers=tuple(
            BrokerNode(node_id=int(b.node_id), host=b.host, port=int(b.port), rack=b.rack)
            for b in response.brokers
        ),
        topics=tuple(
            TopicMetadata(
                name=str(t.name),
                topic_id=None,
                is_internal=t.is_internal,
                error=t.error_code,
                partitions=tuple(
                    PartitionMetadata(
                        partition=int(p.partition_index),
                        leader_id=int(p.leader_id),
                        leader_epoch=-1,
                        replicas=tuple(int(r) for r in p.replica_nodes),
                        isr=tuple(int(r) for r in p.isr_nodes),
                        offline_replicas=(),
                        error=p.error_code,
                    )
                    for p in t.partitions
                ),
            )
            for t in response.topics
        ),
    )


def _topic_id(value: uuid.UUID | None) -> Uuid | None:
    """Kafka sends the zero id when a topic has none (or is unknown)."""
    if value is None:
        return None
    topic_id = Uuid.from_bytes(value.bytes)
    return None if topic_id == ZERO_UUID else topic_id


def partition_metadata(p: Any) -> PartitionMetadata:
    """A partition as Metadata and DescribeTopicPartitions describe it (same field names)."""
    return PartitionMetadata(
        partition=int(p.partition_index),
        leader_id=int(p.leader_id),
        leader_epoch=int(p.leader_epoch),
        replicas=tuple(int(r) for r in p.replica_nodes),
        isr=tuple(int(r) for r in p.isr_nodes),
        offline_replicas=tuple(int(r) for r in p.offline_replicas),
        error=p.error_code,
    )
