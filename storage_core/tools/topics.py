"""``storage-core topics``: create, list, describe, delete topics and alter their configs.

Output follows ``kafka-topics.sh``: ``describe`` prints one summary line per topic (id,
partition count, replication factor, configs set on the topic) and one line per partition
(leader, ``none`` when it has none; replicas; isr; offline replicas when there are any).
Without ``--topic`` it describes every topic, internal ones included. With
``--under-replicated-partitions`` (ISR smaller than the replicas) or
``--unavailable-partitions`` (no live leader) it prints only the partition lines that match
either, and no topic lines, as ``kafka-topics.sh`` does.

Under a partition whose last stable offset is below its high watermark, ``describe`` prints
both and the partition's open transactions (``storage_core.tools.open_transactions``), so that
a hanging transaction shows where an operator looks.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Mapping, Sequence
from typing import TextIO

from storage_core.client.admin import KafkaAdminClient, TopicDescription
from storage_core.client.admin_requests import AlterConfigOp
from storage_core.client.cluster import KafkaCluster
from storage_core.client.connection import ConnectionConfig
from storage_core.client.errors import UnsupportedVersionError
from storage_core.client.metadata import (
    NO_LEADER,
    PartitionMetadata,
    TopicMetadata,
)
from storage_core.protocol.config_resource import (
    AlterConfigOpType,
    ConfigResourceType,
    ConfigSource,
)
from storage_core.tools.key_values import parse_key_values
from storage_core.tools.open_transactions import format_transactions, partition_transactions

ACTIONS = ("create", "list", "describe", "delete", "alter-config")


def create_topic(
    admin: KafkaAdminClient,
    out: TextIO,
    *,
    topic: str,
    partitions: int,
    replication_factor: int,
    configs: Mapping[str, str],
) -> None:
    admin.create_topic(
        topic,
        num_partitions=partitions,
        replication_factor=replication_factor,
        configs=configs,
    )
    print(f"Created topic {topic}.", file=out)


def list_topics(admin: KafkaAdminClient, out: TextIO) -> None:
    for name in admin.list_topics():
        print(name, file=out)


def describe_topics(
    admin: KafkaAdminClient,
    out: TextIO,
    err: TextIO,
    *,
    topics: Sequence[str],
    under_replicated: bool = False,
    unavailable: bool = False,
) -> None:
    names = list(topics) or admin.list_topics(include_internal=True)
    if not names:
        return
    if under_replicated or unavailable:
        live = {b.node_id for b in admin.cluster.refresh_metadata([]).brokers}
        described = {t.name: t for t in admin.describe_topic_partitions(names)}
        for name in names:
            topic = described.get(name)
            if topic is None:  # pragma: no cover - the broker always answers every name
                continue
            topic.raise_for_error()
            for p in sorted(topic.partitions, key=lambda p: p.partition):
                if (under_replicated and is_under_replicated(p)) or (
                    unavailable and is_unavailable(p, live)
                ):
                    print(format_partition(topic.name, p), file=out)
        return
    try:
        descriptions = admin.describe_topics(names)
    except UnsupportedVersionError as exc:
        print(f"warning: configs not shown: {exc}", file=err)
        metadata = admin.cluster.refresh_metadata(names)
        descriptions = []
        for name in names:
            topic = metadata.topic(name)
            if topic is None:  # pragma: no cover - the broker always answers every name
                continue
            topic.raise_for_error()
            descriptions.append(TopicDescription(metadata=topic, configs=()))
    for description in descriptions:
        extra = transaction_lines(admin, description.metadata, err)
        print(format_description(description, extra), file=out)


def transaction_lines(
    admin: KafkaAdminClient, topic: TopicMetadata, err: TextIO
) -> dict[int, list[str]]:
    """Per led partition of ``topic``, the LSO and open-transaction lines to print under it;
    what could not be read is a warning on ``err``."""
    led = sorted(p.partition for p in topic.partitions if p.leader_id != NO_LEADER)
    if not led:
        return {}
    found, warnings = partition_transactions(admin, topic.name, led)
    for warning in warnings:
        print(f"warning: {warning}", file=err)
    now_ms = int(time.time() * 1000)
    return {t.partition.partition: format_transactions(t, now_ms) for t in found}


def format_description(
    description: TopicDescription, extra: Mapping[int, Sequence[str]] | None = None
) -> str:
    """The topic line and its partitions' lines, each followed by its ``extra`` lines."""
    topic: TopicMetadata = description.metadata
    replication_factor = max((len(p.replicas) for p in topic.partitions), default=0)
    configs = ",".join(
        f"{c.name}={'<sensitive>' if c.is_sensitive else c.value}"
        for c in description.configs
        if c.source == ConfigSource.DYNAMIC_TOPIC_CONFIG
    )
    lines = [
        f"Topic: {topic.name}\tTopicId: {topic.topic_id or '-'}"
        f"\tPartitionCount: {len(topic.partitions)}\tReplicationFactor: {replication_factor}"
        f"\tConfigs: {configs}"
    ]
    for p in sorted(topic.partitions, key=lambda p: p.partition):
        lines.append(format_partition(topic.name, p))
        lines += (extra or {}).get(p.partition, ())
    return "\n".join(lines)


