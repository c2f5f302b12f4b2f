"""``ControllerZkClient``: the controller's side of ``KafkaZkClient``: its election (Kafka's
``registerControllerAndIncrementControllerEpoch``, ``getControllerEpoch``, ``getControllerId``,
``deleteController``) and the writes only the active controller makes, each with the
``/controller_epoch`` check Kafka wraps around every controller write (assignments, partition
states, the reassignment znode, a deleted topic's znodes). It sits on ``ZooKeeperClient``'s
session; ``KafkaZkClient`` adds what every broker reads and writes.

Fencing, the rule that keeps two controllers from acting together:

- A broker becomes controller by one ZooKeeper transaction that creates the ephemeral
  ``/controller`` and sets ``/controller_epoch`` to epoch + 1 at the version it read. Losing
  the race (the node exists, or the version moved) raises ``ControllerMovedError``.
- Every later controller write is a transaction that first checks ``/controller_epoch`` at the
  version the controller wrote. A deposed controller (its session expired and another won)
  fails that check and gets ``ControllerMovedError``; it never half-writes.
- Partition states are set at the znode version last read: a writer with a stale view gets
  the partition back in ``retry`` (Kafka's BADVERSION path) and rereads.

Writes of many partitions (a topic's first states, the elections of a broker's failure or
controlled shutdown, ISR shrinks) are sent pipelined (``pipelined_requests``), as Kafka's
``KafkaZkClient`` sends its ``Seq`` of requests: each partition's write is still its own
transaction with the epoch check, so one partition's BADVERSION leaves the others written.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from kazoo.exceptions import (
    BadVersionError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    RolledBackError,
)

from storage_core.common import TopicPartition
from storage_core.errors import StorageError
from storage_core.zk import zk_data
from storage_core.zk.pipelined_requests import send_pipelined
from storage_core.zk.zk_data import ControllerRegistration, LeaderAndIsr, TopicAssignment
from storage_core.zk.zookeeper_client import Watch, ZooKeeperClient

Op = tuple[str, tuple[Any, ...]]  # a transaction's operation: its name and arguments
# operations joined into one multi-op transaction: 200 partition states of ~150 bytes, well
# under ZooKeeper's jute.maxbuffer (1 MiB) for the request
MAX_OPS_PER_TRANSACTION = 200

# passes of a subtree deletion before a subtree that keeps growing is reported: brokers add
# at most one acknowledgement each to a deletion marker
DELETE_TREE_PASSES = 5


class ControllerMovedError(StorageError):
    """This broker is not (or no longer) the controller: another broker won the election or
    the controller epoch moved past the one this broker wrote."""

    error_code: ClassVar[str] = "not_controller"


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


class ControllerZkClient(ZooKeeperClient):
    """The controller election and the epoch every controller write is fenced on."""

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

    def _fenced(self, epoch: ControllerEpoch, ops: Iterable[Op]) -> list[Any]:
        """Run ``ops`` in one transaction after checking ``/controller_epoch`` is still at the
        version this controller wrote. Returns each op's result (an exception where it failed)."""
        return self._fenced_pipelined(epoch, [list(ops)])[0]

    def _fenced_pipelined(
        self, epoch: ControllerEpoch | None, transactions: list[list[Op]]
    ) -> list[list[Any]]:
        """Each of ``transactions`` as its own transaction, all sent pipelined; each one checks
        ``/controller_epoch`` first (``epoch`` None: unchecked, only where no controller runs).
        Returns each transaction's results (an exception where an op failed); raises
        ``ControllerMovedError`` if any check failed, once every answer is in."""

        def start(ops: list[Op]) -> Callable[[], Any]:
            def send() -> Any:
                transaction = self.zk.transaction()
                if epoch is not None:
                    transaction.check(zk_data.CONTROLLER_EPOCH_PATH, epoch.zk_version)
                for name, args in ops:
                    getattr(transaction, name)(*args)
                return transaction.commit_async()

            return send

        answers = send_pipelined(self.zk, [start(ops) for ops in transactions])
        if epoch is None:
            return [list(results) for results in answers]
        if any(isinstance(results[0], BadVersionError | NoNodeError) for results in answers):
            raise ControllerMovedError(
                f"controller epoch {epoch.epoch} was superseded (/controller_epoch is no longer "
                f"at version {epoch.zk_version}): another broker is controller"
            )
        return [list(results[1:]) for results in answers]

    def _fenced_batched(
        self, epoch: ControllerEpoch | None, transactions: list[list[Op]]
    ) -> list[list[Any]]:
        """As ``_fenced_pipelined``, with the transactions joined into multi-op transactions of
        at most ``MAX_OPS_PER_TRANSACTION`` operations (and the epoch check), all pipelined.
        Fewer, larger requests: each of kazoo's requests and answers takes its connection
        thread several hand-overs of the interpreter lock, slow while the broker's other
        threads are busy. A joined transaction is all or nothing: where one of its operations
        fails (a state that moved, a znode that exists), its transactions are sent again each
        on its own, so each gets its own outcome as if it had been sent alone."""
        if not transactions:
            return []
        batches: list[list[int]] = [[]]
        ops_in_batch = 0
        for index, ops in enumerate(transactions):
            if batches[-1] and ops_in_batch + len(ops) > MAX_OPS_PER_TRANSACTION:
                batches.append([])
                ops_in_batch = 0
            batches[-1].append(index)
            ops_in_batch += len(ops)
        joined = [[op for index in batch for op in transactions[index]] for batch in batches]
        answers = self._fenced_pipelined(epoch, joined)
        results: list[list[Any]] = [[] for _ in transactions]
        alone: list[int] = []
        for batch, answer in zip(batches, answers, strict=True):
            if any(isinstance(result, Exception) for result in answer):
                alone.extend(batch)
                continue
            offset = 0
            for index in batch:
                count = len(transactions[index])
                results[index] = answer[offset : offset + count]
                offset += count
        if alone:
            singles = self._fenced_pipelined(epoch, [transactions[index] for index in alone])
            for index, single in zip(alone, singles, strict=True):
                results[index] = single
        return results

    # --- the controller's writes ---------------------------------------------------------

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

    def create_partition_states(
        self, epoch: ControllerEpoch | None, states: Mapping[TopicPartition, LeaderAndIsr]
    ) -> dict[TopicPartition, LeaderAndIsr]:
        """Create new partitions' state znodes (with their parents), fenced (``None``: only
        when no controller runs, as when a broker moves its old metadata in before starting
        one); returns the ones created (version 0). An existing state is left as it is.

        Kafka's ``createTopicPartitionStatesRaw``: ``/brokers/topics/<t>/partitions`` once per
        topic, then each partition's znode and its state in one transaction, all pipelined;
        a partition whose znode exists already (a controller that died midway) gets its
        state in a second pipelined pass."""
        for topic in sorted({tp.topic for tp in states}):
            self.zk.ensure_path(zk_data.partitions_path(topic))
        pending = list(states)
        created: dict[TopicPartition, LeaderAndIsr] = {}
        with_parent = self._fenced_batched(
            epoch,
            [
                [
                    ("create", (zk_data.partition_state_path(tp).rsplit("/", 1)[0], b"")),
                    _create_state(tp, states[tp]),
                ]
                for tp in pending
            ],
        )
        parent_exists = []
        for tp, (parent, state) in zip(pending, with_parent, strict=True):
            if isinstance(parent, NodeExistsError):
                parent_exists.append(tp)
            elif isinstance(parent, Exception):
                raise parent
            elif isinstance(state, Exception):
                raise state
            else:
                created[tp] = _with_version(states[tp], 0)
        alone = self._fenced_batched(
            epoch, [[_create_state(tp, states[tp])] for tp in parent_exists]
        )
        for tp, (result,) in zip(parent_exists, alone, strict=True):
            if isinstance(result, NodeExistsError):
                continue
            if isinstance(result, Exception):
                raise result
            created[tp] = _with_version(states[tp], 0)
        return created

    def update_leader_and_isr(
        self, epoch: ControllerEpoch, states: Mapping[TopicPartition, LeaderAndIsr]
    ) -> UpdateLeaderAndIsrResult:
        """Set each state at the znode version it carries, fenced by the controller epoch
        (Kafka's ``updateLeaderAndIsr``: one conditional set per partition, all pipelined)."""
        finished = {}
        retry = []
        written = self._fenced_batched(
            epoch,
            [
                [
                    (
                        "set_data",
                        (
                            zk_data.partition_state_path(tp),
                            zk_data.encode_leader_and_isr(state),
                            state.zk_version,
                        ),
                    )
                ]
                for tp, state in states.items()
            ],
        )
        for (tp, state), (outcome,) in zip(states.items(), written, strict=True):
            if isinstance(outcome, BadVersionError | NoNodeError):
                retry.append(tp)
            elif isinstance(outcome, Exception):
                raise outcome
            else:
                finished[tp] = _with_version(state, int(outcome.version))
        return UpdateLeaderAndIsrResult(finished=finished, retry=tuple(retry))

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


def _create_state(tp: TopicPartition, state: LeaderAndIsr) -> Op:
    return ("create", (zk_data.partition_state_path(tp), zk_data.encode_leader_and_isr(state)))


def _with_version(state: LeaderAndIsr, zk_version: int) -> LeaderAndIsr:
    return LeaderAndIsr(
        leader=state.leader,
        leader_epoch=state.leader_epoch,
        isr=state.isr,
        controller_epoch=state.controller_epoch,
        zk_version=zk_version,
    )
