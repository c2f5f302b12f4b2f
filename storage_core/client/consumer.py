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

from kio.schema.errors import ErrorCode
from kio.schema.fetch.v4 import request as fetch_v4
from kio.schema.fetch.v4.response import FetchResponse as FetchResponseV4
from kio.schema.fetch.v12 import request as fetch_v12
from kio.schema.fetch.v12.response import FetchResponse as FetchResponseV12
from kio.schema.list_offsets.v1 import request as list_v1
from kio.schema.list_offsets.v1.response import ListOffsetsResponse as ListOffsetsResponseV1
from kio.schema.list_offsets.v7 import request as list_v7
from kio.schema.list_offsets.v7.response import ListOffsetsResponse as ListOffsetsResponseV7
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
    def list_offset(self, topic: str, partition: int, timestamp: int) -> OffsetAndTimestamp:
        """The offset for ``timestamp``: ``EARLIEST_TIMESTAMP``, ``LATEST_TIMESTAMP`` or the
        first offset whose record timestamp is at least ``timestamp`` (epoch ms)."""
        topic_partition = TopicPartition(topic, partition)
        session = self.cluster.leader_session(topic_partition)
        version = session.version(ApiKey.LIST_OFFSETS)
        resource = f"partition {topic_partition}"
        if version >= 7:
            response7 = session.send(
                list_v7.ListOffsetsRequest(
                    replica_id=BrokerId(self.replica_id),
                    isolation_level=i8(self.isolation_level),
                    topics=(
                        list_v7.ListOffsetsTopic(
                            name=TopicName(topic),
                            partitions=(
                                list_v7.ListOffsetsPartition(
                                    partition_index=i32(partition),
                                    current_leader_epoch=i32(_NO_EPOCH),
                                    timestamp=i64(timestamp),
                                ),
                            ),
                        ),
                    ),
                ),
                ListOffsetsResponseV7,
            )
            for t7 in response7.topics:
                for p7 in t7.partitions:
                    if p7.partition_index == partition:
                        raise_for_error(p7.error_code, resource=resource)
                        return OffsetAndTimestamp(
                            offset=int(p7.offset),
                            timestamp=int(p7.timestamp),
                            leader_epoch=int(p7.leader_epoch),
                        )
        else:
            response1 = session.send(
                list_v1.ListOffsetsRequest(
                    replica_id=BrokerId(self.replica_id),
                    topics=(
                        list_v1.ListOffsetsTopic(
                            name=TopicName(topic),
                            partitions=(
                                list_v1.ListOffsetsPartition(
                                    partition_index=i32(partition), timestamp=i64(timestamp)
                                ),
                            ),
                        ),
                    ),
                ),
                ListOffsetsResponseV1,
            )
            for t1 in response1.topics:
                for p1 in t1.partitions:
                    if p1.partition_index == partition:
                        raise_for_error(p1.error_code, resource=resource)
                        return OffsetAndTimestamp(
                            offset=int(p1.offset), timestamp=int(p1.timestamp)
                        )
        raise ProtocolMismatchError(
            f"broker {session.address} answered ListOffsets without partition {topic_partition}"
        )

    def earliest_offset(self, topic: str, partition: int) -> int:
        return self.list_offset(topic, partition, EARLIEST_TIMESTAMP).offset

    def latest_offset(self, topic: str, partition: int) -> int:
        return self.list_offset(topic, partition, LATEST_TIMESTAMP).offset

    # ------------------------------------------------------------------ fetch
    def fetch(self, topic: str, partition: int, offset: int) -> FetchedRecords:
        """One Fetch from ``offset``; waits up to ``max_wait_ms`` for ``min_bytes``."""
        topic_partition = TopicPartition(topic, partition)
        session = self.cluster.leader_session(topic_partition)
        version = session.version(ApiKey.FETCH)
        resource = f"partition {topic_partition}"
        if version >= 12:
            response12 = session.send(
                fetch_v12.FetchRequest(
                    replica_id=BrokerId(self.replica_id),
                    max_wait=i32_timedelta(self.max_wait_ms),
                    min_bytes=i32(self.min_bytes),
                    max_bytes=i32(self.max_bytes),
                    isolation_level=i8(self.isolation_level),
                    session_id=i32(_SESSIONLESS_ID),
                    session_epoch=i32(_FINAL_EPOCH),
                    topics=(
                        fetch_v12.FetchTopic(
                            topic=TopicName(topic),
                            partitions=(
                                fetch_v12.FetchPartition(
                                    partition=i32(partition),
                                    current_leader_epoch=i32(_NO_EPOCH),
                                    fetch_offset=i64(offset),
                                    last_fetched_epoch=i32(_NO_EPOCH),
                                    log_start_offset=i64(-1),
                                    partition_max_bytes=i32(self.partition_max_bytes),
                                ),
                            ),
                        ),
                    ),
                    forgotten_topics_data=(),
                    rack_id="",
                ),
                FetchResponseV12,
            )
            raise_for_error(response12.error_code, resource=f"fetch from {session.address}")
            for t12 in response12.responses:
                for p12 in t12.partitions:
                    if p12.partition_index == partition:
                        raise_for_error(p12.error_code, resource=resource)
                        records, next_offset = decode_records(
                            p12.records or b"", fetch_offset=offset
                        )
                        return FetchedRecords(
                            topic_partition=topic_partition,
                            records=tuple(records),
                            next_offset=next_offset,
                            high_watermark=int(p12.high_watermark),
                            log_start_offset=int(p12.log_start_offset),
                        )
        else:
            response4 = session.send(
                fetch_v4.FetchRequest(
                    replica_id=BrokerId(self.replica_id),
                    max_wait=i32_timedelta(self.max_wait_ms),
                    min_bytes=i32(self.min_bytes),
                    max_bytes=i32(self.max_bytes),
                    isolation_level=i8(self.isolation_level),
                    topics=(
                        fetch_v4.FetchTopic(
                            topic=TopicName(topic),
                            partitions=(
                                fetch_v4.FetchPartition(
                                    partition=i32(partition),
                                    fetch_offset=i64(offset),
                                    partition_max_bytes=i32(self.partition_max_bytes),
                                ),
                            ),
                        ),
                    ),
                ),
                FetchResponseV4,
            )
            for t4 in response4.responses:
                for p4 in t4.partitions:
                    if p4.partition_index == partition:
                        raise_for_error(p4.error_code, resource=resource)
                        records, next_offset = decode_records(
                            p4.records or b"", fetch_offset=offset
                        )
                        return FetchedRecords(
                            topic_partition=topic_partition,
                            records=tuple(records),
                            next_offset=next_offset,
                            high_watermark=int(p4.high_watermark),
                            log_start_offset=-1,
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
