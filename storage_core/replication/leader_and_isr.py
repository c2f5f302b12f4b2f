"""Kafka's ``becomeLeaderOrFollower``, ``makeLeaders`` and ``makeFollowers`` (the LeaderAndIsr
path of ``ReplicaManager``), fed by ZooKeeper instead of LeaderAndIsr requests:
``ReplicaManager`` gets them from ``LeaderAndIsrMixin``, which names the state they use.

The controller's decisions for the partitions that changed (``PartitionState``) make this
broker host, lead, follow or stop hosting each of them; the follower side
(``ReplicaFetcherManager``) is stopped for partitions led here or no longer hosted and started
again from ``initial_fetch_offset`` for partitions whose leader or epoch changed.

Thread-safety: called from the metadata listener's thread; the partition map is guarded by
``ReplicaManager._lock``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from storage_core.clock import Clock
from storage_core.common import ZERO_UUID, TopicIdPartition, TopicPartition, Uuid
from storage_core.errors import InconsistentTopicIdError, StorageError
from storage_core.log.log_config import LogConfig
from storage_core.log.log_manager import LogManager
from storage_core.replication.fetch_state import InitialFetchState
from storage_core.replication.partition import IsrUpdateSubmitter, Partition
from storage_core.replication.remote_log_restore import (
    awaiting_restore,
    needs_restore,
    restore_from_remote_tier,
)
from storage_core.replication.replica_fetcher_thread import initial_fetch_offset
from storage_core.tiered.remote_log_manager import RemoteLogManager

# The lines keep the logger they were always written with.
logger = logging.getLogger("storage_core.replication.replica_manager")

LEADERSHIP_CHANGE_THREADS_MAX = 8
"""Partitions made leader or follower at once: a new leader's epoch is synced to its
leader-epoch-checkpoint before it serves, and on this machine 8 threads syncing side by side
took a sixth of the time of one syncing after another (the file system commits their
journal entries together). The rest of the work is Python's and runs one thread at a time."""

T = TypeVar("T")
R = TypeVar("R")


def _map_in_parallel(function: Callable[[T], R], items: Sequence[T]) -> list[R]:
    """``function`` over ``items``, on up to ``LEADERSHIP_CHANGE_THREADS_MAX`` threads; the
    results in the order of ``items``."""
    if len(items) <= 1:
        return [function(item) for item in items]
    workers = min(LEADERSHIP_CHANGE_THREADS_MAX, len(items))
    with ThreadPoolExecutor(workers, thread_name_prefix="leader-and-isr") as pool:
        return list(pool.map(function, items))


class PartitionState(Protocol):
    """What the controller decided for a partition (``MetadataCache``'s ``PartitionMetadata``)."""

    @property
    def replicas(self) -> tuple[int, ...]: ...
    @property
    def leader(self) -> int: ...
    @property
    def leader_epoch(self) -> int: ...
    @property
    def isr(self) -> tuple[int, ...]: ...
    @property
    def partition_epoch(self) -> int: ...
    @property
    def controller_epoch(self) -> int: ...


class FollowerFetchers(Protocol):
    """The follower side (``ReplicaFetcherManager``) as the ReplicaManager drives it."""

    def add_fetcher_for_partitions(
        self, partitions: Mapping[TopicPartition, InitialFetchState]
    ) -> None: ...
    def remove_fetcher_for_partitions(self, partitions: Iterable[TopicPartition]) -> object: ...
    def shutdown_idle_fetcher_threads(self) -> int: ...


@dataclass(slots=True)
class LeadershipChanges:
    """What ``become_leader_or_follower`` changed on this broker."""

    leaders: list[Partition] = field(default_factory=list)
    followers: list[Partition] = field(default_factory=list)
    stopped: list[TopicPartition] = field(default_factory=list)
    failed: list[TopicPartition] = field(default_factory=list)


