"""What the broker observes of tiered storage, as Kafka's ``BrokerTopicMetrics`` remote series.

Remote reads run on the broker, so their meters are marked as Kafka's ``RemoteLogReader``
marks them, on the reader thread when a read ends (whether or not the fetch waiting for it
timed out in the meantime)::

    RemoteFetchRequestsPerSec   every remote read (one partition of a consumer fetch); a read
                                refused by a full reader queue counts too
    RemoteFetchBytesPerSec      the record bytes a read returned
    RemoteFetchErrorsPerSec     every read that failed (store, corrupt data, full queue);
                                OFFSET_OUT_OF_RANGE is an answer, not an error, as in Kafka

Copies and remote deletions run in jobs, which mark ``RemoteCopy*``/``RemoteDelete*`` in
their own processes. What the broker can see of them is refreshed per partition it leads by
the ``RemoteLogManager`` task (``update_partition``)::

    RemoteCopyLagBytes       bytes of local segments eligible for copy (closed, every offset
    RemoteCopyLagSegments    below the high watermark) above the highest remote offset; 0
                             when remote.log.copy.disable is set (nothing is eligible)
    RemoteLogSizeBytes       sum of segment_size_in_bytes of COPY_SEGMENT_FINISHED segments
    RemoteLogMetadataCount   segment metadata entries the RLMM lists for the partition, any
                             state (a stale COPY_SEGMENT_STARTED left by a killed copy counts:
                             it is work for the reconcile job)

The chunk cache of the chunked format (``register_chunk_cache``) is sampled at scrape time
under Aiven's names, ``aiven.kafka.server.tieredstorage.cache:type=chunk-cache``::

    cache-hits-total / cache-misses-total / cache-eviction-total   counts since start
    cache-size-total                                               bytes held
    prefetched-chunks-total                                        chunks read ahead

The gauges are per-partition values summed per topic and broker-wide by ``BrokerTopicStats``;
a partition the broker stops leading or hosting is forgotten.

Thread-safety: any method may be called from any thread (``BrokerTopicStats`` locks itself).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from storage_core.common import TopicPartition
from storage_core.log.retention import SegmentSummary
from storage_core.metrics import BrokerTopicStats, KafkaMetricsRegistry, MetricName
from storage_core.metrics.broker_topic_stats import (
    REMOTE_COPY_LAG_BYTES,
    REMOTE_COPY_LAG_SEGMENTS,
    REMOTE_FETCH_BYTES_PER_SEC,
    REMOTE_FETCH_ERRORS_PER_SEC,
    REMOTE_FETCH_REQUESTS_PER_SEC,
    REMOTE_LOG_METADATA_COUNT,
    REMOTE_LOG_SIZE_BYTES,
)
from storage_core.tiered.chunked.chunk_fetcher import ChunkFetcher
from storage_core.tiered.metadata.metadata import RemoteLogSegmentMetadata
from storage_core.tiered.metadata.states import RemoteLogSegmentState


@dataclass(frozen=True, slots=True, kw_only=True)
class CopyLag:
    """Local segments waiting to be copied: their count and their ``.log`` bytes."""

    segment_count: int
    size_bytes: int

    def __post_init__(self) -> None:
        if self.segment_count < 0 or self.size_bytes < 0:
            raise ValueError(f"copy lag must not be negative: {self}")


NO_COPY_LAG = CopyLag(segment_count=0, size_bytes=0)


@dataclass(frozen=True, slots=True, kw_only=True)
class RemoteLogSize:
    """A partition's remote tier as its metadata lists it."""

    finished_size_bytes: int
    metadata_count: int


