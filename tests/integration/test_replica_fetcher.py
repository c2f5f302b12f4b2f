"""The follower side of replication against a real leader broker process.

The leader is a ``storage-core broker`` process without ZooKeeper (its single-node store). A
leader serves replica fetches only to the partition's assigned replicas, and a topic cannot be
created with an unregistered broker, so each topic is created with one replica and then given
broker 1 as its second replica in the leader's metadata store (while it is stopped), as the
controller records a replica assignment: partition state leader 0, ISR [0], replicas [0, 1].
The follower is built in the test process as a broker builds it: a ``LogManager`` and
``ReplicaManager`` on a temporary directory, the partition made follower of broker 0, and a
``ReplicaFetcherManager`` fetching over loopback. Records are produced with kafka-python and
confluent-kafka (acks=1: the follower may be away); the two logs are compared batch by batch
(offsets, leader epochs, CRCs) and byte for byte.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka import TopicPartition as CTopicPartition
from confluent_kafka.admin import AdminClient
from kafka import KafkaAdminClient, KafkaProducer
from kafka.admin import NewTopic

from embedded.ports import free_port
from storage_core.client.cluster import KafkaCluster
from storage_core.client.consumer import KafkaConsumer
from storage_core.common import TopicPartition, Uuid
from storage_core.log.log import Log
from storage_core.log.log_config import LogConfig
from storage_core.log.log_manager import LogManager
from storage_core.metrics.registry import Gauge, KafkaMetricsRegistry
from storage_core.records.memory_records import iter_batches
from storage_core.records.memory_records_builder import build_batch
from storage_core.records.record import Record, SimpleRecord
from storage_core.replication.fetch_state import InitialFetchState, ReplicaState
from storage_core.replication.metadata_cache import PartitionMetadata
from storage_core.replication.partition import Partition
from storage_core.replication.replica_fetcher_config import ReplicaFetcherConfig
from storage_core.replication.replica_fetcher_manager import (
    ReplicaFetcherManager,
    replica_fetcher_manager_metric,
)
from storage_core.replication.replica_fetcher_thread import initial_fetch_offset
from storage_core.replication.replica_manager import ReplicaManager
from storage_core.server.kafka_broker import KafkaBroker
from storage_core.server.kafka_config import KafkaConfig
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
    # A follower that stops fetching leaves the ISR after a second, so that the leader's HW
    # moves on without it (DeleteRecords needs that).
    with BrokerProcess(
        tmp_path_factory.mktemp("leader"), overrides={"replica.lag.time.max.ms": "1000"}
    ) as process:
        yield process


def create_topic(broker: BrokerProcess) -> str:
    """A topic of one partition with replicas [0, 1]: leader 0, ISR [0]."""
    name = f"replicated-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10_000)
    try:
        admin.create_topics([NewTopic(name, 1, 1)])
    finally:
        admin.close()
    rewrite_store(broker, name, assign_follower=True)
    return name


def rewrite_store(
    broker: BrokerProcess, topic: str, *, assign_follower: bool = False, bump_epoch: bool = False
) -> None:
    """Change what the controller recorded for the topic, as ZooKeeper would hold it after a
    reassignment (``assign_follower``: replicas [0, 1]) or an election (``bump_epoch``: leader
    epoch + 1); written to the stopped broker's metadata store, read again at its start."""
    broker.stop()
    path = broker.log_dir / "metadata-store.json"
    store = json.loads(path.read_text())

    def update(znode: str, change: Callable[[dict[str, Any]], None]) -> None:
        node = store["nodes"][znode]
        data = json.loads(base64.b64decode(node["data"]))
        change(data)
        node["data"] = base64.b64encode(json.dumps(data).encode()).decode()
        node["version"] += 1

    if assign_follower:
        update(
            f"/brokers/topics/{topic}",
            lambda d: d["partitions"].update({"0": [LEADER_ID, FOLLOWER_ID]}),
        )
    if bump_epoch:
        update(
            f"/brokers/topics/{topic}/partitions/0/state",
            lambda d: d.update(leader_epoch=d["leader_epoch"] + 1),
        )
    path.write_text(json.dumps(store))
    broker.start()


def produce_kafka_python(broker: BrokerProcess, topic: str, count: int, *, tag: str) -> None:
    """Several batches: small batches, a linger, keys and headers."""
    producer = KafkaProducer(
        bootstrap_servers=broker.bootstrap, acks=1, linger_ms=5, batch_size=512
    )
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
        {
            "bootstrap.servers": broker.bootstrap,
            "acks": "1",
            "compression.type": "gzip",
            "linger.ms": 5,
        }
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


