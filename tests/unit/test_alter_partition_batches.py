"""ISR changes that leaders propose while a write is out are written together: a restarted
broker rejoining the ISR of many partitions costs their leader one pipelined round of
ZooKeeper writes, not one round trip per partition, and each write still succeeds or fails on
its own znode version."""

from __future__ import annotations

from pathlib import Path

from storage_core.clock import ManualClock
from storage_core.common import TopicPartition, Uuid
from storage_core.log.log_config import LogConfig
from storage_core.log.log_manager import LogManager
from storage_core.replication.alter_partition_manager import AlterPartitionManager
from storage_core.replication.partition import Partition
from storage_core.zk import zk_data
from storage_core.zk.kafka_zk_client import KafkaZkClient
from storage_core.zk.local_znode_tree import LocalZNodeTree
from storage_core.zk.zk_data import LeaderAndIsr
from tests.cluster_support import eventually
from tests.zk_round_trips import RoundTrips

PARTITIONS = 100


def test_proposals_waiting_together_are_written_in_one_round_of_requests(tmp_path: Path) -> None:
    zk = KafkaZkClient.single_node(LocalZNodeTree(None)).start()
    manager = LogManager([tmp_path], LogConfig())
    manager.startup(background_tasks=False)
    committed: list[TopicPartition] = []
    alter = AlterPartitionManager(
        zk, on_committed=lambda u, _p: committed.append(u.topic_partition)
    )
    clock = ManualClock()
    partitions = []
    for p in range(PARTITIONS):
        tp = TopicPartition("events", p)
        state = LeaderAndIsr(leader=0, leader_epoch=2, isr=(0,), controller_epoch=1)
        path = zk_data.partition_state_path(tp)
        zk.zk.create(path, zk_data.encode_leader_and_isr(state), makepath=True)
        version = zk.zk.get(path)[1].version
        partition = Partition(
            tp,
            Uuid.random(),
            manager.get_or_create_log(tp, topic_id=Uuid.random()),
            local_broker_id=0,
            clock=clock,
            replica_lag_time_max_ms=10_000,
            submit_isr_update=alter.submit,
        )
        partition.make_leader(
            leader_epoch=2, replicas=(0, 1), isr=(0,), partition_epoch=version, controller_epoch=1
        )
        partitions.append(partition)
    stale = TopicPartition("events", 0)
    zk.zk.set(  # the controller changed partition 0 meanwhile: its proposal must lose
        zk_data.partition_state_path(stale),
        zk_data.encode_leader_and_isr(
            LeaderAndIsr(leader=0, leader_epoch=3, isr=(0,), controller_epoch=2)
        ),
    )
    counter = RoundTrips.install(zk, thread_prefix="alter-partition")
    for partition in partitions:  # follower 1 caught up everywhere: each leader proposes
        partition.update_follower_fetch_state(
            1,
            fetch_offset=0,
            follower_log_start_offset=0,
            leader_end_offset=0,
            fetch_time_ms=clock.milliseconds(),
        )

    alter.start()
    try:
        eventually(lambda: len(committed) == PARTITIONS - 1, what="every fresh proposal committed")
    finally:
        alter.shutdown()

    assert counter.round_trips == 1
    assert counter.requests == PARTITIONS
    assert stale not in committed
    assert partitions[0].isr == (0,)
    assert all(p.isr == (0, 1) for p in partitions[1:])
    written = zk.get_partition_states([p.topic_partition for p in partitions])
    assert written[stale].isr == (0,) and written[stale].leader_epoch == 3
    assert all(written[p.topic_partition].isr == (0, 1) for p in partitions[1:])
    manager.shutdown()
