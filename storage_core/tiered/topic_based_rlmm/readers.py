"""Where a ``ConsumerTask`` reads ``__remote_log_metadata`` records from.

- ``LocalLogMetadataReader`` (broker mode): the broker's own replica of each metadata
  partition, read from its ``Log`` up to the high watermark (only committed events are
  applied, as a consumer would see them).
- ``ClientMetadataReader`` (client mode): Fetch requests to the partition's leader through
  ``storage_core.client`` (HW isolation on the broker side).
- ``HostedOrLeaderMetadataReader`` (broker mode): the local replica when this broker hosts
  the metadata partition (as leader or follower), else the client reader through the
  broker's own listener: a broker follows the metadata partitions of every user partition it
  hosts, leader or follower, wherever those metadata partitions live (Kafka's RLMM consumer
  subscribes to them on ``onPartitionLeadershipChanges(leaders, followers)``).

Both return at most ``max_records`` records per call, skip control batches, and move a read
that starts below the log start offset up to it (nothing before it exists any more).

Thread-safety: a reader is used by its consumer thread only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from kio.schema.errors import ErrorCode

from storage_core.client.cluster import KafkaCluster
from storage_core.client.consumer import KafkaConsumer
from storage_core.client.errors import BrokerResponseError
from storage_core.errors import UnknownTopicOrPartitionError
from storage_core.log.log import Log
from storage_core.tiered.topic_based_rlmm.config import REMOTE_LOG_METADATA_TOPIC_NAME

CLIENT_PARTITION_MAX_BYTES = 1024 * 1024


@dataclass(frozen=True, slots=True, kw_only=True)
class MetadataRecord:
    """One record of a metadata partition: its offset and value (``None``: a null value)."""

    offset: int
    value: bytes | None


@dataclass(frozen=True, slots=True, kw_only=True)
class MetadataRead:
    """Records read from ``offset`` on; ``next_offset`` (exclusive end of what was read) is
    where the next read starts; ``high_watermark`` as seen by this read."""

    records: tuple[MetadataRecord, ...]
    next_offset: int
    high_watermark: int


class MetadataPartitionReader(Protocol):
    def read(self, metadata_partition: int, offset: int, max_records: int) -> MetadataRead:
        """Records of ``metadata_partition`` from ``offset`` (inclusive) below the HW."""


class LocalLogMetadataReader:
    """Reads the local logs of the metadata partitions; ``log_for(partition)`` finds them
    (raising a ``StorageError`` when the partition is not hosted)."""

    def __init__(self, log_for: Callable[[int], Log]) -> None:
        self._log_for = log_for

    def read(self, metadata_partition: int, offset: int, max_records: int) -> MetadataRead:
        log = self._log_for(metadata_partition)
        high_watermark = log.high_watermark
        start = log.local_log_start_offset
        if offset < start:
            return MetadataRead(records=(), next_offset=start, high_watermark=high_watermark)
        if offset >= high_watermark:
            return MetadataRead(records=(), next_offset=offset, high_watermark=high_watermark)
        records: list[MetadataRecord] = []
        next_offset = offset
        for batch in log.read_batches(offset, max_offset=high_watermark):
            batch.ensure_valid()  # check what was just read before applying it
            next_offset = batch.last_offset + 1
            if not batch.is_control:
                records.extend(
                    MetadataRecord(offset=r.offset, value=r.value)
                    for r in batch.records()
                    if r.offset >= offset
                )
            if len(records) >= max_records:
                break
        return MetadataRead(
            records=tuple(records), next_offset=next_offset, high_watermark=high_watermark
        )


class ClientMetadataReader:
    """Fetches the metadata partitions from their leaders over the Kafka protocol.

    Owns ``cluster`` (not thread-safe; the consumer thread is its only user). Fetches do not
    wait on the broker (``max_wait_ms=0``): the consumer task paces idle rounds itself.
    """

    def __init__(self, cluster: KafkaCluster) -> None:
        self.cluster = cluster
        self._consumer = KafkaConsumer(
            cluster, max_wait_ms=0, min_bytes=0, partition_max_bytes=CLIENT_PARTITION_MAX_BYTES
        )

    def read(self, metadata_partition: int, offset: int, max_records: int) -> MetadataRead:
        topic = REMOTE_LOG_METADATA_TOPIC_NAME
        try:
            fetched = self._consumer.fetch(topic, metadata_partition, offset)
        except BrokerResponseError as exc:
            if exc.error == ErrorCode.offset_out_of_range:
                earliest = self._consumer.earliest_offset(topic, metadata_partition)
                if earliest > offset:
                    return MetadataRead(records=(), next_offset=earliest, high_watermark=earliest)
            if exc.error in (ErrorCode.not_leader_or_follower, ErrorCode.leader_not_available):
                self.cluster.invalidate_metadata()
            raise
        records = tuple(
            MetadataRecord(offset=r.offset, value=r.value) for r in fetched.records[:max_records]
        )
        next_offset = records[-1].offset + 1 if len(fetched.records) > max_records else None
        return MetadataRead(
            records=records,
            next_offset=fetched.next_offset if next_offset is None else next_offset,
            high_watermark=fetched.high_watermark,
        )

    def close(self) -> None:
        self.cluster.close()


class HostedOrLeaderMetadataReader:
    """Broker mode: ``local`` for the metadata partitions this broker hosts, else a client
    reader (built on first need by ``connect``, closed by ``close``) that fetches them from
    their leaders."""

    def __init__(
        self, local: LocalLogMetadataReader, connect: Callable[[], ClientMetadataReader]
    ) -> None:
        self._local = local
        self._connect = connect
        self._remote: ClientMetadataReader | None = None

    def read(self, metadata_partition: int, offset: int, max_records: int) -> MetadataRead:
        try:
            return self._local.read(metadata_partition, offset, max_records)
        except UnknownTopicOrPartitionError:
            pass  # not hosted here: read it from its leader
        if self._remote is None:
            self._remote = self._connect()
        return self._remote.read(metadata_partition, offset, max_records)

    def close(self) -> None:
        remote, self._remote = self._remote, None
        if remote is not None:
            remote.close()
