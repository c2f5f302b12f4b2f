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
moves the HW and marks the ISR shrink and expand meters. Proposals that queue up while a
write is out (a restarted broker rejoining the ISR of thousands of partitions) are written
together, pipelined, as Kafka's AlterPartitionManager sends the pending changes in one
request: at most ``ISR_UPDATES_PER_BATCH_MAX`` per batch, each still its own conditional
write that succeeds or fails alone.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Sequence
from typing import Protocol

from storage_core.common import TopicPartition
from storage_core.replication.partition import IsrUpdate, Partition
from storage_core.zk.zk_data import LeaderAndIsr

logger = logging.getLogger(__name__)

ISR_UPDATES_PER_BATCH_MAX = 1000


class LeaderIsrWriter(Protocol):
    def update_isrs_as_leader(
        self, states: Sequence[tuple[TopicPartition, LeaderAndIsr]]
    ) -> list[int | None]: ...


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
        self._pending: deque[tuple[Partition, IsrUpdate]] = deque()
        self._changed = threading.Condition()
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="alter-partition", daemon=True)

    def start(self) -> None:
        """Start writing; proposals submitted before are written as the first batch."""
        self._thread.start()

    def submit(self, partition: Partition, update: IsrUpdate) -> None:
        """Write ``update`` in the background; the partition learns the outcome."""
        with self._changed:
            if self._stopping:
                return
            self._pending.append((partition, update))
            self._changed.notify()

    def shutdown(self) -> None:
        """Stop; proposals not yet written are dropped (their partitions keep the committed
        ISR, which is safe)."""
        with self._changed:
            self._stopping = True
            self._pending.clear()
            self._changed.notify()
        if self._thread.is_alive():
            self._thread.join(timeout=30)

    def _run(self) -> None:
        while True:
            with self._changed:
                while not self._pending and not self._stopping:
                    self._changed.wait()
                if self._stopping:
                    return
                count = min(len(self._pending), ISR_UPDATES_PER_BATCH_MAX)
                batch = [self._pending.popleft() for _ in range(count)]
            self._write(batch)

    def _write(self, batch: list[tuple[Partition, IsrUpdate]]) -> None:
        unread = [(p, u) for p, u in batch if u.partition_epoch < 0]
        for partition, update in unread:  # never read back: an unconditional write could win
            partition.complete_isr_update(update, new_partition_epoch=None)
        batch = [(p, u) for p, u in batch if u.partition_epoch >= 0]
        if not batch:
            return
        previous = [partition.isr for partition, _ in batch]
        try:
            versions = self._writer.update_isrs_as_leader(
                [
                    (
                        update.topic_partition,
                        LeaderAndIsr(
                            leader=update.leader,
                            leader_epoch=update.leader_epoch,
                            isr=update.isr,
                            controller_epoch=update.controller_epoch,
                            zk_version=update.partition_epoch,
                        ),
                    )
                    for _, update in batch
                ]
            )
        except Exception:
            # ZooKeeper unreachable: the proposals are dropped; each leader proposes again at
            # its next check (the ISR stays as committed meanwhile, which is safe).
            logger.exception(
                "ISR changes not written partitions=%s",
                [update.topic_partition for _, update in batch],
            )
            versions = [None] * len(batch)
        for (partition, update), version, isr in zip(batch, versions, previous, strict=True):
            partition.complete_isr_update(update, new_partition_epoch=version)
            if version is not None:
                self._on_committed(update, isr)
