"""``KafkaZkClient``: the reads and writes the brokers and the controller make in ZooKeeper,
as Kafka's class of that name does them, over a kazoo session. Consensus is ZooKeeper's: this
class only lays data out (``zk_data``) and makes each write conditional where Kafka does.

A broker's registration, ``/brokers/ids/<id>``, is an ephemeral znode that lives as long as
the session that made it. A broker killed without closing its session (SIGKILL, a crashed
host) leaves it behind until ZooKeeper expires the session, ``zookeeper.session.timeout.ms``
after the last heartbeat. ``register_broker`` refuses a registration held by another session
at once (another live broker has this ``broker.id``) unless the caller vouches that the
holder is this broker's previous run (``previous_run_wait_ms``, given when the holder has this
broker's endpoints and the log dirs were already this broker's); then it waits, that long at
most, for ZooKeeper to delete the holder's znode, and registers. It never deletes another
session's registration: a holder that is in fact alive keeps it, and the wait ends in the
same refusal.

The session is ``ZooKeeperClient``'s (zookeeper_client); the controller's election, the
fencing rule and the writes only the controller makes are ``ControllerZkClient``'s
(controller_zk), the base this class adds what every broker reads and writes to.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Self

from kazoo.exceptions import (
    BadVersionError,
    NodeExistsError,
    NoNodeError,
)

from storage_core.common import TopicPartition
from storage_core.errors import StorageError
from storage_core.zk import zk_data
from storage_core.zk.controller_zk import ControllerEpoch, ControllerZkClient
from storage_core.zk.pipelined_requests import send_pipelined
from storage_core.zk.zk_data import (
    BrokerRegistration,
    LeaderAndIsr,
    ProducerIdBlock,
    TopicAssignment,
)
from storage_core.zk.zookeeper_client import Watch

# the logger keeps the name it had before kafka.zk became its own package
logger = logging.getLogger("storage_core.controller.kafka_zk_client")


class BrokerIdInUseError(StorageError):
    """Another live broker is registered under this ``broker.id``; ``holder`` is its
    registration (endpoints) as ZooKeeper holds it."""

    def __init__(self, message: str, *, holder: BrokerRegistration) -> None:
        super().__init__(message)
        self.holder = holder


class KafkaZkClient(ControllerZkClient):
    """One ZooKeeper session of a broker (its registration and, while it is controller, the
    controller's writes)."""

    def start(self) -> Self:
        """Open the session (``ZooKeeperClient.start``: the chroot first) and create Kafka's
        persistent paths."""
        super().start()
        for path in zk_data.PERSISTENT_PATHS:
            self.zk.ensure_path(path)
        return self

    # --- cluster id -------------------------------------------------------------------------

    def get_or_create_cluster_id(self, proposed: str) -> str:
        try:
            self.zk.create(zk_data.CLUSTER_ID_PATH, zk_data.encode_cluster_id(proposed))
            return proposed
        except NodeExistsError:
            data, _ = self.zk.get(zk_data.CLUSTER_ID_PATH)
            return zk_data.decode_cluster_id(data)

    # --- producer ids -----------------------------------------------------------------------

    def allocate_producer_id_block(
        self, broker_id: int, block_size: int, *, first_id_at_least: int = 0
    ) -> ProducerIdBlock:
        """The next block of producer ids for this broker, unique in the cluster (Kafka's
        ZkProducerIdManager): ``/latest_producer_id_block`` moves on by a conditional write,
        retried when another broker took a block meanwhile."""
        while True:
            try:
                data, stat = self.zk.get(zk_data.PRODUCER_ID_BLOCK_PATH)
            except NoNodeError:
                start = first_id_at_least
                block = ProducerIdBlock(
                    broker_id=broker_id, block_start=start, block_end=start + block_size - 1
                )
                try:
                    self.zk.create(
                        zk_data.PRODUCER_ID_BLOCK_PATH, zk_data.encode_producer_id_block(block)
                    )
                    return block
                except NodeExistsError:
                    continue
            previous = zk_data.decode_producer_id_block(data)
            start = max(previous.block_end + 1, first_id_at_least)
            block = ProducerIdBlock(
                broker_id=broker_id, block_start=start, block_end=start + block_size - 1
            )
            try:
                self.zk.set(
                    zk_data.PRODUCER_ID_BLOCK_PATH,
                    zk_data.encode_producer_id_block(block),
                    version=stat.version,
                )
                return block
            except BadVersionError:
                continue

    # --- brokers ----------------------------------------------------------------------------

    def register_broker(
        self, registration: BrokerRegistration, *, previous_run_wait_ms: int = 0
    ) -> int:
        """Create the ephemeral ``/brokers/ids/<id>``; returns the broker epoch (its czxid).
        A registration held by another session is another live broker: refused
        (``BrokerIdInUseError``), at once unless it has ``registration``'s endpoints and
        ``previous_run_wait_ms`` > 0 (the caller found it to be this broker's previous run:
        its session expires within the session timeout); then refused only if it is still
        there after that long."""
        path = zk_data.broker_path(registration.broker_id)
        waiting_since: float | None = None
        while True:
            try:
                _, stat = self.zk.create(
                    path, zk_data.encode_broker(registration), ephemeral=True, include_data=True
                )
                if waiting_since is not None:
                    logger.info(
                        "the previous run's registration expired, registered broker_id=%d"
                        " waited_s=%.1f",
                        registration.broker_id,
                        time.monotonic() - waiting_since,
                    )
                return int(stat.czxid)
            except NodeExistsError:
                pass
            gone = threading.Event()
            try:
                data, stat = self.zk.get(path, watch=_setter(gone))
            except NoNodeError:
                continue  # deleted since the create: try again
            if stat.ephemeralOwner == self.session_id:
                return int(stat.czxid)  # ours: a retried create after a reconnect
            holder = zk_data.decode_broker(registration.broker_id, data)
            session = f"0x{stat.ephemeralOwner:x}"
            held = (
                f"broker.id={registration.broker_id} is already registered in ZooKeeper by a "
                f"live broker at {_endpoints(holder)} ({path}, session {session})"
            )
            if previous_run_wait_ms <= 0 or set(holder.endpoints) != set(registration.endpoints):
                raise BrokerIdInUseError(
                    f"{held}; give this broker another broker.id", holder=holder
                )
            now = time.monotonic()
            if waiting_since is None:
                waiting_since = now
                until = datetime.datetime.now(datetime.UTC) + datetime.timedelta(
                    milliseconds=previous_run_wait_ms
                )
                logger.warning(
                    "broker.id=%d is registered at this broker's endpoints %s by the session"
                    " of its previous run, which ZooKeeper keeps until it expires: waiting for"
                    " it session=%s path=%s deadline=%s wait_ms_max=%d",
                    registration.broker_id,
                    _endpoints(holder),
                    session,
                    path,
                    until.isoformat(timespec="milliseconds"),
                    previous_run_wait_ms,
                )
            deadline = waiting_since + previous_run_wait_ms / 1000
            if now >= deadline:
                raise BrokerIdInUseError(
                    f"{held}, still after waiting {previous_run_wait_ms} ms for that session to"
                    " expire as the session of a stopped earlier run of this broker would:"
                    " another broker with this broker.id and endpoint is running; stop it or"
                    " give this broker another broker.id",
                    holder=holder,
                )
            gone.wait(deadline - now)

    def get_all_brokers(self, watch: Watch | None = None) -> dict[int, BrokerRegistration]:
        """Every registered broker; ``watch`` fires once when the set of registrations changes."""
        brokers = {}
        for child in self.zk.get_children(zk_data.BROKER_IDS_PATH, watch=watch):
            try:
                data, stat = self.zk.get(f"{zk_data.BROKER_IDS_PATH}/{child}")
            except NoNodeError:
                continue  # went away between the listing and the read
            broker_id = int(child)
            brokers[broker_id] = zk_data.decode_broker(broker_id, data, czxid=stat.czxid)
        return brokers

    def request_controlled_shutdown(self, broker_id: int, broker_epoch: int) -> None:
        """Ask the controller to move this broker's leaderships away before it stops. Asking
        again (a retry, as Kafka's broker sends ControlledShutdown again) replaces the request
        with a new znode: the controller serves each request znode once."""
        path = f"{zk_data.CONTROLLED_SHUTDOWN_PATH}/{broker_id}"
        with contextlib.suppress(NoNodeError):
            self.zk.delete(path)
        with contextlib.suppress(NodeExistsError):
            self.zk.create(path, str(broker_epoch).encode("ascii"), ephemeral=True)

    def get_controlled_shutdown_requests(
        self, watch: Watch | None = None
    ) -> dict[int, tuple[int, int]]:
        """Broker id -> (broker epoch, the request znode's czxid) of the brokers asking to
        shut down; a request asked again has a new czxid."""
        requests = {}
        for child in self.zk.get_children(zk_data.CONTROLLED_SHUTDOWN_PATH, watch=watch):
            try:
                data, stat = self.zk.get(f"{zk_data.CONTROLLED_SHUTDOWN_PATH}/{child}")
            except NoNodeError:
                continue
            text = data.decode("ascii", errors="replace").strip()
            if child.isdigit() and text.lstrip("-").isdigit():
                requests[int(child)] = (int(text), int(stat.czxid))
        return requests

    # --- topics -----------------------------------------------------------------------------

    def get_all_topics(self, watch: Watch | None = None) -> list[str]:
        return sorted(self.zk.get_children(zk_data.TOPICS_PATH, watch=watch))

    def get_topic_assignment(
        self, topic: str, watch: Watch | None = None
    ) -> tuple[TopicAssignment, int] | None:
        """The assignment and its znode version, or None for an unknown topic; ``watch`` fires
        once when the assignment changes (partitions added) or the topic goes."""
        try:
            data, stat = self.zk.get(zk_data.topic_path(topic), watch=watch)
        except NoNodeError:
            return None
        return zk_data.decode_topic_assignment(topic, data), int(stat.version)

    def get_topic_config(self, topic: str) -> dict[str, str]:
        try:
            data, _ = self.zk.get(zk_data.topic_config_path(topic))
        except NoNodeError:
            return {}
        return zk_data.decode_topic_config(topic, data)

    def create_topic(
        self,
        epoch: ControllerEpoch | None,
        assignment: TopicAssignment,
        configs: Mapping[str, str],
    ) -> bool:
        """Create the topic's config and assignment znodes in one transaction, fenced by the
        controller's epoch (``None``: unfenced, as Kafka's AdminZkClient writes a topic that a
        broker creates on its own, e.g. automatically; the controller then gives its partitions
        their states). False if the topic already exists (nothing written)."""
        ops = [
            (
                "create",
                (zk_data.topic_config_path(assignment.topic), zk_data.encode_topic_config(configs)),
            ),
            (
                "create",
                (zk_data.topic_path(assignment.topic), zk_data.encode_topic_assignment(assignment)),
            ),
        ]
        if epoch is None:
            transaction = self.zk.transaction()
            for name, args in ops:
                getattr(transaction, name)(*args)
            results = list(transaction.commit())
        else:
            results = self._fenced(epoch, ops)
        failures = [r for r in results if isinstance(r, Exception)]
        if any(isinstance(r, NodeExistsError) for r in failures):
            return False
        if failures:
            raise failures[0]
        return True

    def set_topic_config(self, topic: str, configs: Mapping[str, str]) -> None:
        self.zk.ensure_path(zk_data.TOPIC_CONFIGS_PATH)
        data = zk_data.encode_topic_config(configs)
        try:
            self.zk.set(zk_data.topic_config_path(topic), data)
        except NoNodeError:
            self.zk.create(zk_data.topic_config_path(topic), data)

    # --- partition states -------------------------------------------------------------------

    def get_partition_states(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, LeaderAndIsr]:
        """State (with znode version) of each partition that has one (Kafka's
        ``getTopicPartitionStatesRaw``, here in multiRead requests of many states each)."""
        wanted = list(partitions)
        answers = self.get_data_many([zk_data.partition_state_path(tp) for tp in wanted])
        states = {}
        for tp, answer in zip(wanted, answers, strict=True):
            if isinstance(answer, NoNodeError):
                continue
            data, stat = answer
            states[tp] = zk_data.decode_leader_and_isr(tp, data, zk_version=stat.version)
        return states

    def get_partition_state(self, tp: TopicPartition, watch: Watch) -> LeaderAndIsr | None:
        """One partition's state, or None; ``watch`` fires once when the state znode is
        created, changed or deleted (Kafka's PartitionReassignmentIsrChangeHandler)."""
        path = zk_data.partition_state_path(tp)
        if self.zk.exists(path, watch=watch) is None:
            return None
        try:
            data, stat = self.zk.get(path, watch=watch)
        except NoNodeError:
            return None
        return zk_data.decode_leader_and_isr(tp, data, zk_version=stat.version)

    def update_isrs_as_leader(
        self, states: Sequence[tuple[TopicPartition, LeaderAndIsr]]
    ) -> list[int | None]:
        """Partition leaders' ISR changes (Kafka's ZooKeeper-mode ``ReplicationUtils.
        updateLeaderAndIsr``), each written only if its state znode is still at
        ``state.zk_version``, so that a change by the controller (a new leader, a dead broker
        removed) or by a deposed leader wins over nothing; not fenced by the controller epoch
        (the leader is not the controller). The writes are sent pipelined. Returns each
        partition's new znode version, or None where its state moved on."""

        def start(tp: TopicPartition, state: LeaderAndIsr) -> Callable[[], Any]:
            def send() -> Any:
                transaction = self.zk.transaction()  # one conditional set, as a request
                path = zk_data.partition_state_path(tp)
                transaction.set_data(path, zk_data.encode_leader_and_isr(state), state.zk_version)
                return transaction.commit_async()

            return send

        answers = send_pipelined(self.zk, [start(tp, state) for tp, state in states])
        return [
            None if isinstance(results[0], BadVersionError | NoNodeError) else results[0].version
            for results in answers
        ]

    # --- reassignments asked through ZooKeeper ----------------------------------------------

    def get_partition_reassignment(
        self, watch: Watch | None = None
    ) -> dict[TopicPartition, tuple[int, ...]] | None:
        """``/admin/reassign_partitions``, or None when absent; ``watch`` fires once when it is
        created, changed or deleted."""
        if self.zk.exists(zk_data.REASSIGN_PARTITIONS_PATH, watch=watch) is None:
            return None
        try:
            data, _ = self.zk.get(zk_data.REASSIGN_PARTITIONS_PATH)
        except NoNodeError:
            return None
        return zk_data.decode_partition_reassignment(data)

    # --- topic deletion ---------------------------------------------------------------------

    def mark_topic_for_deletion(self, topic: str) -> None:
        with contextlib.suppress(NodeExistsError):
            self.zk.create(zk_data.delete_topic_path(topic))

    def get_topics_marked_for_deletion(self, watch: Watch | None = None) -> list[str]:
        return sorted(self.zk.get_children(zk_data.DELETE_TOPICS_PATH, watch=watch))

    def get_deletion_markers(self, watch: Watch | None = None) -> dict[str, int]:
        """Each topic marked for deletion with its marker's creation zxid: a topic deleted,
        made again and marked again between two reads has the same name and a new marker."""
        markers = {}
        for topic in self.get_topics_marked_for_deletion(watch=watch):
            stat = self.zk.exists(zk_data.delete_topic_path(topic))
            if stat is not None:  # else deleted since the listing
                markers[topic] = stat.czxid
        return markers

    def acknowledge_topic_deletion(self, topic: str, broker_id: int) -> None:
        """A broker has removed its replicas of a topic marked for deletion (the role of a
        StopReplica response in Kafka): ``/admin/delete_topics/<topic>/<broker id>``."""
        with contextlib.suppress(NodeExistsError, NoNodeError):
            self.zk.create(f"{zk_data.delete_topic_path(topic)}/{broker_id}")

    def get_topic_deletion_acknowledgements(
        self, topic: str, watch: Watch | None = None
    ) -> set[int]:
        try:
            children = self.zk.get_children(zk_data.delete_topic_path(topic), watch=watch)
        except NoNodeError:
            return set()
        return {int(c) for c in children if c.isdigit()}


def _setter(event: threading.Event) -> Watch:
    """A watch that sets ``event`` when it fires."""
    return lambda _event: event.set()


def _endpoints(registration: BrokerRegistration) -> str:
    return ", ".join(e.connection_string() for e in registration.endpoints)
