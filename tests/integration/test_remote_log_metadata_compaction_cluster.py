"""``__remote_log_metadata`` compacted on three brokers (ZooKeeper, metadata topic RF 3, one
metadata partition, the remote tier in a directory they share).

Story::

    tiered-0 on U (RF 3), the metadata partition led by M
    produce, copy every eligible segment (about 30), delete all but the last two (oldest
    first): the deleted segments' events are interleaved with the kept ones', so M's
    compactor re-appends the kept ones' and moves the metadata partition's log start past
    everything before them
    SIGKILL M: the metadata partition moves to N, which starts it at the cut too
    U restarted without snapshots or committed offsets: it rebuilds from the log start and
    answers the same earliest and latest-tiered offsets, and serves every record from the
    log start on (the first ones from the remote tier)
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import ElectionType
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from storage_core.client import KafkaCluster
from storage_core.client.consumer import KafkaConsumer as StorageConsumer
from storage_core.common import TopicIdPartition
from storage_core.common import TopicPartition as StorageTopicPartition
from storage_core.tiered.local_tiered_storage import LocalTieredStorage
from storage_core.tiered.operations.segment_deletion import delete_segment
from storage_core.tiered.topic_based_rlmm import (
    REMOTE_LOG_METADATA_TOPIC_NAME,
    ConsumerTaskConfig,
    TopicBasedRemoteLogMetadataManager,
)
from tests import cluster_support
from tests.broker_process import BrokerProcess
from tests.cluster_support import SESSION_TIMEOUT_MS, eventually, partition_states
from tests.integration.test_remote_log_metadata_replicated import (
    SEGMENT_BYTES,
    TOPIC,
    copy_segments,
    servers_of,
    topic_id_of,
    value_of,
)
from tests.tiered_broker_support import EARLIEST, LATEST_TIERED, list_offset

cluster_support.require_java()

pytestmark = pytest.mark.timeout(240)

RECORDS = 4000  # about 30 segments: enough history for the kept ones' events to be re-appended


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[dict[int, BrokerProcess], Path]]:
    remote_dir = tmp_path / "remote-tier"
    with (
        cluster_support.zookeeper_ensemble(tmp_path / "zk") as zk,
        cluster_support.three_brokers(
            zk,
            tmp_path / "brokers",
            {
                "remote.log.storage.system.enable": "true",
                "remote.log.storage.manager.class.name": "LocalTieredStorage",
                "rsm.config.local.storage.dir": str(remote_dir),
                "rsm.config.local.fsync": "false",
                "remote.log.metadata.topic.num.partitions": "1",
                "remote.log.metadata.topic.replication.factor": "3",
                "remote.log.metadata.compaction.interval.ms": "500",
                "remote.log.metadata.compaction.min.lag.ms": "500",
                "remote.log.manager.task.interval.ms": "200",
                "log.retention.check.interval.ms": "200",
                "replica.lag.time.max.ms": "3000",
            },
        ) as (brokers, _connect),
    ):
        yield brokers, remote_dir


def metadata_log_start(broker: BrokerProcess) -> int:
    with KafkaCluster(broker.bootstrap) as cluster:
        return StorageConsumer(cluster).earliest_offset(REMOTE_LOG_METADATA_TOPIC_NAME, 0)


def tiered_offsets(broker: BrokerProcess) -> tuple[int, int]:
    return (
        list_offset(broker.bootstrap, TOPIC, EARLIEST)[0],
        list_offset(broker.bootstrap, TOPIC, LATEST_TIERED)[0],
    )


def test_the_compacted_metadata_partition_survives_failover_and_a_rebuild(
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
    metadata_leader = metadata_partition.leader_id
    user_leader = next(b for b in replicas if b != metadata_leader)
    others = [b for b in replicas if b != user_leader]
    admin = AdminClient({"bootstrap.servers": servers})
    admin.create_topics(
        [
            NewTopic(
                TOPIC,
                num_partitions=1,
                replica_assignment=[[user_leader, *others]],
                config={
                    "remote.storage.enable": "true",
                    "segment.bytes": str(SEGMENT_BYTES),
                    "local.retention.bytes": str(2 * SEGMENT_BYTES),
                },
            )
        ]
    )[TOPIC].result(30)
    eventually(
        lambda: partition_states(brokers[user_leader].bootstrap, TOPIC)[0][0] == user_leader,
        what="tiered-0's leader",
    )
    producer = KafkaProducer(bootstrap_servers=servers, acks="all", linger_ms=5)
    for i in range(RECORDS):
        producer.send(TOPIC, value=value_of(i), partition=0)
        if i % 200 == 199:
            producer.flush()
    producer.flush()
    producer.close()

    u = brokers[user_leader]
    tip = TopicIdPartition(topic_id_of(u), StorageTopicPartition(TOPIC, 0))
    copy_segments(u, servers, remote_dir, count=None)
    rsm = LocalTieredStorage(remote_dir, fsync=False)
    with TopicBasedRemoteLogMetadataManager.for_client(
        servers, consumer_config=ConsumerTaskConfig(idle_poll_ms=20)
    ) as rlmm:
        copied = list(rlmm.list_remote_log_segments(tip))
        assert len(copied) >= 20
        for segment in copied[:-2]:
            delete_segment(segment, rsm=rsm, rlmm=rlmm, broker_id=user_leader, reason="test")
    kept = copied[-2:]
    cut = eventually(
        lambda: metadata_log_start(brokers[metadata_leader]) or None,
        what="the compaction of the metadata partition",
    )
    # everything below the cut: the deleted segments' four events each, and the kept ones'
    # first copies (their events were re-appended above the cut)
    assert cut >= 4 * (len(copied) - 2) + 2 * 2
    # the earliest offset: past the deleted segments, or the local log start if lower (the
    # local log still holds some of their records)
    expected_offsets = eventually(
        lambda: (o := tiered_offsets(u))[0] > copied[0].end_offset and o,
        what="U's log start past the deleted segments",
    )
    assert expected_offsets[1] == kept[-1].end_offset

    brokers[metadata_leader].kill()
    eventually(
        lambda: (
            partition_states(u.bootstrap, REMOTE_LOG_METADATA_TOPIC_NAME)[0][0]
            not in (metadata_leader, -1)
        ),
        timeout_s=SESSION_TIMEOUT_MS / 1000 + 20,
        what="a new leader of the metadata partition",
    )
    # the new leader's metadata partition starts at the cut or later (its own compactor
    # plans the same cut from the same records)
    eventually(lambda: metadata_log_start(u) >= cut, what="the cut on the new leader")
    u.stop()
    removed = list(u.log_dir.glob("*/remote_log_snapshot"))
    assert removed
    for path in [*removed, *u.log_dir.glob("_rlmm_committed_offsets")]:
        path.unlink()
    u.start()
    eventually(
        lambda: user_leader in partition_states(u.bootstrap, TOPIC)[0][2],
        what="U back in tiered-0's ISR",
    )
    admin = AdminClient({"bootstrap.servers": servers_of(brokers)})

    def u_leads() -> bool:
        if partition_states(u.bootstrap, TOPIC)[0][0] == user_leader:
            return True
        admin.elect_leaders(ElectionType.PREFERRED, [CkTopicPartition(TOPIC, 0)]).result(30)
        return False

    eventually(u_leads, what="U elected tiered-0's leader again")
    eventually(lambda: tiered_offsets(u) == expected_offsets, what="U's rebuilt offsets")
    earliest = expected_offsets[0]
    records = consume_from(u, earliest)
    assert records == [(i, value_of(i)) for i in range(earliest, RECORDS)]
    with TopicBasedRemoteLogMetadataManager.for_client(
        servers_of(brokers), consumer_config=ConsumerTaskConfig(idle_poll_ms=20)
    ) as rlmm:
        assert list(rlmm.list_remote_log_segments(tip)) == kept


def consume_from(broker: BrokerProcess, start: int) -> list[tuple[int, bytes]]:
    consumer = KafkaConsumer(
        bootstrap_servers=broker.bootstrap,
        enable_auto_commit=False,
        consumer_timeout_ms=20_000,
        max_partition_fetch_bytes=4096,
    )
    try:
        tp = TopicPartition(TOPIC, 0)
        consumer.assign([tp])
        consumer.seek(tp, start)
        out: list[tuple[int, bytes]] = []
        for message in consumer:
            out.append((message.offset, message.value))
            if message.offset == RECORDS - 1:
                break
        return out
    finally:
        consumer.close()
