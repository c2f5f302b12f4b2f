"""Tiered storage end to end on a broker process (KIP-405, the broker side).

Story::

    produce 600 records            local:  [seg 0][seg 1] ... [seg k][active]   remote: -
    copy eligible segments         local:  same                                remote: seg 0..k
    (operations library, client-mode RLMM from the test process)
    local retention (local.retention.bytes) deletes copied segments
                                   local:               [seg j..k][active]      remote: seg 0..k
    consume from 0 (kafka-python, confluent-kafka): every record, in order
    ListOffsets v9: -2 = 0, -4 = local log start (> 0), -5 = last copied offset
    restart the broker: consume from 0 again, same records; same offsets
    delete the topic: local data gone, DELETE_PARTITION_MARKED published
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer as ConfluentConsumer
from confluent_kafka import TopicPartition as ConfluentTopicPartition
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kio.schema.errors import ErrorCode
from kio.schema.list_offsets.v9 import request as list_v9
from kio.schema.list_offsets.v9.response import ListOffsetsResponse as ListOffsetsResponseV9
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i8, i32, i64

from storage_core.client import KafkaAdminClient, KafkaCluster
from storage_core.common import TopicIdPartition
from storage_core.common import TopicPartition as StorageTopicPartition
from storage_core.log.log_config import LogConfig
from storage_core.tiered.local_tiered_storage import LocalTieredStorage
from storage_core.tiered.metadata.states import RemotePartitionDeleteState
from storage_core.tiered.operations.copy import candidate_segments, copy_segment
from storage_core.tiered.operations.fencing import LeaderEpochFence
from storage_core.tiered.operations.log_view import LogView
from storage_core.tiered.topic_based_rlmm import (
    ConsumerTaskConfig,
    TopicBasedRemoteLogMetadataManager,
)
from tests.broker_process import BrokerProcess

TOPIC = "tiered-orders"
RECORDS = 600
SEGMENT_BYTES = 16 * 1024
LOCAL_RETENTION_BYTES = 2 * SEGMENT_BYTES
EARLIEST, EARLIEST_LOCAL, LATEST_TIERED, LATEST = -2, -4, -5, -1


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    with BrokerProcess(
        tmp_path,
        overrides={
            "remote.log.storage.system.enable": "true",
            "remote.log.storage.manager.class.name": "LocalTieredStorage",
            "rsm.config.local.storage.dir": str(tmp_path / "remote-tier"),
            "rsm.config.local.fsync": "false",
            "remote.log.metadata.topic.num.partitions": "3",
            "remote.log.manager.task.interval.ms": "200",
            "log.retention.check.interval.ms": "200",
        },
    ) as process:
        yield process


def value_of(i: int) -> bytes:
    return f"record-{i:05d}-".encode() * 8


def list_offset(bootstrap: str, timestamp: int) -> tuple[int, int]:
    """ListOffsets v9 for partition 0: ``(offset, leader epoch)``."""
    with KafkaCluster(bootstrap) as cluster:
        session = cluster.leader_session(StorageTopicPartition(TOPIC, 0))
        response = session.send(
            list_v9.ListOffsetsRequest(
                replica_id=BrokerId(-1),
                isolation_level=i8(0),
                topics=(
                    list_v9.ListOffsetsTopic(
                        name=TopicName(TOPIC),
                        partitions=(
                            list_v9.ListOffsetsPartition(
                                partition_index=i32(0),
                                current_leader_epoch=i32(-1),
                                timestamp=i64(timestamp),
                            ),
                        ),
                    ),
                ),
            ),
            ListOffsetsResponseV9,
        )
    (partition,) = response.topics[0].partitions
    assert partition.error_code == ErrorCode.none
    return int(partition.offset), int(partition.leader_epoch)


def copy_eligible_segments(broker: BrokerProcess, remote_dir: Path) -> int:
    """Copy every eligible segment as a tiering job would; returns the last copied offset."""
    high_watermark, _ = list_offset(broker.bootstrap, LATEST)
    view = LogView.read(broker.log_dir / f"{TOPIC}-0", high_watermark=high_watermark)
    config = LogConfig(remote_storage_enable=True, segment_bytes=SEGMENT_BYTES)
    rsm = LocalTieredStorage(remote_dir, fsync=False)
    epoch = view.latest_epoch
    assert epoch is not None
    fence = LeaderEpochFence(planned_leader_epoch=epoch, current_leader_epoch=lambda: epoch)
    last = -1
    with TopicBasedRemoteLogMetadataManager.for_client(
        broker.bootstrap, consumer_config=ConsumerTaskConfig(idle_poll_ms=20)
    ) as rlmm:
        segments = candidate_segments(view, rlmm, config=config)
        assert len(segments) >= 5
        for segment in segments:
            result = copy_segment(view, segment, rsm=rsm, rlmm=rlmm, fence=fence, broker_id=0)
            last = result.metadata.end_offset
    return last


def local_retention_settled(broker: BrokerProcess) -> bool:
    """Whether size-based local retention would delete nothing more (Kafka's rule: the oldest
    segment goes while the log without it still holds ``local.retention.bytes``)."""
    segments = sorted((broker.log_dir / f"{TOPIC}-0").glob("*.log"))
    try:
        sizes = [segment.stat().st_size for segment in segments]
    except FileNotFoundError:  # renamed for deletion while we looked
        return False
    return len(sizes) > 1 and sum(sizes) - sizes[0] < LOCAL_RETENTION_BYTES


def wait_until(condition: object, what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def consume_kafka_python(bootstrap: str) -> list[tuple[int, bytes]]:
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        consumer_timeout_ms=20_000,
        max_partition_fetch_bytes=4096,  # many fetches, each crossing remote batch positions
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


def consume_confluent(bootstrap: str) -> list[tuple[int, bytes]]:
    consumer = ConfluentConsumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "tiered-check",
            "enable.auto.commit": False,
            "max.partition.fetch.bytes": 8192,
        }
    )
    try:
        consumer.assign([ConfluentTopicPartition(TOPIC, 0, 0)])
        out: list[tuple[int, bytes]] = []
        deadline = time.monotonic() + 30
        while len(out) < RECORDS and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            assert message.error() is None, message.error()
            out.append((message.offset(), message.value()))
        return out
    finally:
        consumer.close()


def test_consumers_read_tiered_records_across_a_restart(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    with KafkaCluster(broker.bootstrap) as cluster:
        created = KafkaAdminClient(cluster).create_topic(
            TOPIC,
            num_partitions=1,
            replication_factor=1,
            configs={
                "remote.storage.enable": "true",
                "segment.bytes": str(SEGMENT_BYTES),
                "local.retention.bytes": str(LOCAL_RETENTION_BYTES),
            },
        )
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all", linger_ms=0)
    for i in range(RECORDS):
        producer.send(TOPIC, value=value_of(i), partition=0)
        if i % 50 == 49:
            producer.flush()
    producer.flush()
    producer.close()
    expected = [(i, value_of(i)) for i in range(RECORDS)]

    last_copied = copy_eligible_segments(broker, tmp_path / "remote-tier")
    wait_until(
        lambda: list_offset(broker.bootstrap, EARLIEST_LOCAL)[0] > 0,
        "local retention to delete copied segments",
    )
    # The broker learns the copied segments from __remote_log_metadata, as its consumer task
    # reads the copy's events: eventually, not when the copy returns.
    wait_until(
        lambda: list_offset(broker.bootstrap, LATEST_TIERED)[0] == last_copied,
        "the broker to learn every copied segment",
    )
    # Retention deletes what the broker knows is tiered, tick by tick: read the local start
    # once it has nothing left to delete, or a later tick moves it under the test's feet.
    wait_until(lambda: local_retention_settled(broker), "local retention to settle")
    local_start, _ = list_offset(broker.bootstrap, EARLIEST_LOCAL)
    assert 0 < local_start <= last_copied + 1  # no hole between remote and local
    assert list_offset(broker.bootstrap, EARLIEST)[0] == 0
    assert list_offset(broker.bootstrap, LATEST)[0] == RECORDS
    remote_segments = list((tmp_path / "remote-tier").rglob("*.log"))
    assert len(remote_segments) >= 5

    assert consume_kafka_python(broker.bootstrap) == expected
    assert consume_confluent(broker.bootstrap) == expected
    assert (broker.log_dir / "remote-log-index-cache").is_dir()

    broker.restart()
    assert list_offset(broker.bootstrap, EARLIEST)[0] == 0
    assert list_offset(broker.bootstrap, EARLIEST_LOCAL)[0] == local_start
    wait_until(  # read again from __remote_log_metadata, from its snapshot on
        lambda: list_offset(broker.bootstrap, LATEST_TIERED)[0] == last_copied,
        "the restarted broker to learn every copied segment",
    )
    assert consume_kafka_python(broker.bootstrap) == expected
    assert consume_confluent(broker.bootstrap) == expected

    # Deleting the topic marks its remote partition for the remote deletion job.
    with KafkaCluster(broker.bootstrap) as cluster:
        KafkaAdminClient(cluster).delete_topics([TOPIC])
    assert created.topic_id is not None
    tip = TopicIdPartition(created.topic_id, StorageTopicPartition(TOPIC, 0))
    with TopicBasedRemoteLogMetadataManager.for_client(
        broker.bootstrap, consumer_config=ConsumerTaskConfig(idle_poll_ms=20)
    ) as rlmm:
        marked = rlmm.remote_partition_delete_metadata(tip)
    assert marked is not None
    assert marked.state is RemotePartitionDeleteState.DELETE_PARTITION_MARKED
    assert not (broker.log_dir / f"{TOPIC}-0").exists()
