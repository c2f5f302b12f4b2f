"""``PartitionStateMachine``: the controller's partition state changes (Kafka's
``ZkPartitionStateMachine``), written to the partitions' ``state`` znodes with conditional
updates fenced by the controller epoch.

    NewPartition     -> OnlinePartition   the live assigned replicas in sync, the first leading
    OfflinePartition -> OnlinePartition   offline election (unclean only where it is enabled)
    OnlinePartition  -> OnlinePartition   preferred-replica or unclean election (ElectLeaders)

The rules of each election are ``election``'s; this class reads the states, writes the results
and rereads a state that moved under it (``write_states``, which the controller's other parts
also write through). Only the controller's event thread calls it: no lock.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from storage_core.common import TopicPartition
from storage_core.controller import election
from storage_core.controller.controller_context import ControllerContext
from storage_core.zk.controller_zk import ControllerEpoch
from storage_core.zk.kafka_zk_client import KafkaZkClient
from storage_core.zk.zk_data import NO_LEADER, LeaderAndIsr

# the controller's lines keep the logger they had before its state machines had modules
logger = logging.getLogger("storage_core.controller.kafka_controller")

RESTORE_LEADER_EPOCH_CONFIG = "remote.log.restore.leader.epoch"
MAX_STATE_WRITE_ATTEMPTS = 10  # rereads after a partition state moved under the controller
ELECTION_NOT_NEEDED_MESSAGE = "Leader election not needed for topic partition."


@dataclass(frozen=True, slots=True, kw_only=True)
class ElectionOutcome:
    """One partition's answer to ElectLeaders: an error name (Kafka's, lower case) or None and
    the leader elected (``leader``, set only when the election was written)."""

    error: str | None = None
    message: str | None = None
    leader: int | None = None


class PartitionStateMachine:
    def __init__(
        self,
        zk: KafkaZkClient,
        context: ControllerContext,
        *,
        epoch: Callable[[], ControllerEpoch],
        unclean_leader_election_enable: Callable[[str], bool],
    ) -> None:
        """``epoch()``: the controller's epoch, raising ``ControllerMovedError`` once it is
        not the controller; ``unclean_leader_election_enable(topic)``: the topic's setting."""
        self.zk = zk
        self.context = context
        self._epoch = epoch
        self._unclean_enabled = unclean_leader_election_enable

    def trigger_online_partition_state_change(self) -> None:
        """Elect leaders for every new or offline partition that has a candidate."""
        ctx = self.context
        offline = ctx.offline_partitions()
        new = [tp for tp in offline if tp not in ctx.states]
        if new:
            self._initialize_partitions(new)
        changes = {}
        for tp in offline:
            state = ctx.states.get(tp)
            if state is None:
                continue
            result = self._offline_election(tp, state)
            if result is not None:
                changes[tp] = result
        self.write_states(changes, reread=self._offline_election)

    def _initialize_partitions(self, partitions: list[TopicPartition]) -> None:
        """First states: the live assigned replicas in sync, the first of them leading. A
        state that already exists (written by a previous controller) is read as it is.

        The first leader epoch is 0, or, for a topic restored from the remote tier, the one
        after its ``remote.log.restore.leader.epoch`` (read from ZooKeeper, as Kafka's
        controller reads a topic's unclean.leader.election.enable): the restored leader epochs
        stay below every epoch the new leaders write."""
        ctx = self.context
        first_epochs = {
            topic: self._first_leader_epoch(topic) for topic in {tp.topic for tp in partitions}
        }
        initial = {}
        for tp in partitions:
            state = election.initial_leader_and_isr(
                ctx.assignments[tp].replicas,
                ctx.live_broker_ids,
                controller_epoch=self._epoch().epoch,
                leader_epoch=first_epochs[tp.topic],
            )
            if state is None:
                logger.warning(
                    "no assigned replica is alive: partition stays new, partition=%s replicas=%s",
                    tp,
                    list(ctx.assignments[tp].replicas),
                )
                continue
            initial[tp] = state
        created = self.zk.create_partition_states(self._epoch(), initial)
        ctx.states.update(created)
        ctx.states.update(self.zk.get_partition_states([tp for tp in initial if tp not in created]))

    def _first_leader_epoch(self, topic: str) -> int:
        restored = self.zk.get_topic_config(topic).get(RESTORE_LEADER_EPOCH_CONFIG)
        try:
            return max(0, int(restored) + 1) if restored is not None else 0
        except ValueError:
            logger.warning(
                "topic=%s has %s=%r, not an integer: its partitions start at leader epoch 0",
                topic,
                RESTORE_LEADER_EPOCH_CONFIG,
                restored,
            )
            return 0

    def _offline_election(self, tp: TopicPartition, state: LeaderAndIsr) -> LeaderAndIsr | None:
        ctx = self.context
        if state.leader != NO_LEADER and state.leader in ctx.live_broker_ids:
            return None
        result = election.elect_offline_leader(
            ctx.assignments[tp].replicas,
            state,
            ctx.live_broker_ids,
            unclean_leader_election_enable=self._unclean_enabled(tp.topic),
            controller_epoch=self._epoch().epoch,
        )
        if result.new_state is None:
            if state.leader != NO_LEADER:
                # its leader is gone and nobody can take over: say so in ZooKeeper
                return election.remove_replica_from_isr(
                    state, state.leader, controller_epoch=self._epoch().epoch
                ) or without_leader(state, self._epoch().epoch)
            return None
        if result.unclean:
            logger.warning(
                "unclean leader election: records acknowledged by the old ISR may be lost, "
                "partition=%s leader=%s leader_epoch=%s old_isr=%s",
                tp,
                result.new_state.leader,
                result.new_state.leader_epoch,
                list(state.isr),
            )
        return result.new_state

    def write_states(
        self,
        changes: dict[TopicPartition, LeaderAndIsr],
        *,
        reread: Callable[[TopicPartition, LeaderAndIsr], LeaderAndIsr | None],
    ) -> None:
        """Write states conditionally; the partitions whose znode moved are read again (in one
        batch) and ``reread(tp, current_state)`` decides each one's change anew, None for none
        (bounded attempts)."""
        for _attempt in range(MAX_STATE_WRITE_ATTEMPTS):
            if not changes:
                return
            result = self.zk.update_leader_and_isr(self._epoch(), changes)
            for tp, state in result.finished.items():
                self.context.states[tp] = state
                logger.info(
                    "partition state, partition=%s leader=%s leader_epoch=%s isr=%s",
                    tp,
                    state.leader,
                    state.leader_epoch,
                    list(state.isr),
                )
            current = self.zk.get_partition_states(result.retry)
            self.context.states.update(current)
            retried = {}
            for tp, state in current.items():
                again = reread(tp, state)
                if again is not None:
                    retried[tp] = again
            changes = retried
        if changes:
            logger.error(
                "partition states kept moving, giving up for now, partitions=%s", list(changes)
            )

    def elect_leaders(
        self, partitions: list[TopicPartition], unclean: bool
    ) -> dict[TopicPartition, ElectionOutcome]:
        """ElectLeaders: preferred (``unclean=False``) or unclean, one outcome per partition."""
        ctx = self.context
        self.refresh_states(tp for tp in partitions if tp in ctx.assignments)
        outcomes: dict[TopicPartition, ElectionOutcome] = {}
        changes = {}
        for tp in partitions:
            state = ctx.states.get(tp)
            if tp not in ctx.assignments or state is None:
                outcomes[tp] = ElectionOutcome(
                    error="unknown_topic_or_partition", message="The partition does not exist."
                )
                continue
            if tp.topic in ctx.topics_to_delete:
                outcomes[tp] = ElectionOutcome(
                    error="invalid_topic_exception", message="The topic is being deleted"
                )
                continue
            replicas = ctx.assignments[tp].replicas
            if unclean:
                if state.leader != NO_LEADER and state.leader in ctx.live_broker_ids:
                    outcomes[tp] = ElectionOutcome(
                        error="election_not_needed", message=ELECTION_NOT_NEEDED_MESSAGE
                    )
                    continue
                result = election.elect_offline_leader(
                    replicas,
                    state,
                    ctx.live_broker_ids,
                    unclean_leader_election_enable=True,
                    controller_epoch=self._epoch().epoch,
                )
                missing = "eligible_leaders_not_available"
                strategy = "OfflinePartitionLeaderElectionStrategy(true)"
            else:
                if state.leader == replicas[0]:
                    outcomes[tp] = ElectionOutcome(
                        error="election_not_needed", message=ELECTION_NOT_NEEDED_MESSAGE
                    )
                    continue
                result = election.elect_preferred_leader(
                    replicas, state, ctx.live_broker_ids, controller_epoch=self._epoch().epoch
                )
                missing = "preferred_leader_not_available"
                strategy = "PreferredReplicaPartitionLeaderElectionStrategy"
            if result.new_state is None:
                outcomes[tp] = ElectionOutcome(
                    error=missing,
                    message=f"Failed to elect leader for partition {tp} under strategy {strategy}",
                )
                continue
            changes[tp] = result.new_state
        written = self.zk.update_leader_and_isr(self._epoch(), changes)
        for tp, state in written.finished.items():
            ctx.states[tp] = state
            outcomes[tp] = ElectionOutcome(leader=state.leader)
        for tp in written.retry:
            outcomes[tp] = ElectionOutcome(
                error="unknown_server_error", message=f"{tp} changed during the election; retry"
            )
        return outcomes

    def refresh_states(self, partitions: Iterable[TopicPartition]) -> None:
        """Read these partitions' states again before deciding on their ISRs: leaders write
        ISR changes to ZooKeeper themselves (Kafka's ZooKeeper mode), so the controller's copy
        may be behind (Kafka learned them through ``/isr_change_notification``)."""
        self.context.states.update(self.zk.get_partition_states(list(partitions)))


def without_leader(state: LeaderAndIsr, controller_epoch: int) -> LeaderAndIsr:
    return LeaderAndIsr(
        leader=NO_LEADER,
        leader_epoch=state.leader_epoch + 1,
        isr=state.isr,
        controller_epoch=controller_epoch,
        zk_version=state.zk_version,
    )
