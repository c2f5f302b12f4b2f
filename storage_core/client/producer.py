"""``KafkaProducer``: records to v2 batches (``build_batch``) to Produce requests.

Records for one partition are cut into batches of at most ``max_batch_bytes`` (estimated
before compression; one record larger than that gets a batch of its own), batches are
grouped into requests of at most ``max_request_bytes``, and each request goes to the
partition's leader (Produce v9, flexible, or v3). With ``acks=0`` the broker sends no
response and offsets are unknown (-1).

The producer is not idempotent: a retry after ``NOT_LEADER_OR_FOLLOWER`` or a broken
connection may write a batch twice. At most ``retries`` retries per request, after a
metadata refresh and ``retry_backoff_ms``; a leader that refuses connections (its process
died, the controller has not moved the leadership yet) is retried too.

Not thread-safe (it uses a ``KafkaCluster``).
"""

from __future__ import annotations

import datetime
import logging
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.types import TopicName
from kio.static.primitive import Records, i16, i32

from storage_core.client.cluster import KafkaCluster
from storage_core.client.errors import (
    BrokerResponseError,
    BrokerUnreachableError,
    ConnectionClosedError,
    ProtocolMismatchError,
    raise_for_error,
)
from storage_core.client.framing import i32_timedelta
from storage_core.client.negotiation import ApiKey, BrokerSession
from storage_core.common import TopicPartition
from storage_core.protocol.messages import build, request_module, response_schema
from storage_core.records.compression import CompressionType
from storage_core.records.memory_records_builder import build_batch
from storage_core.records.record import SimpleRecord

logger = logging.getLogger(__name__)

ACKS_NONE = 0
ACKS_LEADER = 1
ACKS_ALL = -1
DEFAULT_MAX_BATCH_BYTES = 512 * 1024  # below Kafka's default max.message.bytes (~1 MiB)
DEFAULT_MAX_REQUEST_BYTES = 1024 * 1024  # Kafka's max.request.size
MAX_RECORDS_PER_BATCH = 100_000
DEFAULT_RETRIES = 3
# How long the broker may wait for acks=all; below the connection's request timeout (30 s).
DEFAULT_PRODUCE_TIMEOUT_MS = 25_000
DEFAULT_RETRY_BACKOFF_MS = 100
# Upper bound of the per-record framing inside a batch (length, attributes, deltas, lengths).
_RECORD_OVERHEAD_BYTES = 24
_BATCH_OVERHEAD_BYTES = 61
_RETRIABLE = frozenset(
    {
        ErrorCode.not_leader_or_follower,
        ErrorCode.leader_not_available,
        ErrorCode.request_timed_out,
        ErrorCode.not_enough_replicas,
    }
)


