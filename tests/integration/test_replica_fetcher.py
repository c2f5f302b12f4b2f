"""The follower side of replication against a real leader broker process.

The leader is a ``storage-core broker`` process (one broker, topics with one replica, so it
serves replica fetches up to its high watermark, which is its log end offset). The follower
is built in the test process as a broker builds it: a ``LogManager`` and ``ReplicaManager``
on a temporary directory, the partition made follower of broker 0, and a
``ReplicaFetcherManager`` fetching over loopback. Records are produced with kafka-python and
confluent-kafka; the two logs are compared batch by batch (offsets, leader epochs, CRCs) and
byte for byte.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka import TopicPartition as CTopicPartition
from confluent_kafka.admin import AdminClient
from kafka import KafkaAdminClient, KafkaProducer
from kafka.admin import NewTopic

from storage_core.client.cluster import KafkaCluster
from storage_core.common import TopicPartition, Uuid
from storage_core.log.log import Log
from storage_core.log.log_config import LogConfig
from storage_core.log.log_manager import LogManager
from storage_core.records.memory_records import iter_batches
from storage_core.replication.fetch_state import InitialFetchState, ReplicaState
from storage_core.replication.metadata_cache import PartitionMetadata
from storage_core.replication.partition import Partition
from storage_core.replication.replica_fetcher_config import ReplicaFetcherConfig
from storage_core.replication.replica_fetcher_manager import ReplicaFetcherManager
from storage_core.replication.replica_fetcher_thread import initial_fetch_offset
from storage_core.replication.replica_manager import ReplicaManager
from tests.broker_process import BrokerProcess

pytestmark = pytest.mark.timeout(180)

LEADER_ID = 0
FOLLOWER_ID = 1
TIMEOUT_S = 20.0
BACKOFF_MS = 300
FETCHER_CONFIG = ReplicaFetcherConfig(fetch_wait_max_ms=100, fetch_backoff_ms=BACKOFF_MS)


# ---------------------------------------------------------------- the leader
@pytest.fixture(scope="module")
def leader(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with BrokerProcess(tmp_path_factory.mktemp("leader")) as process:
        yield process


def create_topic(broker: BrokerProcess) -> str:
    name = f"replicated-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10_000)
    try:
        admin.create_topics([NewTopic(name, 1, 1)])
    finally:
        admin.close()
    return name


def produce_kafka_python(broker: BrokerProcess, topic: str, count: int, *, tag: str) -> None:
    """Several batches: small batches, a linger, keys and headers."""
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=5, batch_size=512)
    for i in range(count):
        producer.send(
            topic,
            key=f"k{i}".encode(),
            value=f"{tag}-{i}-".encode() * 8,
            headers=[("h", b"v")],
            partition=0,
        )
    producer.flush(TIMEOUT_S)
    producer.close()


def produce_confluent(broker: BrokerProcess, topic: str, count: int, *, tag: str) -> None:
    """Compressed batches from librdkafka."""
    producer = Producer(
        {"bootstrap.servers": broker.bootstrap, "compression.type": "gzip", "linger.ms": 5}
    )
    for i in range(count):
        producer.produce(topic, value=f"{tag}-{i}".encode(), partition=0)
    assert producer.flush(TIMEOUT_S) == 0


@dataclass(frozen=True)
class LeaderView:
    topic_id: Uuid
    leader_epoch: int


def leader_view(broker: BrokerProcess, topic: str) -> LeaderView:
    with KafkaCluster(broker.bootstrap) as cluster:
        metadata = cluster.metadata([topic]).topic(topic)
    assert metadata is not None and metadata.topic_id is not None
    partition = metadata.partition(0)
    assert partition is not None and partition.leader_id == LEADER_ID
    return LeaderView(metadata.topic_id, partition.leader_epoch)


def leader_log_bytes(broker: BrokerProcess, topic: str) -> bytes:
    """The leader's segment files, read as they are on its disk (read only)."""
    directory = broker.log_dir / f"{topic}-0"
    return b"".join(p.read_bytes() for p in sorted(directory.glob("*.log")))


def follower_log_bytes(log: Log) -> bytes:
    return b"".join(s.path.read_bytes() for s in log.segments)


def batches(data: bytes) -> list[tuple[int, int, int, int]]:
    """(base offset, last offset, partition leader epoch, CRC) of every batch."""
    return [
        (b.base_offset, b.last_offset, b.partition_leader_epoch, b.crc)
        for _position, b in iter_batches(data)
    ]


