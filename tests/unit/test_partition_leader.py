"""The leader's side of replication without the network (Kafka's Partition): followers'
fetch states, ISR expansion and shrinking, the high watermark over the ISR, acks=all."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest

from storage_core.clock import ManualClock
from storage_core.common import TopicPartition, Uuid
from storage_core.errors import NotEnoughReplicasAfterAppendError, NotLeaderOrFollowerError
from storage_core.log.log_config import LogConfig
from storage_core.log.log_manager import LogManager
from storage_core.replication.delayed_fetch import FetchRequestPartition
from storage_core.replication.partition import IsrUpdate, Partition
from storage_core.replication.replica_manager import ReplicaManager
from tests.conftest import make_batch

TP = TopicPartition("events", 0)
LAG_MS = 10_000


class _Proposals:
    """Collects ISR proposals; the test decides when they commit (as ZooKeeper would)."""

    def __init__(self) -> None:
        self.updates: list[tuple[Partition, IsrUpdate]] = []

    def __call__(self, partition: Partition, update: IsrUpdate) -> None:
        self.updates.append((partition, update))

    def commit_all(self) -> list[tuple[int, ...]]:
        committed = []
        for partition, update in self.updates:
            partition.complete_isr_update(update, new_partition_epoch=update.partition_epoch + 1)
            committed.append(update.isr)
        self.updates.clear()
        return committed


def _leader(
    tmp_path: Path,
    *,
    replicas: tuple[int, ...] = (0, 1, 2),
    isr: tuple[int, ...] = (0, 1, 2),
    min_isr: int = 1,
    clock: ManualClock | None = None,
    proposals: _Proposals | None = None,
) -> Partition:
    manager = LogManager([tmp_path], LogConfig(min_insync_replicas=min_isr))
    manager.startup(background_tasks=False)
    log = manager.get_or_create_log(TP, topic_id=Uuid.random())
    partition = Partition(
        TP,
        Uuid.random(),
        log,
        local_broker_id=0,
        clock=clock or ManualClock(),
        replica_lag_time_max_ms=LAG_MS,
        submit_isr_update=proposals,
    )
    partition.make_leader(
        leader_epoch=3, replicas=replicas, isr=isr, partition_epoch=7, controller_epoch=1
    )
    return partition


def _fetch(partition: Partition, follower: int, offset: int, clock: ManualClock) -> bool:
    return partition.update_follower_fetch_state(
        follower,
        fetch_offset=offset,
        follower_log_start_offset=0,
        leader_end_offset=partition.log.log_end_offset,
        fetch_time_ms=clock.milliseconds(),
    )


def test_high_watermark_is_the_smallest_log_end_offset_in_the_isr(tmp_path: Path) -> None:
    clock = ManualClock()
    partition = _leader(tmp_path, clock=clock)
    partition.append_records_to_leader(make_batch(5), required_acks=1)
    assert partition.log.high_watermark == 0
    assert _fetch(partition, 1, 5, clock) is False  # follower 2 still at nothing
    assert partition.log.high_watermark == 0
    assert _fetch(partition, 2, 3, clock) is True
    assert partition.log.high_watermark == 3
    _fetch(partition, 2, 5, clock)
    assert partition.log.high_watermark == 5
    # a follower fetching an older offset does not move the HW back
    _fetch(partition, 2, 4, clock)
    assert partition.log.high_watermark == 5


def test_a_follower_joins_the_isr_once_it_reaches_the_hw_and_the_epoch_start(
    tmp_path: Path,
) -> None:
    clock = ManualClock()
    proposals = _Proposals()
    partition = _leader(tmp_path, isr=(0, 1), clock=clock, proposals=proposals)
    partition.append_records_to_leader(make_batch(4), required_acks=1)
    _fetch(partition, 1, 4, clock)
    assert partition.log.high_watermark == 4
    _fetch(partition, 2, 2, clock)  # below the HW: not yet
    assert proposals.updates == []
    _fetch(partition, 2, 4, clock)
    [(_, update)] = proposals.updates
    assert (update.isr, update.leader_epoch, update.partition_epoch) == ((0, 1, 2), 3, 7)
    assert update.controller_epoch == 1
    assert partition.maximal_isr == (0, 1, 2)  # counted for the HW while in flight
    assert partition.isr == (0, 1)
    _fetch(partition, 1, 4, clock)
    assert proposals.updates == [(partition, update)]  # nothing else proposed meanwhile
    assert proposals.commit_all() == [(0, 1, 2)]
    assert (partition.isr, partition.partition_epoch) == ((0, 1, 2), 8)


def test_a_follower_behind_for_replica_lag_time_max_ms_leaves_the_isr(tmp_path: Path) -> None:
    clock = ManualClock()
    proposals = _Proposals()
    partition = _leader(tmp_path, clock=clock, proposals=proposals)
    partition.append_records_to_leader(make_batch(2), required_acks=1)
    _fetch(partition, 1, 2, clock)
    _fetch(partition, 2, 2, clock)
    assert partition.log.high_watermark == 2
    partition.append_records_to_leader(make_batch(2), required_acks=1)
    clock.sleep(LAG_MS - 1)
    _fetch(partition, 1, 4, clock)  # follower 1 keeps up, follower 2 stops fetching
    assert partition.maybe_shrink_isr() is False
    clock.sleep(2)
    assert partition.maybe_shrink_isr() is True
    assert proposals.commit_all() == [(0, 1)]
    # with follower 2 out, the HW follows follower 1
    assert partition.log.high_watermark == 4


def test_a_refused_isr_change_leaves_the_committed_isr(tmp_path: Path) -> None:
    clock = ManualClock()
    proposals = _Proposals()
    partition = _leader(tmp_path, clock=clock, proposals=proposals)
    clock.sleep(LAG_MS + 1)
    partition.append_records_to_leader(make_batch(1), required_acks=1)
    assert partition.maybe_shrink_isr() is True
    [(_, update)] = proposals.updates
    partition.complete_isr_update(update, new_partition_epoch=None)
    assert (partition.isr, partition.partition_epoch) == ((0, 1, 2), 7)
    assert not partition.isr_update_in_flight


def test_the_hw_does_not_move_while_the_isr_is_below_min_insync_replicas(
    tmp_path: Path,
) -> None:
    clock = ManualClock()
    proposals = _Proposals()
    partition = _leader(
        tmp_path, replicas=(0, 1, 2), isr=(0,), min_isr=2, clock=clock, proposals=proposals
    )
    partition.append_records_to_leader(make_batch(3), required_acks=1)
    _fetch(partition, 1, 3, clock)
    assert partition.log.high_watermark == 0  # follower 1's expansion is not committed yet
    assert proposals.commit_all() == [(0, 1)]
    assert partition.log.high_watermark == 3


def test_acks_all_is_answered_after_append_when_the_isr_shrank(tmp_path: Path) -> None:
    clock = ManualClock()
    partition = _leader(tmp_path, replicas=(0, 1), isr=(0, 1), min_isr=2, clock=clock)
    partition.append_records_to_leader(make_batch(2), required_acks=-1)
    assert partition.check_enough_replicas_reach_offset(2) == (False, None)
    _fetch(partition, 1, 2, clock)
    assert partition.check_enough_replicas_reach_offset(2) == (True, None)
    partition.make_leader(leader_epoch=3, replicas=(0, 1), isr=(0,), partition_epoch=9)
    done, error = partition.check_enough_replicas_reach_offset(2)
    assert done and isinstance(error, NotEnoughReplicasAfterAppendError)
    partition.make_follower(
        leader_id=1, leader_epoch=4, replicas=(0, 1), isr=(1,), partition_epoch=10
    )
    done, error = partition.check_enough_replicas_reach_offset(2)
    assert done and isinstance(error, NotLeaderOrFollowerError)


def test_acks_all_is_checked_while_an_append_holds_the_partition(tmp_path: Path) -> None:
    """The event loop checks waiting acks=all produces; an append on an I/O thread holds the
    partition's lock for its whole write. The check answers without waiting for it, unless
    the leadership is in question (then it waits for a consistent answer)."""
    clock = ManualClock()
    partition = _leader(tmp_path, replicas=(0, 1), isr=(0, 1), min_isr=2, clock=clock)
    partition.append_records_to_leader(make_batch(2), required_acks=-1)
    held, release = threading.Event(), threading.Event()

    def append_in_progress() -> None:
        with partition._lock:
            held.set()
            release.wait(10)

    holder = threading.Thread(target=append_in_progress)
    holder.start()
    try:
        assert held.wait(5)
        started = time.monotonic()
        assert partition.check_enough_replicas_reach_offset(2) == (False, None)
        _fetch_unlocked_hw(partition, 2)
        assert partition.check_enough_replicas_reach_offset(2) == (True, None)
        assert time.monotonic() - started < 1  # neither waited for the append
        partition.leader_id = 1  # as make_follower writes it, under the lock held above
        asked = threading.Thread(target=partition.check_enough_replicas_reach_offset, args=(2,))
        asked.start()
        asked.join(0.3)
        assert asked.is_alive()  # not leading: waits for the lock, for a consistent view
    finally:
        release.set()
        holder.join()
    asked.join(5)
    assert not asked.is_alive()
    done, error = partition.check_enough_replicas_reach_offset(2)
    assert done and isinstance(error, NotLeaderOrFollowerError)


def _fetch_unlocked_hw(partition: Partition, high_watermark: int) -> None:
    """The HW a follower's fetch would set, written as one field (the fetch itself would wait
    for the lock the test holds)."""
    partition.log.maybe_increment_high_watermark(high_watermark)


def test_a_state_older_than_the_known_partition_epoch_is_ignored(tmp_path: Path) -> None:
    partition = _leader(tmp_path)
    assert (
        partition.make_follower(
            leader_id=1, leader_epoch=3, replicas=(0, 1, 2), isr=(0, 1, 2), partition_epoch=6
        )
        is False
    )
    assert partition.is_leader and partition.partition_epoch == 7


def test_the_same_leader_epoch_again_keeps_the_followers_positions(tmp_path: Path) -> None:
    clock = ManualClock()
    partition = _leader(tmp_path, clock=clock)
    partition.append_records_to_leader(make_batch(3), required_acks=1)
    _fetch(partition, 1, 3, clock)
    clock.sleep(LAG_MS + 1)  # follower 2 silent since: no longer waited for
    partition.make_leader(leader_epoch=3, replicas=(0, 1, 2), isr=(0, 1), partition_epoch=8)
    assert partition.follower_states()[1].log_end_offset == 3
    assert partition.log.high_watermark == 3  # follower 2 left the ISR
    assert partition.log.leader_epoch_cache.latest_epoch == 3


def test_a_follower_not_in_the_replicas_is_refused(tmp_path: Path) -> None:
    partition = _leader(tmp_path)
    with pytest.raises(NotLeaderOrFollowerError):
        _fetch(partition, 9, 0, ManualClock())


def test_replica_fetches_read_past_the_hw_and_complete_acks_all(tmp_path: Path) -> None:
    """A follower's fetch reads up to the LEO, moves the HW and releases the producer."""

    async def scenario() -> None:
        manager = LogManager([tmp_path], LogConfig())
        manager.startup(background_tasks=False)
        replicas = ReplicaManager(manager, local_broker_id=0)
        replicas.bind_loop(asyncio.get_running_loop())
        log = manager.get_or_create_log(TP, topic_id=Uuid.random())
        partition = Partition(
            TP,
            Uuid.random(),
            log,
            local_broker_id=0,
            on_high_watermark_advanced=replicas.on_high_watermark_advanced,
        )
        partition.make_leader(leader_epoch=0, replicas=(0, 1), isr=(0, 1), partition_epoch=0)
        replicas.add_partition(partition)

        # the follower parks at offset 0; the produce wakes it with the new records
        follower_fetch = asyncio.ensure_future(
            replicas.fetch_messages(
                {TP: FetchRequestPartition(fetch_offset=0, max_bytes=1 << 20)},
                max_wait_ms=5_000,
                min_bytes=1,
                max_bytes=1 << 20,
                replica_id=1,
            )
        )
        await asyncio.sleep(0.05)
        produce = asyncio.ensure_future(
            replicas.append_records({TP: make_batch(3)}, required_acks=-1, timeout_ms=5_000)
        )
        fetched = (await asyncio.wait_for(follower_fetch, 2))[TP]
        assert fetched.read is not None and fetched.read.high_watermark == 0
        assert len(fetched.records) > 0
        await asyncio.sleep(0.05)
        assert not produce.done()  # the follower has not confirmed yet
        await replicas.fetch_messages(
            {TP: FetchRequestPartition(fetch_offset=3, max_bytes=1 << 20)},
            max_wait_ms=0,
            min_bytes=0,
            max_bytes=1 << 20,
            replica_id=1,
        )
        result = (await asyncio.wait_for(produce, 2))[TP]
        assert result.error is None and log.high_watermark == 3
        replicas.shutdown()

    asyncio.run(scenario())