def parse_acks(text: str) -> int:
    """``all``/``-1``, ``1`` or ``0`` as Produce ``acks``."""
    value = text.strip().lower()
    if value == "all":
        return ACKS_ALL
    if value in ("-1", "0", "1"):
        return int(value)
    raise ValueError(f"acks must be all, -1, 0 or 1, got {text!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class ProduceResult:
    """Where one request's batches for a partition landed.

    ``base_offset`` is the first record's offset (-1 with ``acks=0``); ``record_count``
    records took offsets ``base_offset`` to ``base_offset + record_count - 1`` (inclusive).
    """

    topic_partition: TopicPartition
    base_offset: int
    record_count: int
    log_append_time_ms: int = -1
    log_start_offset: int = -1


def estimate_record_bytes(record: SimpleRecord) -> int:
    """An upper bound of ``record``'s size inside an uncompressed batch."""
    size = _RECORD_OVERHEAD_BYTES + len(record.key or b"") + len(record.value or b"")
    for header in record.headers:
        size += 10 + len(header.key.encode("utf-8")) + len(header.value or b"")
    return size


def split_into_batches(
    records: Iterable[SimpleRecord], *, max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES
) -> Iterator[list[SimpleRecord]]:
    """Consecutive groups of records whose estimated batch size stays within the limit."""
    batch: list[SimpleRecord] = []
    size = _BATCH_OVERHEAD_BYTES
    for record in records:
        record_bytes = estimate_record_bytes(record)
        if batch and (size + record_bytes > max_batch_bytes or len(batch) >= MAX_RECORDS_PER_BATCH):
            yield batch
            batch = []
            size = _BATCH_OVERHEAD_BYTES
        batch.append(record)
        size += record_bytes
    if batch:
        yield batch


class KafkaProducer:
    """Sends records to partitions; every call blocks until the broker acknowledged."""

    def __init__(
        self,
        cluster: KafkaCluster,
        *,
        acks: int = ACKS_ALL,
        compression: CompressionType = CompressionType.NONE,
        timeout_ms: int = DEFAULT_PRODUCE_TIMEOUT_MS,
        max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES,
        max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
        retries: int = DEFAULT_RETRIES,
        retry_backoff_ms: int = DEFAULT_RETRY_BACKOFF_MS,
    ):
        if acks not in (ACKS_NONE, ACKS_LEADER, ACKS_ALL):
            raise ValueError(f"acks must be -1, 0 or 1, got {acks}")
        if not 0 < max_batch_bytes <= max_request_bytes:
            raise ValueError("need 0 < max_batch_bytes <= max_request_bytes")
        if timeout_ms <= 0 or retries < 0 or retry_backoff_ms < 0:
            raise ValueError("timeout_ms must be positive, retries and backoff not negative")
        if timeout_ms >= cluster.config.request_timeout_ms:
            raise ValueError(
                f"timeout_ms ({timeout_ms}) must be below the request timeout"
                f" ({cluster.config.request_timeout_ms} ms) so the broker answers first"
            )
        self.cluster = cluster
        self.acks = acks
        self.compression = compression
        self.timeout_ms = timeout_ms
        self.max_batch_bytes = max_batch_bytes
        self.max_request_bytes = max_request_bytes
        self.retries = retries
        self.retry_backoff_ms = retry_backoff_ms

    def send(
        self, topic: str, partition: int, records: Iterable[SimpleRecord]
    ) -> list[ProduceResult]:
        """Batch, compress and send ``records`` in order; one result per request."""
        topic_partition = TopicPartition(topic, partition)
        results: list[ProduceResult] = []
        pending: list[bytes] = []
        pending_records = 0
        pending_bytes = 0
        for group in split_into_batches(records, max_batch_bytes=self.max_batch_bytes):
            batch = build_batch(group, compression=self.compression)
            if pending and pending_bytes + len(batch) > self.max_request_bytes:
                results.append(self.send_batches(topic_partition, pending, pending_records))
                pending, pending_records, pending_bytes = [], 0, 0
            pending.append(batch)
            pending_records += len(group)
            pending_bytes += len(batch)
        if pending:
            results.append(self.send_batches(topic_partition, pending, pending_records))
        return results

    def send_batches(
        self, topic_partition: TopicPartition, batches: Sequence[bytes], record_count: int
    ) -> ProduceResult:
        """Send already-built batches in one Produce request to the partition's leader."""
        payload = b"".join(batches)
        attempt = 0
        while True:
            try:
                session = self.cluster.leader_session(topic_partition)
                return self._produce(session, topic_partition, payload, record_count)
            except (
                BrokerResponseError,
                BrokerUnreachableError,
                ConnectionClosedError,
                ProtocolMismatchError,
            ) as exc:
                retriable = not isinstance(exc, BrokerResponseError) or exc.error in _RETRIABLE
                if not retriable or attempt >= self.retries:
                    raise
                attempt += 1
                logger.info(
                    "produce retry partition=%s attempt=%d error=%s", topic_partition, attempt, exc
                )
                self.cluster.invalidate_metadata()
                time.sleep(self.retry_backoff_ms / 1000)

    def _produce(
        self,
        session: BrokerSession,
        topic_partition: TopicPartition,
        payload: bytes,
        record_count: int,
    ) -> ProduceResult:
        version = session.version(ApiKey.PRODUCE)
        resource = f"partition {topic_partition}"
        request = produce_request(
            version, topic_partition, payload, acks=self.acks, timeout_ms=self.timeout_ms
        )
        if self.acks == ACKS_NONE:
            session.send_no_response(request)
            return ProduceResult(
                topic_partition=topic_partition, base_offset=-1, record_count=record_count
            )
        response = session.send(request, response_schema(ApiKey.PRODUCE, version))
        for topic in response.responses:
            for p in topic.partition_responses:
                # v8+ answers carry an error message, v5+ the log start offset
                raise_for_error(
                    p.error_code,
                    resource=resource,
                    broker_message=getattr(p, "error_message", None),
                    operation="Write",
                )
                return ProduceResult(
                    topic_partition=topic_partition,
                    base_offset=int(p.base_offset),
                    record_count=record_count,
                    log_append_time_ms=_millis(p.log_append_time),
                    log_start_offset=int(getattr(p, "log_start_offset", -1)),
                )
        raise ProtocolMismatchError(
            f"broker {session.address} answered a produce to {topic_partition} without that"
            " partition"
        )


def produce_request(
    version: int, topic_partition: TopicPartition, payload: bytes, *, acks: int, timeout_ms: int
) -> Any:
    """One partition's batches in a Produce request of any version (Kafka's
    ``ProduceRequest.Builder``)."""
    m = request_module(ApiKey.PRODUCE, version)
    return build(
        m.ProduceRequest,
        transactional_id=None,
        acks=i16(acks),
        timeout=i32_timedelta(timeout_ms),
        topic_data=(
            build(
                m.TopicProduceData,
                name=TopicName(topic_partition.topic),
                partition_data=(
                    build(
                        m.PartitionProduceData,
                        index=i32(topic_partition.partition),
                        records=Records(payload),
                    ),
                ),
            ),
        ),
    )


def _millis(value: datetime.datetime | None) -> int:
    """kio gives ``log_append_time`` as an aware datetime, or ``None`` for -1."""
    if value is None:
        return -1
    return (value - _EPOCH) // datetime.timedelta(milliseconds=1)


_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
