"""DeleteRecords (key 21): move the log start offset of partitions forward.

Records below the new log start offset are no longer readable (a consumer from "earliest"
starts at it; ListOffsets earliest answers it) and the segments that lie wholly below it are
deleted by the next retention pass. Offset -1 means the high watermark. The answer's
``low_watermark`` is the log start offset afterwards. Per partition errors (Kafka's
``Partition.deleteRecordsOnLeader``): UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER,
OFFSET_OUT_OF_RANGE (negative, or above the high watermark), POLICY_VIOLATION (the topic's
``cleanup.policy`` lacks ``delete``). The new log start offsets are checkpointed before the
answer, so they survive a crash.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from storage_core.common import TopicPartition
from storage_core.errors import OffsetOutOfRangeError, PolicyViolationError, StorageError
from storage_core.replication.replica_manager import ReplicaManager
from storage_core.server.handlers.common import NO_THROTTLE, error_code_of
from storage_core.server.protocol import build
from storage_core.server.request_context import RequestContext

API_KEY = 21
MIN_VERSION = 0
MAX_VERSION = 2

HIGH_WATERMARK = -1


@dataclass(frozen=True, slots=True, kw_only=True)
class _Outcome:
    low_watermark: int = -1
    error: StorageError | None = None


async def handle(ctx: RequestContext, request: Any) -> Any:
    module = ctx.response_module
    replica_manager = ctx.broker.replica_manager
    wanted = [
        (TopicPartition(topic.name, p.partition_index), int(p.offset))
        for topic in request.topics
        for p in topic.partitions
    ]
    outcomes = await replica_manager.run_io(lambda: _delete_all(replica_manager, wanted))
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
) -> dict[TopicPartition, _Outcome]:
    outcomes: dict[TopicPartition, _Outcome] = {}
    moved = False
    for tp, offset in wanted:
        try:
            low_watermark, changed = _delete_one(replica_manager, tp, offset)
            outcomes[tp] = _Outcome(low_watermark=low_watermark)
            moved = moved or changed
        except StorageError as error:
            outcomes[tp] = _Outcome(error=error)
    if moved:
        replica_manager.log_manager.checkpoint_log_start_offsets()
    return outcomes


def _delete_one(
    replica_manager: ReplicaManager, tp: TopicPartition, offset: int
) -> tuple[int, bool]:
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
    return log.log_start_offset, changed
