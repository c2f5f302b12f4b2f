"""``__remote_log_metadata`` replicated, on broker processes with a real ZooKeeper, one
metadata partition and a remote tier in one directory shared by the brokers. Two layouts:
three brokers with remote.log.metadata.topic.replication.factor=3 (every broker holds a
replica of the metadata partition and reads it locally, below its HW), and four brokers with
factor 2 (U holds none and fetches it from the leader).

Story::

    the brokers start one after the other: the metadata topic can exist only once enough have
    registered, and every broker's metadata manager comes up then
    M = leader of __remote_log_metadata-0, N its next replica; U leads tiered-0 (RF 3) and
    does not lead the metadata partition, before or after
    produce 600 records          U local: [seg 0] ... [seg k][active]
    copy the first segments      (client-mode manager: events appended on M)
    SIGKILL M                    __remote_log_metadata-0 moves to N
    copy the other segments      (events appended on N)
    U applies every event: local retention on U deletes the segments copied after the kill,
    and a consumer reads all 600 records from U, the first ones from the remote tier
    M back, delete the topic     the partition's leader U publishes DELETE_PARTITION_MARKED (to
                                 the metadata partition's leader when it does not lead it)
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from storage_core.common import TopicIdPartition, Uuid
from storage_core.common import TopicPartition as StorageTopicPartition
from storage_core.log.log_config import LogConfig
from storage_core.tiered.local_tiered_storage import LocalTieredStorage
from storage_core.tiered.metadata.states import RemotePartitionDeleteState
from storage_core.tiered.operations.copy import candidate_segments, copy_segment
from storage_core.tiered.operations.fencing import LeaderEpochFence
from storage_core.tiered.operations.log_view import LogView
from storage_core.tiered.topic_based_rlmm import (
    REMOTE_LOG_METADATA_TOPIC_NAME,
    ConsumerTaskConfig,
    TopicBasedRemoteLogMetadataManager,
)
from tests import cluster_support
from tests.broker_process import BrokerProcess
from tests.cluster_support import SESSION_TIMEOUT_MS, eventually, partition_states

cluster_support.require_java()

pytestmark = pytest.mark.timeout(180)

TOPIC = "tiered"
RECORDS = 600
SEGMENT_BYTES = 16 * 1024
LOCAL_RETENTION_BYTES = 2 * SEGMENT_BYTES
DEATH_S = SESSION_TIMEOUT_MS / 1000 + 20


LAYOUTS = {"3-brokers-rf3": ((1, 2, 3), 3), "4-brokers-rf2": ((1, 2, 3, 4), 2)}


@pytest.fixture(params=sorted(LAYOUTS))
def cluster(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[dict[int, BrokerProcess], Path]]:
    broker_ids, factor = LAYOUTS[request.param]
    remote_dir = tmp_path / "remote-tier"
    with (
        cluster_support.zookeeper_ensemble(tmp_path / "zk") as zk,
        cluster_support.brokers_in_cluster(
            zk,
            tmp_path / "brokers",
            broker_ids,
            {
                "remote.log.storage.system.enable": "true",
                "remote.log.storage.manager.class.name": "LocalTieredStorage",
                "rsm.config.local.storage.dir": str(remote_dir),
                "rsm.config.local.fsync": "false",
                "remote.log.metadata.topic.num.partitions": "1",
                "remote.log.metadata.topic.replication.factor": str(factor),
                "remote.log.manager.task.interval.ms": "200",
                "log.retention.check.interval.ms": "200",
                "replica.lag.time.max.ms": "3000",
            },
        ) as (brokers, _connect),
    ):
        yield brokers, remote_dir


def value_of(i: int) -> bytes:
    return f"record-{i:05d}-".encode() * 8


def servers_of(brokers: dict[int, BrokerProcess]) -> str:
    return ",".join(b.bootstrap for b in brokers.values() if b.process is not None)


def copy_segments(
    leader: BrokerProcess, servers: str, remote_dir: Path, *, count: int | None
) -> int:
    """Copy the first ``count`` eligible segments of tiered-0 (all when ``None``) from the
    leader's log as a tiering job does; the last copied offset."""
    consumer = KafkaConsumer(bootstrap_servers=leader.bootstrap)
    tp = TopicPartition(TOPIC, 0)
    high_watermark = consumer.end_offsets([tp])[tp]
    consumer.close()
    view = LogView.read(leader.log_dir / f"{TOPIC}-0", high_watermark=high_watermark)
    config = LogConfig(remote_storage_enable=True, segment_bytes=SEGMENT_BYTES)
    rsm = LocalTieredStorage(remote_dir, fsync=False)
    epoch = view.latest_epoch
    assert epoch is not None
    fence = LeaderEpochFence(planned_leader_epoch=epoch, current_leader_epoch=lambda: epoch)
    last = -1
    with TopicBasedRemoteLogMetadataManager.for_client(
        servers, consumer_config=ConsumerTaskConfig(idle_poll_ms=20)
    ) as rlmm:
        segments = candidate_segments(view, rlmm, config=config)
        assert segments
        for segment in segments[:count]:
            result = copy_segment(view, segment, rsm=rsm, rlmm=rlmm, fence=fence, broker_id=0)
            last = result.metadata.end_offset
    return last


