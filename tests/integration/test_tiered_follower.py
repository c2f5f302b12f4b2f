"""A brand-new follower of a tiered partition builds its remote log auxiliary state (KIP-405,
follower scenario 1), on two broker processes and a real ZooKeeper.

Story::

    broker 1 leads t-0 alone (RF 1), 600 records; every closed segment copied to the remote
    tier (operations library, client-mode RLMM), local.retention.bytes=1 deletes them locally
          broker 1:  [Lx .. active]          remote: [0 .. Lx-1]          broker 2: -
    reassign [1] -> [2, 1]: broker 2 fetches offset 0, gets OFFSET_MOVED_TO_TIERED_STORAGE,
    goes to BuildingRemoteLogAuxState, reads the epoch entries and producer snapshot of the
    remote segment ending at Lx - 1 (its RLMM reads __remote_log_metadata, which only broker 1
    hosts, from broker 1), restarts its log at Lx and fetches from there
          broker 2:  [Lx .. ]  log start offset 0, leader-epoch-checkpoint = broker 1's
    200 more records (acks=all: broker 2 is in the ISR); broker 2 elected leader (preferred):
    every record from offset 0 is consumed through it, the first ones from the remote tier.

And follower scenario 2 (an out-of-sync follower): broker 2 of a [1, 2] partition dies with
what it had; broker 1 leads on in a later epoch, tiers everything and deletes it locally; the
returned broker 2 fetches from its log end, below the leader's local start: it truncates its
whole log and builds from the remote tier, asking the leader (OffsetForLeaderEpoch) for the
epoch before the leader's local start, which is not 0 here.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, ElectionType, Producer
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import TopicPartition as KpTopicPartition
from kafka.admin import KafkaAdminClient

from embedded.zookeeper import ZooKeeperEnsemble
from storage_core.tiered.local_tiered_storage import LocalTieredStorage
from storage_core.tiered.metadata.metadata import RemoteLogSegmentMetadata
from tests import cluster_support
from tests.broker_process import BrokerProcess
from tests.cluster_support import eventually, partition_states
from tests.tiered_broker_support import (
    EARLIEST,
    EARLIEST_LOCAL,
    client_rlmm,
    copy_eligible_segments,
    list_offset,
    local_offsets,
)

cluster_support.require_java()

pytestmark = pytest.mark.timeout(150)

TOPIC = "tiered-follower"
SEGMENT_BYTES = 8 * 1024
FIRST_RECORDS = 600
MORE_RECORDS = 200


@pytest.fixture
def brokers(zookeeper: ZooKeeperEnsemble, tmp_path: Path) -> Iterator[dict[int, BrokerProcess]]:
    settings = {
        "auto.create.topics.enable": "false",
        "remote.log.storage.system.enable": "true",
        "remote.log.storage.manager.class.name": "LocalTieredStorage",
        "rsm.config.local.storage.dir": str(tmp_path / "remote-tier"),
        "rsm.config.local.fsync": "false",
        # one metadata partition, on broker 1 only: broker 2 must read it from there
        "remote.log.metadata.topic.num.partitions": "1",
        "remote.log.metadata.topic.replication.factor": "1",
        "remote.log.manager.task.interval.ms": "200",
        "log.retention.check.interval.ms": "200",
        "log.segment.delete.delay.ms": "0",
        "replica.fetch.backoff.ms": "200",
    }
    with cluster_support.brokers_in_cluster(zookeeper, tmp_path, (1, 2), settings) as (
        started,
        _connect,
    ):
        yield started


def value_of(i: int) -> bytes:
    return f"value-{i:05d}-".encode() * 6


def produce(servers: str, first: int, count: int) -> None:
    producer = Producer(
        {"bootstrap.servers": servers, "acks": "all", "linger.ms": 5, "batch.size": 4096}
    )
    errors: list[str] = []
    for i in range(first, first + count):
        producer.produce(
            TOPIC,
            value_of(i),
            partition=0,
            on_delivery=lambda e, _m: errors.append(str(e)) if e else None,
        )
        producer.poll(0)
    assert producer.flush(30) == 0
    assert errors == []


def consume_all(bootstrap: str, expected: int) -> list[tuple[int, bytes]]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "tiered-follower-check",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    out: list[tuple[int, bytes]] = []
    try:
        consumer.assign([CkTopicPartition(TOPIC, 0, 0)])
        for _ in range(300):
            if len(out) >= expected:
                break
            for message in consumer.consume(500, timeout=0.5):
                assert message.error() is None, message.error()
                value = message.value()
                assert value is not None
                out.append((message.offset(), value))
    finally:
        consumer.close()
    return out


def settled_local_start(bootstrap: str, possible: set[int]) -> int | None:
    """The leader's local log start once retention is done with what was copied."""
    first = list_offset(bootstrap, TOPIC, EARLIEST_LOCAL)[0]
    if first not in possible:
        return None
    time.sleep(1.0)  # five retention checks: nothing more to delete
    return first if list_offset(bootstrap, TOPIC, EARLIEST_LOCAL)[0] == first else None


