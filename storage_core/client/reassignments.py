"""Partition reassignments through AlterPartitionReassignments (key 45, v0/v1) and
ListPartitionReassignments (key 46, v0), both sent to the controller (KIP-455).

A top-level error (NOT_CONTROLLER...) raises ``BrokerResponseError``; per-partition errors
come back to the caller, who decides what to report. Not thread-safe (it uses a
``KafkaCluster``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.list_partition_reassignments.v0 import request as list_v0
from kio.schema.list_partition_reassignments.v0.response import (
    ListPartitionReassignmentsResponse,
)
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i32

from storage_core.client.cluster import KafkaCluster
from storage_core.client.errors import UnsupportedVersionError, raise_for_error
from storage_core.client.framing import i32_timedelta
from storage_core.client.negotiation import ApiKey
from storage_core.common import TopicPartition
from storage_core.protocol.messages import build, request_module, response_schema

DEFAULT_TIMEOUT_MS = 30_000


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionReassignment:
    """An ongoing reassignment: all replicas (target first), those being added and removed."""

    replicas: tuple[int, ...]
    adding_replicas: tuple[int, ...]
    removing_replicas: tuple[int, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class ReassignmentResult:
    """One partition's answer: ``ErrorCode.none`` when the broker accepted it."""

    error: ErrorCode
    message: str | None = None


def alter_partition_reassignments(
    cluster: KafkaCluster,
    reassignments: Mapping[TopicPartition, Sequence[int] | None],
    *,
    allow_replication_factor_change: bool = True,
    timeout_ms: int = DEFAULT_TIMEOUT_MS,
) -> dict[TopicPartition, ReassignmentResult]:
    """Start reassigning each partition to its replicas; None cancels its reassignment."""
    by_topic: dict[str, list[tuple[int, tuple[int, ...] | None]]] = {}
    for tp, replicas in reassignments.items():
        target = None if replicas is None else tuple(replicas)
        by_topic.setdefault(tp.topic, []).append((tp.partition, target))
    session = cluster.controller_session()
    version = session.version(ApiKey.ALTER_PARTITION_REASSIGNMENTS)
    if version < 1 and not allow_replication_factor_change:
        raise UnsupportedVersionError(
            "the controller does not support refusing replication factor changes"
            " (AlterPartitionReassignments v1, Kafka 3.9+)"
        )
    response = session.send(
        alter_partition_reassignments_request(
            version,
            by_topic,
            allow_replication_factor_change=allow_replication_factor_change,
            timeout_ms=timeout_ms,
        ),
        response_schema(ApiKey.ALTER_PARTITION_REASSIGNMENTS, version),
    )
    raise_for_error(
        response.error_code,
        resource="AlterPartitionReassignments",
        broker_message=response.error_message,
    )
    return {
        TopicPartition(str(t.name), int(p.partition_index)): ReassignmentResult(
            error=p.error_code, message=p.error_message
        )
        for t in response.responses
        for p in t.partitions
    }


def alter_partition_reassignments_request(
    version: int,
    by_topic: Mapping[str, Sequence[tuple[int, tuple[int, ...] | None]]],
    *,
    allow_replication_factor_change: bool,
    timeout_ms: int,
) -> Any:
    """An AlterPartitionReassignments request of any version: topic -> (partition, target
    replicas or None to cancel)."""
    m = request_module(ApiKey.ALTER_PARTITION_REASSIGNMENTS, version)
    return build(
        m.AlterPartitionReassignmentsRequest,
        timeout=i32_timedelta(timeout_ms),
        allow_replication_factor_change=allow_replication_factor_change,
        topics=tuple(
            build(
                m.ReassignableTopic,
                name=TopicName(topic),
                partitions=tuple(
                    build(
                        m.ReassignablePartition,
                        partition_index=i32(partition),
                        replicas=_broker_ids(replicas),
                    )
                    for partition, replicas in parts
                ),
            )
            for topic, parts in by_topic.items()
        ),
    )


def list_partition_reassignments(
    cluster: KafkaCluster,
    partitions: Sequence[TopicPartition] | None = None,
    *,
    timeout_ms: int = DEFAULT_TIMEOUT_MS,
) -> dict[TopicPartition, PartitionReassignment]:
    """The ongoing reassignments of ``partitions`` (None: all of them)."""
    topics = None
    if partitions is not None:
        by_topic: dict[str, list[int]] = {}
        for tp in partitions:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        topics = tuple(
            list_v0.ListPartitionReassignmentsTopics(
                name=TopicName(topic), partition_indexes=tuple(i32(p) for p in indexes)
            )
            for topic, indexes in by_topic.items()
        )
    session = cluster.controller_session()
    session.version(ApiKey.LIST_PARTITION_REASSIGNMENTS)
    response = session.send(
        list_v0.ListPartitionReassignmentsRequest(timeout=i32_timedelta(timeout_ms), topics=topics),
        ListPartitionReassignmentsResponse,
    )
    raise_for_error(
        response.error_code,
        resource="ListPartitionReassignments",
        broker_message=response.error_message,
    )
    return {
        TopicPartition(str(t.name), int(p.partition_index)): PartitionReassignment(
            replicas=tuple(int(r) for r in p.replicas),
            adding_replicas=tuple(int(r) for r in p.adding_replicas),
            removing_replicas=tuple(int(r) for r in p.removing_replicas),
        )
        for t in response.topics
        for p in t.partitions
    }


def _broker_ids(replicas: tuple[int, ...] | None) -> tuple[BrokerId, ...] | None:
    return None if replicas is None else tuple(BrokerId(r) for r in replicas)
