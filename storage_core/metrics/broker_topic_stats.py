"""Kafka's ``BrokerTopicStats``: ``kafka.server:type=BrokerTopicMetrics`` meters and gauges.

Every meter exists twice, as in Kafka: broker-wide (no tags) and per topic (tag ``topic``);
one ``mark`` updates both. The broker-wide produce and fetch meters are registered at once
(a scrape shows them at zero), a topic's produce and fetch meters all at its first mark; the
tiered-storage series appear on first use. ``remove_topic`` drops a deleted topic's series.

Tiered-storage gauges (``RemoteCopyLagBytes`` ...) are fed per partition with
``set_partition_value``; the per-topic gauge is the sum over the topic's partitions and the
broker-wide gauge the sum over all (Kafka's ``BrokerTopicAggregatedMetric``).

What is counted (per partition of a request, as Kafka's ``ReplicaManager``):

- ``TotalProduceRequestsPerSec`` / ``TotalFetchRequestsPerSec``: every partition of a
  produce / fetch.
- ``BytesInPerSec`` / ``MessagesInPerSec``: the bytes and records of appended batches
  (a retried duplicate appends nothing and counts nothing).
- ``BytesOutPerSec``: the record bytes a consumer's fetch returns.
- ``ReplicationBytesOutPerSec`` / ``ReplicationBytesInPerSec`` (broker-wide only, as Kafka):
  the record bytes a follower's fetch returns on its leader, and the bytes a follower
  appends. Replication traffic stays out of ``BytesOutPerSec``/``BytesInPerSec``, so that
  those keep measuring clients.
- ``FailedProduceRequestsPerSec`` / ``FailedFetchRequestsPerSec``: every partition that
  ended in an error (Kafka leaves out some expected errors; this counts them all).
  A partition of an unknown topic counts only broker-wide, so that made-up topic names
  cannot create series.

Thread-safety: marking may happen on any thread (meters lock themselves); the per-topic
cache and the partition values are guarded by ``_lock``.
"""

from __future__ import annotations

import threading
from typing import Protocol

from storage_core.errors import UnknownTopicOrPartitionError
from storage_core.metrics.registry import KafkaMetricsRegistry, Meter, MetricName

GROUP = "kafka.server"
TYPE = "BrokerTopicMetrics"

MESSAGES_IN_PER_SEC = "MessagesInPerSec"
BYTES_IN_PER_SEC = "BytesInPerSec"
BYTES_OUT_PER_SEC = "BytesOutPerSec"
REPLICATION_BYTES_IN_PER_SEC = "ReplicationBytesInPerSec"
REPLICATION_BYTES_OUT_PER_SEC = "ReplicationBytesOutPerSec"
TOTAL_PRODUCE_REQUESTS_PER_SEC = "TotalProduceRequestsPerSec"
TOTAL_FETCH_REQUESTS_PER_SEC = "TotalFetchRequestsPerSec"
FAILED_PRODUCE_REQUESTS_PER_SEC = "FailedProduceRequestsPerSec"
FAILED_FETCH_REQUESTS_PER_SEC = "FailedFetchRequestsPerSec"
# KIP-405 / KIP-963 tiered storage
REMOTE_FETCH_REQUESTS_PER_SEC = "RemoteFetchRequestsPerSec"
REMOTE_FETCH_BYTES_PER_SEC = "RemoteFetchBytesPerSec"
REMOTE_FETCH_ERRORS_PER_SEC = "RemoteFetchErrorsPerSec"
REMOTE_COPY_REQUESTS_PER_SEC = "RemoteCopyRequestsPerSec"
REMOTE_COPY_BYTES_PER_SEC = "RemoteCopyBytesPerSec"
REMOTE_COPY_ERRORS_PER_SEC = "RemoteCopyErrorsPerSec"
REMOTE_DELETE_REQUESTS_PER_SEC = "RemoteDeleteRequestsPerSec"
REMOTE_DELETE_ERRORS_PER_SEC = "RemoteDeleteErrorsPerSec"
REMOTE_COPY_LAG_BYTES = "RemoteCopyLagBytes"
REMOTE_COPY_LAG_SEGMENTS = "RemoteCopyLagSegments"
REMOTE_LOG_SIZE_BYTES = "RemoteLogSizeBytes"
REMOTE_LOG_METADATA_COUNT = "RemoteLogMetadataCount"

