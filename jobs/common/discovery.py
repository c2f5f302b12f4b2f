"""Which partitions a job works on: the library's ``discover_targets`` over the broker id ->
log dirs map, with the partitions left out recorded in the run summary.

The map is ``--broker-log-dirs`` (every broker's log dirs: each remote-enabled partition is
read from its leader's, wherever it leads), else the single-broker form: ``--log-dir`` (or
the broker config's ``log.dirs``) as the dirs of ``--broker-id`` (or the broker config's
id, or the cluster's only broker), acting on what that broker leads. Each partition left
out gets a ``partition=<tp> event=skipped reason=...`` line and a ``skipped`` summary entry.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TypeVar

from jobs.common.args import JobArgs
from jobs.common.broker_log_dirs import BrokerLogDirs
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


def lock_log_dirs(args: JobArgs) -> tuple[Path, ...]:
    """Every log dir a run reads (its run locks): the map's, else ``--log-dir``'s."""
    if args.broker_log_dirs:
        return tuple(sorted({d for dirs in args.broker_log_dirs.values() for d in dirs}))
    return args.require_log_dirs()


def broker_log_dirs(args: JobArgs, cluster: KafkaCluster) -> BrokerLogDirs:
    """The map a job reads through (see the module docstring); empty when no log dir is
    given at all."""
    if args.broker_log_dirs or not args.log_dirs:
        return args.log_dirs_by_broker(None)
    metadata = cluster.refresh_metadata([])
    broker_id = resolve_broker_id(args.broker_id, args.broker_config(), metadata)
    return args.log_dirs_by_broker(broker_id)


def plan_led_partitions(
    args: JobArgs,
    summary: RunSummary,
    *,
    job: str,
    plan: PartitionPlanner[T],
) -> list[T]:
    """Driver side: ``plan`` applied to each remote-enabled partition a broker of the map
    leads (its target, a read-only view of its directory in its leader's log dirs, and a
    metadata client)."""
    with KafkaCluster(args.bootstrap_server) as cluster:
        found = discover_targets(cluster, broker_log_dirs(args, cluster), topic=args.topic)
        record_skipped(found, job=job, summary=summary)
        if not found.targets:
            return []
        consumer = KafkaConsumer(cluster)
        planned: list[T] = []
        with metadata_client(args.bootstrap_server) as rlmm:
            for target in found.targets:
                planned.extend(plan(target, read_view(consumer, target), rlmm))
    return planned
