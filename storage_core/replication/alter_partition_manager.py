"""``AlterPartitionManager``: commits the ISR changes partition leaders propose.

A leader writes its partition's state znode itself, conditionally on the znode version it
knows (Kafka's ZooKeeper-mode ISR path, before AlterPartition requests to the controller):
ZooKeeper orders the write against the controller's own writes, a stale proposal fails on
the version and loses nothing, and every broker (the controller included) sees the change
through the watches it already holds on the state znodes. An RPC to the controller would
add a second way for decisions to travel and a controller queue to wait in, for the same
outcome.

The writes run on one thread of their own, off the I/O threads, in the order proposed;
each outcome is handed back to the partition (``Partition.complete_isr_update``), which
moves the HW and marks the ISR shrink and expand meters.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

from storage_core.common import TopicPartition
from storage_core.replication.partition import IsrUpdate, Partition
from storage_core.zk.zk_data import LeaderAndIsr

logger = logging.getLogger(__name__)


class LeaderIsrWriter(Protocol):
    def update_isr_as_leader(self, tp: TopicPartition, state: LeaderAndIsr) -> int | None: ...


class AlterPartitionManager:
    def __init__(
        self,
        writer: LeaderIsrWriter,
        *,
        on_committed: Callable[[IsrUpdate, tuple[int, ...]], None] | None = None,
    ) -> None:
        """``on_committed(update, previous_isr)`` runs after each committed change."""
        self._writer = writer
        self._on_committed = on_committed or (lambda _u, _p: None)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="alter-partition")

    def submit(self, partition: Partition, update: IsrUpdate) -> None:
        """Write ``update`` in the background; the partition learns the outcome."""
        self._executor.submit(self._write, partition, update)

    def shutdown(self) -> None:
        self._executor.shutdown(wait=True, cancel_futures=True)

    def _write(self, partition: Partition, update: IsrUpdate) -> None:
        previous = partition.isr
        if update.partition_epoch < 0:  # never read back: an unconditional write could win
            partition.complete_isr_update(update, new_partition_epoch=None)
            return
        try:
            version = self._writer.update_isr_as_leader(
                update.topic_partition,
                LeaderAndIsr(
                    leader=update.leader,
                    leader_epoch=update.leader_epoch,
                    isr=update.isr,
                    controller_epoch=update.controller_epoch,
                    zk_version=update.partition_epoch,
                ),
            )
        except Exception:
            # ZooKeeper unreachable: the proposal is dropped; the leader proposes again at its
            # next check (the ISR stays as committed meanwhile, which is safe).
            logger.exception(
                "ISR change not written partition=%s isr=%s", update.topic_partition, update.isr
            )
            version = None
        partition.complete_isr_update(update, new_partition_epoch=version)
        if version is not None:
            self._on_committed(update, previous)
