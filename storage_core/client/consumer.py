"""``KafkaConsumer``: list offsets and fetch records of one partition at a time (no groups).

ListOffsets (v7/v1) resolves ``EARLIEST_TIMESTAMP`` (-2), ``LATEST_TIMESTAMP`` (-1) or a
timestamp to an offset; Fetch (v12/v4, full fetches without a session) returns the batches
from an offset on, which are decoded with ``records.batch.RecordBatch``: the CRC of every
batch is checked, control batches are skipped, and records before the fetch offset (a
batch may start earlier) are dropped. A truncated batch at the end of a response is normal
(the broker cuts at ``max_bytes``) and is fetched again next time.

Not thread-safe (it uses a ``KafkaCluster``).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i8, i32, i64

from storage_core.client.cluster import KafkaCluster
from storage_core.client.errors import (
    BrokerResponseError,
    ProtocolMismatchError,
    raise_for_error,
)
from storage_core.client.framing import i32_timedelta
from storage_core.client.negotiation import ApiKey
from storage_core.common import TopicPartition
from storage_core.protocol.messages import build, request_module, response_schema
from storage_core.records.batch import LOG_OVERHEAD, RecordBatch
from storage_core.records.record import Record

EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
CONSUMER_REPLICA_ID = -1
READ_UNCOMMITTED = 0
READ_COMMITTED = 1
DEFAULT_MAX_WAIT_MS = 500
DEFAULT_FETCH_MAX_BYTES = 50 * 1024 * 1024  # Kafka's fetch.max.bytes
DEFAULT_PARTITION_MAX_BYTES = 1024 * 1024  # Kafka's max.partition.fetch.bytes
_SESSIONLESS_ID = 0
_FINAL_EPOCH = -1  # a full fetch that neither creates nor uses a fetch session
_NO_EPOCH = -1
_BATCH_LENGTH_OFFSET = 8


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetAndTimestamp:
    """A ListOffsets answer; ``offset`` is -1 when no record has a timestamp that late."""

    offset: int
    timestamp: int
    leader_epoch: int = -1


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchedRecords:
    """The records of one fetch, in offset order.

    ``next_offset`` is where the next fetch starts: after the last complete batch returned
    (control batches included), or the fetch offset if none was complete.
    """

    topic_partition: TopicPartition
    records: tuple[Record, ...]
    next_offset: int
    high_watermark: int
    log_start_offset: int


def decode_records(data: bytes, *, fetch_offset: int) -> tuple[list[Record], int]:
    """Decode the batches of a fetch response: ``(records from fetch_offset on, next offset)``.

    Raises ``CorruptRecordError`` for a batch whose CRC or framing is bad.
    """
    records: list[Record] = []
    next_offset = fetch_offset
    position = 0
    end = len(data)
    view = memoryview(data)
    while end - position >= LOG_OVERHEAD:
        batch_length = int.from_bytes(
            view[position + _BATCH_LENGTH_OFFSET : position + LOG_OVERHEAD], "big", signed=True
        )
        if position + LOG_OVERHEAD + batch_length > end:
            break  # a partial batch cut by the broker at the size limit
        batch = RecordBatch.from_buffer(view, position)
        batch.ensure_valid()
        position += batch.size_in_bytes
        if batch.last_offset < fetch_offset:
            continue
        next_offset = batch.next_offset
        if batch.is_control:
            continue
        records += (r for r in batch.records() if r.offset >= fetch_offset)
    return records, next_offset


class KafkaConsumer:
    """Reads partitions by offset; each call goes to the partition's current leader."""

    def __init__(
        self,
        cluster: KafkaCluster,
        *,
        max_wait_ms: int = DEFAULT_MAX_WAIT_MS,
        min_bytes: int = 1,
        max_bytes: int = DEFAULT_FETCH_MAX_BYTES,
        partition_max_bytes: int = DEFAULT_PARTITION_MAX_BYTES,
        isolation_level: int = READ_UNCOMMITTED,
        replica_id: int = CONSUMER_REPLICA_ID,
    ):
        if max_wait_ms < 0 or min_bytes < 0 or max_bytes <= 0 or partition_max_bytes <= 0:
            raise ValueError("fetch limits must be positive (max_wait_ms, min_bytes >= 0)")
        if max_wait_ms >= cluster.config.request_timeout_ms:
            raise ValueError(
                f"max_wait_ms ({max_wait_ms}) must be below the request timeout"
                f" ({cluster.config.request_timeout_ms} ms), or every idle fetch times out"
            )
        if isolation_level not in (READ_UNCOMMITTED, READ_COMMITTED):
            raise ValueError(f"isolation_level must be 0 or 1, got {isolation_level}")
        self.cluster = cluster
        self.max_wait_ms = max_wait_ms
        self.min_bytes = min_bytes
        self.max_bytes = max_bytes
        self.partition_max_bytes = partition_max_bytes
        self.isolation_level = isolation_level
        self.replica_id = replica_id

    # ------------------------------------------------------------------ offsets
    def list_offset(
        self, topic: str, partition: int, timestamp: int, *, isolation_level: int | None = None
    ) -> OffsetAndTimestamp:
        """The offset for ``timestamp``: ``EARLIEST_TIMESTAMP``, ``LATEST_TIMESTAMP`` or the
        first offset whose record timestamp is at least ``timestamp`` (epoch ms), asked at
        ``isolation_level`` (default: the consumer's)."""
        topic_partition = TopicPartition(topic, partition)
        session = self.cluster.leader_session(topic_partition)
        version = session.version(ApiKey.LIST_OFFSETS)
        resource = f"partition {topic_partition}"
        response = session.send(
            list_offsets_request(
                version,
                topic_partition,
                timestamp,
                replica_id=self.replica_id,
                isolation_level=self.isolation_level
                if isolation_level is None
                else isolation_level,
            ),
            response_schema(ApiKey.LIST_OFFSETS, version),
        )
        for t in response.topics:
            for p in t.partitions:
                if p.partition_index == partition:
                    raise_for_error(p.error_code, resource=resource, operation="Describe")
                    # v4+ answers carry the leader epoch
                    return OffsetAndTimestamp(
                        offset=int(p.offset),
                        timestamp=int(p.timestamp),
                        leader_epoch=int(getattr(p, "leader_epoch", -1)),
                    )
        raise ProtocolMismatchError(
            f"broker {session.address} answered ListOffsets without partition {topic_partition}"
        )

    def earliest_offset(self, topic: str, partition: int) -> int:
        return self.list_offset(topic, partition, EARLIEST_TIMESTAMP).offset

    def latest_offset(self, topic: str, partition: int) -> int:
        return self.list_offset(topic, partition, LATEST_TIMESTAMP).offset

    def last_stable_offset(self, topic: str, partition: int) -> int:
        """The leader's LSO (exclusive): ListOffsets latest at isolation level 1."""
        return self.list_offset(
            topic, partition, LATEST_TIMESTAMP, isolation_level=READ_COMMITTED
        ).offset

    # ------------------------------------------------------------------ fetch
    def fetch(self, topic: str, partition: int, offset: int) -> FetchedRecords:
        """One Fetch from ``offset``; waits up to ``max_wait_ms`` for ``min_bytes``."""
        topic_partition = TopicPartition(topic, partition)
        session = self.cluster.leader_session(topic_partition)
        version = session.version(ApiKey.FETCH)
        resource = f"partition {topic_partition}"
        response = session.send(
            fetch_request(
                version,
                topic_partition,
                offset,
                replica_id=self.replica_id,
                max_wait_ms=self.max_wait_ms,
                min_bytes=self.min_bytes,
                max_bytes=self.max_bytes,
                partition_max_bytes=self.partition_max_bytes,
                isolation_level=self.isolation_level,
            ),
            response_schema(ApiKey.FETCH, version),
        )
        # v7+ answers carry a top-level error (of the fetch session)
        if hasattr(response, "error_code"):
            raise_for_error(response.error_code, resource=f"fetch from {session.address}")
        for t in response.responses:
            for p in t.partitions:
                if p.partition_index == partition:
                    raise_for_error(p.error_code, resource=resource, operation="Read")
                    records, next_offset = decode_records(p.records or b"", fetch_offset=offset)
                    # v5+ answers carry the log start offset
                    return FetchedRecords(
                        topic_partition=topic_partition,
                        records=tuple(records),
                        next_offset=next_offset,
                        high_watermark=int(p.high_watermark),
                        log_start_offset=int(getattr(p, "log_start_offset", -1)),
                    )
        raise ProtocolMismatchError(
            f"broker {session.address} answered a fetch without partition {topic_partition}"
        )

    def consume(
        self,
        topic: str,
        partition: int,
        offset: int,
        *,
        max_records: int | None = None,
        idle_timeout_ms: int | None = None,
    ) -> Iterator[Record]:
        """Records from ``offset`` on, fetching repeatedly.

        Stops after ``max_records`` records, or once no record arrived for
        ``idle_timeout_ms``; with neither it follows the partition forever. A fetch that
        hits ``NOT_LEADER_OR_FOLLOWER`` refreshes metadata and is repeated.
        """
        if max_records is not None and max_records < 0:
            raise ValueError(f"max_records must not be negative, got {max_records}")
        delivered = 0
        last_progress = time.monotonic()
        while max_records is None or delivered < max_records:
            try:
                fetched = self.fetch(topic, partition, offset)
            except BrokerResponseError as exc:
                if exc.error not in (
                    ErrorCode.not_leader_or_follower,
                    ErrorCode.leader_not_available,
                ):
                    raise
                self.cluster.invalidate_metadata()
                time.sleep(self.max_wait_ms / 1000)
                continue
            offset = fetched.next_offset
            for record in fetched.records:
                yield record
                delivered += 1
                if max_records is not None and delivered >= max_records:
                    return
            if fetched.records:
                last_progress = time.monotonic()
            elif (
                idle_timeout_ms is not None
                and (time.monotonic() - last_progress) * 1000 >= idle_timeout_ms
            ):
                return


