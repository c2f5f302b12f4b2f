"""The pure part of the transaction marker channel (Kafka's ``TransactionMarkerChannelManager``
and ``TransactionMarkerRequestCompletionHandler``): where each partition's marker goes, the
WriteTxnMarkers v1 request that carries the markers queued for one broker, and what each
partition's answer means. No sockets, no threads: immutable values, safe from any thread.

WriteTxnMarkers v1 (key 27, flexible), one request per destination broker:

    markers: [producer_id int64, producer_epoch int16, transaction_result bool (true = COMMIT),
              topics: [name string, partition_indexes [int32]], coordinator_epoch int32]

Its response lists, marker by marker in the request's order, each partition's error code.
A marker's partitions are matched by position, not by producer id: two markers of one
producer may travel in one request (a retry next to the rest of its transaction).

The answer of a partition (Kafka's completion handler; ``marker_outcome``):

    NONE, UNSUPPORTED_FOR_MESSAGE_FORMAT, UNSUPPORTED_VERSION        WRITTEN
    NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION,
    NOT_ENOUGH_REPLICAS(_AFTER_APPEND), REQUEST_TIMED_OUT,
    KAFKA_STORAGE_ERROR (and a lost connection)                     RETRY, to the leader then
    INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED           FENCED: stop the transaction
    CLUSTER_AUTHORIZATION_FAILED                                     UNAUTHORIZED: retried, reported
    anything else (CORRUPT_MESSAGE, MESSAGE_TOO_LARGE, ...)          FATAL: stop the transaction

A retried partition whose topic has left the metadata counts as written (its topic was
deleted, as Kafka's ``addTxnMarkersToBrokerQueue`` skips it).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from kio.schema.errors import ErrorCode
from kio.schema.types import ProducerId, TopicName
from kio.schema.write_txn_markers.v1 import request as markers_v1
from kio.schema.write_txn_markers.v1.response import WriteTxnMarkersResponse
from kio.static.primitive import i16, i32

from storage_core.common import TopicPartition
from storage_core.coordinator.transaction.transaction_results import TransactionResult
from storage_core.zk.zk_data import NO_LEADER

E = ErrorCode
WRITE_TXN_MARKERS_KEY = 27
WRITE_TXN_MARKERS_VERSION = 1


class MarkerOutcome(enum.Enum):
    WRITTEN = "written"
    RETRY = "retry"
    FENCED = "fenced"
    UNAUTHORIZED = "unauthorized"
    FATAL = "fatal"


_OUTCOMES = {
    E.none: MarkerOutcome.WRITTEN,
    # The producer could not have written to such a partition: nothing to end there.
    E.unsupported_for_message_format: MarkerOutcome.WRITTEN,
    E.unsupported_version: MarkerOutcome.WRITTEN,
    E.unknown_topic_or_partition: MarkerOutcome.RETRY,
    E.not_leader_or_follower: MarkerOutcome.RETRY,
    E.not_enough_replicas: MarkerOutcome.RETRY,
    E.not_enough_replicas_after_append: MarkerOutcome.RETRY,
    E.request_timed_out: MarkerOutcome.RETRY,
    E.kafka_storage_error: MarkerOutcome.RETRY,
    E.invalid_producer_epoch: MarkerOutcome.FENCED,
    E.transaction_coordinator_fenced: MarkerOutcome.FENCED,
    E.cluster_authorization_failed: MarkerOutcome.UNAUTHORIZED,
}


def marker_outcome(error: ErrorCode) -> MarkerOutcome:
    """What a partition's WriteTxnMarkers answer means for its marker."""
    return _OUTCOMES.get(error, MarkerOutcome.FATAL)


