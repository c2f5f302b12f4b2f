"""Kafka's ``DelayedProduce`` and the produce's result types.

An acks=-1 produce whose appends are done waits in the produce purgatory, watched under each
partition it appended to, until each partition's high watermark reaches the offset it
requires there, or its leadership or ISR decides otherwise (``complete_replicated``, Kafka's
``checkEnoughReplicasReachOffset``), or ``timeout_ms`` passes (REQUEST_TIMED_OUT).

Thread-safety: loop thread only.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from storage_core.common import TopicPartition
from storage_core.errors import RequestTimedOutError, StorageError
from storage_core.log.log_validator import LogAppendInfo
from storage_core.replication.delayed_operation import DelayedOperation
from storage_core.replication.partition import Partition


@dataclass(frozen=True, slots=True, kw_only=True)
class ProduceResult:
    """One partition's produce outcome: the append info or the error that stopped it."""

    info: LogAppendInfo | None = None
    error: StorageError | None = None
    log_start_offset: int = -1


class AppendedRecords:
    """A produce whose records are in the leaders' logs (or refused): ``results`` per
    partition. With acks=-1 it may still wait for the ISR (Kafka's ``DelayedProduce``):
    ``replication`` is then a future done once the wait has decided, having updated
    ``results``; ``replicated`` waits for it. The produce's ``timeout_ms`` runs from the
    append, as Kafka's."""

    __slots__ = ("replication", "results")

    def __init__(
        self,
        results: dict[TopicPartition, ProduceResult],
        replication: asyncio.Future[None] | None = None,
    ) -> None:
        self.results = results
        self.replication = replication

    async def replicated(self) -> dict[TopicPartition, ProduceResult]:
        if self.replication is not None:
            await self.replication
        return self.results


class DelayedProduce(DelayedOperation):
    """Kafka's ``DelayedProduce``: an acks=-1 produce whose appends are done, waiting until
    the HW of each partition in ``required`` reaches the offset it requires there, or its
    leadership or ISR decides otherwise (``complete_replicated``), or ``timeout_ms`` passes
    (REQUEST_TIMED_OUT). A callback object, not a task: it is tried where the HW moves and
    answers through ``future``, which the response waits for.

    Thread-safety: loop thread only."""

    __slots__ = ("_get_partition", "future", "required", "results")

    def __init__(
        self,
        get_partition: Callable[[TopicPartition], Partition],
        results: dict[TopicPartition, ProduceResult],
        required: dict[TopicPartition, int],
        timeout_ms: int,
    ) -> None:
        super().__init__(timeout_ms)
        self._get_partition = get_partition
        self.results = results
        self.required = required
        self.future: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def try_complete(self) -> bool:
        """Answer if every partition's wait is over; True once answered."""
        complete_replicated(self._get_partition, self.results, self.required)
        if self.required:
            return False
        self.force_complete()
        return True

    def on_expiration(self) -> None:
        for tp in self.required:
            self.results[tp] = ProduceResult(
                error=RequestTimedOutError(
                    f"partition {tp}: not replicated to the ISR within {self.delay_ms} ms"
                )
            )
        self.required.clear()

    def on_complete(self) -> None:
        if not self.future.done():  # cancelled: whoever awaited it went away
            self.future.set_result(None)


def complete_replicated(
    get_partition: Callable[[TopicPartition], Partition],
    results: dict[TopicPartition, ProduceResult],
    required: dict[TopicPartition, int],
) -> None:
    """Answer, and drop from ``required``, each partition whose acks=-1 wait is over: its
    HW reached the offset it requires, or its leadership or ISR decided otherwise
    (Kafka's ``checkEnoughReplicasReachOffset``)."""
    for tp, required_offset in list(required.items()):
        done, error = _replication_outcome(get_partition, tp, required_offset)
        if done:
            del required[tp]
            if error is not None:
                results[tp] = ProduceResult(error=error)


def _replication_outcome(
    get_partition: Callable[[TopicPartition], Partition], tp: TopicPartition, required_offset: int
) -> tuple[bool, StorageError | None]:
    try:
        return get_partition(tp).check_enough_replicas_reach_offset(required_offset)
    except StorageError as error:
        return True, error
