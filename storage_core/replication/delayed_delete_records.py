"""Kafka's ``DelayedDeleteRecords``: a DeleteRecords answered once the followers deleted too.

A partition whose log start offset DeleteRecords moved is answered once its low watermark
(the lowest log start offset of the leader and of the followers on live brokers, which report
theirs in their fetches) reached the requested offset: a follower elected next keeps the
records deleted. Replica fetches are woken at once so followers learn the new log start
offset; a partition still short of it after the request's ``timeout_ms`` answers
REQUEST_TIMED_OUT (the leader's log start offset has moved all the same).

Unlike the produce purgatory (``delayed_operation``), the wait looks at the low watermarks
every ``LOW_WATERMARK_POLL_S`` instead of being tried when a follower's fetch moves one.

Thread-safety: loop thread only.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from storage_core.common import TopicPartition
from storage_core.errors import RequestTimedOutError, StorageError
from storage_core.replication.replica_manager import ReplicaManager

# How often a waiting DeleteRecords looks at the followers' log start offsets.
LOW_WATERMARK_POLL_S = 0.01


@dataclass(frozen=True, slots=True, kw_only=True)
class DeleteRecordsOutcome:
    low_watermark: int = -1
    error: StorageError | None = None
    # the offset the low watermark must reach before the answer (-1: nothing to wait for)
    required_offset: int = -1


async def wait_for_low_watermarks(
    replica_manager: ReplicaManager,
    outcomes: dict[TopicPartition, DeleteRecordsOutcome],
    *,
    timeout_ms: int,
) -> None:
    """Replace each successful outcome by the partition's low watermark once it reached the
    requested offset, or by REQUEST_TIMED_OUT after ``timeout_ms``."""
    pending = {tp: o for tp, o in outcomes.items() if o.error is None and o.required_offset >= 0}
    for tp in pending:
        replica_manager.on_log_start_offset_incremented(tp)
    deadline = time.monotonic() + max(timeout_ms, 0) / 1000
    while pending:
        for tp, outcome in list(pending.items()):
            try:
                low_watermark = replica_manager.leader_partition(tp).low_watermark_if_leader()
            except StorageError as error:
                outcomes[tp] = DeleteRecordsOutcome(error=error)
                del pending[tp]
                continue
            if low_watermark >= outcome.required_offset:
                outcomes[tp] = DeleteRecordsOutcome(low_watermark=low_watermark)
                del pending[tp]
        if not pending:
            return
        if time.monotonic() >= deadline:
            for tp, outcome in pending.items():
                outcomes[tp] = DeleteRecordsOutcome(
                    low_watermark=outcome.low_watermark,
                    error=RequestTimedOutError(
                        f"partition {tp}: the followers' log start offsets did not reach"
                        f" {outcome.required_offset} within {timeout_ms} ms; the leader's is"
                        f" {outcome.low_watermark} (retry, or check the followers)"
                    ),
                )
            return
        await asyncio.sleep(LOW_WATERMARK_POLL_S)
