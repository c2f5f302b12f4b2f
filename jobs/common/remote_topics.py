"""The remote-enabled topics of the cluster, with the configs DescribeConfigs returns for
each: what the jobs that write the bucket's topic manifests and offsets backups work on."""

from __future__ import annotations

from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from jobs.common.args import JobArgumentError
from storage_core.client.admin import ConfigEntry, KafkaAdminClient
from storage_core.client.cluster import KafkaCluster
from storage_core.client.metadata import TopicMetadata
from storage_core.log.log_config import TOPIC_CONFIG_NAMES, LogConfig
from storage_core.protocol.config_resource import ConfigResourceType


@dataclass(frozen=True, slots=True, kw_only=True)
class RemoteEnabledTopic:
    metadata: TopicMetadata
    configs: tuple[ConfigEntry, ...]

    @property
    def name(self) -> str:
        return self.metadata.name

    @property
    def replication_factor(self) -> int:
        return max((len(p.replicas) for p in self.metadata.partitions), default=0)


def is_remote_enabled(configs: tuple[ConfigEntry, ...]) -> bool:
    """``remote.storage.enable`` as the topic's effective config says (as ``topic_log_config``)."""
    return (
        LogConfig()
        .with_overrides(
            {
                e.name: e.value
                for e in configs
                if e.value is not None and e.name in TOPIC_CONFIG_NAMES
            }
        )
        .remote_storage_enable
    )


def remote_enabled_topics(cluster: KafkaCluster, topic: str | None) -> list[RemoteEnabledTopic]:
    """Every remote-enabled topic (internal ones never), by name; only ``topic`` when given,
    which must exist and be remote-enabled (``JobArgumentError`` naming ``--topic``)."""
    metadata = cluster.refresh_metadata([topic] if topic else None)
    if topic is not None:
        named = metadata.topic(topic)
        if named is None or named.error == ErrorCode.unknown_topic_or_partition:
            raise JobArgumentError(f"--topic {topic!r}: no such topic in the cluster")
        named.raise_for_error()
    admin = KafkaAdminClient(cluster)
    found: list[RemoteEnabledTopic] = []
    for described in sorted(metadata.topics, key=lambda t: t.name):
        if described.is_internal or described.error != ErrorCode.none:
            continue
        if topic is not None and described.name != topic:
            continue
        configs = admin.describe_configs(ConfigResourceType.TOPIC, described.name)
        if is_remote_enabled(configs):
            found.append(RemoteEnabledTopic(metadata=described, configs=configs))
        elif topic is not None:
            raise JobArgumentError(
                f"--topic {topic!r}: the topic has remote.storage.enable=false, nothing of it"
                " is in the remote tier"
            )
    return found
