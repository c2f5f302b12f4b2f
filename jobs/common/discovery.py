"""Which partitions a job works on: the library's ``discover_targets`` over the broker id ->
log dirs map, with the partitions left out recorded in the run summary.

The map is ``--broker-log-dirs`` (every broker's log dirs: each remote-enabled partition is
read from its leader's, wherever it leads), else the single-broker form: ``--log-dir`` (or
the broker config's ``log.dirs``) as the dirs of ``--broker-id`` (or the broker config's
id, or the cluster's only broker), acting on what that broker leads. Each partition left
out gets a ``partition=<tp> event=skipped reason=...`` line and a ``skipped`` summary entry.

A leader that dies (or loses the partition) between Metadata and the read of its view
(ListOffsets to it, then its directory) leaves that partition out the same way, with a
reason naming the leader and the error; the other partitions go on, and the partitions of a
leader found unreachable are not asked again. Any other error while reading a view (a corrupt
segment, a topic id mismatch) fails the run as before.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TypeVar

from jobs.common.args import JobArgs
from jobs.common.broker_log_dirs import BrokerLogDirs
from jobs.common.clients import kafka_cluster, remote_log_metadata_client
from jobs.common.output import log_partition
from jobs.common.summary import RunSummary
from storage_core.client.cluster import KafkaCluster
from storage_core.client.consumer import KafkaConsumer
from storage_core.client.errors import ClientError
from storage_core.tiered.operations import (
    LogView,
    PartitionTarget,
    SkippedPartition,
    TargetDiscovery,
    check_log_dir_owners,
    discover_targets,
    is_leader_unreachable,
    leader_unavailable,
    read_log_dir_owners,
    read_view,
    resolve_broker_id,
)
from storage_core.tiered.remote_log_metadata_manager import RemoteLogMetadataManager

T = TypeVar("T")
PartitionPlanner = Callable[[PartitionTarget, LogView, RemoteLogMetadataManager], Iterable[T]]
ViewReader = Callable[[PartitionTarget], LogView]


def record_skip(skipped: SkippedPartition, *, job: str, summary: RunSummary) -> None:
    """One ``event=skipped`` line and one summary entry."""
    partition = str(skipped.topic_partition)
    log_partition("skipped", partition, job=job, reason=skipped.reason)
    summary.partition(partition, "skipped", reason=skipped.reason)
    summary.count("partitions_skipped")


def record_skipped(found: TargetDiscovery, *, job: str, summary: RunSummary) -> None:
    """One ``event=skipped`` line and one summary entry per partition left out."""
    for skipped in found.skipped:
        record_skip(skipped, job=job, summary=summary)


def readable_targets(
    targets: Sequence[PartitionTarget], read: ViewReader, *, job: str, summary: RunSummary
) -> Iterator[tuple[PartitionTarget, LogView]]:
    """Each target with its view (``read``); a target whose leader died, cannot be reached
    or no longer leads it is recorded as skipped instead (``leader_unavailable``), and the
    other targets of a leader found unreachable are skipped without asking it again. Other
    errors propagate."""
    unreachable: dict[int, ClientError] = {}
    for target in targets:
        error = unreachable.get(target.leader_id)
        if error is None:
            try:
                yield target, read(target)
                continue
            except ClientError as read_error:
                error = read_error
            if is_leader_unreachable(error):
                unreachable[target.leader_id] = error
        skipped = leader_unavailable(target, error)
        if skipped is None:
            raise error
        record_skip(skipped, job=job, summary=summary)


def lock_log_dirs(args: JobArgs) -> tuple[Path, ...]:
    """Every log dir a run reads (its run locks): the map's, else ``--log-dir``'s."""
    if args.broker_log_dirs:
        return tuple(sorted({d for dirs in args.broker_log_dirs.values() for d in dirs}))
    return args.require_log_dirs()


def broker_log_dirs(args: JobArgs, cluster: KafkaCluster) -> BrokerLogDirs:
    """The map a job reads through (see the module docstring); empty when no log dir is
    given at all. Each mapped dir's ``meta.properties`` must name its broker and this
    cluster (``check_log_dir_owners``: ``InvalidConfigError``, exit 2, otherwise)."""
    dirs = mapped_log_dirs(args, cluster)
    check_log_dir_owners(read_log_dir_owners(dirs), cluster_id=cluster.metadata().cluster_id)
    return dirs


def mapped_log_dirs(args: JobArgs, cluster: KafkaCluster) -> BrokerLogDirs:
    """The map as given, not checked (``discover_targets`` checks it itself)."""
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
    with kafka_cluster(args) as cluster:
        found = discover_targets(cluster, mapped_log_dirs(args, cluster), topic=args.topic)
        record_skipped(found, job=job, summary=summary)
        if not found.targets:
            return []
        consumer = KafkaConsumer(cluster)
        planned: list[T] = []
        with remote_log_metadata_client(args) as rlmm:
            for target, view in readable_targets(
                found.targets,
                lambda target: read_view(consumer, target),
                job=job,
                summary=summary,
            ):
                planned.extend(plan(target, view, rlmm))
    return planned