def test_max_lag_gauge_shows_a_follower_behind(leader: BrokerProcess, follower: Follower) -> None:
    """MaxLag (kafka.server:type=ReplicaFetcherManager): the leader's HW minus the follower's
    next offset; with a small replica.fetch.max.bytes a follower catches up over many
    fetches, and the gauge goes from the backlog down to 0."""
    registry = KafkaMetricsRegistry()
    follower.fetchers.register_metrics(registry)
    max_lag = registry.get(replica_fetcher_manager_metric("MaxLag"))
    assert isinstance(max_lag, Gauge) and max_lag.value() == 0
    topic = create_topic(leader)
    produce_kafka_python(leader, topic, 400, tag="backlog")
    slow = ReplicaFetcherManager(
        broker_id=FOLLOWER_ID,
        config=dataclasses.replace(FETCHER_CONFIG, fetch_max_bytes=1),  # one batch a fetch
        get_partition=follower.replica_manager.get_partition,
        endpoint_of=follower.endpoint_of,
    )
    follower.fetchers.shutdown()
    follower.fetchers = slow
    slow.register_metrics(registry)
    lags: list[float] = []
    sampling = threading.Event()

    def sample() -> None:
        while not sampling.is_set():
            lags.append(max_lag_of(registry))
            time.sleep(0.005)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    partition = follower.follow(topic, leader_view(leader, topic))
    wait_until_caught_up(leader, topic, partition.log)
    eventually(lambda: max_lag_of(registry) == 0, "MaxLag back to 0")
    sampling.set()
    sampler.join()
    assert max(lags) > 0
    assert slow.fetcher_threads()[next(iter(slow.fetcher_threads()))].fetch_requests > 10


def max_lag_of(registry: KafkaMetricsRegistry) -> float:
    gauge = registry.get(replica_fetcher_manager_metric("MaxLag"))
    assert isinstance(gauge, Gauge)
    return gauge.value()


def old_leader_batches(first_offset: int, count: int, epoch: int) -> list[bytes]:
    """Batches this replica wrote as leader of ``epoch`` that no other replica received."""
    return [
        build_batch(
            [SimpleRecord(value=f"unreplicated-{first_offset + i}".encode())],
            base_offset=first_offset + i,
            partition_leader_epoch=epoch,
        )
        for i in range(count)
    ]


