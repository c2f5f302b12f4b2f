"""DescribeProducers (key 61 v0, KIP-664) from the admin client: the active producers of
partitions as their leaders' producer state knows them (Kafka's ``Admin.describeProducers``).

Each partition is asked of its leader (one request per leader, as Kafka's
``DescribeProducersHandler`` batches them); a partition whose leader answers
NOT_LEADER_OR_FOLLOWER (leadership moved since the metadata was read) is asked once more
after a metadata refresh. A leaderless partition is LEADER_NOT_AVAILABLE without a request;
the partitions of a leader that cannot be asked get UNSUPPORTED_VERSION (a broker without
DescribeProducers), REQUEST_TIMED_OUT or NETWORK_EXCEPTION with the client's message. Errors
are per partition values (``PartitionProducers.error``), never raised: an operator looking at
many partitions sees which ones could not be read and why.

Not thread-safe (it uses a ``KafkaCluster``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.types import TopicName
from kio.static.primitive import i32

from storage_core.client.cluster import KafkaCluster
from storage_core.client.errors import (
    BrokerResponseError,
    ClientError,
    RequestTimeoutError,
    UnsupportedVersionError,
)
from storage_core.client.metadata import NO_LEADER
from storage_core.client.negotiation import ApiKey
from storage_core.common import TopicPartition
from storage_core.protocol.messages import build, request_module, response_schema

NO_TXN_START_OFFSET = -1
MAX_PARTITIONS_PER_REQUEST = 1000
# a leader that cannot be asked: its partitions' error, as Kafka's admin client reports it
_CLIENT_ERRORS: dict[type[ClientError], ErrorCode] = {
    UnsupportedVersionError: ErrorCode.unsupported_version,
    RequestTimeoutError: ErrorCode.request_timed_out,
}


@dataclass(frozen=True, slots=True, kw_only=True)
class ProducerState:
    """One active producer of a partition (Kafka's admin ``ProducerState``);
    ``current_txn_start_offset`` is the first offset of its open transaction, -1 for none."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp_ms: int
    coordinator_epoch: int
    current_txn_start_offset: int

    @property
    def has_open_transaction(self) -> bool:
        return self.current_txn_start_offset != NO_TXN_START_OFFSET


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionProducers:
    """A partition's active producers, or the error its leader (or the metadata) gave;
    ``error_message`` is the broker's own explanation when it sent one."""

    partition: TopicPartition
    error: ErrorCode = ErrorCode.none
    error_message: str | None = None
    producers: tuple[ProducerState, ...] = ()

    @property
    def open_transactions(self) -> tuple[ProducerState, ...]:
        """The producers with an open transaction, the oldest (lowest start offset) first."""
        return tuple(
            sorted(
                (p for p in self.producers if p.has_open_transaction),
                key=lambda p: (p.current_txn_start_offset, p.producer_id),
            )
        )

    def raise_for_error(self) -> None:
        if self.error != ErrorCode.none:
            raise BrokerResponseError(
                self.error,
                resource=f"partition {self.partition}",
                broker_message=self.error_message,
                operation="Read",
            )


def describe_producers(
    cluster: KafkaCluster, topic: str, partitions: Sequence[int]
) -> list[PartitionProducers]:
    """The active producers of ``topic``'s ``partitions``, in the order given."""
    if not partitions:
        raise ValueError(f"no partition of {topic!r} given")
    if len(partitions) > MAX_PARTITIONS_PER_REQUEST:
        raise ValueError(
            f"{len(partitions)} partitions in one request; at most {MAX_PARTITIONS_PER_REQUEST}"
        )
    answers = _ask_leaders(cluster, topic, list(dict.fromkeys(partitions)))
    moved = [i for i, a in answers.items() if a.error == ErrorCode.not_leader_or_follower]
    if moved:
        cluster.refresh_metadata([topic])
        answers.update(_ask_leaders(cluster, topic, moved))
    return [answers[i] for i in partitions]


def _ask_leaders(
    cluster: KafkaCluster, topic: str, partitions: list[int]
) -> dict[int, PartitionProducers]:
    metadata = cluster.metadata([topic])
    described = metadata.topic(topic)
    if described is None or described.error != ErrorCode.none:
        metadata = cluster.refresh_metadata([topic])
        described = metadata.topic(topic)
    answers: dict[int, PartitionProducers] = {}
    by_leader: dict[int, list[int]] = defaultdict(list)
    for index in partitions:
        tp = TopicPartition(topic, index)
        if described is None or described.error != ErrorCode.none:
            error = ErrorCode.unknown_topic_or_partition if described is None else described.error
            answers[index] = PartitionProducers(partition=tp, error=error)
            continue
        p = described.partition(index)
        if p is None:
            answers[index] = PartitionProducers(
                partition=tp, error=ErrorCode.unknown_topic_or_partition
            )
        elif p.leader_id == NO_LEADER:
            answers[index] = PartitionProducers(partition=tp, error=ErrorCode.leader_not_available)
        else:
            by_leader[p.leader_id].append(index)
    for leader, indexes in sorted(by_leader.items()):
        try:
            session = cluster.session_for_node(leader)
            version = session.version(ApiKey.DESCRIBE_PRODUCERS)
            response = session.send(
                describe_producers_request(version, topic, indexes),
                response_schema(ApiKey.DESCRIBE_PRODUCERS, version),
            )
        except ClientError as exc:
            # this leader's partitions only: the others' answers still count
            error = _CLIENT_ERRORS.get(type(exc), ErrorCode.network_exception)
            for index in indexes:
                answers[index] = PartitionProducers(
                    partition=TopicPartition(topic, index),
                    error=error,
                    error_message=f"broker {leader}: {exc}",
                )
            continue
        for t in response.topics:
            if str(t.name) != topic:
                continue
            for r in t.partitions:
                index = int(r.partition_index)
                if index in indexes:
                    answers[index] = _partition_producers(TopicPartition(topic, index), r)
        for index in indexes:
            # a leader that leaves a partition out of its answer did not describe it
            answers.setdefault(
                index,
                PartitionProducers(
                    partition=TopicPartition(topic, index),
                    error=ErrorCode.unknown_server_error,
                    error_message=f"broker {leader} left it out of its DescribeProducers answer",
                ),
            )
    return answers


def describe_producers_request(version: int, topic: str, partitions: Sequence[int]) -> Any:
    m = request_module(ApiKey.DESCRIBE_PRODUCERS, version)
    return build(
        m.DescribeProducersRequest,
        topics=(
            build(
                m.TopicRequest,
                name=TopicName(topic),
                partition_indexes=tuple(i32(p) for p in partitions),
            ),
        ),
    )


def _partition_producers(tp: TopicPartition, r: Any) -> PartitionProducers:
    return PartitionProducers(
        partition=tp,
        error=r.error_code,
        error_message=r.error_message,
        producers=tuple(
            ProducerState(
                producer_id=int(p.producer_id),
                producer_epoch=int(p.producer_epoch),
                last_sequence=int(p.last_sequence),
                last_timestamp_ms=int(p.last_timestamp),
                coordinator_epoch=int(p.coordinator_epoch),
                current_txn_start_offset=int(p.current_txn_start_offset),
            )
            for p in r.active_producers
        ),
    )
