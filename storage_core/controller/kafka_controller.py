"""``KafkaController``: the cluster's brain, active on one broker at a time (Kafka's
ZooKeeper-mode controller, one code path for a cluster and for a single broker's store).

Every broker runs one. The one whose ``/controller`` registration succeeds is active: it alone
elects leaders (each election is the leader epoch + 1) and writes partition states, fenced by
its controller epoch (see ``zk.kafka_zk_client``). The others only watch ``/controller`` and try
again when it goes.

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
The work of the events is done by Kafka's collaborators of the controller, one module each
(the package docstring lists them); this class is the event-processing core.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, TypeVar

from kazoo.exceptions import KazooException

from storage_core.common import TopicPartition
from storage_core.controller import auto_leader_rebalance
from storage_core.controller.controlled_shutdown import ControlledShutdownManager
from storage_core.controller.controller_context import ControllerContext
from storage_core.controller.event_manager import EventManager
from storage_core.controller.partition_state_machine import ElectionOutcome, PartitionStateMachine
from storage_core.controller.reassignment import ReassignmentOutcome
from storage_core.controller.reassignment_manager import PartitionReassignmentManager
from storage_core.controller.replica_state_machine import ReplicaStateMachine
from storage_core.controller.topic_deletion_manager import TopicDeletionManager
from storage_core.errors import InvalidPartitionsError, UnknownTopicOrPartitionError
from storage_core.zk.controller_zk import ControllerEpoch, ControllerMovedError
from storage_core.zk.kafka_zk_client import KafkaZkClient
from storage_core.zk.zk_data import ReplicaAssignment, TopicAssignment

logger = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True, slots=True, kw_only=True)
class ControllerConfig:
    """Kafka's names: ``auto.leader.rebalance.enable``,
    ``leader.imbalance.check.interval.seconds``, ``leader.imbalance.per.broker.percentage``."""

    auto_leader_rebalance_enable: bool = True
    leader_imbalance_check_interval_s: float = 300.0
    leader_imbalance_per_broker_percentage: int = 10


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
        self.context = ControllerContext()
        self._events = EventManager(
            f"controller-event-thread-{broker_id}", on_error=self._on_event_error, idle=self._idle
        )
        self._started = False
        self._active = threading.Event()
        self._active_controller_id = -1
        self._next_rebalance_s = float("inf")
        # Kafka's collaborators of the controller, on its event thread and its context
        ctx, epoch, active = self.context, self._epoch, self._active.is_set
        self._partition_state_machine = psm = PartitionStateMachine(
            zk, ctx, epoch=epoch, unclean_leader_election_enable=unclean_leader_election_enable
        )
        self._replica_state_machine = rsm = ReplicaStateMachine(zk, ctx, psm, epoch=epoch)
        self._topic_deletion_manager = TopicDeletionManager(
            zk,
            ctx,
            psm,
            epoch=epoch,
            is_active=active,
            load_topic=self._load_topic,
            watch=self._watch_deletions,
        )
        self._reassignment_manager = PartitionReassignmentManager(
            zk, ctx, psm, rsm, epoch=epoch, is_active=active, enqueue=self._enqueue
        )
        self._controlled_shutdown_manager = ControlledShutdownManager(
            zk, ctx, psm, epoch=epoch, is_active=active, enqueue=self._enqueue
        )

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
        return self._call(
            "ElectLeaders", lambda: self._partition_state_machine.elect_leaders(wanted, unclean)
        )

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
        deletion = self._topic_deletion_manager
        return self._call("DeleteTopics", lambda: deletion.enqueue_topics_for_deletion(wanted))

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
            lambda: self._reassignment_manager.process_api_partition_reassignment(
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
            "ListPartitionReassignments",
            lambda: self._reassignment_manager.process_list_partition_reassignments(wanted),
        )

    def controlled_shutdown(self, broker_id: int) -> Future[list[TopicPartition]]:
        """Move the broker's leaderships away and take it out of ISRs; returns the partitions
        it still leads (none once every one had another in-sync replica)."""
        shutdown = self._controlled_shutdown_manager.process_controlled_shutdown
        return self._call("ControlledShutdown", lambda: shutdown(broker_id))

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

    def _process_auto_rebalance(self) -> None:
        """Every ``leader.imbalance.check.interval.seconds`` (see ``auto_leader_rebalance``)."""
        self._next_rebalance_s = time.monotonic() + self.config.leader_imbalance_check_interval_s
        if not self.is_active:
            return
        auto_leader_rebalance.check_and_trigger_auto_leader_rebalance(
            self.context,
            self._partition_state_machine,
            leader_imbalance_per_broker_percentage=self.config.leader_imbalance_per_broker_percentage,
        )

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
        self._partition_state_machine.trigger_online_partition_state_change()
        # Kafka's replicaStateMachine.startup: replicas on brokers that are not alive go
        # offline, so they leave the ISRs (a broker that died with the last controller, or
        # whose session expired before this one was elected, had no broker change to tell)
        in_isrs = {b for state in ctx.states.values() for b in state.isr}
        gone = sorted(in_isrs - set(ctx.live_brokers))
        if gone:
            logger.info("replicas on brokers that are not alive leave the ISRs, brokers=%s", gone)
            self._on_brokers_failure(gone)
        # Kafka's initializePartitionReassignments: those asked in ZooKeeper meanwhile first
        zk_resumed = self._reassignment_manager.process_zk_partition_reassignment()
        self._reassignment_manager.maybe_resume_reassignments(
            lambda tp, _assignment: tp not in zk_resumed
        )
        self._topic_deletion_manager.resume_deletions()
        self._controlled_shutdown_manager.process_controlled_shutdown_requests()
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
        self._enqueue("TopicDeletion", self._topic_deletion_manager.resume_deletions)

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
        self._partition_state_machine.trigger_online_partition_state_change()
        started = set(new) | set(bounced)
        if started:  # Kafka's onBrokerStartup: their reassignments go on
            self._reassignment_manager.maybe_resume_reassignments(
                lambda _tp, a: bool(started & set(a.replicas))
            )

    def _on_brokers_failure(self, dead: list[int]) -> None:
        """Partitions they led get new leaders (or go offline); they leave every ISR. The
        states are read again first: a leader that took a returning replica back into its
        ISR wrote that itself, and a stale copy would keep the dead replica in the ISR."""
        ctx = self.context
        self._partition_state_machine.refresh_states(
            tp for broker_id in dead for tp in ctx.partitions_on_broker(broker_id)
        )
        self._partition_state_machine.trigger_online_partition_state_change()
        for broker_id in dead:
            self._replica_state_machine.handle_offline_broker(broker_id)

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
            self._partition_state_machine.trigger_online_partition_state_change()

    def _process_partition_change(self, topic: str) -> None:
        if not self.is_active or topic not in self.context.topic_ids:
            return
        added = self._load_topic(topic)
        if added and topic in self.context.topics_to_delete:
            logger.warning("partitions added to a topic being deleted are ignored, topic=%s", topic)
            return
        if added:
            self._partition_state_machine.trigger_online_partition_state_change()

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

    def _epoch(self) -> ControllerEpoch:
        epoch = self.context.epoch
        if epoch is None or not self.is_active:
            raise ControllerMovedError(f"broker {self.broker_id} is not the controller")
        return epoch