def copy_lag(
    segments: Sequence[SegmentSummary],
    *,
    highest_remote_offset: int,
    local_log_start_offset: int,
    last_stable_offset: int,
) -> CopyLag:
    """The segments a copy job would copy now (as ``operations.copy.plan_upload`` plans):
    from the one holding ``max(highest remote offset + 1, local log start)`` on, while closed
    and below the LSO (``next_base_offset <= last_stable_offset``). Pure."""
    from_offset = max(highest_remote_offset + 1, local_log_start_offset)
    count = size_bytes = 0
    for segment in segments:
        if segment.next_base_offset is not None and segment.next_base_offset <= from_offset:
            continue  # entirely copied (or below the local log start)
        if segment.next_base_offset is None or segment.next_base_offset > last_stable_offset:
            break  # the active segment, or offsets not yet committed or decided
        count += 1
        size_bytes += segment.size_bytes
    return CopyLag(segment_count=count, size_bytes=size_bytes)


def remote_log_size(segments: Iterable[RemoteLogSegmentMetadata]) -> RemoteLogSize:
    finished_size_bytes = count = 0
    for metadata in segments:
        count += 1
        if metadata.state is RemoteLogSegmentState.COPY_SEGMENT_FINISHED:
            finished_size_bytes += metadata.segment_size_in_bytes
    return RemoteLogSize(finished_size_bytes=finished_size_bytes, metadata_count=count)


class RemoteLogMetrics:
    """Marks and sets the remote series of ``topic_stats``; see the module docstring."""

    def __init__(self, topic_stats: BrokerTopicStats) -> None:
        self.topic_stats = topic_stats

    # ------------------------------------------------------------------ remote reads
    def mark_fetch(self, topic: str, size_bytes: int) -> None:
        """A remote read that returned ``size_bytes`` of records (or none: out of range)."""
        self.topic_stats.mark(REMOTE_FETCH_REQUESTS_PER_SEC, topic)
        if size_bytes > 0:
            self.topic_stats.mark(REMOTE_FETCH_BYTES_PER_SEC, topic, size_bytes)

    def mark_fetch_error(self, topic: str) -> None:
        self.topic_stats.mark(REMOTE_FETCH_REQUESTS_PER_SEC, topic)
        self.topic_stats.mark(REMOTE_FETCH_ERRORS_PER_SEC, topic)

    # ------------------------------------------------------------------ partition gauges
    def update_partition(self, tp: TopicPartition, lag: CopyLag, size: RemoteLogSize) -> None:
        stats = self.topic_stats
        stats.set_partition_value(REMOTE_COPY_LAG_BYTES, tp.topic, tp.partition, lag.size_bytes)
        stats.set_partition_value(
            REMOTE_COPY_LAG_SEGMENTS, tp.topic, tp.partition, lag.segment_count
        )
        stats.set_partition_value(
            REMOTE_LOG_SIZE_BYTES, tp.topic, tp.partition, size.finished_size_bytes
        )
        stats.set_partition_value(
            REMOTE_LOG_METADATA_COUNT, tp.topic, tp.partition, size.metadata_count
        )

    def remove_partition(self, tp: TopicPartition) -> None:
        self.topic_stats.remove_partition(tp.topic, tp.partition)


CHUNK_CACHE_GROUP = "aiven.kafka.server.tieredstorage.cache"


def register_chunk_cache(registry: KafkaMetricsRegistry, fetcher: ChunkFetcher) -> None:
    """The chunk cache's gauges (module docstring), sampled from ``fetcher`` at scrape time."""

    def name(metric: str) -> MetricName:
        return MetricName(group=CHUNK_CACHE_GROUP, type="chunk-cache", name=metric)

    cache = fetcher.cache
    registry.gauge(name("cache-hits-total"), lambda: cache.stats().hits)
    registry.gauge(name("cache-misses-total"), lambda: cache.stats().misses)
    registry.gauge(name("cache-eviction-total"), lambda: cache.stats().evictions)
    registry.gauge(name("cache-size-total"), lambda: cache.stats().size_bytes)
    registry.gauge(name("prefetched-chunks-total"), lambda: fetcher.prefetched_chunks)
