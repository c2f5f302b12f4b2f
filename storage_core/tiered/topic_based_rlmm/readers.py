"""Where a ``ConsumerTask`` reads ``__remote_log_metadata`` records from.

- ``LocalLogMetadataReader`` (broker mode): the broker's own replica of each metadata
  partition, read from its ``Log`` up to the high watermark (only committed events are
  applied, as a consumer would see them).
- ``ClientMetadataReader`` (client mode): Fetch requests to the partition's leader through
  ``storage_core.client`` (HW isolation on the broker side).
- ``HostedFirstMetadataReader`` (broker mode): the local replica where this broker hosts the
  metadata partition, else Fetch requests to its leader (a metadata topic whose replication
  factor is below the broker count is not on every broker).

Both return at most ``max_records`` records per call, skip control batches, and move a read
that starts below the log start offset up to it (nothing before it exists any more), saying
so (``moved_to_log_start``: the reader skipped records it had not read).

Thread-safety: a reader is used by its consumer thread only.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol

from kio.schema.errors import ErrorCode

from storage_core.client.cluster import KafkaCluster
from storage_core.client.consumer import FetchedRecords, KafkaConsumer
from storage_core.client.errors import (
    BrokerResponseError,
    BrokerUnreachableError,
    ConnectionClosedError,
    RequestTimeoutError,
)
from storage_core.log.log import Log
from storage_core.tiered.metadata.compaction import MetadataEntry
from storage_core.tiered.topic_based_rlmm.config import REMOTE_LOG_METADATA_TOPIC_NAME

CLIENT_PARTITION_MAX_BYTES = 1024 * 1024
CLIENT_PARTITION_MIN_BYTES = 16 * 1024
"""Bounds (inclusive) of the bytes a client-mode Fetch asks per metadata partition."""
CLIENT_PARTITION_FIRST_BYTES = 64 * 1024
"""What the first Fetch asks per metadata partition, before any record size is known."""


@dataclass(frozen=True, slots=True, kw_only=True)
class MetadataRecord:
    """One record of a metadata partition: its offset, value (``None``: a null value) and
    timestamp (ms; -1 unknown)."""

    offset: int
    value: bytes | None
    timestamp_ms: int = -1


@dataclass(frozen=True, slots=True, kw_only=True)
class MetadataRead:
    """Records read from ``offset`` on; ``next_offset`` (exclusive end of what was read) is
    where the next read starts; ``high_watermark`` as seen by this read.
    ``moved_to_log_start``: ``offset`` was below the log start offset (records were deleted:
    the metadata topic's compaction), and ``next_offset`` is the log start offset."""

    records: tuple[MetadataRecord, ...]
    next_offset: int
    high_watermark: int
    moved_to_log_start: bool = False


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
            return MetadataRead(
                records=(),
                next_offset=start,
                high_watermark=high_watermark,
                moved_to_log_start=True,
            )
        if offset >= high_watermark:
            return MetadataRead(records=(), next_offset=offset, high_watermark=high_watermark)
        records: list[MetadataRecord] = []
        next_offset = offset
        for batch in log.read_batches(offset, max_offset=high_watermark):
            batch.ensure_valid()  # check what was just read before applying it
            next_offset = batch.last_offset + 1
            if not batch.is_control:
                records.extend(
                    MetadataRecord(offset=r.offset, value=r.value, timestamp_ms=r.timestamp)
                    for r in batch.records()
                    if r.offset >= offset
                )
            if len(records) >= max_records:
                break
        return MetadataRead(
            records=tuple(records), next_offset=next_offset, high_watermark=high_watermark
        )

    def log_end_offset(self, metadata_partition: int) -> int:
        """The local replica's log end offset (exclusive): every record it holds, committed
        or not (an acks=all record once acknowledged, on every in-sync replica)."""
        return self._log_for(metadata_partition).log_end_offset

    def read_appended(
        self, metadata_partition: int, offset: int
    ) -> tuple[Iterator[MetadataEntry], int]:
        """(the records from ``offset`` to the log end, uncommitted ones included, read as
        iterated; that log end): what the leader appended since ``offset``."""
        log = self._log_for(metadata_partition)
        log_end = log.log_end_offset

        def entries() -> Iterator[MetadataEntry]:
            for batch in log.read_batches(offset, max_offset=log_end):
                batch.ensure_valid()
                if batch.is_control:
                    continue
                for record in batch.records():
                    if offset <= record.offset < log_end and record.value is not None:
                        yield MetadataEntry.decode(record.offset, record.value)

        return entries(), log_end


class ClientMetadataReader:
    """Fetches the metadata partitions from their leaders over the Kafka protocol.

    Owns ``cluster`` (not thread-safe; the consumer thread is its only user). Fetches do not
    wait on the broker (``max_wait_ms=0``): the consumer task paces idle rounds itself.

    A read returns at most ``max_records`` records and the next read fetches from after them,
    so what a Fetch brings beyond them is decoded again by the next one. The bytes asked per
    partition follow the records asked for: after a Fetch that brought more than
    ``max_records``, ``max_records`` times its bytes per record; after one that brought fewer
    while more were there, twice as many; always within ``CLIENT_PARTITION_MIN_BYTES`` ..
    ``CLIENT_PARTITION_MAX_BYTES`` (a batch larger than that still comes whole), from
    ``CLIENT_PARTITION_FIRST_BYTES``. Catching up with 10^5 segments' events (187 bytes
    each, 2,000 per read) decoded each record 2.8 times with a fixed 1 MiB.
    """

    def __init__(self, cluster: KafkaCluster) -> None:
        self.cluster = cluster
        self._consumer = KafkaConsumer(
            cluster, max_wait_ms=0, min_bytes=0, partition_max_bytes=CLIENT_PARTITION_FIRST_BYTES
        )

    def read(self, metadata_partition: int, offset: int, max_records: int) -> MetadataRead:
        topic = REMOTE_LOG_METADATA_TOPIC_NAME
        try:
            fetched = self._consumer.fetch(topic, metadata_partition, offset)
        except BrokerResponseError as exc:
            if exc.error == ErrorCode.offset_out_of_range:
                earliest = self._consumer.earliest_offset(topic, metadata_partition)
                if earliest > offset:
                    return MetadataRead(
                        records=(),
                        next_offset=earliest,
                        high_watermark=earliest,
                        moved_to_log_start=True,
                    )
            if exc.error in (ErrorCode.not_leader_or_follower, ErrorCode.leader_not_available):
                self.cluster.invalidate_metadata()
            raise
        except (BrokerUnreachableError, ConnectionClosedError, RequestTimeoutError):
            self.cluster.invalidate_metadata()  # the leader may be gone: ask who leads now
            raise
        self._fit_fetch_bytes(len(fetched.records), max_records, fetched)
        records = tuple(
            MetadataRecord(offset=r.offset, value=r.value, timestamp_ms=r.timestamp)
            for r in fetched.records[:max_records]
        )
        next_offset = records[-1].offset + 1 if len(fetched.records) > max_records else None
        return MetadataRead(
            records=records,
            next_offset=fetched.next_offset if next_offset is None else next_offset,
            high_watermark=fetched.high_watermark,
        )

    def _fit_fetch_bytes(self, fetched: int, max_records: int, read: FetchedRecords) -> None:
        asked = self._consumer.partition_max_bytes
        if fetched > max_records:
            wanted = asked * max_records // fetched
        elif fetched < max_records and read.next_offset < read.high_watermark:
            wanted = asked * 2
        else:
            return
        self._consumer.partition_max_bytes = min(
            CLIENT_PARTITION_MAX_BYTES, max(CLIENT_PARTITION_MIN_BYTES, wanted)
        )

    def close(self) -> None:
        self.cluster.close()


class HostedFirstMetadataReader:
    """Reads a metadata partition from the local replica when ``is_hosted(partition)``, else
    from its leader through the ``ClientMetadataReader`` that ``client_factory`` builds on
    first need (closed by ``close``). Both read only what is committed (below the HW), at the
    same offsets, so a partition may move between the two from one read to the next."""

    def __init__(
        self,
        is_hosted: Callable[[int], bool],
        local: LocalLogMetadataReader,
        client_factory: Callable[[], ClientMetadataReader],
    ) -> None:
        self._is_hosted = is_hosted
        self._local = local
        self._client_factory = client_factory
        self._client: ClientMetadataReader | None = None
        self._lock = threading.Lock()  # close may come from another thread

    def read(self, metadata_partition: int, offset: int, max_records: int) -> MetadataRead:
        if self._is_hosted(metadata_partition):
            return self._local.read(metadata_partition, offset, max_records)
        with self._lock:
            if self._client is None:
                self._client = self._client_factory()
            client = self._client
        return client.read(metadata_partition, offset, max_records)

    def hosted_log_end_offset(self, metadata_partition: int) -> int | None:
        """The local replica's log end offset (exclusive) when the partition is hosted here,
        else ``None`` (reads come from the leader, whose high watermark is current)."""
        if not self._is_hosted(metadata_partition):
            return None
        return self._local.log_end_offset(metadata_partition)

    def close(self) -> None:
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()
