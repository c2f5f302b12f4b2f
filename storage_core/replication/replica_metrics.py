"""Replication metrics with Kafka's names (``kafka.server:type=ReplicaManager,...`` and
``kafka.controller:type=KafkaController,name=OfflinePartitionsCount``), sampled at scrape
time from the ReplicaManager and the MetadataCache."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from storage_core.metrics import KafkaMetricsRegistry
from storage_core.metrics.registry import Meter, MetricName

GROUP = "kafka.server"
TYPE = "ReplicaManager"


class ReplicaCounts(Protocol):
    def under_replicated_count(self) -> int: ...
    def under_min_isr_count(self) -> int: ...
    def at_min_isr_count(self) -> int: ...
    def leader_count(self) -> int: ...
    def partition_count(self) -> int: ...


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
    replicas: ReplicaCounts,
    *,
    offline_partitions: Callable[[], int],
) -> IsrChangeMeters:
    gauges: dict[str, Callable[[], int]] = {
        "UnderReplicatedPartitions": replicas.under_replicated_count,
        "UnderMinIsrPartitionCount": replicas.under_min_isr_count,
        "AtMinIsrPartitionCount": replicas.at_min_isr_count,
        "LeaderCount": replicas.leader_count,
        "PartitionCount": replicas.partition_count,
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
