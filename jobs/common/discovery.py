"""Which partitions a job works on: ``storage-core tier``'s discovery, with the partitions
left out recorded in the run summary.

``discover_targets`` returns the partition directories of the log dirs whose topic has
``remote.storage.enable=true`` (DescribeConfigs) and whose leader is this broker
(Metadata, with the leader epoch to fence at). Each partition left out gets a
``partition=<tp> event=skipped reason=...`` line and a ``skipped`` summary entry.
"""

from __future__ import annotations

import io
import shlex
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TypeVar

from jobs.common.args import JobArgs
from jobs.common.output import log_partition
from jobs.common.summary import RunSummary
from storage_core.client.cluster import KafkaCluster
from storage_core.client.consumer import KafkaConsumer
from storage_core.tiered.operations import LogView
from storage_core.tiered.remote_log_metadata_manager import RemoteLogMetadataManager
from storage_core.tools.tier import (
    PartitionTarget,
    find_targets,
    metadata_client,
    read_view,
    resolve_broker_id,
)

T = TypeVar("T")
PartitionPlanner = Callable[[PartitionTarget, LogView, RemoteLogMetadataManager], Iterable[T]]


def discover_targets(
    cluster: KafkaCluster,
    log_dirs: Sequence[Path],
    *,
    topic: str | None,
    broker_id: int,
    job: str,
    summary: RunSummary,
) -> list[PartitionTarget]:
    skipped = io.StringIO()
    targets = find_targets(
        cluster, log_dirs, topic=topic, broker_id=broker_id, out=skipped, action=job
    )
    for line in skipped.getvalue().splitlines():
        fields = dict(item.partition("=")[::2] for item in shlex.split(line))
        partition = fields.get("partition", "?")
        reason = fields.get("reason", "")
        log_partition("skipped", partition, job=job, reason=reason)
        summary.partition(partition, "skipped", reason=reason)
        summary.count("partitions_skipped")
    return targets


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
        targets = discover_targets(
            cluster, log_dirs, topic=args.topic, broker_id=broker_id, job=job, summary=summary
        )
        if not targets:
            return broker_id, []
        consumer = KafkaConsumer(cluster)
        planned: list[T] = []
        with metadata_client(args.bootstrap_server) as rlmm:
            for target in targets:
                planned.extend(plan(target, read_view(consumer, target), rlmm))
    return broker_id, planned
