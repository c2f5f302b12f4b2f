"""``KafkaController``: the cluster's brain, active on one broker at a time (Kafka's
ZooKeeper-mode controller, one code path for a cluster and for a single broker's store).

Every broker runs one. The one whose ``/controller`` registration succeeds is active: it alone
elects leaders (each election is the leader epoch + 1) and writes partition states, fenced by
its controller epoch (see ``kafka_zk_client``). The others only watch ``/controller`` and try
again when it goes.

How decisions reach the brokers: through ZooKeeper itself. Kafka's ZooKeeper mode pushed them
with LeaderAndIsr / UpdateMetadata / StopReplica requests, RPCs Kafka 4.0 removed and the
protocol library here does not have. The brokers instead watch what the controller writes
(``/brokers/ids``, ``/brokers/topics``, the partition ``state`` znodes, ``/admin/delete_topics``):
ZooKeeper delivers every change in order, to every broker, including one that was
disconnected (it reads the current state when its watch fires or it reconnects), and nothing
a deposed controller tries can get there (its writes fail the epoch check). What a broker
tells the controller (it removed a deleted topic's replicas; it wants to shut down) it also
writes to ZooKeeper.

Events (one thread; ZooKeeper watches and callers only enqueue):

    Startup            register for session changes; elect
    ControllerChange   /controller changed: resign if it is not us any more; elect if empty
    BrokerChange       brokers registered, gone, or bounced (a new czxid = a new broker epoch)
    TopicChange        topics created (partitions get their first state) or removed
    PartitionChange    partitions added to a topic
    TopicDeletion      topics marked for deletion; done once every replica acknowledged
    ControlledShutdown a broker asks to leave: its leaderships move first
    ElectLeaders       preferred or unclean election asked by an admin client
    AlterPartitionReassignments  reassignments started, replaced or cancelled (KIP-455)
    ListPartitionReassignments   the reassignments in progress
    PartitionReassignmentIsrChange  a reassigning partition's state znode changed: complete it
                       once every target replica is in the ISR
    ZkPartitionReassignment  /admin/reassign_partitions created: start what it asks
    AutoRebalance      periodic preferred-replica election when a broker's imbalance is high
    SessionExpired     the ZooKeeper session is gone: stop acting at once; elect again later

A failure inside an event (other than losing the controllership) makes this broker resign so
that another one takes over with a fresh view, as Kafka's ``triggerControllerMove`` does.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, TypeVar

from kazoo.exceptions import KazooException

from storage_core.common import TopicPartition
from storage_core.controller import election, reassignment
from storage_core.controller.controller_context import ControllerContext
from storage_core.controller.event_manager import EventManager
from storage_core.controller.kafka_zk_client import (
    ControllerEpoch,
    ControllerMovedError,
    KafkaZkClient,
    Watch,
)
from storage_core.controller.reassignment import ReassignmentOutcome
from storage_core.controller.zk_data import (
    NO_LEADER,
    LeaderAndIsr,
    ReplicaAssignment,
    TopicAssignment,
)
from storage_core.errors import (
    InvalidPartitionsError,
    StorageError,
    UnknownTopicOrPartitionError,
)

logger = logging.getLogger(__name__)

MAX_STATE_WRITE_ATTEMPTS = 10  # rereads after a partition state moved under the controller
ELECTION_NOT_NEEDED_MESSAGE = "Leader election not needed for topic partition."
T = TypeVar("T")


@dataclass(frozen=True, slots=True, kw_only=True)
class ControllerConfig:
    """Kafka's names: ``auto.leader.rebalance.enable``,
    ``leader.imbalance.check.interval.seconds``, ``leader.imbalance.per.broker.percentage``."""

    auto_leader_rebalance_enable: bool = True
    leader_imbalance_check_interval_s: float = 300.0
    leader_imbalance_per_broker_percentage: int = 10


@dataclass(frozen=True, slots=True, kw_only=True)
class ElectionOutcome:
    """One partition's answer to ElectLeaders: an error name (Kafka's, lower case) or None and
    the leader elected (``leader``, set only when the election was written)."""

    error: str | None = None
    message: str | None = None
    leader: int | None = None


class KafkaController:
    def __init__(
        self,
        broker_id: int,
        zk: KafkaZkClient,
        *,
        unclean_leader_election_enable: Callable[[str], bool],
        config: ControllerConfig | None = None,
    ) -> None:
        """``unclean_leader_election_enable(topic)``: the topic's effective setting (topic
        config over the broker's)."""
        self.broker_id = broker_id
        self.zk = zk
        self.config = config or ControllerConfig()
        self._unclean_enabled = unclean_leader_election_enable
        self.context = ControllerContext()
        self._events = EventManager(
            f"controller-event-thread-{broker_id}", on_error=self._on_event_error, idle=self._idle
        )
        self._started = False
        self._active = threading.Event()
        self._active_controller_id = -1
        self._next_rebalance_s = float("inf")
        self._shutdowns_served: set[tuple[int, int]] = set()
        self._isr_change_watches: dict[TopicPartition, Watch] = {}

    # --- lifecycle and state, from any thread -----------------------------------------------

    def start(self) -> None:
        self._events.start()
        self._started = True
        self._events.put("Startup", self._process_startup)

    def shutdown(self) -> None:
        """Stop processing events and give up the controllership (another broker takes over
        at once instead of after this broker's session timeout)."""
        if not self._started:
            return
        self._started = False
        self._events.stop()
        if self._active.is_set():
            self._active.clear()
            try:
                self.zk.resign_controller(self.broker_id)
            except Exception as exc:  # the session may be gone already: it resigned for us
                logger.info(
                    "controller resignation skipped, broker=%s reason=%s", self.broker_id, exc
                )

    @property
    def is_active(self) -> bool:
        return self._active.is_set()

    @property
    def active_controller_id(self) -> int:
        """The controller as this broker last saw it (-1: none known)."""
        return self._active_controller_id

    def elect_leaders(
        self, partitions: Iterable[TopicPartition], *, unclean: bool
    ) -> Future[dict[TopicPartition, ElectionOutcome]]:
        """ElectLeaders on the controller: preferred (``unclean=False``) or unclean."""
        wanted = list(partitions)
        return self._call("ElectLeaders", lambda: self._process_elect_leaders(wanted, unclean))

    def create_topic(self, assignment: TopicAssignment, configs: Mapping[str, str]) -> Future[bool]:
        """Write a new topic (config and assignment in one fenced transaction) and give its
        partitions their first states; False if it exists."""
        return self._call("CreateTopic", lambda: self._process_create_topic(assignment, configs))

    def add_partitions(self, topic: str, added: Mapping[int, ReplicaAssignment]) -> Future[None]:
        """Add partitions (numbered after the existing ones) to a topic."""
        return self._call("CreatePartitions", lambda: self._process_add_partitions(topic, added))

    def delete_topics(self, topics: Iterable[str]) -> Future[None]:
        """Mark topics for deletion; they go once every replica acknowledged."""
        wanted = sorted(set(topics))

        def mark() -> None:
            for topic in wanted:
                self.zk.mark_topic_for_deletion(topic)
            self._process_topic_deletion()

        return self._call("DeleteTopics", mark)

    def alter_partition_reassignments(
        self,
        reassignments: Mapping[TopicPartition, Sequence[int] | None],
        *,
        allow_replication_factor_change: bool = True,
    ) -> Future[dict[TopicPartition, ReassignmentOutcome]]:
        """Start (or replace) the reassignment of each partition to its target replicas;
        a target of None cancels the partition's reassignment."""
        wanted = {tp: None if r is None else tuple(r) for tp, r in reassignments.items()}
        return self._call(
            "AlterPartitionReassignments",
            lambda: self._process_api_partition_reassignment(
                wanted, allow_replication_factor_change
            ),
        )

    def list_partition_reassignments(
        self, partitions: Iterable[TopicPartition] | None = None
    ) -> Future[dict[TopicPartition, ReplicaAssignment]]:
        """The reassignments in progress (of ``partitions``, or all of them): each partition's
        replicas with those being added and removed."""
        wanted = None if partitions is None else list(partitions)
        return self._call(
            "ListPartitionReassignments", lambda: self._process_list_partition_reassignments(wanted)
        )

    def controlled_shutdown(self, broker_id: int) -> Future[list[TopicPartition]]:
        """Move the broker's leaderships away and take it out of ISRs; returns the partitions
        it still leads (none once every one had another in-sync replica)."""
        return self._call(
            "ControlledShutdown", lambda: self._process_controlled_shutdown(broker_id)
        )

    # --- the event thread ---------------------------------------------------------------------

    def _enqueue(self, name: str, handler: Callable[[], None]) -> None:
        self._events.put(name, handler)

    def _call(self, name: str, handler: Callable[[], T]) -> Future[T]:
        def when_active() -> T:
            if not self.is_active:
                raise ControllerMovedError(f"broker {self.broker_id} is not the controller")
            return handler()

        return self._events.call(name, when_active)

    def _idle(self) -> float:
        if time.monotonic() >= self._next_rebalance_s:
            self._process_auto_rebalance()
        return min(1.0, max(0.05, self._next_rebalance_s - time.monotonic()))

    def _on_event_error(self, name: str, exc: Exception) -> None:
        if isinstance(exc, ControllerMovedError):
            logger.info("controller moved, broker=%s event=%s reason=%s", self.broker_id, name, exc)
            self._resign()
            return
        logger.error(
            "controller event failed, broker=%s event=%s: resigning so that another broker "
            "takes over with a fresh view",
            self.broker_id,
            name,
            exc_info=exc,
        )
        if self.is_active:
            self._resign()
            try:
                self.zk.resign_controller(self.broker_id)
            except KazooException as lost:
                # a lost session already took our ephemeral /controller with it
                logger.info("could not delete /controller, broker=%s: %r", self.broker_id, lost)

    # --- election of the controller ----------------------------------------------------------

    def _process_startup(self) -> None:
        self.zk.add_session_listener(self._on_session_state)
        self._elect()

    def _on_session_state(self, state: str) -> None:
        if state == "LOST":
            self._enqueue("SessionExpired", self._process_session_expired)
        elif state == "CONNECTED":
            self._enqueue("ControllerChange", self._process_controller_change)

    def _watch_controller(self, _event: Any = None) -> None:
        self._enqueue("ControllerChange", self._process_controller_change)

    def _elect(self) -> None:
        current = self.zk.get_controller(watch=self._watch_controller)
        if current is not None:
            self._active_controller_id = current.broker_id
            return
        try:
            epoch = self.zk.register_controller_and_increment_controller_epoch(
                self.broker_id, timestamp_ms=int(time.time() * 1000)
            )
        except ControllerMovedError:
            current = self.zk.get_controller(watch=self._watch_controller)
            self._active_controller_id = current.broker_id if current else -1
            return
        self._active_controller_id = self.broker_id
        self.context.clear()
        self.context.epoch = epoch
        self._active.set()
        logger.info(
            "elected controller, broker=%s controller_epoch=%s", self.broker_id, epoch.epoch
        )
        self._on_controller_failover()

    def _process_controller_change(self) -> None:
        current = self.zk.get_controller(watch=self._watch_controller)
        if current is not None and current.broker_id == self.broker_id and self.is_active:
            return
        if self.is_active:
            self._resign()
        if current is None:
            self._elect()
        else:
            self._active_controller_id = current.broker_id

    def _process_session_expired(self) -> None:
        """The session is gone, and with it ``/controller`` if it was ours: stop at once."""
        if self.is_active:
            logger.warning("zookeeper session expired, resigning, broker=%s", self.broker_id)
        self._resign()
        self._active_controller_id = -1

    def _resign(self) -> None:
        if self.is_active:
            logger.info("resigning as controller, broker=%s", self.broker_id)
        self._active.clear()
        self.context.clear()
        self._next_rebalance_s = float("inf")

    def _on_controller_failover(self) -> None:
        """Read the cluster from ZooKeeper (watches first, so no change is missed), then bring
        every partition online that can be."""
        ctx = self.context
        ctx.live_brokers = self.zk.get_all_brokers(watch=self._watch_brokers)
        for topic in self.zk.get_all_topics(watch=self._watch_topics):
            self._load_topic(topic)
        ctx.states = self.zk.get_partition_states(list(ctx.assignments))
        # only topics that exist: a marker left behind its topic (the last controller died
        # between deleting the topic's znodes and the marker) would otherwise keep a topic
        # created later under that name from ever getting leaders; the deletion pass below
        # removes such markers, as Kafka ignores deletions of topics that do not exist
        marked = self.zk.get_topics_marked_for_deletion(self._watch_deletions)
        ctx.topics_to_delete = set(marked) & set(ctx.topic_ids)
        ctx.partitions_being_reassigned = {
            tp for tp, a in ctx.assignments.items() if a.is_being_reassigned
        }
        self._trigger_online_partition_state_change()
        # Kafka's replicaStateMachine.startup: replicas on brokers that are not alive go
        # offline, so they leave the ISRs (a broker that died with the last controller, or
        # whose session expired before this one was elected, had no broker change to tell)
        in_isrs = {b for state in ctx.states.values() for b in state.isr}
        gone = sorted(in_isrs - set(ctx.live_brokers))
        if gone:
            logger.info("replicas on brokers that are not alive leave the ISRs, brokers=%s", gone)
            self._on_brokers_failure(gone)
        # Kafka's initializePartitionReassignments: those asked in ZooKeeper meanwhile first
        zk_resumed = self._process_zk_partition_reassignment()
        self._maybe_resume_reassignments(lambda tp, _assignment: tp not in zk_resumed)
        self._process_topic_deletion()
        self._process_controlled_shutdown_requests()
        if self.config.auto_leader_rebalance_enable:
            self._next_rebalance_s = time.monotonic() + min(
                5.0, self.config.leader_imbalance_check_interval_s
            )

    def _load_topic(self, topic: str) -> list[TopicPartition]:
        """Read a topic's assignment into the context (watching it); returns its partitions
        that the context did not know."""
        read = self.zk.get_topic_assignment(topic, watch=self._partition_watch(topic))
        if read is None:
            return []
        assignment, _ = read
        self.context.topic_ids[topic] = assignment.topic_id
        added = []
        for partition, replicas in assignment.partitions.items():
            tp = TopicPartition(topic, partition)
            if tp not in self.context.assignments:
                added.append(tp)
            self.context.assignments[tp] = replicas
        return added

    # --- watches -----------------------------------------------------------------------------

    def _watch_brokers(self, _event: Any = None) -> None:
        self._enqueue("BrokerChange", self._process_broker_change)

    def _watch_topics(self, _event: Any = None) -> None:
        self._enqueue("TopicChange", self._process_topic_change)

    def _watch_deletions(self, _event: Any = None) -> None:
        self._enqueue("TopicDeletion", self._process_topic_deletion)

    def _partition_watch(self, topic: str) -> Callable[[Any], None]:
        def fired(_event: Any) -> None:
            self._enqueue("PartitionChange", lambda: self._process_partition_change(topic))

        return fired

    # --- broker changes ----------------------------------------------------------------------

    def _process_broker_change(self) -> None:
        if not self.is_active:
            return
        ctx = self.context
        current = self.zk.get_all_brokers(watch=self._watch_brokers)
        known = ctx.live_brokers
        new = sorted(set(current) - set(known))
        dead = sorted(set(known) - set(current))
        bounced = sorted(
            b for b in set(current) & set(known) if current[b].broker_epoch > known[b].broker_epoch
        )
        if not (new or dead or bounced):
            ctx.live_brokers = current
            return
        logger.info(
            "broker change, new=%s dead=%s bounced=%s live=%s", new, dead, bounced, sorted(current)
        )
        ctx.live_brokers = {b: r for b, r in current.items() if b not in bounced}
        if dead or bounced:
            self._on_brokers_failure(dead + bounced)
        ctx.live_brokers = current
        ctx.shutting_down -= set(dead) | set(bounced)
        self._trigger_online_partition_state_change()
        started = set(new) | set(bounced)
        if started:  # Kafka's onBrokerStartup: their reassignments go on
            self._maybe_resume_reassignments(lambda _tp, a: bool(started & set(a.replicas)))

    def _on_brokers_failure(self, dead: list[int]) -> None:
        """Partitions they led get new leaders (or go offline); they leave every ISR. The
        states are read again first: a leader that took a returning replica back into its
        ISR wrote that itself, and a stale copy would keep the dead replica in the ISR."""
        ctx = self.context
        self._refresh_states(tp for broker_id in dead for tp in ctx.partitions_on_broker(broker_id))
        self._trigger_online_partition_state_change()
        for broker_id in dead:
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
            self._write_states(
                changes, reread=functools.partial(self._reread_removal, broker_id=broker_id)
            )

    def _reread_removal(self, tp: TopicPartition, *, broker_id: int) -> LeaderAndIsr | None:
        state = self.zk.get_partition_states([tp]).get(tp)
        if state is None:
            return None
        return election.remove_replica_from_isr(
            state, broker_id, controller_epoch=self._epoch().epoch
        )

    # --- topics ------------------------------------------------------------------------------

    def _process_topic_change(self) -> None:
        if not self.is_active:
            return
        ctx = self.context
        topics = set(self.zk.get_all_topics(watch=self._watch_topics))
        known = set(ctx.topic_ids)
        for topic in sorted(known - topics):
            ctx.remove_topic(topic)
        added: list[TopicPartition] = []
        for topic in sorted(topics - known):
            added += self._load_topic(topic)
        if added:
            self._trigger_online_partition_state_change()

    def _process_partition_change(self, topic: str) -> None:
        if not self.is_active or topic not in self.context.topic_ids:
            return
        added = self._load_topic(topic)
        if added and topic in self.context.topics_to_delete:
            logger.warning("partitions added to a topic being deleted are ignored, topic=%s", topic)
            return
        if added:
            self._trigger_online_partition_state_change()

    def _initialize_partitions(self, partitions: list[TopicPartition]) -> None:
        """First states: the live assigned replicas in sync, the first of them leading. A
        state that already exists (written by a previous controller) is read as it is."""
        ctx = self.context
        initial = {}
        for tp in partitions:
            state = election.initial_leader_and_isr(
                ctx.assignments[tp].replicas,
                ctx.live_broker_ids,
                controller_epoch=self._epoch().epoch,
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

    def _process_create_topic(
        self, assignment: TopicAssignment, configs: Mapping[str, str]
    ) -> bool:
        if not self.zk.create_topic(self._epoch(), assignment, configs):
            return False
        self._process_topic_change()
        return True

    def _process_add_partitions(self, topic: str, added: Mapping[int, ReplicaAssignment]) -> None:
        read = self.zk.get_topic_assignment(topic)
        if read is None or topic in self.context.topics_to_delete:
            raise UnknownTopicOrPartitionError(f"topic {topic} does not exist")
        current, version = read
        clash = sorted(set(added) & set(current.partitions))
        if clash:
            raise InvalidPartitionsError(f"topic {topic} already has partitions {clash}")
        updated = TopicAssignment(
            topic=topic,
            topic_id=current.topic_id,
            partitions={**current.partitions, **added},
        )
        if not self.zk.set_topic_assignment(self._epoch(), updated, expected_version=version):
            raise InvalidPartitionsError(
                f"the assignment of {topic} changed while partitions were added; retry"
            )
        self._process_partition_change(topic)

    # --- elections ---------------------------------------------------------------------------

    def _trigger_online_partition_state_change(self) -> None:
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
        self._write_states(changes, reread=self._reread_offline)

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
                ) or _without_leader(state, self._epoch().epoch)
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

    def _reread_offline(self, tp: TopicPartition) -> LeaderAndIsr | None:
        state = self.zk.get_partition_states([tp]).get(tp)
        if state is None:
            return None
        self.context.states[tp] = state
        return self._offline_election(tp, state)

    def _write_states(
        self,
        changes: dict[TopicPartition, LeaderAndIsr],
        *,
        reread: Callable[[TopicPartition], LeaderAndIsr | None],
    ) -> None:
        """Write states conditionally; a partition whose znode moved is reread and its change
        recomputed (bounded attempts)."""
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
            retried = {}
            for tp in result.retry:
                again = reread(tp)
                if again is not None:
                    retried[tp] = again
            changes = retried
        if changes:
            logger.error(
                "partition states kept moving, giving up for now, partitions=%s", list(changes)
            )

    def _process_elect_leaders(
        self, partitions: list[TopicPartition], unclean: bool
    ) -> dict[TopicPartition, ElectionOutcome]:
        ctx = self.context
        self._refresh_states(tp for tp in partitions if tp in ctx.assignments)
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

    def _watch_shutdown_requests(self, _event: Any = None) -> None:
        self._enqueue("ControlledShutdown", self._process_controlled_shutdown_requests)

    def _process_controlled_shutdown_requests(self) -> None:
        """Brokers asking to leave (``/admin/controlled_shutdown``): each request of a broker
        epoch is served once, as Kafka's ControlledShutdown request was."""
        if not self.is_active:
            return
        requests = self.zk.get_controlled_shutdown_requests(watch=self._watch_shutdown_requests)
        for broker_id, broker_epoch in sorted(requests.items()):
            known = self.context.live_brokers.get(broker_id)
            if known is None or broker_epoch < known.broker_epoch:
                continue  # gone already, or a request of an earlier life of that broker
            if (broker_id, broker_epoch) in self._shutdowns_served:
                continue
            still_led = self._process_controlled_shutdown(broker_id)
            self._shutdowns_served.add((broker_id, broker_epoch))
            logger.info(
                "controlled shutdown served, broker=%s partitions_still_led=%s",
                broker_id,
                [str(tp) for tp in still_led],
            )

    def _process_controlled_shutdown(self, broker_id: int) -> list[TopicPartition]:
        ctx = self.context
        if broker_id not in ctx.live_brokers:
            return []  # gone already: its partitions were handled as a failure
        ctx.shutting_down.add(broker_id)
        self._refresh_states(ctx.partitions_on_broker(broker_id))
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
        self._write_states(
            changes, reread=functools.partial(self._reread_shutdown, broker_id=broker_id)
        )
        return ctx.partitions_led_by(broker_id)

    def _reread_shutdown(self, tp: TopicPartition, *, broker_id: int) -> LeaderAndIsr | None:
        """A state that moved during a controlled shutdown (its leader changed the ISR): the
        same decision on the current state."""
        ctx = self.context
        state = self.zk.get_partition_states([tp]).get(tp)
        if state is None:
            return None
        ctx.states[tp] = state
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

    def _process_auto_rebalance(self) -> None:
        """Kafka's checkAndTriggerAutoLeaderRebalance: per preferred broker, if more than
        ``leader.imbalance.per.broker.percentage`` of the partitions it prefers are led by
        others, elect it where it is live and in sync."""
        self._next_rebalance_s = time.monotonic() + self.config.leader_imbalance_check_interval_s
        if not self.is_active:
            return
        ctx = self.context
        self._refresh_states(tp for tp in ctx.assignments if tp.topic not in ctx.topics_to_delete)
        by_preferred: dict[int, list[TopicPartition]] = {}
        for tp, assignment in ctx.assignments.items():
            if assignment.replicas and tp in ctx.states and tp.topic not in ctx.topics_to_delete:
                by_preferred.setdefault(assignment.replicas[0], []).append(tp)
        to_elect = []
        for broker_id, partitions in sorted(by_preferred.items()):
            if broker_id not in ctx.live_broker_ids:
                continue
            not_led = [tp for tp in partitions if ctx.states[tp].leader != broker_id]
            ratio = len(not_led) / len(partitions)
            if ratio * 100 > self.config.leader_imbalance_per_broker_percentage:
                to_elect += [tp for tp in not_led if broker_id in ctx.states[tp].isr]
        if to_elect:
            logger.info("auto leader rebalance, partitions=%s", [str(tp) for tp in to_elect])
            self._process_elect_leaders(sorted(to_elect), unclean=False)

    # --- partition reassignment (KIP-455) ------------------------------------------------------
    #
    # Kafka's onPartitionReassignment, with ZooKeeper watches in place of LeaderAndIsr and
    # StopReplica requests. For ORS = [1,2,3] -> TRS = [2,3,4] (RS = TRS + ORS):
    #
    #   RS         AR   RR   leader ISR       step
    #   1,2,3      -    -    1      1,2,3     initial state
    #   2,3,4,1    4    1    1      1,2,3     U1 topic znode; A1 epoch + 1: broker 4 follows
    #   2,3,4,1    4    1    1      1,2,3,4   broker 4 caught up: the state znode watch fires
    #   2,3,4,1    4    1    2      1,2,3,4   B3 leader not in TRS: reassignment election
    #   2,3,4,1    4    1    2      2,3,4     B4 RR leave the ISR
    #   2,3,4      -    -    2      2,3,4     B6 topic znode: broker 1 deletes its replica
    #
    # The topic znode keeps ORS (RS - AR) until the last step, so a new controller resumes
    # from it (``_maybe_resume_reassignments`` at failover).

    def _process_api_partition_reassignment(
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
        if self.is_active:
            self.zk.get_partition_reassignment(watch=self._watch_zk_reassignment)

    def _process_zk_reassignment_event(self) -> None:
        self._process_zk_partition_reassignment()

    def _process_zk_partition_reassignment(self) -> set[TopicPartition]:
        """Start the reassignments ``/admin/reassign_partitions`` asks for (checked as the API's
        are); those refused leave it. Returns the partitions started."""
        if not self.is_active:
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

    def _process_list_partition_reassignments(
        self, partitions: list[TopicPartition] | None
    ) -> dict[TopicPartition, ReplicaAssignment]:
        ctx = self.context
        wanted = sorted(ctx.partitions_being_reassigned) if partitions is None else partitions
        return {
            tp: ctx.assignments[tp]
            for tp in wanted
            if tp in ctx.assignments and ctx.assignments[tp].is_being_reassigned
        }

    def _maybe_resume_reassignments(
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
        self._stop_removed_replicas(tp, assignment.removing_replicas)
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
                self._stop_removed_replicas(tp, unneeded)
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

            self._isr_change_watches[tp] = watch
        state = self.zk.get_partition_state(tp, watch)
        if state is not None:
            self.context.states[tp] = state
        return state

    def _process_partition_reassignment_isr_change(self, tp: TopicPartition) -> None:
        ctx = self.context
        if not self.is_active or tp not in ctx.partitions_being_reassigned:
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
        self._write_states(
            {tp: elected}, reread=lambda t: (s := self._reread_state(t)) and elect(s)
        )
        return True

    def _stop_removed_replicas(self, tp: TopicPartition, replicas: Iterable[int]) -> None:
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
                self._write_states(
                    {tp: removed},
                    reread=functools.partial(self._reread_removal, broker_id=broker_id),
                )
        state = self.context.states.get(tp)
        if state is not None and state.leader == NO_LEADER:
            self._trigger_online_partition_state_change()

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
        self._write_states(
            {tp: bump(state)}, reread=lambda t: (s := self._reread_state(t)) and bump(s)
        )

    def _reread_state(self, tp: TopicPartition) -> LeaderAndIsr | None:
        state = self.zk.get_partition_states([tp]).get(tp)
        if state is not None:
            self.context.states[tp] = state
        return state

    # --- topic deletion ----------------------------------------------------------------------

    def _process_topic_deletion(self) -> None:
        """Topics marked for deletion lose their leaders; once every replica's broker has
        acknowledged removing its logs, the topic's znodes go."""
        if not self.is_active:
            return
        ctx = self.context
        marked = set(self.zk.get_topics_marked_for_deletion(watch=self._watch_deletions))
        epoch = self._epoch()
        for topic in sorted(marked):
            # a topic written since the last TopicChange is read now; one that is still
            # unknown is gone, and its marker (with any of its znodes left) is cleared
            if topic not in ctx.topic_ids and not self._load_topic(topic):
                logger.warning("deletion of an unknown topic ignored, topic=%s", topic)
                self.zk.delete_topic_znodes(epoch, topic)
                continue
            if topic not in ctx.topics_to_delete or any(
                ctx.states.get(tp) is not None and ctx.states[tp].leader != NO_LEADER
                for tp in ctx.partitions_of(topic)
            ):
                ctx.topics_to_delete.add(topic)
                self._stop_partitions(topic)
            replicas = {b for tp in ctx.partitions_of(topic) for b in ctx.assignments[tp].replicas}
            acknowledged = self.zk.get_topic_deletion_acknowledgements(
                topic, watch=self._watch_deletions
            )
            if replicas <= acknowledged:
                self.zk.delete_topic_znodes(epoch, topic)
                ctx.remove_topic(topic)
                logger.info("topic deleted, topic=%s", topic)
            else:
                logger.info(
                    "topic deletion waits for replicas, topic=%s waiting_for=%s",
                    topic,
                    sorted(replicas - acknowledged),
                )

    def _stop_partitions(self, topic: str) -> None:
        ctx = self.context
        changes = {
            tp: _without_leader(ctx.states[tp], self._epoch().epoch)
            for tp in ctx.partitions_of(topic)
            if tp in ctx.states and ctx.states[tp].leader != NO_LEADER
        }
        self._write_states(changes, reread=self._reread_stop)

    def _reread_stop(self, tp: TopicPartition) -> LeaderAndIsr | None:
        state = self.zk.get_partition_states([tp]).get(tp)
        if state is None or state.leader == NO_LEADER:
            return None
        return _without_leader(state, self._epoch().epoch)

    def _refresh_states(self, partitions: Iterable[TopicPartition]) -> None:
        """Read these partitions' states again before deciding on their ISRs: leaders write
        ISR changes to ZooKeeper themselves (Kafka's ZooKeeper mode), so the controller's copy
        may be behind (Kafka learned them through ``/isr_change_notification``)."""
        self.context.states.update(self.zk.get_partition_states(list(partitions)))

    def _epoch(self) -> ControllerEpoch:
        epoch = self.context.epoch
        if epoch is None or not self.is_active:
            raise ControllerMovedError(f"broker {self.broker_id} is not the controller")
        return epoch


def _without_leader(state: LeaderAndIsr, controller_epoch: int) -> LeaderAndIsr:
    return LeaderAndIsr(
        leader=NO_LEADER,
        leader_epoch=state.leader_epoch + 1,
        isr=state.isr,
        controller_epoch=controller_epoch,
        zk_version=state.zk_version,
    )
