"""``ReplicaStateMachine``: replicas going offline (Kafka's ``ZkReplicaStateMachine``, its
OfflineReplica transition and ``doRemoveReplicasFromIsr``).

    OnlineReplica -> OfflineReplica   the replica leaves the partition's ISR; a leader that
                                      leaves leaves no leader; the ISR's last member stays

A replica goes offline when its broker dies or bounces, or when a reassignment removes it (its
broker then deletes it once the topic znode no longer lists it). The states are written through
the partition state machine's ``write_states``; a state that moved is reread and the removal
decided again. Only the controller's event thread calls it: no lock.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable

from storage_core.common import TopicPartition
from storage_core.controller import election
from storage_core.controller.controller_context import ControllerContext
from storage_core.controller.partition_state_machine import PartitionStateMachine
from storage_core.zk.controller_zk import ControllerEpoch
from storage_core.zk.kafka_zk_client import KafkaZkClient
from storage_core.zk.zk_data import NO_LEADER, LeaderAndIsr


class ReplicaStateMachine:
    def __init__(
        self,
        zk: KafkaZkClient,
        context: ControllerContext,
        partition_state_machine: PartitionStateMachine,
        *,
        epoch: Callable[[], ControllerEpoch],
    ) -> None:
        """``epoch()``: the controller's epoch, raising ``ControllerMovedError`` once it is
        not the controller."""
        self.zk = zk
        self.context = context
        self._partition_state_machine = partition_state_machine
        self._epoch = epoch

    def handle_offline_broker(self, broker_id: int) -> None:
        """Every replica on a failed broker goes offline: it leaves each ISR (partitions of
        topics being deleted are left as they are)."""
        ctx = self.context
        changes = {}
        for tp in ctx.partitions_on_broker(broker_id):
            state = ctx.states.get(tp)
            if state is None or tp.topic in ctx.topics_to_delete:
                continue
            removed = election.remove_replica_from_isr(
                state, broker_id, controller_epoch=self._epoch().epoch
            )
            if removed is not None:
                changes[tp] = removed
        self._partition_state_machine.write_states(
            changes, reread=functools.partial(self._reread_removal, broker_id=broker_id)
        )

    def stop_removed_replicas(self, tp: TopicPartition, replicas: Iterable[int]) -> None:
        """B4: each removed replica leaves the ISR (Kafka's OfflineReplica step); its broker
        stops hosting and deletes it once the topic znode no longer lists it."""
        for broker_id in replicas:
            state = self.context.states.get(tp)
            if state is None:
                return
            removed = election.remove_replica_from_isr(
                state, broker_id, controller_epoch=self._epoch().epoch
            )
            if removed is not None:
                self._partition_state_machine.write_states(
                    {tp: removed},
                    reread=functools.partial(self._reread_removal, broker_id=broker_id),
                )
        state = self.context.states.get(tp)
        if state is not None and state.leader == NO_LEADER:
            self._partition_state_machine.trigger_online_partition_state_change()

    def _reread_removal(
        self, _tp: TopicPartition, state: LeaderAndIsr, *, broker_id: int
    ) -> LeaderAndIsr | None:
        return election.remove_replica_from_isr(
            state, broker_id, controller_epoch=self._epoch().epoch
        )
