"""``KafkaZkClient``: the reads and writes the brokers and the controller make in ZooKeeper,
as Kafka's class of that name does them, over a kazoo session. Consensus is ZooKeeper's: this
class only lays data out (``zk_data``) and makes each write conditional where Kafka does.

Fencing, the rule that keeps two controllers from acting together:

- A broker becomes controller by one ZooKeeper transaction that creates the ephemeral
  ``/controller`` and sets ``/controller_epoch`` to epoch + 1 at the version it read. Losing
  the race (the node exists, or the version moved) raises ``ControllerMovedError``.
- Every later controller write is a transaction that first checks ``/controller_epoch`` at the
  version the controller wrote. A deposed controller (its session expired and another won)
  fails that check and gets ``ControllerMovedError``; it never half-writes.
- Partition states are set at the znode version last read: a writer with a stale view gets
  the partition back in ``retry`` (Kafka's BADVERSION path) and rereads.

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

``zookeeper.connect`` may end in a chroot (``127.0.0.1:2181/storage-core``), created on first
use as Kafka does. Thread-safety: kazoo's client is thread-safe; this class keeps no state but
the session it opened.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadVersionError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    RolledBackError,
)
from kazoo.handlers.threading import KazooTimeoutError

from storage_core.common import TopicPartition
from storage_core.errors import StorageError
from storage_core.zk import zk_data
from storage_core.zk.local_znode_tree import LocalZNodeTree
from storage_core.zk.zk_data import (
    BrokerRegistration,
    ControllerRegistration,
    LeaderAndIsr,
    ProducerIdBlock,
    TopicAssignment,
)

Watch = Callable[[Any], None]  # called once with the ZooKeeper event that fired it

# the logger keeps the name it had before kafka.zk became its own package
logger = logging.getLogger("storage_core.controller.kafka_zk_client")

# passes of a subtree deletion before a subtree that keeps growing is reported: brokers add
# at most one acknowledgement each to a deletion marker
DELETE_TREE_PASSES = 5


class ZooKeeperConnectionError(StorageError):
    """ZooKeeper could not be reached, or the session could not be opened in time."""


class ControllerMovedError(StorageError):
    """This broker is not (or no longer) the controller: another broker won the election or
    the controller epoch moved past the one this broker wrote."""

    error_code: ClassVar[str] = "not_controller"


class BrokerIdInUseError(StorageError):
    """Another live broker is registered under this ``broker.id``; ``holder`` is its
    registration (endpoints) as ZooKeeper holds it."""

    def __init__(self, message: str, *, holder: BrokerRegistration) -> None:
        super().__init__(message)
        self.holder = holder


@dataclass(frozen=True, slots=True, kw_only=True)
class ControllerEpoch:
    """The epoch this controller wrote and the znode version its writes are fenced on."""

    epoch: int
    zk_version: int


@dataclass(frozen=True, slots=True, kw_only=True)
class UpdateLeaderAndIsrResult:
    """States written (with their new znode versions) and partitions whose znode moved since it
    was read (reread and retry)."""

    finished: Mapping[TopicPartition, LeaderAndIsr]
    retry: tuple[TopicPartition, ...]


def split_chroot(connect: str) -> tuple[str, str]:
    """``"h1:2181,h2:2181/chroot"`` -> ``("h1:2181,h2:2181", "/chroot")``; chroot "" if none."""
    hosts, slash, chroot = connect.partition("/")
    if not hosts:
        raise ZooKeeperConnectionError(f"zookeeper.connect={connect!r} names no server")
    chroot = f"/{chroot}".rstrip("/") if slash else ""
    return hosts, chroot


class KafkaZkClient:
    """One ZooKeeper session of a broker (its registration and, while it is controller, the
    controller's writes)."""

    def __init__(
        self,
        connect: str,
        *,
        session_timeout_ms: int = 18_000,
        connection_timeout_ms: int = 18_000,
        session: Any = None,
    ) -> None:
        """``session``: a client with kazoo's API other than a ZooKeeper connection (the
        single-node store's, see ``single_node``); by default a kazoo session to ``connect``."""
        self.connect = connect
        self.session_timeout_ms = session_timeout_ms
        self.connection_timeout_ms = connection_timeout_ms
        if session is not None:
            self.hosts, self.chroot = connect, ""
            self.zk: Any = session
            return
        self.hosts, self.chroot = split_chroot(connect)
        self.zk = KazooClient(
            hosts=connect,
            timeout=session_timeout_ms / 1000,
            connection_retry={"max_tries": -1, "max_delay": 1.0},
            command_retry={"max_tries": 3, "max_delay": 1.0},
        )

    @classmethod
    def single_node(cls, tree: LocalZNodeTree) -> KafkaZkClient:
        """A session on the single-node store of a broker without ``zookeeper.connect``."""
        return cls(f"single-node store {tree.location}", session=tree.session())

    def start(self) -> KafkaZkClient:
        """Open the session (bounded by ``zookeeper.connection.timeout.ms``), create the chroot
        and Kafka's persistent paths."""
        if self.chroot:
            self._ensure_chroot()
        self._start(self.zk)
        for path in zk_data.PERSISTENT_PATHS:
            self.zk.ensure_path(path)
        return self

    def _start(self, client: Any) -> None:
        try:
            client.start(timeout=self.connection_timeout_ms / 1000)
        except KazooTimeoutError:
            client.stop()
            client.close()
            raise ZooKeeperConnectionError(
                f"could not connect to ZooKeeper at zookeeper.connect={self.connect} within "
                f"zookeeper.connection.timeout.ms={self.connection_timeout_ms}"
            ) from None

    def _ensure_chroot(self) -> None:
        root = KazooClient(hosts=self.hosts, timeout=self.session_timeout_ms / 1000)
        self._start(root)
        try:
            root.ensure_path(self.chroot)
        finally:
            root.stop()
            root.close()

    def close(self) -> None:
        self.zk.stop()
        self.zk.close()

    @property
    def session_id(self) -> int:
        session = self.zk.client_id
        return int(session[0]) if session else 0

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
        """Ask the controller to move this broker's leaderships away before it stops."""
        with contextlib.suppress(NodeExistsError):
            self.zk.create(
                f"{zk_data.CONTROLLED_SHUTDOWN_PATH}/{broker_id}",
                str(broker_epoch).encode("ascii"),
                ephemeral=True,
            )

    def get_controlled_shutdown_requests(self, watch: Watch | None = None) -> dict[int, int]:
        """Broker id -> broker epoch of the brokers asking to shut down."""
        requests = {}
        for child in self.zk.get_children(zk_data.CONTROLLED_SHUTDOWN_PATH, watch=watch):
            try:
                data, _ = self.zk.get(f"{zk_data.CONTROLLED_SHUTDOWN_PATH}/{child}")
            except NoNodeError:
                continue
            text = data.decode("ascii", errors="replace").strip()
            if child.isdigit() and text.lstrip("-").isdigit():
                requests[int(child)] = int(text)
        return requests

    # --- controller -------------------------------------------------------------------------

    def get_controller(self, watch: Watch | None = None) -> ControllerRegistration | None:
        """The controller, or None; ``watch`` fires once when ``/controller`` is created,
        changed or deleted."""
        if watch is not None and self.zk.exists(zk_data.CONTROLLER_PATH, watch=watch) is None:
            return None
        try:
            data, stat = self.zk.get(zk_data.CONTROLLER_PATH)
        except NoNodeError:
            return None
        return zk_data.decode_controller(data, zk_version=stat.version)

    def get_controller_epoch(self) -> ControllerEpoch | None:
        try:
            data, stat = self.zk.get(zk_data.CONTROLLER_EPOCH_PATH)
        except NoNodeError:
            return None
        return ControllerEpoch(epoch=zk_data.decode_controller_epoch(data), zk_version=stat.version)

    def register_controller_and_increment_controller_epoch(
        self, broker_id: int, *, timestamp_ms: int = 0
    ) -> ControllerEpoch:
        """Win the controller election (or raise ``ControllerMovedError``)."""
        current = self.get_controller_epoch() or self._create_controller_epoch()
        new_epoch = current.epoch + 1
        transaction = self.zk.transaction()
        transaction.create(
            zk_data.CONTROLLER_PATH,
            zk_data.encode_controller(
                ControllerRegistration(broker_id=broker_id, timestamp_ms=timestamp_ms)
            ),
            ephemeral=True,
        )
        transaction.set_data(
            zk_data.CONTROLLER_EPOCH_PATH,
            zk_data.encode_controller_epoch(new_epoch),
            version=current.zk_version,
        )
        results = transaction.commit()
        if not any(isinstance(r, Exception) for r in results):
            return ControllerEpoch(epoch=new_epoch, zk_version=results[1].version)
        # lost a race, or a retried commit that did succeed: read back who won
        controller = self.get_controller()
        epoch = self.get_controller_epoch()
        if (
            controller is not None
            and controller.broker_id == broker_id
            and epoch is not None
            and epoch.epoch == new_epoch
        ):
            return epoch
        raise ControllerMovedError(
            f"broker {broker_id} lost the controller election "
            f"(controller: {controller.broker_id if controller else 'none'})"
        )

    def _create_controller_epoch(self) -> ControllerEpoch:
        with contextlib.suppress(NodeExistsError):
            self.zk.create(
                zk_data.CONTROLLER_EPOCH_PATH,
                zk_data.encode_controller_epoch(zk_data.INITIAL_CONTROLLER_EPOCH),
            )
        epoch = self.get_controller_epoch()
        if epoch is None:
            raise ControllerMovedError(f"{zk_data.CONTROLLER_EPOCH_PATH} vanished after creation")
        return epoch

    def resign_controller(self, broker_id: int) -> None:
        """Delete ``/controller`` if this broker holds it (a controlled resignation)."""
        controller = self.get_controller()
        if controller is None or controller.broker_id != broker_id:
            return
        with contextlib.suppress(NoNodeError, BadVersionError):
            self.zk.delete(zk_data.CONTROLLER_PATH, version=controller.zk_version)

    def _fenced(
        self, epoch: ControllerEpoch, ops: Iterable[tuple[str, tuple[Any, ...]]]
    ) -> list[Any]:
        """Run ``ops`` in one transaction after checking ``/controller_epoch`` is still at the
        version this controller wrote. Returns each op's result (an exception where it failed)."""
        transaction = self.zk.transaction()
        transaction.check(zk_data.CONTROLLER_EPOCH_PATH, epoch.zk_version)
        for name, args in ops:
            getattr(transaction, name)(*args)
        results = transaction.commit()
        if isinstance(results[0], BadVersionError | NoNodeError):
            raise ControllerMovedError(
                f"controller epoch {epoch.epoch} was superseded (/controller_epoch is no longer "
                f"at version {epoch.zk_version}): another broker is controller"
            )
        return list(results[1:])

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

    def set_topic_assignment(
        self, epoch: ControllerEpoch, assignment: TopicAssignment, *, expected_version: int
    ) -> bool:
        """Replace the assignment (partitions added, a reassignment); False if it moved."""
        results = self._fenced(
            epoch,
            [
                (
                    "set_data",
                    (
                        zk_data.topic_path(assignment.topic),
                        zk_data.encode_topic_assignment(assignment),
                        expected_version,
                    ),
                )
            ],
        )
        if isinstance(results[0], BadVersionError):
            return False
        if isinstance(results[0], Exception):
            raise results[0]
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
        """State (with znode version) of each partition that has one."""
        states = {}
        for tp in partitions:
            try:
                data, stat = self.zk.get(zk_data.partition_state_path(tp))
            except NoNodeError:
                continue
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

    def create_partition_states(
        self, epoch: ControllerEpoch | None, states: Mapping[TopicPartition, LeaderAndIsr]
    ) -> dict[TopicPartition, LeaderAndIsr]:
        """Create new partitions' state znodes (with their parents), fenced (``None``: only
        when no controller runs, as when a broker moves its old metadata in before starting
        one); returns the ones created (version 0). An existing state is left as it is."""
        created = {}
        for tp, state in states.items():
            self.zk.ensure_path(zk_data.partition_state_path(tp).rsplit("/", 1)[0])
            op = (zk_data.partition_state_path(tp), zk_data.encode_leader_and_isr(state))
            if epoch is None:
                transaction = self.zk.transaction()
                transaction.create(*op)
                results = list(transaction.commit())
            else:
                results = self._fenced(epoch, [("create", op)])
            if isinstance(results[0], NodeExistsError):
                continue
            if isinstance(results[0], Exception):
                raise results[0]
            created[tp] = _with_version(state, 0)
        return created

    def update_leader_and_isr(
        self, epoch: ControllerEpoch, states: Mapping[TopicPartition, LeaderAndIsr]
    ) -> UpdateLeaderAndIsrResult:
        """Set each state at the znode version it carries, fenced by the controller epoch."""
        finished = {}
        retry = []
        for tp, state in states.items():
            results = self._fenced(
                epoch,
                [
                    (
                        "set_data",
                        (
                            zk_data.partition_state_path(tp),
                            zk_data.encode_leader_and_isr(state),
                            state.zk_version,
                        ),
                    )
                ],
            )
            outcome = results[0]
            if isinstance(outcome, BadVersionError | NoNodeError):
                retry.append(tp)
            elif isinstance(outcome, Exception):
                raise outcome
            else:
                finished[tp] = _with_version(state, int(outcome.version))
        return UpdateLeaderAndIsrResult(finished=finished, retry=tuple(retry))

    def update_isr_as_leader(self, tp: TopicPartition, state: LeaderAndIsr) -> int | None:
        """A partition leader's ISR change (Kafka's ZooKeeper-mode ``ReplicationUtils.
        updateLeaderAndIsr``): written only if the state znode is still at ``state.zk_version``,
        so that a change by the controller (a new leader, a dead broker removed) or by a deposed
        leader wins over nothing. Returns the new znode version, or None if the state moved on.
        Not fenced by the controller epoch: the leader is not the controller."""
        try:
            stat = self.zk.set(
                zk_data.partition_state_path(tp),
                zk_data.encode_leader_and_isr(state),
                state.zk_version,
            )
        except (BadVersionError, NoNodeError):
            return None
        return int(stat.version)

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

    def set_or_create_partition_reassignment(
        self, epoch: ControllerEpoch, reassignments: Mapping[TopicPartition, Iterable[int]]
    ) -> None:
        """Rewrite the reassignments still asked (the controller removes those it is done
        with); fenced by the controller's epoch."""
        data = zk_data.encode_partition_reassignment(
            {tp: tuple(r) for tp, r in reassignments.items()}
        )
        results = self._fenced(epoch, [("set_data", (zk_data.REASSIGN_PARTITIONS_PATH, data, -1))])
        if isinstance(results[0], NoNodeError):
            results = self._fenced(epoch, [("create", (zk_data.REASSIGN_PARTITIONS_PATH, data))])
        if isinstance(results[0], Exception):
            raise results[0]

    def delete_partition_reassignment(self, epoch: ControllerEpoch) -> None:
        results = self._fenced(epoch, [("delete", (zk_data.REASSIGN_PARTITIONS_PATH,))])
        if isinstance(results[0], Exception) and not isinstance(results[0], NoNodeError):
            raise results[0]

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

    def add_session_listener(self, listener: Callable[[str], None]) -> None:
        """``listener(state)`` on every session state change: "CONNECTED", "SUSPENDED" (the
        connection is lost, the session may survive) or "LOST" (the session expired: its
        ephemeral znodes are gone). Called on the client's thread: hand work off quickly."""
        add = getattr(self.zk, "add_listener", None)
        if add is not None:
            add(lambda state: listener(str(state)))

    def delete_topic_znodes(self, epoch: ControllerEpoch, topic: str) -> None:
        """Remove the topic's assignment, partition states and config, then its deletion
        marker: the last step of a topic deletion, once every broker removed its logs."""
        self._delete_tree(epoch, zk_data.topic_path(topic))
        self._delete_tree(epoch, zk_data.topic_config_path(topic))
        self._delete_tree(epoch, zk_data.delete_topic_path(topic))  # with the acks

    def _delete_tree(self, epoch: ControllerEpoch, root: str) -> None:
        """Delete ``root`` and its descendants, deepest first, one fenced delete each. A child
        added meanwhile (every broker acknowledges a deletion, replica or not, and the last
        may do so after the replicas) is read and deleted on the next pass."""
        for _ in range(DELETE_TREE_PASSES):
            for path in self._subtree(root):
                outcome = self._fenced(epoch, [("delete", (path,))])[0]
                if isinstance(outcome, NotEmptyError):
                    break
                if isinstance(outcome, Exception) and not isinstance(
                    outcome, NoNodeError | RolledBackError
                ):
                    raise outcome
            else:
                return
        raise StorageError(f"{root} kept gaining children while it was being deleted")

    def _subtree(self, path: str) -> list[str]:
        """``path`` and its descendants, deepest first."""
        try:
            children = self.zk.get_children(path)
        except NoNodeError:
            return []
        paths: list[str] = []
        for child in children:
            paths.extend(self._subtree(f"{path}/{child}"))
        paths.append(path)
        return paths


def _setter(event: threading.Event) -> Watch:
    """A watch that sets ``event`` when it fires."""
    return lambda _event: event.set()


def _endpoints(registration: BrokerRegistration) -> str:
    return ", ".join(e.connection_string() for e in registration.endpoints)


def _with_version(state: LeaderAndIsr, zk_version: int) -> LeaderAndIsr:
    return LeaderAndIsr(
        leader=state.leader,
        leader_epoch=state.leader_epoch,
        isr=state.isr,
        controller_epoch=state.controller_epoch,
        zk_version=zk_version,
    )