@dataclass(frozen=True, slots=True, kw_only=True)
class TxnMarkerEntry:
    """One marker to write (Kafka's ``TxnMarkerEntry``): a transaction's end on some of its
    partitions, all led by one broker when it is queued for that broker."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    result: TransactionResult
    topic_partitions: frozenset[TopicPartition]

    def __post_init__(self) -> None:
        if self.producer_id < 0 or self.producer_epoch < 0:
            raise ValueError(
                f"markers of {self.transactional_id!r} need a producer id and epoch, got"
                f" {self.producer_id}/{self.producer_epoch}"
            )
        if self.coordinator_epoch < 0:
            raise ValueError(f"coordinator epoch must be >= 0, got {self.coordinator_epoch}")
        if not self.topic_partitions:
            raise ValueError(f"markers of {self.transactional_id!r} name no partition")

    def with_partitions(self, partitions: Iterable[TopicPartition]) -> TxnMarkerEntry:
        return TxnMarkerEntry(
            transactional_id=self.transactional_id,
            producer_id=self.producer_id,
            producer_epoch=self.producer_epoch,
            coordinator_epoch=self.coordinator_epoch,
            result=self.result,
            topic_partitions=frozenset(partitions),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class MarkerDestinations:
    """Partitions grouped by where their markers go now. ``by_broker``: led by a live broker
    with an endpoint of the inter-broker listener; ``unknown_leader``: no leader, or a leader
    not reachable yet (wait for metadata, then look again); ``deleted``: the topic or the
    partition is no longer in the metadata (counts as written)."""

    by_broker: dict[int, frozenset[TopicPartition]]
    unknown_leader: frozenset[TopicPartition]
    deleted: frozenset[TopicPartition]


class ListenerEndpoint(Protocol):
    @property
    def host(self) -> str: ...
    @property
    def port(self) -> int: ...


class LeaderOf(Protocol):
    @property
    def leader(self) -> int: ...


class BrokerEndpoints(Protocol):
    def endpoint(self, listener_name: str) -> ListenerEndpoint | None: ...


class ClusterImage(Protocol):
    """What the channel reads of the broker's ``MetadataImage`` (the replication layer's,
    which this layer does not import)."""

    @property
    def brokers(self) -> Mapping[int, BrokerEndpoints]: ...
    def partition(self, tp: TopicPartition) -> LeaderOf | None: ...


class ClusterMetadata(Protocol):
    """The broker's ``MetadataCache``: its current image."""

    def image(self) -> ClusterImage: ...


def marker_destinations(
    image: ClusterImage, partitions: Iterable[TopicPartition], listener_name: str
) -> MarkerDestinations:
    """Group ``partitions`` by their current leader (Kafka's ``getPartitionLeaderEndpoint``)."""
    by_broker: dict[int, set[TopicPartition]] = {}
    unknown: set[TopicPartition] = set()
    deleted: set[TopicPartition] = set()
    for tp in partitions:
        partition = image.partition(tp)
        if partition is None:
            deleted.add(tp)
            continue
        registration = image.brokers.get(partition.leader)
        if (
            partition.leader == NO_LEADER
            or registration is None
            or registration.endpoint(listener_name) is None
        ):
            unknown.add(tp)
            continue
        by_broker.setdefault(partition.leader, set()).add(tp)
    return MarkerDestinations(
        by_broker={broker: frozenset(tps) for broker, tps in by_broker.items()},
        unknown_leader=frozenset(unknown),
        deleted=frozenset(deleted),
    )


def write_txn_markers_request(
    entries: Sequence[TxnMarkerEntry],
) -> markers_v1.WriteTxnMarkersRequest:
    """One WriteTxnMarkers v1 request carrying ``entries`` in order (partitions sorted)."""
    return markers_v1.WriteTxnMarkersRequest(
        markers=tuple(
            markers_v1.WritableTxnMarker(
                producer_id=ProducerId(entry.producer_id),
                producer_epoch=i16(entry.producer_epoch),
                transaction_result=entry.result is TransactionResult.COMMIT,
                topics=tuple(
                    markers_v1.WritableTxnMarkerTopic(
                        name=TopicName(topic), partition_indexes=tuple(i32(p) for p in indexes)
                    )
                    for topic, indexes in _by_topic(entry.topic_partitions)
                ),
                coordinator_epoch=i32(entry.coordinator_epoch),
            )
            for entry in entries
        )
    )


def _by_topic(partitions: Iterable[TopicPartition]) -> list[tuple[str, list[int]]]:
    topics: dict[str, list[int]] = {}
    for tp in sorted(partitions):
        topics.setdefault(tp.topic, []).append(tp.partition)
    return list(topics.items())


class MarkerResponseMismatchError(ValueError):
    """A WriteTxnMarkers response that does not answer the request's markers (another count,
    another producer id in a marker's place): the broker is not speaking Kafka's protocol as
    expected; the markers are sent again."""


def partition_errors(
    entries: Sequence[TxnMarkerEntry], response: WriteTxnMarkersResponse
) -> list[dict[TopicPartition, ErrorCode]]:
    """Each entry's partitions with their answers. A partition the broker left out of its
    answer is given REQUEST_TIMED_OUT (retried)."""
    if len(response.markers) != len(entries):
        raise MarkerResponseMismatchError(
            f"WriteTxnMarkers answered {len(response.markers)} markers to {len(entries)} sent"
        )
    answers = []
    for entry, marker in zip(entries, response.markers, strict=True):
        if int(marker.producer_id) != entry.producer_id:
            raise MarkerResponseMismatchError(
                f"WriteTxnMarkers answered producer id {marker.producer_id} in the place of"
                f" {entry.producer_id}"
            )
        answered = {
            TopicPartition(str(topic.name), int(p.partition_index)): ErrorCode(p.error_code)
            for topic in marker.topics
            for p in topic.partitions
        }
        answers.append({tp: answered.get(tp, E.request_timed_out) for tp in entry.topic_partitions})
    return answers
