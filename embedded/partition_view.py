"""What the broker and the remote tier say about each partition of a topic: the offsets of
KIP-405 (ListOffsets with -2 earliest, -4 earliest local, -5 latest tiered, -1 latest) and
the segments and bytes the remote tier holds (a listing of its directory)."""

from __future__ import annotations

from dataclasses import dataclass

from embedded.cluster import EmbeddedCluster
from storage_core.client import KafkaCluster, KafkaConsumer

EARLIEST, EARLIEST_LOCAL, LATEST_TIERED, LATEST = -2, -4, -5, -1


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionView:
    topic: str
    partition: int
    log_start_offset: int
    earliest_local_offset: int
    highest_tiered_offset: int  # -1 when nothing is tiered yet
    high_watermark: int
    remote_segments: int
    remote_bytes: int

    def line(self) -> str:
        return (
            f"{self.topic}-{self.partition}: log start {self.log_start_offset},"
            f" local start {self.earliest_local_offset},"
            f" highest tiered {self.highest_tiered_offset},"
            f" high watermark {self.high_watermark};"
            f" remote: {self.remote_segments} segments, {self.remote_bytes} bytes"
        )


def partition_views(cluster: EmbeddedCluster, topic: str, partitions: int) -> list[PartitionView]:
    views = []
    with KafkaCluster(cluster.bootstrap_server, config=cluster.admin_config()) as kafka:
        consumer = KafkaConsumer(kafka)
        for partition in range(partitions):

            def offset(timestamp: int, partition: int = partition) -> int:
                return consumer.list_offset(topic, partition, timestamp).offset

            logs = list(cluster.remote_dir.glob(f"{topic}-*/{partition}/*.log"))
            views.append(
                PartitionView(
                    topic=topic,
                    partition=partition,
                    log_start_offset=offset(EARLIEST),
                    earliest_local_offset=offset(EARLIEST_LOCAL),
                    highest_tiered_offset=offset(LATEST_TIERED),
                    high_watermark=offset(LATEST),
                    remote_segments=len(logs),
                    remote_bytes=sum(p.stat().st_size for p in logs),
                )
            )
    return views
