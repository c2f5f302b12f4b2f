"""``ControlledShutdownManager``: a broker asking to leave (Kafka's ZooKeeper-mode
``KafkaController.doControlledShutdown`` and the ControlledShutdown request it served).

A broker asks by writing its broker epoch under ``/admin/controlled_shutdown``; each request
(znode) is served once, and a broker that still leads partitions it could hand over asks again
(``controlled.shutdown.max.retries``), as Kafka's broker sent ControlledShutdown again. Every
partition is decided in one pass and the states are written pipelined in one batch (Kafka's
``doControlledShutdown``: one election for all the partitions it leads, one ISR shrink for
those it follows), so a broker with thousands of partitions is served in a few round trips
to ZooKeeper. The broker joins the context's brokers shutting down; each
partition it leads gets another leader (Kafka's ControlledShutdownPartitionLeaderElectionStrategy:
the first live ISR member not shutting down), and it leaves the ISR of each partition it follows
(OfflineReplica) unless it is the last member. The answer is the partitions it still leads.
Only the controller's event thread calls it: no lock.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from typing import Any

from storage_core.common import TopicPartition
from storage_core.controller import election
from storage_core.controller.controller_context import ControllerContext
from storage_core.controller.partition_state_machine import PartitionStateMachine
from storage_core.zk.controller_zk import ControllerEpoch
from storage_core.zk.kafka_zk_client import KafkaZkClient
from storage_core.zk.zk_data import LeaderAndIsr

# the controller's lines keep the logger they had before its state machines had modules
logger = logging.getLogger("storage_core.controller.kafka_controller")

LOGGED_PARTITIONS_MAX = 20  # of those a served request leaves led, named in its log line


class ControlledShutdownManager:
    def __init__(
        self,
        zk: KafkaZkClient,
        context: ControllerContext,
        partition_state_machine: PartitionStateMachine,
        *,
        epoch: Callable[[], ControllerEpoch],
        is_active: Callable[[], bool],
        enqueue: Callable[[str, Callable[[], None]], None],
    ) -> None:
        """``epoch()``: the controller's epoch, raising ``ControllerMovedError`` once it is
        not the controller; ``is_active()``: whether it is; ``enqueue(name, handler)``: an
        event for the controller's event thread."""
        self.zk = zk
        self.context = context
        self._partition_state_machine = partition_state_machine
        self._epoch = epoch
        self._is_active = is_active
        self._enqueue = enqueue
        # (broker id, broker epoch, request czxid) of the requests served
        self._shutdowns_served: set[tuple[int, int, int]] = set()

    def _watch_shutdown_requests(self, _event: Any = None) -> None:
        self._enqueue("ControlledShutdown", self.process_controlled_shutdown_requests)

    def process_controlled_shutdown_requests(self) -> None:
        """Brokers asking to leave (``/admin/controlled_shutdown``): each request znode is
        served once, as each of Kafka's ControlledShutdown requests was."""
        if not self._is_active():
            return
        requests = self.zk.get_controlled_shutdown_requests(watch=self._watch_shutdown_requests)
        present = {(b, epoch, czxid) for b, (epoch, czxid) in requests.items()}
        # A request znode is ephemeral and replaced when asked again: remembering only the
        # present ones keeps the set bounded.
        self._shutdowns_served &= present
        for broker_id, broker_epoch, czxid in sorted(present - self._shutdowns_served):
            known = self.context.live_brokers.get(broker_id)
            if known is None or broker_epoch < known.broker_epoch:
                continue  # gone already, or a request of an earlier life of that broker
            started = time.monotonic()
            still_led = self.process_controlled_shutdown(broker_id)
            self._shutdowns_served.add((broker_id, broker_epoch, czxid))
            logger.info(
                "controlled shutdown served, broker=%s partitions=%d took_ms=%.0f"
                " partitions_still_led=%s%s",
                broker_id,
                len(self.context.partitions_on_broker(broker_id)),
                (time.monotonic() - started) * 1000,
                [str(tp) for tp in still_led[:LOGGED_PARTITIONS_MAX]],
                f" (and {len(still_led) - LOGGED_PARTITIONS_MAX} more)"
                if len(still_led) > LOGGED_PARTITIONS_MAX
                else "",
            )

    def process_controlled_shutdown(self, broker_id: int) -> list[TopicPartition]:
        ctx = self.context
        if broker_id not in ctx.live_brokers:
            return []  # gone already: its partitions were handled as a failure
        ctx.shutting_down.add(broker_id)
        self._partition_state_machine.refresh_states(ctx.partitions_on_broker(broker_id))
        changes = {}
        for tp in ctx.partitions_on_broker(broker_id):
            state = ctx.states.get(tp)
            if state is None or len(ctx.assignments[tp].replicas) < 2:
                continue
            if tp.topic in ctx.topics_to_delete:
                continue
            if state.leader == broker_id:
                result = election.elect_controlled_shutdown_leader(
                    ctx.assignments[tp].replicas,
                    state,
                    set(ctx.live_brokers),
                    ctx.shutting_down,
                    controller_epoch=self._epoch().epoch,
                )
                if result.new_state is not None:
                    changes[tp] = result.new_state
            else:
                removed = election.remove_replica_from_isr(
                    state, broker_id, controller_epoch=self._epoch().epoch
                )
                if removed is not None and len(state.isr) > 1:
                    changes[tp] = removed
        self._partition_state_machine.write_states(
            changes, reread=functools.partial(self._reread_shutdown, broker_id=broker_id)
        )
        return ctx.partitions_led_by(broker_id)

    def _reread_shutdown(
        self, tp: TopicPartition, state: LeaderAndIsr, *, broker_id: int
    ) -> LeaderAndIsr | None:
        """A state that moved during a controlled shutdown (its leader changed the ISR): the
        same decision on the current state."""
        ctx = self.context
        if state.leader == broker_id:
            return election.elect_controlled_shutdown_leader(
                ctx.assignments[tp].replicas,
                state,
                set(ctx.live_brokers),
                ctx.shutting_down,
                controller_epoch=self._epoch().epoch,
            ).new_state
        if len(state.isr) < 2:
            return None
        return election.remove_replica_from_isr(
            state, broker_id, controller_epoch=self._epoch().epoch
        )