def format_partition(topic: str, p: PartitionMetadata) -> str:
    leader = "none" if p.leader_id == NO_LEADER else str(p.leader_id)
    return (
        f"\tTopic: {topic}\tPartition: {p.partition}\tLeader: {leader}"
        f"\tReplicas: {_ids(p.replicas)}\tIsr: {_ids(p.isr)}"
        + (f"\tOffline: {_ids(p.offline_replicas)}" if p.offline_replicas else "")
    )


def is_under_replicated(p: PartitionMetadata) -> bool:
    """Fewer in-sync replicas than replicas (kafka-topics.sh's --under-replicated-partitions)."""
    return len(p.isr) < len(p.replicas)


def is_unavailable(p: PartitionMetadata, live_brokers: Collection[int]) -> bool:
    """No leader, or a leader that is not a live broker (--unavailable-partitions)."""
    return p.leader_id == NO_LEADER or p.leader_id not in live_brokers


def _ids(ids: Sequence[int]) -> str:
    return ",".join(str(i) for i in ids)


def delete_topic(admin: KafkaAdminClient, out: TextIO, *, topic: str) -> None:
    admin.delete_topics([topic])
    print(f"Deleted topic {topic}.", file=out)


def alter_topic_config(
    admin: KafkaAdminClient,
    out: TextIO,
    *,
    topic: str,
    set_configs: Mapping[str, str],
    delete_configs: Sequence[str],
) -> None:
    ops = [AlterConfigOp(name=k, op=AlterConfigOpType.SET, value=v) for k, v in set_configs.items()]
    ops += [AlterConfigOp(name=k, op=AlterConfigOpType.DELETE) for k in delete_configs]
    if not ops:
        raise ValueError("alter-config needs at least one --set KEY=VALUE or --delete KEY")
    admin.incremental_alter_configs(ConfigResourceType.TOPIC, topic, ops)
    print(f"Updated config of topic {topic}.", file=out)


def run_topics(
    action: str,
    *,
    bootstrap_server: str,
    connection_config: ConnectionConfig | None = None,
    topic: str | None,
    partitions: int,
    replication_factor: int,
    configs: Sequence[str],
    set_configs: Sequence[str],
    delete_configs: Sequence[str],
    out: TextIO,
    err: TextIO,
    under_replicated: bool = False,
    unavailable: bool = False,
) -> int:
    """Run one action; client errors propagate to the caller (the CLI prints them)."""
    if action not in ACTIONS:
        raise ValueError(f"unknown action {action!r}; use one of {', '.join(ACTIONS)}")
    with KafkaCluster(bootstrap_server, config=connection_config) as cluster:
        admin = KafkaAdminClient(cluster)
        if action == "list":
            list_topics(admin, out)
        elif action == "describe":
            describe_topics(
                admin,
                out,
                err,
                topics=[topic] if topic else [],
                under_replicated=under_replicated,
                unavailable=unavailable,
            )
        elif not topic:
            raise ValueError(f"{action} needs --topic")
        elif action == "create":
            create_topic(
                admin,
                out,
                topic=topic,
                partitions=partitions,
                replication_factor=replication_factor,
                configs=parse_key_values(configs, option="--config"),
            )
        elif action == "delete":
            delete_topic(admin, out, topic=topic)
        else:
            alter_topic_config(
                admin,
                out,
                topic=topic,
                set_configs=parse_key_values(set_configs, option="--set"),
                delete_configs=delete_configs,
            )
    return 0