def test_new_follower_builds_its_state_from_the_remote_tier_then_serves_everything(
    brokers: dict[int, BrokerProcess],
) -> None:
    leader, follower = brokers[1], brokers[2]
    servers = f"{leader.bootstrap},{follower.bootstrap}"
    admin = AdminClient({"bootstrap.servers": servers})
    topic = NewTopic(
        TOPIC,
        num_partitions=1,
        replica_assignment=[[1]],
        config={
            "remote.storage.enable": "true",
            "segment.bytes": str(SEGMENT_BYTES),
            "local.retention.bytes": "1",
        },
    )
    admin.create_topics([topic])[TOPIC].result(30)
    eventually(lambda: partition_states(leader.bootstrap, TOPIC) == {0: (1, 0, (1,))})
    produce(servers, 0, FIRST_RECORDS)

    # Tier every closed segment; local retention then deletes them on the leader.
    with client_rlmm(leader.bootstrap) as rlmm:
        copied = copy_eligible_segments(
            leader.bootstrap,
            leader.log_dir / f"{TOPIC}-0",
            TOPIC,
            LocalTieredStorage(leader.directory.parent / "remote-tier", fsync=False),
            rlmm,
        )
    assert len(copied) >= 3
    # Local retention deletes the copied segments, keeping the log at or above 1 byte (the
    # last segment stays even when copied): Lx is the start of a copied segment or the end
    # of the last one + 1.
    possible_starts = {c.start_offset for c in copied[1:]} | {copied[-1].end_offset + 1}
    leader_local_start = eventually(
        lambda: settled_local_start(leader.bootstrap, possible_starts),
        what="the leader's local log start past the copied segments",
    )
    (below_local_start,) = [c for c in copied if c.end_offset == leader_local_start - 1]
    assert list_offset(leader.bootstrap, TOPIC, EARLIEST)[0] == 0

    # Broker 2 becomes a replica (and the preferred one) with an empty log dir.
    kafka_admin = KafkaAdminClient(bootstrap_servers=servers, request_timeout_ms=10_000)
    try:
        tp = KpTopicPartition(TOPIC, 0)
        assert kafka_admin.alter_partition_reassignments({tp: [2, 1]}) == {tp: None}
        eventually(
            lambda: kafka_admin.list_partition_reassignments() == {},
            timeout_s=45,
            what="the reassignment completed (broker 2 caught up)",
        )
    finally:
        kafka_admin.close()
    eventually(
        lambda: partition_states(leader.bootstrap, TOPIC)[0][2] in ((1, 2), (2, 1)),
        what="broker 2 in the ISR",
    )

    output = follower.output_path.read_text(errors="replace")
    assert (
        f"fetch offset moved to tiered storage, building the remote log auxiliary state"
        f" partition={TOPIC}-0" in output
    )
    assert "state=BuildingRemoteLogAuxState" in output
    assert (
        f"built the remote log auxiliary state partition={TOPIC}-0 remote_segment="
        f"{below_local_start.remote_log_segment_id.id}"
        f" leader_local_log_start_offset={leader_local_start} next_offset={leader_local_start}"
        " log_start_offset=0" in output
    )
    follower_dir = follower.log_dir / f"{TOPIC}-0"
    assert local_offsets(follower_dir)[0] == leader_local_start  # nothing below Lx locally

    produce(servers, FIRST_RECORDS, MORE_RECORDS)
    total = FIRST_RECORDS + MORE_RECORDS
    eventually(
        lambda: local_offsets(follower_dir)[-1] == total - 1,
        what="broker 2 holding every record the leader has",
    )
    # Its first local segment holds untiered offsets (it runs past the last copied one), so
    # local retention keeps it; its epochs are the leader's.
    assert local_offsets(follower_dir)[0] == leader_local_start
    leader_checkpoint = leader.log_dir / f"{TOPIC}-0" / "leader-epoch-checkpoint"
    follower_checkpoint = follower_dir / "leader-epoch-checkpoint"
    assert follower_checkpoint.read_text() == leader_checkpoint.read_text()
    assert follower_checkpoint.read_text().splitlines()[2] == "0 0"

    # Broker 2 leads: every record from offset 0, the first ones read from the remote tier.
    results = admin.elect_leaders(ElectionType.PREFERRED, [CkTopicPartition(TOPIC, 0)]).result(30)
    assert all(error is None for error in results.values()), results
    eventually(
        lambda: partition_states(follower.bootstrap, TOPIC)[0][0] == 2,
        what="broker 2 leading",
    )
    assert list_offset(follower.bootstrap, TOPIC, EARLIEST) == (0, 0)
    assert list_offset(follower.bootstrap, TOPIC, EARLIEST_LOCAL)[0] == leader_local_start
    records = consume_all(follower.bootstrap, total)
    assert [offset for offset, _ in records] == list(range(total))
    assert [value for _, value in records] == [value_of(i) for i in range(total)]


