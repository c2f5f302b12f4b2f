"""Every replica of a set of topics across the brokers of a broker id -> log dirs map, as
``ReplicaState`` values (the inputs of the ``replicas`` table).

Per partition (Metadata, refreshed once for all the topics): its leader, leader epoch,
assignment and ISR. Per replica whose broker is in the map: a read-only ``LogView`` of its
directory in that broker's log dirs. The leader's high watermark and log start offset are
its answers to ListOffsets -1 / -2, asked before any replica is read (the high watermark only
grows, so a follower read after it is never unfairly behind); a follower's come from its
log dir's checkpoints, and so do the leader's when it does not answer. A replica whose
directory is absent or unreadable gets a row without offsets and a ``skipped`` log line.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from pathlib import Path

from kio.schema.errors import ErrorCode

from jobs.common.broker_log_dirs import BrokerLogDirs
from jobs.common.output import log_partition
from jobs.tables.inputs import NO_LEADER, ReplicaState
from storage_core.client.cluster import KafkaCluster
from storage_core.client.consumer import KafkaConsumer
from storage_core.client.metadata import PartitionMetadata
from storage_core.common import TopicPartition, Uuid
from storage_core.errors import StorageError
from storage_core.tiered.operations import LogView

LIST_OFFSETS = "LIST_OFFSETS"
CHECKPOINT = "CHECKPOINT"

# Each broker's partition directories (``found_partition_dirs``).
FoundDirs = Mapping[int, Mapping[TopicPartition, Path]]


def _leader_offsets(
    consumer: KafkaConsumer, tp: TopicPartition, partition: PartitionMetadata
) -> tuple[int, int] | None:
    """The leader's (log start offset, high watermark), or ``None`` if it cannot answer."""
    if partition.leader_id == NO_LEADER:
        return None
    try:
        log_start = consumer.earliest_offset(tp.topic, tp.partition)
        high_watermark = consumer.latest_offset(tp.topic, tp.partition)
    except StorageError as exc:
        log_partition("leader-offsets-unavailable", tp, leader=partition.leader_id, error=exc)
        return None
    return log_start, high_watermark


def _replica(
    tp: TopicPartition,
    *,
    topic_id: Uuid | None,
    partition: PartitionMetadata,
    broker_id: int,
    directory: Path | None,
    leader_offsets: tuple[int, int] | None,
) -> ReplicaState:
    base = ReplicaState(
        topic=tp.topic,
        partition=tp.partition,
        topic_id=topic_id,
        broker_id=broker_id,
        leader_id=partition.leader_id,
        leader_epoch=partition.leader_epoch,
        replicas=tuple(partition.replicas),
        isr=tuple(partition.isr),
        log_dir=None if directory is None else str(directory),
    )
    if directory is None:
        log_partition("skipped", tp, broker=broker_id, reason="no directory in its log dirs")
        return base
    from_leader = base.is_leader and leader_offsets is not None
    try:
        if from_leader and leader_offsets is not None:
            log_start, high_watermark = leader_offsets
            view = LogView.read(
                directory, high_watermark=high_watermark, log_start_offset=log_start
            )
        else:
            view = LogView.read(directory)
    except (StorageError, OSError, ValueError) as exc:
        log_partition("skipped", tp, broker=broker_id, reason=f"unreadable: {exc}")
        return base
    return replace(
        base,
        topic_id=topic_id if topic_id is not None else view.topic_id,
        log_start_offset=view.log_start_offset,
        local_log_start_offset=view.local_log_start_offset,
        high_watermark=view.high_watermark,
        high_watermark_source=LIST_OFFSETS if from_leader else CHECKPOINT,
        log_end_offset=view.log_end_offset,
        leader_epoch_entries=tuple((e.epoch, e.start_offset) for e in view.epoch_entries),
    )


def read_replica_states(
    cluster: KafkaCluster,
    broker_log_dirs: BrokerLogDirs,
    found: FoundDirs,
    topics: Iterable[str],
) -> list[ReplicaState]:
    """Every replica of ``topics``' partitions on a broker of ``broker_log_dirs`` (``found``
    from ``found_partition_dirs``)."""
    names = sorted(set(topics))
    if not names:
        return []
    metadata = cluster.refresh_metadata(names)
    consumer = KafkaConsumer(cluster)
    states = []
    for name in names:
        topic = metadata.topic(name)
        if topic is None or topic.error != ErrorCode.none:
            log_partition("skipped", name, reason="not in the cluster metadata")
            continue
        for partition in sorted(topic.partitions, key=lambda p: p.partition):
            tp = TopicPartition(name, partition.partition)
            held = [b for b in partition.replicas if b in broker_log_dirs]
            if not held:
                continue
            leader_offsets = (
                _leader_offsets(consumer, tp, partition)
                if partition.leader_id in broker_log_dirs
                else None
            )
            for broker_id in held:
                states.append(
                    _replica(
                        tp,
                        topic_id=topic.topic_id,
                        partition=partition,
                        broker_id=broker_id,
                        directory=found.get(broker_id, {}).get(tp),
                        leader_offsets=leader_offsets,
                    )
                )
    return states