BROKER_WIDE_METERS = (
    MESSAGES_IN_PER_SEC,
    BYTES_IN_PER_SEC,
    BYTES_OUT_PER_SEC,
    TOTAL_PRODUCE_REQUESTS_PER_SEC,
    TOTAL_FETCH_REQUESTS_PER_SEC,
    FAILED_PRODUCE_REQUESTS_PER_SEC,
    FAILED_FETCH_REQUESTS_PER_SEC,
)
# Broker-wide only: no topic has them (Kafka's BrokerTopicMetrics without a topic name).
ALL_TOPICS_ONLY_METERS = (REPLICATION_BYTES_IN_PER_SEC, REPLICATION_BYTES_OUT_PER_SEC)
REMOTE_METERS = (
    REMOTE_FETCH_REQUESTS_PER_SEC,
    REMOTE_FETCH_BYTES_PER_SEC,
    REMOTE_FETCH_ERRORS_PER_SEC,
    REMOTE_COPY_REQUESTS_PER_SEC,
    REMOTE_COPY_BYTES_PER_SEC,
    REMOTE_COPY_ERRORS_PER_SEC,
    REMOTE_DELETE_REQUESTS_PER_SEC,
    REMOTE_DELETE_ERRORS_PER_SEC,
)
METER_NAMES = frozenset(BROKER_WIDE_METERS + ALL_TOPICS_ONLY_METERS + REMOTE_METERS)
PARTITION_SUM_GAUGE_NAMES = frozenset(
    {
        REMOTE_COPY_LAG_BYTES,
        REMOTE_COPY_LAG_SEGMENTS,
        REMOTE_LOG_SIZE_BYTES,
        REMOTE_LOG_METADATA_COUNT,
    }
)


class UnknownMetricError(ValueError):
    """A name that is not one of ``BrokerTopicMetrics``' meters or gauges; use the constants."""


class AppendedBatches(Protocol):
    """What a produce counts of one partition's append (``LogAppendInfo`` fits)."""

    @property
    def records_count(self) -> int: ...

    @property
    def valid_bytes(self) -> int: ...

    @property
    def is_duplicate(self) -> bool: ...


def broker_topic_metric_name(name: str, topic: str | None = None) -> MetricName:
    tags = () if topic is None else (("topic", topic),)
    return MetricName(group=GROUP, type=TYPE, name=name, tags=tags)


