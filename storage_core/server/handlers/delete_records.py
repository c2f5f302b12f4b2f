"""DeleteRecords (key 21): move the log start offset of partitions forward.

Records below the new log start offset are no longer readable (a consumer from "earliest"
starts at it; ListOffsets earliest answers it) and the segments that lie wholly below it are
deleted by the next retention pass. Offset -1 means the high watermark. The answer's
``low_watermark`` is the log start offset afterwards. Per partition errors (Kafka's
``Partition.deleteRecordsOnLeader``): UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER,
OFFSET_OUT_OF_RANGE (negative, or above the high watermark), POLICY_VIOLATION (the topic's
``cleanup.policy`` lacks ``delete``). The new log start offsets are checkpointed before the
answer, so they survive a crash.

As Kafka's ``DelayedDeleteRecords``, a partition is answered once its low watermark (the
lowest log start offset of the leader and of the followers on live brokers, which report
theirs in their fetches) reached the requested offset: a follower elected next keeps the
records deleted. Replica fetches are woken at once so followers learn the new log start
offset; a partition still short of it after the request's ``timeout_ms`` answers
REQUEST_TIMED_OUT (the leader's log start offset has moved all the same).
"""

from __future__ import annotations

from typing import Any

from storage_core.common import TopicPartition
from storage_core.errors import OffsetOutOfRangeError, PolicyViolationError, StorageError
from storage_core.protocol.acl import AclOperation, ResourceType
from storage_core.protocol.messages import build
from storage_core.replication.delayed_delete_records import (
    DeleteRecordsOutcome,
    wait_for_low_watermarks,
)
from storage_core.replication.replica_manager import ReplicaManager
from storage_core.server.handlers.auth_helper import (
    TopicAuthorizationFailedError,
    filter_by_authorized,
)
from storage_core.server.handlers.common import NO_THROTTLE, error_code_of, milliseconds
from storage_core.server.request_context import RequestContext

API_KEY = 21
MIN_VERSION = 0
MAX_VERSION = 2

HIGH_WATERMARK = -1


async def handle(ctx: RequestContext, request: Any) -> Any:
    module = ctx.response_module
    replica_manager = ctx.services.replica_manager
    deletable = filter_by_authorized(
        ctx,
        AclOperation.DELETE,
        ResourceType.TOPIC,
        (t.name for t in request.topics for _p in t.partitions),
    )
    wanted = [
        (TopicPartition(topic.name, p.partition_index), int(p.offset))
        for topic in request.topics
        for p in topic.partitions
        if topic.name in deletable
    ]
    outcomes = await replica_manager.run_io(lambda: _delete_all(replica_manager, wanted))
    for topic in request.topics:
        if topic.name not in deletable:
            for p in topic.partitions:
                outcomes[TopicPartition(topic.name, p.partition_index)] = DeleteRecordsOutcome(
                    error=TopicAuthorizationFailedError(topic.name)
                )
    await wait_for_low_watermarks(
        replica_manager, outcomes, timeout_ms=milliseconds(request.timeout)
    )
    topics = []
    for topic in request.topics:
        partitions = []
        for p in topic.partitions:
            outcome = outcomes[TopicPartition(topic.name, p.partition_index)]
            partitions.append(
                build(
                    module.DeleteRecordsPartitionResult,
                    partition_index=p.partition_index,
                    low_watermark=outcome.low_watermark,
                    error_code=error_code_of(outcome.error),
                )
            )
        topics.append(
            build(module.DeleteRecordsTopicResult, name=topic.name, partitions=tuple(partitions))
        )
    return build(module.DeleteRecordsResponse, throttle_time=NO_THROTTLE, topics=tuple(topics))


def _delete_all(
    replica_manager: ReplicaManager, wanted: list[tuple[TopicPartition, int]]
) -> dict[TopicPartition, DeleteRecordsOutcome]:
    outcomes: dict[TopicPartition, DeleteRecordsOutcome] = {}
    moved = False
    for tp, offset in wanted:
        try:
            low_watermark, changed, target = _delete_one(replica_manager, tp, offset)
            outcomes[tp] = DeleteRecordsOutcome(low_watermark=low_watermark, required_offset=target)
            moved = moved or changed
        except StorageError as error:
            outcomes[tp] = DeleteRecordsOutcome(error=error)
    if moved:
        replica_manager.log_manager.checkpoint_log_start_offsets()
    return outcomes


def _delete_one(
    replica_manager: ReplicaManager, tp: TopicPartition, offset: int
) -> tuple[int, bool, int]:
    """Moves the log start offset: (log start offset, whether it moved, requested offset)."""
    log = replica_manager.leader_partition(tp).log
    if "delete" not in log.config.cleanup_policy.split(","):
        raise PolicyViolationError(
            f"Records of partition {tp} can not be deleted due to the configured policy"
            f" cleanup.policy={log.config.cleanup_policy}"
        )
    target = log.high_watermark if offset == HIGH_WATERMARK else offset
    if target < 0:
        raise OffsetOutOfRangeError(f"The offset {offset} for partition {tp} is not valid")
    changed = log.maybe_increment_log_start_offset(target, "DeleteRecords")
    return log.log_start_offset, changed, target