def leader_end_offset(broker: BrokerProcess, topic: str) -> int:
    data = leader_log_bytes(broker, topic)
    found = batches(data)
    return found[-1][1] + 1 if found else 0


def eventually(check: Callable[[], bool], what: str, timeout_s: float = TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.02)
    raise AssertionError(f"not within {timeout_s}s: {what}")


# ---------------------------------------------------------------- the follower
class Follower:
    """Broker 1's replication side, built as a broker builds it."""

    def __init__(self, directory: Path, leader: BrokerProcess, **manager_options: bool) -> None:
        self.leader = leader
        self.log_manager = LogManager([directory], LogConfig())
        self.log_manager.startup(background_tasks=False)
        self.replica_manager = ReplicaManager(self.log_manager, local_broker_id=FOLLOWER_ID)
        self.fetchers = ReplicaFetcherManager(
            broker_id=FOLLOWER_ID,
            config=FETCHER_CONFIG,
            get_partition=self.replica_manager.get_partition,
            endpoint_of=self.endpoint_of,
            **manager_options,
        )

    def endpoint_of(self, broker_id: int) -> tuple[str, int] | None:
        # The MetadataCache's live brokers: broker 0 only while its process runs.
        if broker_id == LEADER_ID and self.leader.process is not None:
            return "127.0.0.1", self.leader.port
        return None

    def host(self, topic: str, view: LeaderView) -> Partition:
        """The partition, follower of broker 0 at the leader's epoch (no fetching yet)."""
        tp = TopicPartition(topic, 0)
        self.replica_manager.become_leader_or_follower(
            {
                tp: PartitionMetadata(
                    partition=0,
                    replicas=(LEADER_ID, FOLLOWER_ID),
                    leader=LEADER_ID,
                    leader_epoch=view.leader_epoch,
                    isr=(LEADER_ID,),
                )
            },
            topic_ids={topic: view.topic_id},
            log_config=lambda _topic: LogConfig(),
        )
        return self.replica_manager.get_partition(tp)

    def follow(self, topic: str, view: LeaderView) -> Partition:
        partition = self.host(topic, view)
        self.fetchers.add_fetcher_for_partitions(
            {
                partition.topic_partition: InitialFetchState(
                    topic_id=view.topic_id,
                    leader_id=LEADER_ID,
                    current_leader_epoch=view.leader_epoch,
                    init_offset=initial_fetch_offset(partition.log),
                )
            }
        )
        return partition

    def close(self) -> None:
        self.fetchers.shutdown()
        self.replica_manager.shutdown()
        self.log_manager.shutdown()


@pytest.fixture
def follower(tmp_path: Path, leader: BrokerProcess) -> Iterator[Follower]:
    built = Follower(tmp_path / "follower-logs", leader)
    yield built
    built.close()


def wait_until_caught_up(leader: BrokerProcess, topic: str, log: Log) -> None:
    eventually(
        lambda: (
            log.log_end_offset == leader_end_offset(leader, topic)
            and log.high_watermark == log.log_end_offset
        ),
        f"follower of {topic} at the leader's end offset and HW",
    )


# ---------------------------------------------------------------- tests
def test_follower_log_becomes_identical_to_the_leaders(
    leader: BrokerProcess, follower: Follower
) -> None:
    topic = create_topic(leader)
    produce_kafka_python(leader, topic, 200, tag="a")
    produce_confluent(leader, topic, 100, tag="b")
    view = leader_view(leader, topic)

    partition = follower.follow(topic, view)
    wait_until_caught_up(leader, topic, partition.log)

    leader_bytes = leader_log_bytes(leader, topic)
    assert len(batches(leader_bytes)) > 5
    assert batches(follower_log_bytes(partition.log)) == batches(leader_bytes)
    assert follower_log_bytes(partition.log) == leader_bytes
    assert partition.log.high_watermark == 300
    assert partition.log.latest_epoch == view.leader_epoch

    # Records produced while following arrive, and the follower's HW follows the leader's.
    produce_kafka_python(leader, topic, 50, tag="c")
    wait_until_caught_up(leader, topic, partition.log)
    assert partition.log.high_watermark == 350
    assert follower_log_bytes(partition.log) == leader_log_bytes(leader, topic)
    state = follower.fetchers.fetch_state(partition.topic_partition)
    assert state is not None and state.state is ReplicaState.FETCHING
    assert state.fetch_offset == 350 and state.last_fetched_epoch == view.leader_epoch
    eventually(lambda: follower.fetchers.lag(partition.topic_partition) == 0, "lag 0")
    assert follower.fetchers.max_lag() == 0
