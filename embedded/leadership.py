"""Who leads each partition of a topic, as Metadata says: the leader, its leader epoch, the
replicas and the in-sync replicas, printed as a short table."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from storage_core.client import KafkaCluster
from storage_core.client.connection import ConnectionConfig
from storage_core.client.metadata import NO_LEADER
from storage_core.common import Uuid
from storage_core.security.client_transport import ClientSecurityConfig

# A killed broker may still be among the bootstrap servers: give up on it quickly.
_CONFIG = ConnectionConfig(connect_timeout_ms=1000, request_timeout_ms=10_000)


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionLeadership:
    topic: str
    partition: int
    leader_id: int  # NO_LEADER (-1) while none is elected
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]

    def line(self) -> str:
        leader = "none" if self.leader_id == NO_LEADER else str(self.leader_id)
        return (
            f"{self.topic}-{self.partition:<3} leader {leader:>4}  epoch {self.leader_epoch:>3}"
            f"  replicas {_ids(self.replicas):<9} isr {_ids(self.isr)}"
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicLeadership:
    topic_id: Uuid | None
    partitions: tuple[PartitionLeadership, ...]

    def partition(self, index: int) -> PartitionLeadership:
        for partition in self.partitions:
            if partition.partition == index:
                return partition
        raise LeadershipError(f"{self.partitions[0].topic} has no partition {index}")

    def lines(self) -> list[str]:
        return [p.line() for p in self.partitions]


class LeadershipError(RuntimeError):
    """The topic is not in the cluster's metadata (or not one of its partitions)."""


def topic_leadership(
    bootstrap_servers: str, topic: str, *, security: ClientSecurityConfig | None = None
) -> TopicLeadership:
    """One Metadata answer for ``topic``, from the first bootstrap server that answers
    (connecting with ``security``, PLAINTEXT when None)."""
    config = _CONFIG if security is None else dataclasses.replace(_CONFIG, security=security)
    with KafkaCluster(bootstrap_servers, config=config) as cluster:
        metadata = cluster.refresh_metadata([topic]).topic(topic)
    if metadata is None or not metadata.partitions:
        raise LeadershipError(f"topic {topic!r} is not in the cluster's metadata")
    metadata.raise_for_error()
    return TopicLeadership(
        topic_id=metadata.topic_id,
        partitions=tuple(
            PartitionLeadership(
                topic=topic,
                partition=p.partition,
                leader_id=p.leader_id,
                leader_epoch=p.leader_epoch,
                replicas=p.replicas,
                isr=p.isr,
            )
            for p in sorted(metadata.partitions, key=lambda p: p.partition)
        ),
    )


def _ids(ids: tuple[int, ...]) -> str:
    return "[" + ",".join(map(str, ids)) + "]"