def list_offsets_request(
    version: int,
    topic_partition: TopicPartition,
    timestamp: int,
    *,
    replica_id: int,
    isolation_level: int,
) -> Any:
    """A ListOffsets request of any version for one partition (Kafka's
    ``ListOffsetsRequest.Builder``)."""
    m = request_module(ApiKey.LIST_OFFSETS, version)
    return build(
        m.ListOffsetsRequest,
        replica_id=BrokerId(replica_id),
        isolation_level=i8(isolation_level),
        topics=(
            build(
                m.ListOffsetsTopic,
                name=TopicName(topic_partition.topic),
                partitions=(
                    build(
                        m.ListOffsetsPartition,
                        partition_index=i32(topic_partition.partition),
                        current_leader_epoch=i32(_NO_EPOCH),
                        timestamp=i64(timestamp),
                    ),
                ),
            ),
        ),
    )


def fetch_request(
    version: int,
    topic_partition: TopicPartition,
    offset: int,
    *,
    replica_id: int,
    max_wait_ms: int,
    min_bytes: int,
    max_bytes: int,
    partition_max_bytes: int,
    isolation_level: int,
) -> Any:
    """A sessionless Fetch request of any version for one partition (Kafka's
    ``FetchRequest.Builder``)."""
    m = request_module(ApiKey.FETCH, version)
    return build(
        m.FetchRequest,
        replica_id=BrokerId(replica_id),
        max_wait=i32_timedelta(max_wait_ms),
        min_bytes=i32(min_bytes),
        max_bytes=i32(max_bytes),
        isolation_level=i8(isolation_level),
        session_id=i32(_SESSIONLESS_ID),
        session_epoch=i32(_FINAL_EPOCH),
        topics=(
            build(
                m.FetchTopic,
                topic=TopicName(topic_partition.topic),
                partitions=(
                    build(
                        m.FetchPartition,
                        partition=i32(topic_partition.partition),
                        current_leader_epoch=i32(_NO_EPOCH),
                        fetch_offset=i64(offset),
                        last_fetched_epoch=i32(_NO_EPOCH),
                        log_start_offset=i64(-1),
                        partition_max_bytes=i32(partition_max_bytes),
                    ),
                ),
            ),
        ),
        forgotten_topics_data=(),
        rack_id="",
    )