class LeaderAndIsrMixin:
    """``ReplicaManager``'s ``become_leader_or_follower`` and its helpers; the attributes and
    methods below are ``ReplicaManager``'s (its partition map, guarded by ``_lock``)."""

    local_broker_id: int
    log_manager: LogManager
    clock: Clock
    replica_lag_time_max_ms: int
    submit_isr_update: IsrUpdateSubmitter | None
    replica_fetcher_manager: FollowerFetchers | None
    is_broker_alive: Callable[[int], bool] | None
    remote_log_manager: RemoteLogManager | None
    _lock: threading.RLock
    _partitions: dict[TopicPartition, Partition]
    _inconsistent_topic_ids: dict[TopicPartition, str]
    _follower_fetching_stopped: bool

    def add_partition(self, partition: Partition) -> None:
        raise NotImplementedError

    def remove_partition(self, tp: TopicPartition) -> Partition | None:
        raise NotImplementedError

    def on_high_watermark_advanced(self, tp: TopicPartition) -> None:
        raise NotImplementedError

    def _on_leadership_lost(self, tp: TopicPartition) -> None:
        raise NotImplementedError

    def become_leader_or_follower(
        self,
        changes: Mapping[TopicPartition, PartitionState | None],
        *,
        topic_ids: Mapping[str, Uuid | None],
        log_config: Callable[[str], LogConfig],
    ) -> LeadershipChanges:
        """Apply the controller's decisions for the partitions that changed (Kafka's
        ``becomeLeaderOrFollower``, fed by ZooKeeper instead of LeaderAndIsr requests): host
        the partitions assigned here (opening or creating their logs), lead those whose leader
        is this broker at the controller's epoch (no new epoch of its own: a restarted leader
        keeps the epoch it was given), follow the others, and stop hosting partitions no longer
        assigned here (their logs stay until the topic is deleted). A partition whose log
        cannot be opened, or holds another topic id, stays offline with an error line; nothing
        is deleted."""
        result = LeadershipChanges()
        fetchers = self.replica_fetcher_manager
        if fetchers is not None:
            # A partition led here or no longer hosted stops fetching before anything else
            # (Kafka's makeLeaders): no follower append may land once it leads.
            fetchers.remove_fetcher_for_partitions(
                [
                    tp
                    for tp, state in changes.items()
                    if state is None
                    or self.local_broker_id not in state.replicas
                    or state.leader == self.local_broker_id
                ]
            )
        hosted_here: list[tuple[TopicPartition, PartitionState]] = []
        for tp, state in sorted(changes.items()):
            if state is None or self.local_broker_id not in state.replicas:
                with self._lock:
                    self._inconsistent_topic_ids.pop(tp, None)
                if self.remove_partition(tp) is not None:
                    result.stopped.append(tp)
            else:
                hosted_here.append((tp, state))
        outcomes = _map_in_parallel(
            lambda change: self._host(*change, topic_ids, log_config), hosted_here
        )
        for (tp, _state), (role, partition) in zip(hosted_here, outcomes, strict=True):
            if partition is None:
                result.failed.append(tp)
            elif role == "leader":
                result.leaders.append(partition)
            elif role == "follower":
                result.followers.append(partition)
        if fetchers is not None:
            if result.followers:
                self._restart_fetchers(fetchers, result.followers)
            fetchers.shutdown_idle_fetcher_threads()
        return result

    def _host(
        self,
        tp: TopicPartition,
        state: PartitionState,
        topic_ids: Mapping[str, Uuid | None],
        log_config: Callable[[str], LogConfig],
    ) -> tuple[str, Partition | None]:
        """Host ``tp`` and lead or follow it as ``state`` says: ("leader", p) when it became
        leader, ("follower", p) when its leader or epoch changed or it is newly hosted,
        ("unchanged", p), or ("failed", None) when it stays offline."""
        try:
            with self._lock:
                partition = self._partitions.get(tp)
            hosted = partition is not None
            if partition is None:
                topic_id = topic_ids.get(tp.topic)
                log = self.log_manager.get_or_create_log(
                    tp, topic_id=topic_id, config=log_config(tp.topic)
                )
                if awaiting_restore(log):
                    logger.info(
                        "partition=%s stays offline until its restore from the remote tier"
                        " publishes its segments (remote.log.restore.enable)",
                        tp,
                    )
                    return "failed", None
                if needs_restore(log):
                    restore_from_remote_tier(
                        self.remote_log_manager,
                        TopicIdPartition(topic_id or log.topic_id or ZERO_UUID, tp),
                        log,
                    )
                partition = Partition(
                    tp,
                    topic_id or log.topic_id or ZERO_UUID,
                    log,
                    local_broker_id=self.local_broker_id,
                    on_high_watermark_advanced=self.on_high_watermark_advanced,
                    clock=self.clock,
                    replica_lag_time_max_ms=self.replica_lag_time_max_ms,
                    submit_isr_update=self.submit_isr_update,
                    is_broker_alive=self.is_broker_alive,
                )
            if state.leader == self.local_broker_id:
                role = "unchanged"
                if partition.make_leader(
                    leader_epoch=state.leader_epoch,
                    replicas=state.replicas,
                    isr=state.isr,
                    partition_epoch=state.partition_epoch,
                    controller_epoch=state.controller_epoch,
                ):
                    role = "leader"
            else:
                was_leader = partition.is_leader
                changed = partition.make_follower(
                    leader_id=state.leader,
                    leader_epoch=state.leader_epoch,
                    replicas=state.replicas,
                    isr=state.isr,
                    partition_epoch=state.partition_epoch,
                    controller_epoch=state.controller_epoch,
                )
                role = "follower" if changed or not hosted else "unchanged"
                if was_leader:  # parked fetches and acks=all produces answer at once
                    self._on_leadership_lost(tp)
            self.add_partition(partition)
            with self._lock:
                self._inconsistent_topic_ids.pop(tp, None)
            return role, partition
        except InconsistentTopicIdError:
            self._refuse_inconsistent_topic_id(tp, topic_ids.get(tp.topic))
            return "failed", None
        except StorageError as error:
            logger.error(
                "cannot host partition=%s leader=%s leader_epoch=%s: it stays offline (%s)",
                tp,
                state.leader,
                state.leader_epoch,
                error,
            )
            return "failed", None

    def _restart_fetchers(self, fetchers: FollowerFetchers, followers: list[Partition]) -> None:
        """Kafka's makeFollowers: the fetchers of partitions whose leader or epoch changed
        start again from ``initial_fetch_offset``; a partition without a leader waits for
        one."""
        fetchers.remove_fetcher_for_partitions([p.topic_partition for p in followers])
        with self._lock:
            if self._follower_fetching_stopped:
                return
        starts = {
            partition.topic_partition: InitialFetchState(
                topic_id=partition.topic_id,
                leader_id=partition.leader_id,
                current_leader_epoch=partition.leader_epoch,
                init_offset=initial_fetch_offset(partition.log),
            )
            for partition in followers
            if partition.leader_id >= 0 and not partition.is_leader
        }
        if starts:
            fetchers.add_fetcher_for_partitions(starts)

    def _refuse_inconsistent_topic_id(self, tp: TopicPartition, topic_id: Uuid | None) -> None:
        """Kafka's INCONSISTENT_TOPIC_ID in ``becomeLeaderOrFollower``: the partition gets no
        role and its log (of another cluster, or of an earlier incarnation of the topic) is
        left as it is for an operator to inspect."""
        log = self.log_manager.get_log(tp)
        log_dir = log.dir if log is not None else None
        log_topic_id = log.topic_id if log is not None else None
        reason = (
            f"its log dir {log_dir} holds topic id {log_topic_id}, the cluster's topic"
            f" {tp.topic} has id {topic_id}"
        )
        with self._lock:
            self._inconsistent_topic_ids[tp] = reason
        logger.error(
            "inconsistent topic id: partition neither led nor followed, its files left"
            " untouched partition=%s dir=%s topic_id=%s log_topic_id=%s",
            tp,
            log_dir,
            topic_id,
            log_topic_id,
        )
