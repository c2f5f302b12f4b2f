"""``scan_metadata_topic``: every record of ``__remote_log_metadata`` from the start of each
partition to its end when the scan reached that partition, in partition then offset order.

For readers that need the whole history at once (the jobs and tools that rebuild states from
the topic), as opposed to a ``ConsumerTask``, which tails the topic and keeps its position.
Null values (none are ever written) are skipped. Each partition is read in at most
``FETCH_ROUNDS_MAX`` fetches: a broker that stops advancing ends the scan of that partition
rather than looping forever.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from storage_core.client.cluster import KafkaCluster
from storage_core.client.consumer import KafkaConsumer
from storage_core.errors import UnknownTopicOrPartitionError
from storage_core.tiered.topic_based_rlmm.config import REMOTE_LOG_METADATA_TOPIC_NAME

FETCH_ROUNDS_MAX = 1_000_000


@dataclass(frozen=True, slots=True, kw_only=True)
class ScannedMetadataRecord:
    partition: int
    offset: int
    timestamp_ms: int
    value: bytes


def scan_metadata_topic(
    cluster: KafkaCluster, *, missing_ok: bool = False
) -> Iterator[ScannedMetadataRecord]:
    """The records; raises ``UnknownTopicOrPartitionError`` when the topic does not exist
    (remote storage never enabled), unless ``missing_ok``, which yields nothing then."""
    name = REMOTE_LOG_METADATA_TOPIC_NAME
    described = cluster.refresh_metadata([name]).topic(name)
    if described is None or not described.partitions:
        if missing_ok:
            return
        raise UnknownTopicOrPartitionError(
            f"{name} does not exist (remote storage is not enabled on the cluster)"
        )
    consumer = KafkaConsumer(cluster, max_wait_ms=0, min_bytes=0)
    for partition in sorted(p.partition for p in described.partitions):
        offset = consumer.earliest_offset(name, partition)
        end = consumer.latest_offset(name, partition)
        for _round in range(FETCH_ROUNDS_MAX):
            if offset >= end:
                break
            fetched = consumer.fetch(name, partition, offset)
            if fetched.next_offset <= offset:
                break
            offset = fetched.next_offset
            for record in fetched.records:
                if record.value is not None:
                    yield ScannedMetadataRecord(
                        partition=partition,
                        offset=record.offset,
                        timestamp_ms=record.timestamp,
                        value=record.value,
                    )
