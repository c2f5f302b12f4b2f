"""``PartitionReassignmentManager``: the controller's partition reassignments (KIP-455), the
part of Kafka's ZooKeeper-mode ``KafkaController`` that runs them: ``onPartitionReassignment``
and the events that drive it (AlterPartitionReassignments, ListPartitionReassignments,
``/admin/reassign_partitions``, a reassigning partition's ISR change). The rules (which
requests are valid, what assignment they lead to, when one is complete) are ``reassignment``'s.

Kafka's onPartitionReassignment, with ZooKeeper watches in place of LeaderAndIsr and
StopReplica requests. For ORS = [1,2,3] -> TRS = [2,3,4] (RS = TRS + ORS):

  RS         AR   RR   leader ISR       step
  1,2,3      -    -    1      1,2,3     initial state
  2,3,4,1    4    1    1      1,2,3     U1 topic znode; A1 epoch + 1: broker 4 follows
  2,3,4,1    4    1    1      1,2,3,4   broker 4 caught up: the state znode watch fires
  2,3,4,1    4    1    2      1,2,3,4   B3 leader not in TRS: reassignment election
  2,3,4,1    4    1    2      2,3,4     B4 RR leave the ISR
  2,3,4      -    -    2      2,3,4     B6 topic znode: broker 1 deletes its replica

The topic znode keeps ORS (RS - AR) until the last step, so a new controller resumes from it
(``maybe_resume_reassignments`` at failover). Only the controller's event thread calls it
(watches enqueue their events there): no lock.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from storage_core.common import TopicPartition
from storage_core.controller import election, reassignment
from storage_core.controller.controller_context import ControllerContext
from storage_core.controller.partition_state_machine import (
    MAX_STATE_WRITE_ATTEMPTS,
    PartitionStateMachine,
)
from storage_core.controller.reassignment import ReassignmentOutcome
from storage_core.controller.replica_state_machine import ReplicaStateMachine
from storage_core.errors import StorageError, UnknownTopicOrPartitionError
from storage_core.zk.controller_zk import ControllerEpoch, ControllerMovedError
from storage_core.zk.kafka_zk_client import KafkaZkClient
from storage_core.zk.zk_data import LeaderAndIsr, ReplicaAssignment, TopicAssignment
from storage_core.zk.zookeeper_client import Watch

# the controller's lines keep the logger they had before its state machines had modules
logger = logging.getLogger("storage_core.controller.kafka_controller")


class PartitionReassignmentManager:
    def __init__(
        self,
        zk: KafkaZkClient,
        context: ControllerContext,
        partition_state_machine: PartitionStateMachine,
        replica_state_machine: ReplicaStateMachine,
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
        self._replica_state_machine = replica_state_machine
        self._epoch = epoch
        self._is_active = is_active
        self._enqueue = enqueue
        self._isr_change_watches: dict[TopicPartition, Watch] = {}

    def process_api_partition_reassignment(
        self,
        reassignments: Mapping[TopicPartition, tuple[int, ...] | None],
        allow_replication_factor_change: bool,
    ) -> dict[TopicPartition, ReassignmentOutcome]:
        # the latest reassignment wins over one asked in ZooKeeper
        self._maybe_remove_from_zk_reassignment(lambda tp, _replicas: tp in reassignments)
        return self._reassign(reassignments, allow_replication_factor_change)

    def _watch_zk_reassignment(self, event: Any = None) -> None:
        """Kafka's PartitionReassignmentHandler: a new ``/admin/reassign_partitions`` starts
        reassignments; other changes (the controller's own rewrites) only renew the watch."""
        if getattr(event, "type", None) == "CREATED":
            self._enqueue("ZkPartitionReassignment", self._process_zk_reassignment_event)
        else:
            self._enqueue("ZkPartitionReassignmentWatch", self._renew_zk_reassignment_watch)

    def _renew_zk_reassignment_watch(self) -> None:
        if self._is_active():
            self.zk.get_partition_reassignment(watch=self._watch_zk_reassignment)

    def _process_zk_reassignment_event(self) -> None:
        self.process_zk_partition_reassignment()

    def process_zk_partition_reassignment(self) -> set[TopicPartition]:
        """Start the reassignments ``/admin/reassign_partitions`` asks for (checked as the API's
        are); those refused leave it. Returns the partitions started."""
        if not self._is_active():
            return set()
        asked = self.zk.get_partition_reassignment(watch=self._watch_zk_reassignment)
        if asked is None:
            return set()
        outcomes = self._reassign(dict(asked), allow_replication_factor_change=True)
        failed = {tp: o for tp, o in outcomes.items() if o.error is not None}
        if failed:
            logger.warning(
                "reassignments asked in zookeeper refused, partitions=%s",
                {str(tp): o.error for tp, o in failed.items()},
            )
            self._maybe_remove_from_zk_reassignment(lambda tp, _replicas: tp in failed)
        return {tp for tp, o in outcomes.items() if o.error is None}

    def _maybe_remove_from_zk_reassignment(
        self, should_remove: Callable[[TopicPartition, tuple[int, ...]], bool]
    ) -> None:
        asked = self.zk.get_partition_reassignment()
        if asked is None:
            return
        kept = {tp: r for tp, r in asked.items() if not should_remove(tp, r)}
        if kept == asked:
            return
        if kept:
            self.zk.set_or_create_partition_reassignment(self._epoch(), kept)
            return
        self.zk.delete_partition_reassignment(self._epoch())
        # one created since is seen: the watch was on the znode just deleted
        self._enqueue("ZkPartitionReassignment", self._process_zk_reassignment_event)

    def _reassign(
        self,
        reassignments: Mapping[TopicPartition, tuple[int, ...] | None],
        allow_replication_factor_change: bool,
    ) -> dict[TopicPartition, ReassignmentOutcome]:
        ctx = self.context
        outcomes: dict[TopicPartition, ReassignmentOutcome] = {}
        to_reassign: dict[TopicPartition, ReplicaAssignment] = {}
        for tp, target in reassignments.items():
            current = ctx.assignments.get(tp)
            if current is None or tp.topic in ctx.topics_to_delete:
                outcomes[tp] = reassignment.UNKNOWN_PARTITION
                continue
            if target is not None:
                invalid = reassignment.validate_replicas(
                    current,
                    target,
                    ctx.live_broker_ids,
                    allow_replication_factor_change=allow_replication_factor_change,
                )
                if invalid is not None:
                    outcomes[tp] = invalid
                    continue
            built = reassignment.build_reassignment(current, target)
            if built is None:
                outcomes[tp] = reassignment.NO_REASSIGNMENT_IN_PROGRESS
                continue
            to_reassign[tp] = built
        for tp, assignment in to_reassign.items():
            try:
                self._on_partition_reassignment(tp, assignment)
                outcomes[tp] = reassignment.ACCEPTED
            except ControllerMovedError:
                raise
            except StorageError as exc:
                logger.exception("partition reassignment failed, partition=%s", tp)
                outcomes[tp] = ReassignmentOutcome(error="unknown_server_error", message=str(exc))
        return {tp: outcomes[tp] for tp in reassignments}

    def process_list_partition_reassignments(
        self, partitions: list[TopicPartition] | None
    ) -> dict[TopicPartition, ReplicaAssignment]:
        ctx = self.context
        wanted = sorted(ctx.partitions_being_reassigned) if partitions is None else partitions
        return {
            tp: ctx.assignments[tp]
            for tp in wanted
            if tp in ctx.assignments and ctx.assignments[tp].is_being_reassigned
        }

    def maybe_resume_reassignments(
        self, should_resume: Callable[[TopicPartition, ReplicaAssignment], bool]
    ) -> None:
        ctx = self.context
        for tp in sorted(ctx.partitions_being_reassigned):
            assignment = ctx.assignments.get(tp)
            if assignment is None or tp.topic in ctx.topics_to_delete:
                continue
            if should_resume(tp, assignment):
                logger.info(
                    "partition reassignment resumed, partition=%s replicas=%s adding=%s"
                    " removing=%s",
                    tp,
                    list(assignment.replicas),
                    list(assignment.adding_replicas),
                    list(assignment.removing_replicas),
                )
                self._on_partition_reassignment(tp, assignment)

    def _on_partition_reassignment(self, tp: TopicPartition, assignment: ReplicaAssignment) -> None:
        """Write RS/AR/RR; until every target replica is in the ISR bump the leader epoch (every
        replica, the new ones included, learns the assignment); once they all are, complete."""
        ctx = self.context
        self._update_current_reassignment(tp, assignment)
        state = self._read_and_watch_reassigning_state(tp)
        if not reassignment.is_reassignment_complete(assignment, state):
            self._bump_leader_epoch(tp)  # A1; A2: the adding replicas' brokers start following
            logger.info(
                "partition reassignment waits for its target replicas to join the ISR,"
                " partition=%s replicas=%s adding=%s removing=%s isr=%s",
                tp,
                list(assignment.replicas),
                list(assignment.adding_replicas),
                list(assignment.removing_replicas),
                list(state.isr) if state else [],
            )
            return
        completed = ReplicaAssignment(replicas=assignment.target_replicas)
        if not self._move_reassigned_partition_leader_if_required(tp, completed):
            return  # stays reassigning: resumed when a target replica comes back
        ctx.assignments[tp] = completed
        self._replica_state_machine.stop_removed_replicas(tp, assignment.removing_replicas)
        self._update_replica_assignment_for_partition(tp, completed)
        ctx.partitions_being_reassigned.discard(tp)
        self._maybe_remove_from_zk_reassignment(
            lambda t, replicas: t == tp and replicas == completed.replicas
        )
        logger.info(
            "partition reassignment completed, partition=%s replicas=%s removed=%s",
            tp,
            list(completed.replicas),
            list(assignment.removing_replicas),
        )

    def _update_current_reassignment(
        self, tp: TopicPartition, assignment: ReplicaAssignment
    ) -> None:
        """U1-U3: the new assignment in ZooKeeper, then in memory; replicas a replaced or
        cancelled reassignment no longer needs leave the ISR (their brokers delete them)."""
        ctx = self.context
        current = ctx.assignments[tp]
        if current != assignment:
            self._update_replica_assignment_for_partition(tp, assignment)
            unneeded = [r for r in current.replicas if r not in assignment.replicas]
            if unneeded:
                self._replica_state_machine.stop_removed_replicas(tp, unneeded)
        ctx.partitions_being_reassigned.add(tp)

    def _update_replica_assignment_for_partition(
        self, tp: TopicPartition, assignment: ReplicaAssignment
    ) -> None:
        """Write the partition's assignment into its topic znode (the other partitions as they
        are there), at the version read; bounded rereads when it moved."""
        for _attempt in range(MAX_STATE_WRITE_ATTEMPTS):
            read = self.zk.get_topic_assignment(tp.topic)
            if read is None:
                raise UnknownTopicOrPartitionError(f"topic {tp.topic} does not exist")
            current, version = read
            updated = TopicAssignment(
                topic=tp.topic,
                topic_id=current.topic_id,
                partitions={**current.partitions, tp.partition: assignment},
            )
            if self.zk.set_topic_assignment(self._epoch(), updated, expected_version=version):
                self.context.assignments[tp] = assignment
                return
        raise StorageError(
            f"the assignment of {tp.topic} kept changing; partition {tp} was not reassigned"
        )

    def _read_and_watch_reassigning_state(self, tp: TopicPartition) -> LeaderAndIsr | None:
        watch = self._isr_change_watches.get(tp)
        if watch is None:

            def watch(_event: Any) -> None:
                self._enqueue(
                    "PartitionReassignmentIsrChange",
                    lambda: self._process_partition_reassignment_isr_change(tp),
                )

            # One watch function per reassigning partition (kazoo registers a function once per
            # znode); those of partitions no longer reassigning go, so the map stays bounded.
            reassigning = self.context.partitions_being_reassigned
            for done in [t for t in self._isr_change_watches if t not in reassigning]:
                del self._isr_change_watches[done]
            self._isr_change_watches[tp] = watch
        state = self.zk.get_partition_state(tp, watch)
        if state is not None:
            self.context.states[tp] = state
        return state

    def _process_partition_reassignment_isr_change(self, tp: TopicPartition) -> None:
        ctx = self.context
        if not self._is_active() or tp not in ctx.partitions_being_reassigned:
            return
        if tp.topic in ctx.topics_to_delete:
            return
        assignment = ctx.assignments[tp]
        state = self._read_and_watch_reassigning_state(tp)
        if reassignment.is_reassignment_complete(assignment, state):
            logger.info(
                "target replicas caught up with the leader, partition=%s target=%s",
                tp,
                list(assignment.target_replicas),
            )
            self._on_partition_reassignment(tp, assignment)

    def _move_reassigned_partition_leader_if_required(
        self, tp: TopicPartition, completed: ReplicaAssignment
    ) -> bool:
        """B3: a leader outside the target replicas, or dead, gives way to the first live
        target replica in the ISR (a "reassignment" election); otherwise its epoch is bumped.
        False when no target replica can lead."""
        ctx = self.context
        state = ctx.states.get(tp)
        if state is None:
            return True
        if not reassignment.leader_must_move(completed.replicas, state, ctx.live_broker_ids):
            self._bump_leader_epoch(tp)
            return True

        def elect(current: LeaderAndIsr) -> LeaderAndIsr | None:
            return election.elect_reassignment_leader(
                completed.replicas,
                current,
                ctx.live_broker_ids,
                controller_epoch=self._epoch().epoch,
            ).new_state

        elected = elect(state)
        if elected is None:
            logger.warning(
                "partition reassignment cannot complete: no target replica is live and in"
                " sync to lead, partition=%s target=%s isr=%s",
                tp,
                list(completed.replicas),
                list(state.isr),
            )
            return False
        self._partition_state_machine.write_states({tp: elected}, reread=lambda _t, s: elect(s))
        return True

    def _bump_leader_epoch(self, tp: TopicPartition) -> None:
        """Same leader and ISR at the next leader epoch (Kafka's ``updateLeaderEpoch``)."""

        def bump(state: LeaderAndIsr) -> LeaderAndIsr:
            return LeaderAndIsr(
                leader=state.leader,
                leader_epoch=state.leader_epoch + 1,
                isr=state.isr,
                controller_epoch=self._epoch().epoch,
                zk_version=state.zk_version,
            )

        state = self.context.states.get(tp)
        if state is None:
            return
        self._partition_state_machine.write_states({tp: bump(state)}, reread=lambda _t, s: bump(s))