def tier_and_settle(leader: BrokerProcess) -> tuple[list[RemoteLogSegmentMetadata], int]:
    """Copy every eligible segment of broker 1's replica; wait until local retention is done.
    Returns the copies and the leader's local log start offset."""
    with client_rlmm(leader.bootstrap) as rlmm:
        copied = copy_eligible_segments(
            leader.bootstrap,
            leader.log_dir / f"{TOPIC}-0",
            TOPIC,
            LocalTieredStorage(leader.directory.parent / "remote-tier", fsync=False),
            rlmm,
        )
    assert len(copied) >= 3
    possible_starts = {c.start_offset for c in copied[1:]} | {copied[-1].end_offset + 1}
    local_start = eventually(
        lambda: settled_local_start(leader.bootstrap, possible_starts),
        what="the leader's local log start past the copied segments",
    )
    return copied, local_start


def test_out_of_sync_follower_rebuilds_from_the_remote_tier_in_a_later_epoch(
    brokers: dict[int, BrokerProcess],
) -> None:
    leader, follower = brokers[1], brokers[2]
    servers = f"{leader.bootstrap},{follower.bootstrap}"
    admin = AdminClient({"bootstrap.servers": servers})
    topic = NewTopic(
        TOPIC,
        num_partitions=1,
        replica_assignment=[[1, 2]],
        config={
            "remote.storage.enable": "true",
            "segment.bytes": str(SEGMENT_BYTES),
            "local.retention.bytes": "1",
        },
    )
    admin.create_topics([topic])[TOPIC].result(30)
    eventually(lambda: partition_states(leader.bootstrap, TOPIC) == {0: (1, 0, (1, 2))})
    produce(servers, 0, 100)
    follower_dir = follower.log_dir / f"{TOPIC}-0"
    eventually(
        lambda: local_offsets(follower_dir)[-1] == 99, what="broker 2 holding the first records"
    )
    follower.kill()
    # the controller takes broker 2 out of the ISR: broker 1 leads on in a later epoch
    state = eventually(
        lambda: (s := partition_states(leader.bootstrap, TOPIC)[0])[2] == (1,) and s,
        what="broker 2 out of the ISR",
    )
    assert state[1] > 0
    produce(leader.bootstrap, 100, FIRST_RECORDS)
    total = 100 + FIRST_RECORDS
    copied, leader_local_start = tier_and_settle(leader)
    assert leader_local_start > 100  # below broker 2's log end: nothing to fetch for it
    local_start_epoch = list_offset(leader.bootstrap, TOPIC, EARLIEST_LOCAL)[1]
    assert local_start_epoch > 0
    (below_local_start,) = [c for c in copied if c.end_offset == leader_local_start - 1]

    follower.start()
    eventually(
        lambda: partition_states(leader.bootstrap, TOPIC)[0][2] in ((1, 2), (2, 1)),
        timeout_s=45,
        what="broker 2 back in the ISR",
    )
    output = follower.output_path.read_text(errors="replace")
    assert (
        f"built the remote log auxiliary state partition={TOPIC}-0 remote_segment="
        f"{below_local_start.remote_log_segment_id.id}"
        f" leader_local_log_start_offset={leader_local_start} next_offset={leader_local_start}"
        " log_start_offset=0" in output
    )
    eventually(
        lambda: local_offsets(follower_dir)[-1] == total - 1,
        what="broker 2 holding every record the leader has",
    )
    assert local_offsets(follower_dir)[0] == leader_local_start  # its old records are gone
    leader_checkpoint = leader.log_dir / f"{TOPIC}-0" / "leader-epoch-checkpoint"
    assert (follower_dir / "leader-epoch-checkpoint").read_text() == leader_checkpoint.read_text()