def earliest_local_offset(broker: BrokerProcess) -> int:
    """The first offset of tiered-0 still in ``broker``'s local log (its oldest segment)."""
    names = sorted(p.name for p in (broker.log_dir / f"{TOPIC}-0").glob("*.log"))
    return int(names[0].split(".")[0])


def topic_id_of(broker: BrokerProcess) -> Uuid:
    """tiered's topic id, as ``broker``'s partition.metadata file holds it."""
    text = (broker.log_dir / f"{TOPIC}-0" / "partition.metadata").read_text()
    fields = dict(line.split(": ", 1) for line in text.splitlines() if ": " in line)
    return Uuid.from_string(fields["topic_id"].strip())


def consume(broker: BrokerProcess) -> list[tuple[int, bytes]]:
    consumer = KafkaConsumer(
        bootstrap_servers=broker.bootstrap,
        enable_auto_commit=False,
        consumer_timeout_ms=20_000,
        max_partition_fetch_bytes=4096,
    )
    try:
        tp = TopicPartition(TOPIC, 0)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        out: list[tuple[int, bytes]] = []
        for message in consumer:
            out.append((message.offset, message.value))
            if len(out) == RECORDS:
                break
        return out
    finally:
        consumer.close()


def test_tiered_reads_survive_the_loss_of_the_metadata_partition_leader(
    cluster: tuple[dict[int, BrokerProcess], Path],
) -> None:
    brokers, remote_dir = cluster
    servers = servers_of(brokers)
    (metadata_partition,) = eventually(
        lambda: (
            cluster_support.metadata(brokers[1].bootstrap, REMOTE_LOG_METADATA_TOPIC_NAME)
            .topics[0]
            .partitions
        ),
        what="the metadata topic",
    )
    replicas = list(metadata_partition.replica_nodes)
    assert sorted(metadata_partition.isr_nodes) == sorted(replicas)
    # M leads the metadata partition, N leads it after M; U is neither (outside its replicas
    # when there are more brokers than replicas)
    metadata_leader, next_leader = replicas[:2]
    assert metadata_partition.leader_id == metadata_leader
    outside = [b for b in brokers if b not in replicas]
    user_leader = outside[0] if outside else replicas[2]
    third = outside[1] if len(outside) > 1 else next_leader
    admin = AdminClient({"bootstrap.servers": servers})
    new = NewTopic(
        TOPIC,
        num_partitions=1,
        replica_assignment=[[user_leader, third, metadata_leader]],
        config={
            "remote.storage.enable": "true",
            "segment.bytes": str(SEGMENT_BYTES),
            "local.retention.bytes": str(LOCAL_RETENTION_BYTES),
        },
    )
    admin.create_topics([new])[TOPIC].result(30)
    eventually(
        lambda: partition_states(brokers[user_leader].bootstrap, TOPIC)[0][0] == user_leader,
        what="tiered-0's leader",
    )
    producer = KafkaProducer(bootstrap_servers=servers, acks="all", linger_ms=0)
    for i in range(RECORDS):
        producer.send(TOPIC, value=value_of(i), partition=0)
        if i % 50 == 49:
            producer.flush()
    producer.flush()
    producer.close()
    expected = [(i, value_of(i)) for i in range(RECORDS)]

    u = brokers[user_leader]
    tip = TopicIdPartition(topic_id_of(u), StorageTopicPartition(TOPIC, 0))
    before_kill = copy_segments(u, servers, remote_dir, count=2)
    eventually(lambda: earliest_local_offset(u) > 0, what="local retention of what was copied")

    brokers[metadata_leader].kill()
    new_leader, _, _ = eventually(
        lambda: (
            (s := partition_states(u.bootstrap, REMOTE_LOG_METADATA_TOPIC_NAME)[0])[0]
            not in (metadata_leader, -1)
            and s
        ),
        timeout_s=DEATH_S,
        what="a new leader of the metadata partition",
    )
    last_copied = copy_segments(u, servers_of(brokers), remote_dir, count=None)
    assert last_copied > before_kill
    # U deletes locally only what its own metadata manager knows is remote
    eventually(
        lambda: earliest_local_offset(u) > before_kill + 1,
        what="U's local retention of the segments copied after the kill",
    )
    assert 0 < earliest_local_offset(u) <= last_copied + 1
    assert consume(u) == expected
    assert new_leader == next_leader

    # Deleting the topic (it waits for every replica's broker: M comes back first): its
    # leader U marks it for remote deletion, through the metadata partition's new leader
    brokers[metadata_leader].start()
    admin = AdminClient({"bootstrap.servers": servers_of(brokers)})
    admin.delete_topics([TOPIC])[TOPIC].result(60)
    for broker in brokers.values():
        assert not (broker.log_dir / f"{TOPIC}-0").exists()
    with TopicBasedRemoteLogMetadataManager.for_client(
        servers_of(brokers), consumer_config=ConsumerTaskConfig(idle_poll_ms=20)
    ) as rlmm:
        marked = rlmm.remote_partition_delete_metadata(tip)
    assert marked is not None
    assert marked.state is RemotePartitionDeleteState.DELETE_PARTITION_MARKED
    print(
        f"metadata replicas {replicas}: leader {metadata_leader} -> {new_leader};"
        f" U {user_leader}, tiered up to {last_copied}"
    )
