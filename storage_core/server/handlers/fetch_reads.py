"""The reads of a Fetch and each partition's part of the answer, shared by the general Fetch
handler, the follower's fast path (``follower_fetch``) and incremental fetch sessions
(``fetch_sessions``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from storage_core.common import TopicPartition
from storage_core.replication.delayed_fetch import FetchRequestPartition, FetchResult
from storage_core.replication.fetch_isolation import FetchIsolation
from storage_core.server.fetch_response import FetchPartitionResponse
from storage_core.server.handlers.common import error_code_of

if TYPE_CHECKING:
    from storage_core.server.broker_services import BrokerServices

MAX_WAIT_MS_MAX = 30_000  # a bound on how long one request may park in the purgatory


async def read_partitions(
    services: BrokerServices,
    wanted: dict[TopicPartition, FetchRequestPartition],
    *,
    max_wait_ms: int,
    min_bytes: int,
    max_bytes: int,
    replica_id: int,
    isolation_level: int = 0,
) -> dict[TopicPartition, FetchResult]:
    """The reads a Fetch asks for, within the broker's bounds (a consumer's below the HW,
    or the LSO at ``isolation_level`` 1); record sets of 64 KiB and more come back as file
    regions, which the caller must close."""
    return await services.replica_manager.fetch_messages(
        wanted,
        max_wait_ms=min(max_wait_ms, MAX_WAIT_MS_MAX),
        min_bytes=min_bytes,
        # As Kafka: a response never exceeds the broker's fetch.max.bytes, whatever the client
        # asks for (a 2 GiB max_bytes would otherwise build a response of the whole log).
        max_bytes=min(max_bytes, services.config.get_int("fetch.max.bytes")),
        zero_copy=True,
        replica_id=replica_id,
        isolation=FetchIsolation.of(replica_id, isolation_level),
    )


def partition_response(
    partition_index: int, result: FetchResult | None, error: ErrorCode | None
) -> FetchPartitionResponse:
    read = result.read if result is not None else None
    if error is None and result is not None:
        error = error_code_of(result.error)
    return FetchPartitionResponse(
        partition_index=partition_index,
        error_code=int(error if error is not None else ErrorCode.none),
        high_watermark=read.high_watermark if read is not None else -1,
        last_stable_offset=read.last_stable_offset if read is not None else -1,
        log_start_offset=read.log_start_offset if read is not None else -1,
        diverging_epoch=result.diverging_epoch if result is not None else None,
        aborted_transactions=(
            None
            if read is None
            else tuple(
                (aborted.producer_id, aborted.first_offset)
                for aborted in read.aborted_transactions or ()
            )
        ),
        # Empty, not null, with an error: as Kafka; librdkafka cannot parse a null record set.
        records=result.records if result is not None and read is not None else b"",
    )