@pytest.mark.parametrize(
    "truncation_on_fetch",
    [True, False],
    ids=["diverging-epoch-in-fetch", "offset-for-leader-epoch"],
)
def test_follower_with_batches_of_a_diverging_epoch_is_truncated_then_matches(
    leader: BrokerProcess,
    tmp_path: Path,
    truncation_on_fetch: bool,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """KIP-101: the follower holds 30 records of epoch 0 that the leader never got; the leader
    moved to epoch 1 at offset 20 and wrote 15 others. The follower must cut at 20 (where the
    leader's epoch 0 ends), not at its HW or the leader's end, then copy epoch 1."""
    follower = Follower(tmp_path / "follower-logs", leader, truncation_on_fetch=truncation_on_fetch)
    try:
        topic = create_topic(leader)
        produce_kafka_python(leader, topic, 20, tag="e0")
        view0 = leader_view(leader, topic)
        assert view0.leader_epoch == 0
        partition = follower.follow(topic, view0)
        wait_until_caught_up(leader, topic, partition.log)
        follower.fetchers.remove_fetcher_for_partitions([partition.topic_partition])
        for batch in old_leader_batches(20, 30, epoch=0):
            partition.log.append_as_follower(batch)
        assert partition.log.log_end_offset == 50

        rewrite_store(leader, topic, bump_epoch=True)
        produce_confluent(leader, topic, 15, tag="e1")
        view1 = leader_view(leader, topic)
        assert view1.leader_epoch == 1
        assert leader_end_offset(leader, topic) == 35  # below the follower's 50

        follower.follow(topic, view1)
        eventually(
            lambda: follower_log_bytes(partition.log) == leader_log_bytes(leader, topic),
            "the follower's log equal to the leader's",
        )

        leader_bytes = leader_log_bytes(leader, topic)
        assert batches(follower_log_bytes(partition.log)) == batches(leader_bytes)
        assert follower_log_bytes(partition.log) == leader_bytes
        assert [
            (e.epoch, e.start_offset) for e in partition.log.leader_epoch_cache.epoch_entries()
        ] == [
            (0, 0),
            (1, 20),
        ]
        assert all(b"unreplicated" not in (r.value or b"") for r in _records(partition.log))
        # Truncated where the epochs diverge, not first to the leader's end as after an
        # unclean election (the leader answers the divergence, not OFFSET_OUT_OF_RANGE).
        assert "unclean leader election" not in caplog.text
    finally:
        follower.close()


def _records(log: Log) -> list[Record]:
    return [r for batch in log.read_batches(log.log_start_offset) for r in batch.records()]


def test_follower_below_the_leaders_log_start_restarts_at_it(
    leader: BrokerProcess, follower: Follower
) -> None:
    """A follower that stopped at offset 10 while the leader deleted records up to the middle
    of a later batch (DeleteRecords): its fetch is out of range, it asks the leader for its end
    and start offsets, empties its log and copies the leader from the batch holding the new
    log start offset on."""
    topic = create_topic(leader)
    produce_kafka_python(leader, topic, 10, tag="early")
    view = leader_view(leader, topic)
    partition = follower.follow(topic, view)
    wait_until_caught_up(leader, topic, partition.log)
    follower.fetchers.remove_fetcher_for_partitions([partition.topic_partition])

    produce_confluent(leader, topic, 300, tag="late")
    # A log start offset inside a batch of several records, past the follower's end.
    base = next(
        base
        for base, last, _e, _c in batches(leader_log_bytes(leader, topic))
        if base >= 10 and last > base
    )
    new_start = base + 1
    admin = AdminClient({"bootstrap.servers": leader.bootstrap})

    def delete_records() -> bool:
        # Refused (OFFSET_OUT_OF_RANGE) until the silent follower has left the ISR and the
        # leader's HW has passed the new start.
        (deleted,) = admin.delete_records([CTopicPartition(topic, 0, new_start)]).values()
        try:
            return bool(deleted.result(timeout=TIMEOUT_S).low_watermark == new_start)
        except KafkaException:
            return False

    eventually(delete_records, f"DeleteRecords up to {new_start}")

    follower.follow(topic, view)
    wait_until_caught_up(leader, topic, partition.log)

    log = partition.log
    assert log.log_start_offset == new_start
    assert log.segments[0].base_offset == base  # the batch holding the start, kept whole
    leader_batches = [b for b in batches(leader_log_bytes(leader, topic)) if b[1] >= new_start]
    assert batches(follower_log_bytes(log)) == leader_batches
    assert min(r.offset for r in _records(log)) == base


def test_fetcher_backs_off_while_the_leader_is_down_and_resumes(
    leader: BrokerProcess, follower: Follower
) -> None:
    topic = create_topic(leader)
    produce_kafka_python(leader, topic, 30, tag="before")
    view = leader_view(leader, topic)
    partition = follower.follow(topic, view)
    wait_until_caught_up(leader, topic, partition.log)
    (thread,) = follower.fetchers.fetcher_threads().values()

    leader.stop()
    try:
        eventually(
            lambda: (
                (s := follower.fetchers.fetch_state(partition.topic_partition)) is not None
                and s.delay_until_ms is not None
            ),
            "the partition backing off",
        )
        requests_before = thread.fetch_requests
        down_s = 2.0
        time.sleep(down_s)
        # About one attempt per back-off (a busy loop would make hundreds).
        assert thread.fetch_requests - requests_before <= 2 * down_s * 1000 / BACKOFF_MS
        assert thread.is_alive()
        assert partition.log.log_end_offset == 30
    finally:
        leader.start()

    produce_confluent(leader, topic, 40, tag="after")
    wait_until_caught_up(leader, topic, partition.log)
    assert partition.log.log_end_offset == 70
    assert follower_log_bytes(partition.log) == leader_log_bytes(leader, topic)


def test_an_idle_follower_sends_empty_incremental_fetches_and_a_restarted_leader_gets_a_full_one(
    leader: BrokerProcess, follower: Follower
) -> None:
    """KIP-227 fetch sessions: once caught up, the follower's Fetch requests name no
    partition (the leader keeps them in the session) and are answered without any; when the
    leader restarts the session is gone, and the follower starts over with a full fetch in a
    new session and replicates on."""
    topic = create_topic(leader)
    produce_kafka_python(leader, topic, 30, tag="before")
    view = leader_view(leader, topic)
    partition = follower.follow(topic, view)
    wait_until_caught_up(leader, topic, partition.log)
    (thread,) = follower.fetchers.fetcher_threads().values()
    endpoint = thread.leader
    eventually(lambda: endpoint.fetch_session_id != 0, "a fetch session")
    session_id = endpoint.fetch_session_id
    incremental, sent, full = (
        endpoint.incremental_fetch_requests,
        endpoint.fetch_request_partitions,
        endpoint.full_fetch_requests,
    )
    time.sleep(10 * FETCHER_CONFIG.fetch_wait_max_ms / 1000)
    # Each idle round is one incremental Fetch of no partition, answered after the wait.
    assert endpoint.incremental_fetch_requests - incremental >= 3
    assert endpoint.fetch_request_partitions == sent
    assert endpoint.full_fetch_requests == full
    assert endpoint.fetch_session_id == session_id

    leader.stop()
    leader.start()
    produce_confluent(leader, topic, 40, tag="after")
    wait_until_caught_up(leader, topic, partition.log)
    assert partition.log.log_end_offset == 70
    assert follower_log_bytes(partition.log) == leader_log_bytes(leader, topic)
    assert endpoint.full_fetch_requests > full
    eventually(lambda: endpoint.fetch_session_id not in (0, session_id), "a new fetch session")


def test_removing_the_partition_stops_appends_at_once(
    leader: BrokerProcess, follower: Follower
) -> None:
    """Kafka's partitionMapLock: once remove_fetcher_for_partitions returns, nothing more is
    appended, although records keep arriving at the leader and a fetch may be in flight."""
    topic = create_topic(leader)
    view = leader_view(leader, topic)
    partition = follower.follow(topic, view)
    stop = threading.Event()

    def produce_continuously() -> None:
        producer = KafkaProducer(bootstrap_servers=leader.bootstrap, acks=1, linger_ms=1)
        i = 0
        while not stop.is_set():
            producer.send(topic, value=f"live-{i}".encode(), partition=0)
            i += 1
            if i % 20 == 0:
                producer.flush(TIMEOUT_S)
        producer.flush(TIMEOUT_S)
        producer.close()

    producer = threading.Thread(target=produce_continuously, daemon=True)
    producer.start()
    try:
        eventually(lambda: partition.log.log_end_offset > 200, "replication under way")
        removed = follower.fetchers.remove_fetcher_for_partitions([partition.topic_partition])
        end_at_removal = partition.log.log_end_offset
        assert partition.topic_partition in removed
        time.sleep(1.0)
        assert partition.log.log_end_offset == end_at_removal
        assert leader_end_offset(leader, topic) > end_at_removal
        assert follower.fetchers.fetch_state(partition.topic_partition) is None
    finally:
        stop.set()
        producer.join(TIMEOUT_S)

    # What was appended is the leader's prefix, and following again completes it.
    follower.follow(topic, view)
    wait_until_caught_up(leader, topic, partition.log)
    assert follower_log_bytes(partition.log) == leader_log_bytes(leader, topic)
    assert follower.fetchers.shutdown_idle_fetcher_threads() == 0


def test_list_offsets_latest_for_a_replica_is_the_log_end_offset(tmp_path: Path) -> None:
    """Kafka reads for replicas without isolation: a follower asking the leader for LATEST
    (``fetchOffsetAndTruncate``) gets the log end offset, a consumer the high watermark. The
    broker runs in this process so that its partition can be given a second, silent ISR member
    (as the controller would for replication factor 2): the HW then stays behind the LEO."""
    port = free_port()
    config = KafkaConfig.from_props(
        {
            "broker.id": "0",
            "listeners": f"PLAINTEXT://127.0.0.1:{port}",
            "log.dirs": str(tmp_path / "logs"),
            "offsets.topic.num.partitions": "1",
        }
    )
    tp = TopicPartition("isr-of-two", 0)

    def produce(count: int) -> None:
        producer = KafkaProducer(bootstrap_servers=f"127.0.0.1:{port}", acks=1)
        for i in range(count):
            producer.send(tp.topic, value=f"v{i}".encode(), partition=0).get(TIMEOUT_S)
        producer.close()

    def latest(replica_id: int) -> int:
        with KafkaCluster(f"127.0.0.1:{port}") as cluster:
            return KafkaConsumer(cluster, replica_id=replica_id).latest_offset(tp.topic, 0)

    async def scenario() -> tuple[int, int, int]:
        broker = KafkaBroker(config)
        await broker.start()
        try:
            broker.admin_manager.create_topic(tp.topic, 1, 1, {})
            await asyncio.to_thread(produce, 4)
            partition = broker.replica_manager.get_partition(tp)
            partition.make_leader(leader_epoch=partition.leader_epoch, replicas=(0, 1), isr=(0, 1))
            await asyncio.to_thread(produce, 6)  # broker 1 fetches nothing: HW stays at 4
            return (
                partition.log.high_watermark,
                await asyncio.to_thread(latest, -1),
                await asyncio.to_thread(latest, FOLLOWER_ID),
            )
        finally:
            await broker.stop()

    high_watermark, consumer_latest, replica_latest = asyncio.run(
        asyncio.wait_for(scenario(), timeout=60)
    )
    assert (high_watermark, consumer_latest, replica_latest) == (4, 4, 10)
