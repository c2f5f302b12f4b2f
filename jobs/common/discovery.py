"""Which partitions a job works on: the library's ``discover_targets``, with the partitions
left out recorded in the run summary.

``discover_targets`` returns the partition directories of the log dirs whose topic has
``remote.storage.enable=true`` (DescribeConfigs) and whose leader is this broker
(Metadata, with the leader epoch to fence at). Each partition left out gets a
``partition=<tp> event=skipped reason=...`` line and a ``skipped`` summary entry.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TypeVar

from jobs.common.args import JobArgs
from jobs.common.output import log_partition
from jobs.common.summary import RunSummary
from storage_core.client.cluster import KafkaCluster
from storage_core.client.consumer import KafkaConsumer
from storage_core.tiered.operations import (
    LogView,
    PartitionTarget,
    TargetDiscovery,
    discover_targets,
    metadata_client,
    read_view,
    resolve_broker_id,
)
from storage_core.tiered.remote_log_metadata_manager import RemoteLogMetadataManager

T = TypeVar("T")
PartitionPlanner = Callable[[PartitionTarget, LogView, RemoteLogMetadataManager], Iterable[T]]


def record_skipped(found: TargetDiscovery, *, job: str, summary: RunSummary) -> None:
    """One ``event=skipped`` line and one summary entry per partition left out."""
    for skipped in found.skipped:
        partition = str(skipped.topic_partition)
        log_partition("skipped", partition, job=job, reason=skipped.reason)
        summary.partition(partition, "skipped", reason=skipped.reason)
        summary.count("partitions_skipped")


def plan_led_partitions(
    args: JobArgs,
    log_dirs: Sequence[Path],
    summary: RunSummary,
    *,
    job: str,
    plan: PartitionPlanner[T],
) -> tuple[int, list[T]]:
    """Driver side: the broker id, and ``plan`` applied to each led, remote-enabled partition
    (its target, a read-only view of its directory, and a metadata client)."""
    broker_config = args.broker_config()
    with KafkaCluster(args.bootstrap_server) as cluster:
        broker_id = resolve_broker_id(args.broker_id, broker_config, cluster.refresh_metadata([]))
        found = discover_targets(cluster, {broker_id: tuple(log_dirs)}, topic=args.topic)
        record_skipped(found, job=job, summary=summary)
        targets = found.targets
        if not targets:
            return broker_id, []
        consumer = KafkaConsumer(cluster)
        planned: list[T] = []
        with metadata_client(args.bootstrap_server) as rlmm:
            for target in targets:
                planned.extend(plan(target, read_view(consumer, target), rlmm))
    return broker_id, planned
