"""Replication metrics with Kafka's names (``kafka.server:type=ReplicaManager,...`` and
``kafka.controller:type=KafkaController,name=OfflinePartitionsCount``), sampled at scrape
time from the ReplicaManager and the MetadataCache."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol

from storage_core.common import TopicPartition
from storage_core.metrics import KafkaMetricsRegistry
from storage_core.metrics.registry import Meter, MetricName

GROUP = "kafka.server"
TYPE = "ReplicaManager"


class HostedPartition(Protocol):
    @property
    def is_under_replicated(self) -> bool: ...
    @property
    def is_under_min_isr(self) -> bool: ...
    @property
    def is_at_min_isr(self) -> bool: ...
    @property
    def is_leader(self) -> bool: ...


class HostedPartitions(Protocol):
    """The ReplicaManager as the gauges sample it: a copy of its partition map."""

    def partitions(self) -> Mapping[TopicPartition, HostedPartition]: ...


def replica_manager_metric(name: str) -> MetricName:
    return MetricName(group=GROUP, type=TYPE, name=name)


class IsrChangeMeters:
    """IsrShrinksPerSec and IsrExpandsPerSec, marked when a leader's ISR change commits."""

    def __init__(self, registry: KafkaMetricsRegistry) -> None:
        self.shrinks: Meter = registry.meter(replica_manager_metric("IsrShrinksPerSec"))
        self.expands: Meter = registry.meter(replica_manager_metric("IsrExpandsPerSec"))

    def mark(self, before: tuple[int, ...], after: tuple[int, ...]) -> None:
        if len(after) < len(before):
            self.shrinks.mark()
        elif len(after) > len(before):
            self.expands.mark()


def register_replica_manager_metrics(
    registry: KafkaMetricsRegistry,
    replicas: HostedPartitions,
    *,
    offline_partitions: Callable[[], int],
) -> IsrChangeMeters:
    def counting(state: str) -> Callable[[], int]:
        return lambda: sum(getattr(p, state) for p in replicas.partitions().values())

    gauges: dict[str, Callable[[], int]] = {
        "UnderReplicatedPartitions": counting("is_under_replicated"),
        "UnderMinIsrPartitionCount": counting("is_under_min_isr"),
        "AtMinIsrPartitionCount": counting("is_at_min_isr"),
        "LeaderCount": counting("is_leader"),
        "PartitionCount": lambda: len(replicas.partitions()),
    }
    for name, sample in gauges.items():
        registry.gauge(replica_manager_metric(name), sample)
    # Kafka reports it on the active controller only; every broker here sees the same
    # metadata, so each reports it (0 where nothing is offline).
    registry.gauge(
        MetricName(group="kafka.controller", type="KafkaController", name="OfflinePartitionsCount"),
        offline_partitions,
    )
    return IsrChangeMeters(registry)
