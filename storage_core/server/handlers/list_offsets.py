"""ListOffsets (key 2): latest (-1), earliest (-2), max timestamp (-3), earliest local (-4),
latest tiered (-5), or the first offset whose timestamp is at or after the given one.

Tiered storage (KIP-405): earliest is the log start offset of the whole partition (remote
included), earliest local the local log start offset, latest tiered the highest offset copied
to the remote tier (-1 if none, or if the topic is not remote-enabled); a timestamp is searched
in remote segments first (on a remote reader thread), then locally.

Consumers see only offsets below the high watermark (read_committed ones, isolation level 1,
below the last stable offset): "latest" is that bound, and a timestamp whose first match lies
at or above it finds nothing (offset -1). A follower broker
(replica id >= 0) reads without isolation, as in Kafka: its "latest" is the log end offset.
"""

from __future__ import annotations

import asyncio
import functools
from typing import Any

from storage_core.common import TopicPartition
from storage_core.errors import StorageError
from storage_core.log.log import Log, TimestampAndOffset
from storage_core.protocol.acl import AclOperation, ResourceType
from storage_core.protocol.messages import build
from storage_core.replication.fetch_isolation import FetchIsolation
from storage_core.server.handlers.auth_helper import (
    TopicAuthorizationFailedError,
    filter_by_authorized,
)
from storage_core.server.handlers.common import NO_THROTTLE, error_code_of
from storage_core.server.request_context import RequestContext
from storage_core.tiered.remote_log_manager import LATEST_TIERED_TIMESTAMP

API_KEY = 2
MIN_VERSION = 1
MAX_VERSION = 9
LATEST = -1
EARLIEST = -2


async def handle(ctx: RequestContext, request: Any) -> Any:
    module = ctx.response_module
    replica_manager = ctx.services.replica_manager
    topics = []
    describable = filter_by_authorized(
        ctx,
        AclOperation.DESCRIBE,
        ResourceType.TOPIC,
        (t.name for t in request.topics for _p in t.partitions),
    )
    for topic in request.topics:
        partitions = []
        for p in topic.partitions:
            tp = TopicPartition(topic.name, p.partition_index)
            timestamp, offset, epoch, error = -1, -1, -1, None
            try:
                if topic.name not in describable:
                    raise TopicAuthorizationFailedError(topic.name)
                partition = replica_manager.get_partition(tp)
                found = await replica_manager.run_io(
                    functools.partial(
                        partition.fetch_offset_for_timestamp,
                        # latest tiered: the local part only checks leadership and epoch
                        EARLIEST if p.timestamp == LATEST_TIERED_TIMESTAMP else p.timestamp,
                        current_leader_epoch=getattr(p, "current_leader_epoch", -1),  # v4+
                        isolation=FetchIsolation.of(-1, getattr(request, "isolation_level", 0)),
                    )
                )
                if p.timestamp == LATEST and request.replica_id >= 0:
                    found = _log_end_offset(partition.log)
                rlm = replica_manager.remote_log_manager
                if rlm is not None and rlm.is_remote_enabled(partition):
                    if p.timestamp == LATEST_TIERED_TIMESTAMP or p.timestamp >= 0:
                        found = await asyncio.wrap_future(
                            rlm.reader.submit(
                                functools.partial(
                                    rlm.fetch_offset_for_timestamp, partition, p.timestamp, found
                                )
                            )
                        )
                elif p.timestamp == LATEST_TIERED_TIMESTAMP:
                    found = None  # nothing is tiered: offset -1
                if found is not None:
                    timestamp, offset = found.timestamp, found.offset
                    epoch = -1 if found.leader_epoch is None else found.leader_epoch
            except (StorageError, ValueError) as exc:  # ValueError: an unknown negative
                error = exc  # timestamp (not -1..-4), answered INVALID_REQUEST
            partitions.append(
                build(
                    module.ListOffsetsPartitionResponse,
                    partition_index=p.partition_index,
                    error_code=error_code_of(error),
                    timestamp=timestamp,
                    offset=offset,
                    leader_epoch=epoch,
                )
            )
        topics.append(
            build(module.ListOffsetsTopicResponse, name=topic.name, partitions=tuple(partitions))
        )
    return build(module.ListOffsetsResponse, throttle_time=NO_THROTTLE, topics=tuple(topics))


def _log_end_offset(log: Log) -> TimestampAndOffset:
    """A replica's LATEST: the log end offset, with the epoch of the last record."""
    end = log.log_end_offset
    return TimestampAndOffset(-1, end, log.leader_epoch_cache.epoch_for_offset(max(end - 1, 0)))