class BrokerTopicStats:
    """Broker-wide and per-topic ``BrokerTopicMetrics`` over one registry."""

    def __init__(self, registry: KafkaMetricsRegistry) -> None:
        self.registry = registry
        self._lock = threading.Lock()
        self._all: dict[str, Meter] = {
            name: registry.meter(broker_topic_metric_name(name))
            for name in BROKER_WIDE_METERS + ALL_TOPICS_ONLY_METERS
        }
        self._by_topic: dict[str, dict[str, Meter]] = {}
        # gauge name -> topic -> partition -> value
        self._partition_values: dict[str, dict[str, dict[int, float]]] = {}

    # ------------------------------------------------------------------ meters
    def all_topics_meter(self, name: str) -> Meter:
        meter = self._all.get(name)
        if meter is None:
            if name not in METER_NAMES:
                raise UnknownMetricError(f"{name!r} is not a BrokerTopicMetrics meter")
            meter = self.registry.meter(broker_topic_metric_name(name))
            with self._lock:
                self._all[name] = meter
        return meter

    def topic_meter(self, name: str, topic: str) -> Meter:
        if name in ALL_TOPICS_ONLY_METERS:
            raise UnknownMetricError(f"{name!r} is broker-wide only: no topic has it")
        meter = self._topic_meters(topic).get(name)
        if meter is None:
            if name not in METER_NAMES:
                raise UnknownMetricError(f"{name!r} is not a BrokerTopicMetrics meter")
            created = self.registry.meter(broker_topic_metric_name(name, topic))
            with self._lock:
                meter = self._topic_meters(topic).setdefault(name, created)
        return meter

    def _topic_meters(self, topic: str) -> dict[str, Meter]:
        """The topic's meters by name; the first use of a topic registers all its produce and
        fetch meters at once, as Kafka's ``BrokerTopicMetrics(topic)`` (they show at zero)."""
        meters = self._by_topic.get(topic)
        if meters is None:
            created = {
                name: self.registry.meter(broker_topic_metric_name(name, topic))
                for name in BROKER_WIDE_METERS
            }
            with self._lock:
                meters = self._by_topic.setdefault(topic, created)
        return meters

    def mark(self, name: str, topic: str | None, n: int = 1) -> None:
        """Mark the broker-wide meter ``name`` and, with a topic, the topic's meter too."""
        self.all_topics_meter(name).mark(n)
        if topic is not None:
            self.topic_meter(name, topic).mark(n)

    def mark_produce(
        self, topic: str, appended: AppendedBatches | None, error: BaseException | None
    ) -> None:
        """One partition of a produce request: its append info, or the error that stopped it."""
        if error is not None:
            self._mark_failure(
                topic, error, TOTAL_PRODUCE_REQUESTS_PER_SEC, FAILED_PRODUCE_REQUESTS_PER_SEC
            )
            return
        all_topics, by_topic = self._all, self._topic_meters(topic)
        all_topics[TOTAL_PRODUCE_REQUESTS_PER_SEC].mark()
        by_topic[TOTAL_PRODUCE_REQUESTS_PER_SEC].mark()
        if appended is not None and not appended.is_duplicate:
            all_topics[BYTES_IN_PER_SEC].mark(appended.valid_bytes)
            by_topic[BYTES_IN_PER_SEC].mark(appended.valid_bytes)
            all_topics[MESSAGES_IN_PER_SEC].mark(appended.records_count)
            by_topic[MESSAGES_IN_PER_SEC].mark(appended.records_count)

    def mark_fetch(
        self,
        topic: str,
        size_bytes: int,
        error: BaseException | None,
        *,
        follower: bool = False,
    ) -> None:
        """One partition of a fetch response: the record bytes returned, or its error; a
        ``follower``'s bytes are replication traffic (Kafka's ``updateBytesOut``)."""
        if error is not None:
            self._mark_failure(
                topic, error, TOTAL_FETCH_REQUESTS_PER_SEC, FAILED_FETCH_REQUESTS_PER_SEC
            )
            return
        all_topics, by_topic = self._all, self._topic_meters(topic)
        all_topics[TOTAL_FETCH_REQUESTS_PER_SEC].mark()
        by_topic[TOTAL_FETCH_REQUESTS_PER_SEC].mark()
        if size_bytes <= 0:
            return
        if follower:
            all_topics[REPLICATION_BYTES_OUT_PER_SEC].mark(size_bytes)
        else:
            all_topics[BYTES_OUT_PER_SEC].mark(size_bytes)
            by_topic[BYTES_OUT_PER_SEC].mark(size_bytes)

    def mark_replication_bytes_in(self, size_bytes: int) -> None:
        """A follower appended ``size_bytes`` of its leader's batches."""
        if size_bytes > 0:
            self._all[REPLICATION_BYTES_IN_PER_SEC].mark(size_bytes)

    def _mark_failure(self, topic: str, error: BaseException, total: str, failed: str) -> None:
        counted_topic = None if isinstance(error, UnknownTopicOrPartitionError) else topic
        self.mark(total, counted_topic)
        self.mark(failed, counted_topic)

    # ------------------------------------------------------------------ partition-sum gauges
    def set_partition_value(self, name: str, topic: str, partition: int, value: float) -> None:
        """Set one partition's share of gauge ``name`` (e.g. its ``RemoteCopyLagBytes``)."""
        if name not in PARTITION_SUM_GAUGE_NAMES:
            raise UnknownMetricError(f"{name!r} is not a BrokerTopicMetrics partition gauge")
        with self._lock:
            by_topic = self._partition_values.get(name)
            first_of_name = by_topic is None
            if by_topic is None:
                by_topic = self._partition_values[name] = {}
            values = by_topic.get(topic)
            first_of_topic = values is None
            if values is None:
                values = by_topic[topic] = {}
            values[partition] = value
        if first_of_name:
            self.registry.gauge(broker_topic_metric_name(name), lambda: self._sum(name, None))
        if first_of_topic:
            self.registry.gauge(
                broker_topic_metric_name(name, topic), lambda: self._sum(name, topic)
            )

    def remove_partition(self, topic: str, partition: int) -> None:
        """Forget a partition's gauge values (it moved away or was deleted)."""
        with self._lock:
            for by_topic in self._partition_values.values():
                values = by_topic.get(topic)
                if values is not None:
                    values.pop(partition, None)

    def _sum(self, name: str, topic: str | None) -> float:
        with self._lock:
            by_topic = self._partition_values.get(name, {})
            if topic is not None:
                return sum(by_topic.get(topic, {}).values())
            return sum(sum(values.values()) for values in by_topic.values())

    # ------------------------------------------------------------------ topics
    def remove_topic(self, topic: str) -> None:
        """Drop every series of a deleted topic (Kafka's ``removeMetrics(topic)``)."""
        with self._lock:
            # Detached meters (refused at the series limit) get a new chance after a removal.
            self._by_topic.clear()
            for by_topic in self._partition_values.values():
                by_topic.pop(topic, None)
        self.registry.remove_tagged("topic", topic)
